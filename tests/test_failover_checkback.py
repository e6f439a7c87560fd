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
from typing import Any

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


def route_ready(nodes: list[Any]) -> bool:
    """Every member answers the topic's route with queues (the producer reads it once at start-up)."""
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as svc
    from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

    for n in nodes:
        req = svc.QueryRouteRequest()
        req.topic.name = TOPIC
        with grpc.insecure_channel(n.endpoint) as ch:
            try:
                resp = svc_grpc.MessagingServiceStub(ch).QueryRoute(req, timeout=5)
            except grpc.RpcError:
                return False
        if resp.status.code != pb.OK or not resp.message_queues:
            return False
    return True


def writable_at_leader(c: LocalCluster, nodes: list[Any]) -> tuple[int] | None:
    """(index,) of the leader once the topic, created on it, has a writable queue on brokerId 0 in every member's
    route; the topic is (re)created on whoever leads meanwhile.  At start-up the first leader may be deposed
    within a second (seen in CI: n0 led term 1 for 0.6 s); a topic created on it then had no writable queue."""
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as svc
    from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

    lead = leader_index(c, nodes)
    if lead is None:
        return None
    c.admin("updateTopic", "-b", nodes[lead[0]].admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
    for n in nodes:
        with grpc.insecure_channel(n.endpoint) as ch:
            try:
                resp = svc_grpc.MessagingServiceStub(ch).QueryRoute(
                    svc.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), timeout=5)
            except grpc.RpcError:
                return None
        if not any(q.permission in (pb.WRITE, pb.READ_WRITE) and q.broker.id == 0 for q in resp.message_queues):
            return None
    return lead if leader_index(c, nodes) == lead else None


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

    def commit_and_wait(self, ids: set[str], since: float, timeout: float, what: str) -> float:
        """Answer COMMIT from now on; seconds from ``since`` until every one of ``ids`` was checked back."""
        self.commit_now.set()
        wait_until(lambda: ids <= self.committed_after(since), timeout=timeout, interval=0.5, what=what)
        return time.monotonic() - since


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
    # the producer reads the route once at start-up: wait until its queues are writable at the leader
    (lead,) = wait_until(lambda: writable_at_leader(c, nodes), timeout=120, interval=0.5,
                         what="a leader with the topic writable in every member's route")
    checker = PhasedChecker()
    p = Producer(config(";".join(n.endpoint for n in nodes)), (TOPIC,), checker)
    p.startup()
    try:
        ids = send_open_transactions(p, "cb")
        nodes[lead].proc.pause(True)
        try:
            wait_until(lambda: leader_index(c, [n for i, n in enumerate(nodes) if i != lead]), timeout=30,
                       what="a new leader while the old one is paused")
        finally:
            nodes[lead].proc.pause(False)
        wait_until(lambda: leader_index(c, [nodes[lead]], "FOLLOWER") is not None, timeout=30,
                   what="the old leader following")
        changed = time.monotonic()
        # ground truth: transactionTimeOut (2 s) has passed, so the new leader asks once per check interval (1 s)
        took = checker.commit_and_wait(ids, changed, timeout=60,
                                       what="every open transaction checked back (and committed) after the "
                                            "leader change")
    finally:
        p.shutdown()
    print(f"open transactions checked back {took:.1f} s after the leader change")


def send_open_transactions(p: Producer, prefix: str, n: int = 3) -> set[str]:
    """``n`` half messages left open (neither committed nor rolled back): their message IDs."""
    ids = set()
    for i in range(n):
        tx = p.begin_transaction()
        ids.add(p.send(message(TOPIC, f"{prefix}-{i}".encode()), tx).message_id)
    return ids


def stream_holder(nodes: list[Any], client_id: str) -> tuple[int] | None:
    """(index,) of the only member whose log shows an open Telemetry stream of ``client_id`` (opened, not ended)."""
    holders = []
    for i, n in enumerate(nodes):
        text = n.proc.log_path.read_text(errors="replace")
        opened = text.count(f"Telemetry stream of client {client_id} opened on this member")
        ended = text.count(f"Telemetry stream of client {client_id} on this member ended")
        if opened > ended:
            holders.append(i)
    return (holders[0],) if len(holders) == 1 else None


