"""Controller mode: a master stopped gracefully has the controller elect its most caught-up slave first (issue 15).

Found by the chaos harness (session 13, restart kind, quiet machine): after a SIGTERM of the master no
send succeeded for 1.8-1.9 s, more than after a kill -9 (0.7 s): the set stayed masterless until the
controllers' heartbeat timeout after the stopping master's last heartbeat.  Now the stopping master
asks the controller to elect (designate) its live in-sync slave that holds every acknowledged put, and
adopts the answer before it stops serving.  Ground truth: the master the test stops, the messages it
acknowledged before, and what the processes log: the old master names the slave, the controller elects
that slave at the master's request (not for an inactive master), and every acknowledged message is
still there to consume from the new master.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from rmq import drain_ids, message, producer, simple_consumer
from test_failover_client_visible import controller_set, ha_status, leader_index, start_default_controllers

pytestmark = pytest.mark.e2e
TOPIC, GROUP = "TopicHandOff", "GroupHandOff"


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("ctl-handoff"), lambda: failed_call(request)) as c:
        yield c


@pytest.mark.timeout(300)
def test_a_stopping_master_has_its_caught_up_slave_elected_before_it_goes(cluster: LocalCluster) -> None:
    c = cluster
    procs = start_default_controllers(c)
    try:
        nodes, master = controller_set(c, "broker-h")
        c.admin("updateTopic", "-b", master.admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
        with producer(master.endpoint, TOPIC) as p:
            acked = {p.send(message(TOPIC, f"m-{i}".encode())).message_id for i in range(20)}

        master.proc.stop()  # SIGTERM, and wait for the process to end

        others = [n for n in nodes if n is not master]
        (k,) = wait_until(lambda: leader_index(c, others, "MASTER"), timeout=60, what="a new master")
        new_id = ha_status(c, others[k])["brokerId"]
        assert f"asking the controller to elect broker {new_id} master" in master.proc.log(), \
            "the stopping master did not hand over"
        controller_logs = "".join(proc.log() for proc in procs)
        assert f"broker {new_id} elected master of broker-h" in controller_logs
        assert "(master inactive)" not in controller_logs, "the set waited for the heartbeat timeout instead"
        with simple_consumer(others[k].endpoint, GROUP, TOPIC) as consumer:
            got = {msg.message_id for msg in drain_ids(consumer, acked, timeout=60, quiet=0.5)}
        assert acked <= got, f"{len(acked - got)} acknowledged messages missing after the hand-over"
    finally:
        for proc in procs:
            proc.stop()
