"""Failover as the official client sees it (issue 15): regression tests over real processes.

Each test drives a real name server and real brokers (and controllers) on loopback with
the official Python client and counts what the client can notice: failed sends, the
longest window without a successful send, redeliveries, duplicated transactions.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cluster import BrokerNode, LocalCluster, start_dledger_group, wait_until
from conftest import failed_call
from rmq import config, message, producer, simple_consumer
from rocketmq import TransactionChecker
from rocketmq.v5.exception.client_exception import BadRequestException

pytestmark = pytest.mark.e2e
TOPIC = "TopicFo"


@dataclass
class SendLog:
    """Every send of a steady sender: when it ended, and whether the client saw it fail."""

    oks: list[float] = field(default_factory=list)
    failures: list[tuple[float, str]] = field(default_factory=list)
    acked: dict[str, bytes] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def failures_between(self, start: float, end: float) -> list[tuple[float, str]]:
        with self.lock:
            return [f for f in self.failures if start <= f[0] <= end]

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time within [start, end] without a successful send (s)."""
        with self.lock:
            times = [start, *sorted(t for t in self.oks if start <= t <= end), end]
        return max(b - a for a, b in itertools.pairwise(times))

    def count(self) -> int:
        with self.lock:
            return len(self.oks)


class Sender:
    """A thread sending one message at a time through the official client (its own retry policy)."""

    def __init__(self, endpoint: str, topic: str = TOPIC) -> None:
        self.log = SendLog()
        self.stop = threading.Event()
        self.endpoint = endpoint
        self.topic = topic
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with producer(self.endpoint, self.topic) as p:
            i = 0
            while not self.stop.is_set():
                body = f"fo-{i}".encode()
                i += 1
                try:
                    receipt = p.send(message(self.topic, body))
                except Exception as exc:
                    with self.log.lock:
                        self.log.failures.append((time.monotonic(), f"{type(exc).__name__}: {exc}"[:300]))
                    continue
                with self.log.lock:
                    self.log.oks.append(time.monotonic())
                    self.log.acked[receipt.message_id] = body
                time.sleep(0.005)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def ha_status(c: LocalCluster, node: BrokerNode) -> dict[str, Any]:
    return json.loads(c.admin("haStatus", "-b", node.admin_addr).stdout)[node.admin_addr]


def leader_index(c: LocalCluster, nodes: list[BrokerNode], role: str = "LEADER") -> tuple[int] | None:
    """(index,) of the node reporting ``role`` (a tuple, so index 0 is truthy for wait_until)."""
    for i, n in enumerate(nodes):
        if not n.proc.alive:
            continue
        try:
            if ha_status(c, n)["role"] == role:
                return (i,)
        except (AssertionError, KeyError):
            continue
    return None


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("failover"))
    try:
        c.start_namesrv()
        yield c
        if failed_call(request):
            print(c.logs())
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def consume_all(endpoint: str, group: str, wanted: set[str], timeout: float = 90.0,
                quiet: float = 3.0) -> Counter[str]:
    """Receive and ack until every wanted ID arrived (then ``quiet`` s more); deliveries per message ID.

    The invisible duration (60 s) is far longer than the test, so a second delivery of an
    ID is a redelivery caused by the broker (lost receive/ack state), not a slow consumer.
    """
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + timeout
    quiet_until: float | None = None
    with simple_consumer(endpoint, group, TOPIC) as consumer:
        while time.monotonic() < deadline:
            if quiet_until is None and wanted <= set(seen):
                quiet_until = time.monotonic() + quiet
            if quiet_until is not None and time.monotonic() >= quiet_until:
                break
            for msg in consumer.receive(32, 60):
                seen[msg.message_id] += 1
                try:
                    consumer.ack(msg)
                except BadRequestException as exc:
                    if "receipt_handle" not in str(exc):
                        raise
    return seen


