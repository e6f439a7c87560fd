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
from cluster import BrokerNode, LocalCluster, cluster_with_namesrv, start_dledger_group, stop_together, wait_until
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
    """The broker's haStatus, asked in-process (the admin CLI takes seconds to start on a loaded machine)."""
    import grpc

    from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2

    with grpc.insecure_channel(node.admin_addr) as ch:
        try:
            resp = admin_pb2_grpc.BrokerAdminStub(ch).HaStatus(common_pb2.Empty(), timeout=5)
        except grpc.RpcError as exc:
            raise AssertionError(f"{node.name} did not answer HaStatus: {exc.code().name}") from None
    return json.loads(resp.json)


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
    with cluster_with_namesrv(tmp_path_factory.mktemp("failover"), lambda: failed_call(request)) as c:
        yield c


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
        steady = time.monotonic()
        wait_until(lambda: time.monotonic() - steady >= 3, timeout=30, interval=0.2, what="3 s of steady sends")
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
    failures = sender.log.failures_between(killed, end)  # the kill's failover and the return alike
    print(f"preferred leader return: {len(sender.log.failures_between(returned, end))} failed sends, longest gap "
          f"{sender.log.longest_gap(returned, end):.3f} s (leadership back after {back - returned:.1f} s); "
          f"kill: {len(sender.log.failures_between(killed, returned))} failed, longest gap "
          f"{sender.log.longest_gap(killed, returned):.3f} s")
    assert not failures, f"{len(failures)} sends failed after the kill or the return: {failures[:3]}"
    # default Raft timing (no timing key set above): a follower starts an election at most one
    # longest election timeout after the leader's last heartbeat; a split vote costs one more
    from rocketscope.broker.broker_config import BROKER_KEYS

    tick_s = default_ms(BROKER_KEYS, "dLegerTickMillis") / 1000
    election_s = default_ms(BROKER_KEYS, "dLegerElectionTicksMax") * tick_s
    assert election_s <= DETECTION_TARGET_S, "default Raft timing detects a dead leader too late"
    kill_gap = sender.log.longest_gap(killed, returned)
    noise = sender.log.longest_gap(steady, killed)  # this machine's longest pause between sends with no fault
    bound = 2 * election_s + SCHEDULING_ALLOWANCE_S + noise
    assert kill_gap <= bound, f"no successful send for {kill_gap:.2f} s after kill (bound {bound:.2f} s)"
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


def default_ms(keys: list[Any], name: str) -> int:
    """The documented default of a timing key (docs/CONFIG.md is generated from the same list)."""
    return int(next(k.default for k in keys if k.name == name))


# A loaded two-core test machine schedules a process late by a few hundred ms; the bounds below
# add this, and the longest pause between two successful sends measured before the fault in the
# same run (the machine's noise floor), to what the configured timings allow.
SCHEDULING_ALLOWANCE_S = 0.6
# The target for default settings on a healthy network: a dead writer replaced within a second.
DETECTION_TARGET_S = 1.0


def controller_set(c: LocalCluster, name: str, **conf: Any) -> tuple[list[BrokerNode], BrokerNode]:
    """Three controller-mode brokers of set ``name`` on the controllers of ``start_default_controllers``;
    returns them and their master once every one is in the SyncStateSet."""
    addrs = ";".join(f"127.0.0.1:{p}" for p in c.controller_ports)  # type: ignore[attr-defined]
    nodes = [c.start_broker(f"{name}-{i}", brokerName=name, enableControllerMode="true", controllerAddr=addrs,
                            **conf) for i in range(3)]
    (m,) = wait_until(lambda: leader_index(c, nodes, "MASTER"), timeout=60, what="a master")
    wait_until(lambda: len(ha_status(c, nodes[m])["syncStateSet"]) == 3, timeout=60,
               what="all three brokers in the SyncStateSet")
    return nodes, nodes[m]


