"""Acks survive a broker restart in every mode: a standalone broker (and a Master/Slave master) that is
stopped, gracefully or with kill -9, must not hand out again a message a consumer acknowledged.

Found by the chaos harness (bench/chaos_bench.py, Master/Slave restarts, session 12): after a master's
restart 86 acknowledged messages of one group came back as attempt 1, two committed transactional
messages among them. The POP engine's acks above a queue's committed offset lived in memory in these
modes (the replicated journal RMQ_SYS_POP_STATE ran only in DLedger and controller mode); a consumer that
acks out of order leaves every message above its first unacked one in that state.

Ground truth: the messages this test sent and acked. One queue, so "above the committed offset" is exact:
the first message is received and left unacked, the other 19 are acked; after the restart the group must
get the first one back (its invisible time runs out) and none of the 19.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from rmq import message, producer, simple_consumer

pytestmark = pytest.mark.e2e
TOPIC, GROUP, COUNT, INVISIBLE_S = "TopicPopRestart", "GroupPopRestart", 20, 4


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("pop-restart"), lambda: failed_call(request)) as c:
        c.start_broker("broker-a")
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "1", "-w", "1")
        yield c


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_acked_messages_above_the_committed_offset_are_not_handed_out_after_a_restart(
        cluster: LocalCluster, how: str) -> None:
    node = cluster.brokers["broker-a"]
    with producer(node.endpoint, TOPIC) as p:
        sent = [p.send(message(TOPIC, f"pop-restart-{i}".encode())).message_id for i in range(COUNT)]
    first, acked = sent[0], set(sent[1:])

    with simple_consumer(node.endpoint, GROUP, TOPIC) as c:
        got: dict[str, object] = {}

        def receive_all() -> bool:
            for m in c.receive(32, INVISIBLE_S):
                got[m.message_id] = m
            return len(got) >= COUNT

        wait_until(receive_all, timeout=30, what=f"all {COUNT} messages handed out")
        for mid in acked:
            c.ack(got[mid])  # type: ignore[arg-type]
    assert set(got) == set(sent)

    if how == "sigterm":
        node.proc.stop()
    else:
        node.proc.kill9()
    cluster.start_broker("broker-a")

    after: list[str] = []
    with simple_consumer(node.endpoint, GROUP, TOPIC) as c:
        def first_back() -> bool:
            for m in c.receive(32, 30):
                after.append(m.message_id)
                c.ack(m)
            return first in after

        # the unacked message returns once its invisible time (INVISIBLE_S) has run out
        # the 19 acked ones sit at higher offsets: a broker that forgot their acks hands them out at once
        wait_until(first_back, timeout=60, what="the unacked first message handed out again")
    again = [mid for mid in after if mid in acked]
    assert not again, f"{len(again)} of {len(acked)} acknowledged messages handed out again after a {how} restart"
    assert after.count(first) == 1
