"""Transaction check-back across a leader change (issue 15): a regression test over real processes.

The writer checks a half message back down the producer's Telemetry stream.  The official
Python client opens that stream once and never re-opens it while it stays up, so a stream
pinned to the node that was the writer when it opened (or relayed to it) left every later
writer unable to reach the producer: the chaos harness (tests/chaos) saw half messages
recovered by a new leader and never checked back (``tx_unchecked``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from cluster import LocalCluster, cluster_with_namesrv, start_dledger_group, wait_until
from conftest import failed_call
from rmq import config, message
from rocketmq import Producer, TransactionChecker, TransactionResolution
from test_failover_client_visible import leader_index

pytestmark = pytest.mark.e2e
TOPIC = "TopicCheckBack"


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("checkback"), lambda: failed_call(request)) as c:
        yield c


class PhasedChecker(TransactionChecker):
    """UNKNOWN until ``commit_now`` is set (the broker then asks again), COMMIT after; records when each was asked."""

    def __init__(self) -> None:
        self.commit_now = threading.Event()
        self.asked: dict[str, list[tuple[float, bool]]] = {}
        self.lock = threading.Lock()

    def check(self, msg):  # type: ignore[no-untyped-def]
        commit = self.commit_now.is_set()
        with self.lock:
            self.asked.setdefault(msg.message_id, []).append((time.monotonic(), commit))
        return TransactionResolution.COMMIT if commit else TransactionResolution.UNKNOWN

    def committed_after(self, t: float) -> set[str]:
        with self.lock:
            return {m for m, calls in self.asked.items() if any(c and at >= t for at, c in calls)}


@pytest.mark.timeout(300)
def test_open_transactions_are_checked_back_by_a_new_leader(cluster: LocalCluster) -> None:
    """Open transactions, then the leader is paused until deposed and resumed as a follower: the new
    leader must check every open transaction back through the producer's (still open) stream.

    No member is killed, so the producer keeps its one Telemetry stream wherever it opened;
    before the fix the new leader had no stream of the producer (it stayed at the deposed
    leader, or was relayed to it) and checked nothing back.
    """
    c = cluster
    timing = {"transactionTimeOut": 2000, "transactionCheckInterval": 1000}
    nodes = start_dledger_group(c, "broker-cb", flushDiskType="SYNC_FLUSH", **timing)
    (lead,) = wait_until(lambda: leader_index(c, nodes), timeout=60, what="a leader")
    c.admin("updateTopic", "-b", nodes[lead].admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
    # the producer reads the route once at start-up: wait until the name server has it
    wait_until(lambda: c.admin("topicRoute", "-t", TOPIC, check=False).returncode == 0, timeout=60,
               what="the topic's route at the name server")
    checker = PhasedChecker()
    p = Producer(config(";".join(n.endpoint for n in nodes)), (TOPIC,), checker)
    p.startup()
    try:
        ids = set()
        for i in range(3):
            tx = p.begin_transaction()
            ids.add(p.send(message(TOPIC, f"cb-{i}".encode()), tx).message_id)  # left open: never ended
        nodes[lead].proc.pause(True)
        try:
            wait_until(lambda: leader_index(c, [n for i, n in enumerate(nodes) if i != lead]), timeout=30,
                       what="a new leader while the old one is paused")
        finally:
            nodes[lead].proc.pause(False)
        wait_until(lambda: leader_index(c, [nodes[lead]], "FOLLOWER") is not None, timeout=30,
                   what="the old leader following")
        changed = time.monotonic()
        checker.commit_now.set()
        # ground truth: transactionTimeOut (2 s) has passed, so the new leader asks once per check interval (1 s)
        wait_until(lambda: ids <= checker.committed_after(changed), timeout=60, interval=0.5,
                   what="every open transaction checked back (and committed) after the leader change")
        took = time.monotonic() - changed
    finally:
        p.shutdown()
    print(f"open transactions checked back {took:.1f} s after the leader change")