def start_default_controllers(c: LocalCluster, n: int = 3) -> list[Any]:
    """Three controllers with no timing key set (only identity, peers, ports and store)."""
    from cluster import BIN, Proc, _port_open
    from conftest import free_port

    raft_ports = [free_port() for _ in range(n)]
    client_ports = [free_port() for _ in range(n)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(raft_ports))
    procs = []
    for i in range(n):
        conf = c.root / f"controller-n{i}.conf"
        values = {"controllerDLegerGroup": "ctl", "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}",
                  "controllerStorePath": c.root / f"controller-n{i}", "listenPort": client_ports[i]}
        conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        procs.append(Proc(f"controller-n{i}", [str(BIN), "controller", "-c", str(conf)],
                          c.root / f"controller-n{i}.log").start())
    for p in client_ports:
        wait_until(lambda p=p: _port_open(p), what=f"controller on {p}")
    c.controller_procs = procs  # type: ignore[attr-defined]
    c.controller_ports = client_ports  # type: ignore[attr-defined]
    return procs


@pytest.mark.timeout(300)
def test_controller_mode_default_timing_fails_over_within_a_second(cluster: LocalCluster) -> None:
    """Issue 15: with no timing key set, kill -9 of the master; the longest window without a
    successful send stays within what the default timings allow, and those detect a dead
    master within a second (RocketMQ's 10 s heartbeat timeout gave an ~11 s outage)."""
    from rocketscope.broker.controller.config import BROKER_CONTROLLER_KEYS, CONTROLLER_KEYS

    c = cluster
    procs = start_default_controllers(c)
    try:
        addrs = ";".join(f"127.0.0.1:{p}" for p in c.controller_ports)  # type: ignore[attr-defined]
        nodes = [c.start_broker(f"c{i}", brokerName="broker-c", enableControllerMode="true", controllerAddr=addrs,
                                allAckInSyncStateSet="true", flushDiskType="SYNC_FLUSH") for i in range(3)]
        (m,) = wait_until(lambda: leader_index(c, nodes, "MASTER"), timeout=60, what="a master")
        wait_until(lambda: len(ha_status(c, nodes[m])["syncStateSet"]) == 3, timeout=60,
                   what="all brokers in the SyncStateSet")
        c.admin("updateTopic", "-b", nodes[m].admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
        sender = Sender(";".join(n.endpoint for n in nodes))
        try:
            wait_until(lambda: sender.log.count() >= 50, timeout=60, what="sends flowing")
            steady = time.monotonic()
            wait_until(lambda: time.monotonic() - steady >= 3, timeout=30, interval=0.2, what="3 s of steady sends")
            nodes[m].proc.kill9()
            killed = time.monotonic()
            wait_until(lambda: leader_index(c, nodes, "MASTER") is not None, timeout=60, what="a new master")
            n = sender.log.count()
            wait_until(lambda: sender.log.count() >= n + 100, timeout=60, what="sends through the new master")
            end = time.monotonic()
        finally:
            sender.close()
        gap = sender.log.longest_gap(killed, end)
        noise = sender.log.longest_gap(steady, killed)  # the longest pause between sends with no fault
        failures = sender.log.failures_between(killed, end)
        print(f"controller mode, default timing, kill -9 of the master: longest window without a successful send "
              f"{gap:.3f} s, {len(failures)} failed sends (longest pause with no fault {noise:.3f} s)")
        timeout_s = default_ms(BROKER_CONTROLLER_KEYS, "controllerHeartBeatTimeoutMills") / 1000
        scan_s = min(default_ms(CONTROLLER_KEYS, "scanNotActiveBrokerInterval"),
                     default_ms(CONTROLLER_KEYS, "scanInactiveMasterInterval")) / 1000
        heartbeat_s = default_ms(BROKER_CONTROLLER_KEYS, "brokerHeartbeatInterval") / 1000
        # the controller deems the master dead `timeout` after its last heartbeat (at most at the kill),
        # sees it at its next scan, elects at once, and the new master learns its role from the
        # notification or at worst its next heartbeat answer
        assert timeout_s + scan_s <= DETECTION_TARGET_S, "default timing detects a dead master too late"
        bound = timeout_s + scan_s + heartbeat_s + SCHEDULING_ALLOWANCE_S + noise
        assert gap <= bound, f"no successful send for {gap:.2f} s after kill -9 (bound {bound:.2f} s)"
        assert not failures, f"{len(failures)} sends failed: {failures[:3]}"
    finally:
        stop_together(procs)


RECEIVE_BATCH = 32  # messages one receive hands out (in flight until acked)


class Consumer:
    """A thread receiving and acking through the official SimpleConsumer; deliveries per message ID."""

    def __init__(self, endpoint: str, group: str, invisible_s: int = 60) -> None:
        self.seen: Counter[str] = Counter()
        self.acked_at: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.endpoint, self.group, self.invisible_s = endpoint, group, invisible_s
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with simple_consumer(self.endpoint, self.group, TOPIC, await_s=1) as consumer:
            while not self.stop.is_set():
                try:
                    msgs = consumer.receive(RECEIVE_BATCH, self.invisible_s)
                except Exception:
                    continue  # a receive during the failover: the client's next one goes on
                for msg in msgs:
                    with self.lock:
                        self.seen[msg.message_id] += 1
                    try:
                        consumer.ack(msg)
                    except Exception:
                        continue
                    with self.lock:
                        self.acked_at.setdefault(msg.message_id, time.monotonic())

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


@pytest.mark.timeout(300)
def test_redeliveries_after_leader_kill_are_few(cluster: LocalCluster) -> None:
    """Issue 15: receive/ack state survives a leader change, so a failover redelivers little.

    The invisible duration (60 s) outlasts the test: any second delivery of a message the
    consumer acked is caused by the failover.  Reported: redeliveries of acked messages.
    """
    c = cluster
    nodes = start_dledger_group(c, "broker-rd", flushDiskType="SYNC_FLUSH")
    (lead,) = wait_until(lambda: leader_index(c, nodes), timeout=60, what="a leader")
    c.admin("updateTopic", "-b", nodes[lead].admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
    endpoint = ";".join(n.endpoint for n in nodes)
    sender = Sender(endpoint)
    consumer = Consumer(endpoint, "GroupRd")
    try:
        wait_until(lambda: len(consumer.acked_at) >= 200, timeout=60, what="consumption flowing")
        nodes[lead].proc.kill9()
        killed = time.monotonic()
        wait_until(lambda: leader_index(c, nodes) is not None, timeout=30, what="a new leader")
        elected = time.monotonic()
        n = len(consumer.acked_at)
        wait_until(lambda: len(consumer.acked_at) >= n + 200, timeout=60, what="consumption after the failover")
        resumed = time.monotonic()
        sender.close()
        wait_until(lambda: set(sender.log.acked) <= set(consumer.seen), timeout=60, what="everything consumed")
        print(f"phases: elected {elected - killed:.1f} s, 200 more consumed {resumed - elected:.1f} s, "
              f"drained {time.monotonic() - resumed:.1f} s")
    finally:
        sender.close()
        consumer.close()
    with consumer.lock:
        redelivered = {m: k - 1 for m, k in consumer.seen.items() if k > 1}
        acked_before_kill = sum(1 for t in consumer.acked_at.values() if t < killed)
    print(f"leader kill -9: {sum(redelivered.values())} redeliveries of {len(consumer.seen)} messages "
          f"({acked_before_kill} acked before the kill)")
    # ground truth from this run: what the consumer acked within one replication interval (plus the
    # commit's latency) before the kill may be lost with the leader, and so may one receive batch in flight
    from rocketscope.broker.broker_config import BROKER_KEYS

    window = default_ms(BROKER_KEYS, "consumerOffsetReplicateInterval") / 1000 + SCHEDULING_ALLOWANCE_S
    with consumer.lock:
        recent = sum(1 for t in consumer.acked_at.values() if killed - window <= t < killed)
    bound = recent + RECEIVE_BATCH
    assert sum(redelivered.values()) <= bound, f"{sum(redelivered.values())} redeliveries (bound {bound})"


def raw_send(endpoint: str, body: bytes, timeout: float = 5.0) -> tuple[int, str]:
    """One SendMessage straight to ``endpoint`` (not the client's pick of member): (status code, message)."""
    import uuid

    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as svc
    from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

    req = svc.SendMessageRequest()
    m = req.messages.add(body=body)
    m.topic.name = TOPIC
    m.system_properties.message_id = uuid.uuid4().hex.upper()
    m.system_properties.message_type = pb.NORMAL
    with grpc.insecure_channel(endpoint) as ch:
        try:
            resp = svc_grpc.MessagingServiceStub(ch).SendMessage(req, metadata=(("x-mq-client-id", "raw"),),
                                                                 timeout=timeout)
        except grpc.RpcError as exc:
            return -1, f"{exc.code().name}: {exc.details()}"
    return resp.status.code, resp.status.message


@pytest.mark.timeout(300)
def test_sends_to_a_follower_or_deposed_leader_wait_for_the_new_leader(cluster: LocalCluster) -> None:
    """Issue 15: a send reaching a follower while the leader is paused, or reaching the deposed
    leader just after it resumes, is served by the new leader within its deadline (5 s here,
    several election timeouts) instead of failing."""
    from rocketmq.grpc_protocol import definition_pb2 as pb

    c = cluster
    nodes = start_dledger_group(c, "broker-dp", flushDiskType="SYNC_FLUSH")
    (lead,) = wait_until(lambda: leader_index(c, nodes), timeout=60, what="a leader")
    c.admin("updateTopic", "-b", nodes[lead].admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
    follower = nodes[(lead + 1) % 3]
    assert raw_send(follower.endpoint, b"warm-up")[0] == pb.OK
    results: list[tuple[str, int, str]] = []
    nodes[lead].proc.pause(True)
    try:
        paused = time.monotonic()
        while time.monotonic() - paused < 2.0:  # across the election of a new leader
            code, text = raw_send(follower.endpoint, b"to-follower")
            results.append(("follower", code, text))
    finally:
        nodes[lead].proc.pause(False)
    resumed = time.monotonic()
    while time.monotonic() - resumed < 2.0:  # the old leader, before and after it learns it was deposed
        code, text = raw_send(nodes[lead].endpoint, b"to-deposed")
        results.append(("deposed", code, text))
    failed = [r for r in results if r[1] != pb.OK]
    print(f"sends during the change: {len(results)}, failed {len(failed)}")
    assert not failed, f"{len(failed)} of {len(results)} sends failed: {failed[:3]}"


@pytest.mark.timeout(300)
def test_controller_mode_sends_to_a_slave_or_deposed_master_wait_for_the_new_master(cluster: LocalCluster) -> None:
    """Issue 15, controller mode: a send reaching a slave while the master is paused, or the
    deposed master just after it resumes, is served by the new master within its deadline."""
    from rocketmq.grpc_protocol import definition_pb2 as pb

    c = cluster
    procs = start_default_controllers(c)
    try:
        addrs = ";".join(f"127.0.0.1:{p}" for p in c.controller_ports)  # type: ignore[attr-defined]
        nodes = [c.start_broker(f"c{i}", brokerName="broker-c", enableControllerMode="true", controllerAddr=addrs,
                                allAckInSyncStateSet="true", flushDiskType="SYNC_FLUSH") for i in range(3)]
        (m,) = wait_until(lambda: leader_index(c, nodes, "MASTER"), timeout=60, what="a master")
        wait_until(lambda: len(ha_status(c, nodes[m])["syncStateSet"]) == 3, timeout=60,
                   what="all brokers in the SyncStateSet")
        c.admin("updateTopic", "-b", nodes[m].admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
        slave = nodes[(m + 1) % 3]
        wait_until(lambda: raw_send(slave.endpoint, b"warm-up")[0] == pb.OK, timeout=30, what="a send via a slave")
        results: list[tuple[str, int, str]] = []
        nodes[m].proc.pause(True)
        try:
            paused = time.monotonic()
            while time.monotonic() - paused < 2.5:  # across the election of a new master
                code, text = raw_send(slave.endpoint, b"to-slave")
                results.append(("slave", code, text))
        finally:
            nodes[m].proc.pause(False)
        resumed = time.monotonic()
        while time.monotonic() - resumed < 2.0:  # the old master, before and after it learns it was deposed
            code, text = raw_send(nodes[m].endpoint, b"to-deposed")
            results.append(("deposed", code, text))
        failed = [r for r in results if r[1] != pb.OK]
        print(f"controller mode, sends during the change: {len(results)}, failed {len(failed)}")
        assert not failed, f"{len(failed)} of {len(results)} sends failed: {failed[:3]}"
    finally:
        stop_together(procs)