@pytest.mark.long  # waits for the official client's route refresh, every 30 s
@pytest.mark.timeout(300)
def test_producer_whose_stream_member_was_killed_is_checked_back(cluster: LocalCluster) -> None:
    """The member holding the producer's Telemetry stream is killed and restarted: the client never
    re-opens that stream by itself (only at its settings sync, every 300 s, or for a route naming a
    new set of members), so the writer's routes must make it open another one, and open transactions
    are checked back within about one route refresh (30 s) plus GRACE_S (broker/forwarding.py).

    The member the test kills is the one whose log says it holds the producer's stream.
    """
    c = cluster
    timing = {"transactionTimeOut": 2000, "transactionCheckInterval": 1000}
    nodes = start_dledger_group(c, "broker-ck", flushDiskType="SYNC_FLUSH", **timing)
    (lead,) = wait_until(lambda: leader_index(c, nodes), timeout=60, what="a leader")
    c.admin("updateTopic", "-b", nodes[lead].admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
    wait_until(lambda: route_ready(nodes), timeout=120, what="the topic's route at the name server")
    checker = PhasedChecker()
    p = Producer(config(";".join(n.endpoint for n in nodes)), (TOPIC,), checker)
    p.startup()
    started = time.monotonic()
    try:
        ids = send_open_transactions(p, "ck")
        (edge,) = wait_until(lambda: stream_holder(nodes, p.client_id), timeout=30,
                             what="the one member holding the producer's Telemetry stream")
        # the client writes its settings down the stream 1 s after start-up and reads routes 10 s after it
        # (either may open a stream), then only every 300 s and 30 s: the kill comes after both
        wait_until(lambda: time.monotonic() - started > 15, timeout=60, what="the client's first route refresh")
        (edge,) = wait_until(lambda: stream_holder(nodes, p.client_id), timeout=30,
                             what="the one member holding the producer's Telemetry stream")
        nodes[edge].proc.kill9()
        killed = time.monotonic()
        # restarted at once: the routes the client reads next name the same members as before, so a
        # route change does not make it open a stream by itself (it does when a member stays away)
        c.start_broker(nodes[edge].name)
        wait_until(lambda: leader_index(c, nodes), timeout=60, what="a leader")
        took = checker.commit_and_wait(ids, killed, timeout=120,
                                       what="every open transaction checked back after the stream's member was killed")
    finally:
        p.shutdown()
    print(f"member holding the producer's stream killed and restarted ({'the leader' if edge == lead else 'a follower'}"
          f"): open transactions checked back {took:.1f} s later")


def kill_restart_and_check_back(c: LocalCluster, writer: Any, access_point: str, prefix: str) -> float:
    """Open transactions from a producer whose access point is ``access_point``; kill -9 and restart ``writer``
    after the client's first route refresh (10 s after start-up, so the kill is what it must recover from);
    seconds from the kill until every one was checked back."""
    checker = PhasedChecker()
    p = Producer(config(access_point), (TOPIC,), checker)
    p.startup()
    started = time.monotonic()
    try:
        ids = send_open_transactions(p, prefix)
        wait_until(lambda: time.monotonic() - started > 12, timeout=60, what="the client's first route refresh")
        writer.proc.kill9()
        killed = time.monotonic()
        c.start_broker(writer.name)
        return checker.commit_and_wait(ids, killed, timeout=120,
                                       what="every open transaction checked back after the writer's restart")
    finally:
        p.shutdown()


@pytest.mark.long  # waits for the official client's route refresh, every 30 s
@pytest.mark.timeout(300)
def test_producer_of_a_restarted_single_broker_is_checked_back(cluster: LocalCluster) -> None:
    """A standalone broker (one address in every route, as a Master/Slave master) is killed and
    restarted with open transactions: the client's stream died with it and it re-opens one by
    itself only at its settings sync (300 s), so the broker's routes name the same address under
    another scheme (broker/stream_revival.py) and the transactions are checked back within about
    one route refresh (30 s) plus GRACE_S.  The Master/Slave chaos schedule found this
    (tx_unchecked after the master's restart)."""
    c = cluster
    node = c.start_broker("broker-one-ck", flushDiskType="SYNC_FLUSH", transactionTimeOut=2000,
                          transactionCheckInterval=1000)
    c.admin("updateTopic", "-b", node.admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
    wait_until(lambda: route_ready([node]), timeout=120, what="the topic's route at the name server")
    took = kill_restart_and_check_back(c, node, node.endpoint, "one")
    print(f"single broker killed and restarted with 3 open transactions: checked back {took:.1f} s later")


@pytest.mark.long  # waits for the official client's route refresh, every 30 s
@pytest.mark.timeout(300)
def test_producer_reading_routes_at_the_slave_is_checked_back_after_the_masters_restart(cluster: LocalCluster) -> None:
    """Master/Slave: the producer's access point is the slave (an application that lists both brokers stays on
    the slave's channel once the master died), so its route reads reach the slave, which cannot know that the
    producer's Telemetry stream died with the master.  Before the slave asked its master for routes
    (broker/forwarding.py ``master_of_slave``), the open transactions were never checked back after a kill -9
    of the master (the chaos harness: eight ``tx_unchecked`` in five kills); now within about one route refresh
    (30 s) plus stream_revival's grace."""
    c = cluster
    kw: dict[str, Any] = {"brokerName": "broker-ms-ck", "transactionTimeOut": 2000, "transactionCheckInterval": 1000}
    master = c.start_broker("ms-ck-master", brokerRole="SYNC_MASTER", **kw)
    slave = c.start_broker("ms-ck-slave", brokerRole="SLAVE", brokerId=1, **kw)
    c.admin("updateTopic", "-b", master.admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
    wait_until(lambda: route_ready([master, slave]), timeout=120, what="the topic's route at the name server")
    took = kill_restart_and_check_back(c, master, slave.endpoint, "ms")
    print(f"master killed and restarted, producer's routes read at the slave: checked back {took:.1f} s later")