@pytest.mark.timeout(300)
def test_preferred_leader_return_is_invisible_to_senders(cluster: LocalCluster) -> None:
    """Issue 15: when the preferred leader comes back and takes leadership back, sends must not fail.

    Before the fix, a follower's forwarding channel to the returning leader sat in gRPC's
    reconnect back-off and every forwarded send failed with UNAVAILABLE for seconds.
    """
    c = cluster
    nodes = start_dledger_group(c, "broker-fo", preferredLeaderId="n0", flushDiskType="SYNC_FLUSH")
    wait_until(lambda: leader_index(c, nodes) == (0,), timeout=60, what="n0 (preferred) leading")
    c.admin("updateTopic", "-b", nodes[0].admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
    sender = Sender(";".join(n.endpoint for n in nodes))
    try:
        wait_until(lambda: sender.log.count() >= 50, timeout=60, what="sends flowing")
        nodes[0].proc.kill9()
        killed = time.monotonic()
        wait_until(lambda: leader_index(c, nodes) is not None, timeout=30, what="a new leader")
        n = sender.log.count()
        wait_until(lambda: sender.log.count() >= n + 50, timeout=60, what="sends through the new leader")
        # the old leader stays down long enough for every channel to it to be deep in reconnect back-off
        wait_until(lambda: time.monotonic() - killed >= 15, timeout=30, interval=0.5, what="15 s of downtime")
        returned = time.monotonic()
        c.start_broker(nodes[0].name)
        wait_until(lambda: leader_index(c, nodes) == (0,), timeout=60, what="n0 taking leadership back")
        back = time.monotonic()
        n = sender.log.count()
        wait_until(lambda: sender.log.count() >= n + 100, timeout=60, what="sends after the return")
        end = time.monotonic()
    finally:
        sender.close()
    failures = sender.log.failures_between(returned, end)
    print(f"preferred leader return: {len(failures)} failed sends, longest gap "
          f"{sender.log.longest_gap(returned, end):.3f} s (leadership back after {back - returned:.1f} s); "
          f"kill: {len(sender.log.failures_between(killed, returned))} failed, longest gap "
          f"{sender.log.longest_gap(killed, returned):.3f} s")
    assert not failures, f"{len(failures)} sends failed after the preferred leader returned: {failures[:3]}"
    seen = consume_all(nodes[0].endpoint, "GroupFo", set(sender.log.acked))
    missing = set(sender.log.acked) - set(seen)
    assert not missing, f"{len(missing)} acknowledged messages lost"


class CommitChecker(TransactionChecker):
    """Answers every check-back with COMMIT and records which messages were checked back."""

    def __init__(self) -> None:
        self.checked: list[str] = []

    def check(self, message):  # type: ignore[no-untyped-def]
        from rocketmq import TransactionResolution

        self.checked.append(message.message_id)
        return TransactionResolution.COMMIT


def end_transaction(endpoint: str, topic: str, message_id: str, transaction_id: str) -> Any:
    """EndTransaction COMMIT sent straight to ``endpoint`` (the new leader), as the client's retry would."""
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as svc
    from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

    req = svc.EndTransactionRequest(message_id=message_id, transaction_id=transaction_id, resolution=pb.COMMIT,
                                    source=pb.SOURCE_CLIENT)
    req.topic.name = topic
    with grpc.insecure_channel(endpoint) as ch:
        return svc_grpc.MessagingServiceStub(ch).EndTransaction(req, metadata=(("x-mq-client-id", "tx-test"),),
                                                               timeout=20)


@pytest.mark.timeout(300)
def test_committed_transaction_is_not_checked_back_after_leader_returns(cluster: LocalCluster) -> None:
    """Issue 15: a transaction committed at a new leader must not be checked back (and committed again)
    by the old leader when it takes leadership back; each committed message is delivered once."""
    from rocketmq import Producer
    from rocketmq.grpc_protocol import definition_pb2 as pb

    c = cluster
    timing = {"transactionTimeOut": 2000, "transactionCheckInterval": 1000}
    nodes = start_dledger_group(c, "broker-tx", preferredLeaderId="n0", flushDiskType="SYNC_FLUSH", **timing)
    wait_until(lambda: leader_index(c, nodes) == (0,), timeout=60, what="n0 (preferred) leading")
    c.admin("updateTopic", "-b", nodes[0].admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
    checker = CommitChecker()
    p = Producer(config(";".join(n.endpoint for n in nodes)), (TOPIC,), checker)
    p.startup()
    try:
        receipts = []
        for i in range(5):
            tx = p.begin_transaction()
            receipts.append(p.send(message(TOPIC, f"tx-{i}".encode()), tx))
        nodes[0].proc.pause(True)
        try:
            (new,) = wait_until(lambda: leader_index(c, nodes[1:]), timeout=30, what="a leader while n0 is paused")
            new_ep = nodes[1 + new].endpoint
            for r in receipts:
                resp = end_transaction(new_ep, TOPIC, r.message_id, r.transaction_id)
                assert resp.status.code == pb.OK, resp.status
        finally:
            nodes[0].proc.pause(False)
        wait_until(lambda: leader_index(c, nodes) == (0,), timeout=60, what="n0 taking leadership back")
        # give n0 well over transactionTimeOut + transactionCheckInterval to (wrongly) check the halves back
        back = time.monotonic()
        wait_until(lambda: time.monotonic() - back > 6, timeout=30, interval=0.5, what="check-back window")
        seen = consume_all(";".join(n.endpoint for n in nodes), "GroupTx", {r.message_id for r in receipts})
    finally:
        p.shutdown()
    ids = {r.message_id for r in receipts}
    assert ids <= set(seen), f"committed messages missing: {ids - set(seen)}"
    twice = {m: k for m, k in seen.items() if k > 1}
    assert not twice, f"committed transactional messages delivered more than once: {twice}; checked back: " \
                      f"{checker.checked}"
    assert not set(checker.checked) & ids, f"resolved transactions checked back: {checker.checked}"
