"""Controller mode: a SyncStateSet member that stops answering leaves the set even when it is not behind.

Why: the master's confirm offset (what consumers may see) is the minimum over the SyncStateSet,
and the shrink rule used to look only at how far behind a member is.  A SIGSTOP'd slave keeps
its TCP connection open and, with nothing new written, is never behind: it stayed in the set and
held every later message from the consumers until haMaxTimeSlaveNotCatchup after that message
(3 s by default), the consumer-visible stall the chaos checker's no-delivery window showed.
The master now also removes a member it has heard nothing from for haHousekeepingInterval (the
slave answers every HA chunk, heartbeats included).  haMaxTimeSlaveNotCatchup is set out of reach
here, so only the silence rule can shrink the set.

The paused slave is one this process holds no connection to: every member serves clients (it
relays to the master), the official client keeps the one address of the route that connected
first, and a SIGSTOP'd access point stalls its clients whatever the SyncStateSet does (CI saw
both sends time out when the paused slave's address was the client's).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from chaos.sockets import connections_to
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from rmq import message, producer, simple_consumer
from test_failover_client_visible import controller_set, ha_status, start_default_controllers

TOPIC = "TopicSilent"
GROUP = "GroupSilent"

pytestmark = pytest.mark.e2e


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("silent"), lambda: failed_call(request)) as c:
        yield c


def receive_body(consumer: object, want: bytes, timeout: float) -> bool:
    """Receive (and ack) until ``want`` arrives or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in consumer.receive(16, 10):  # type: ignore[attr-defined]
            consumer.ack(m)  # type: ignore[attr-defined]
            if m.body == want:
                return True
    return False


@pytest.mark.timeout(300)
def test_a_paused_in_sync_slave_leaves_the_set_and_no_longer_holds_consumers(cluster: LocalCluster) -> None:
    c = cluster
    procs = start_default_controllers(c)
    try:
        nodes, master = controller_set(c, "broker-s", haMaxTimeSlaveNotCatchup=600_000)
        c.admin("updateTopic", "-b", master.admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
        with producer(master.endpoint, TOPIC) as p, simple_consumer(master.endpoint, GROUP, TOPIC) as consumer:
            p.send(message(TOPIC, b"before"))
            assert receive_body(consumer, b"before", 60), "the first message never reached the consumer"
            held = connections_to({n.grpc_port for n in nodes})
            slave = next(n for n in nodes if n is not master and not held[n.grpc_port])
            slave_id = ha_status(c, slave)["brokerId"]
            slave.proc.pause(True)
            try:
                wait_until(lambda: slave_id not in ha_status(c, master)["syncStateSet"], timeout=60,
                           what=f"the paused slave #{slave_id} out of the SyncStateSet")
                assert "silent for" in master.proc.log(), "the set shrank for another reason than silence"
                p.send(message(TOPIC, b"while-paused"))
                assert receive_body(consumer, b"while-paused", 60), \
                    "a message sent after the shrink did not reach the consumer while the slave was paused"
            finally:
                slave.proc.pause(False)
            wait_until(lambda: slave_id in ha_status(c, master)["syncStateSet"], timeout=60,
                       what=f"slave #{slave_id} back in the SyncStateSet once it answers again")
    finally:
        for proc in procs:
            proc.stop()
