"""The broker's metrics: RocketMQ 5's catalogue, recorded where things happen.

Counters and histograms are recorded on the hot paths (send, delivery, RPC).  Gauges
(lag, connections, storage) need a consistent view of broker state that lives on the
event loop, while the metric reader calls gauge callbacks from its own thread; so a
snapshot task computes them on the loop every ``SNAPSHOT_INTERVAL_S`` and the callbacks
only read the latest immutable snapshot.

Definitions (RocketMQ's, for POP consumers): lag = max offset − committed offset;
in-flight = handed out and not acked; ready = max offset − next offset to hand out;
lag latency = now − store time of the oldest unacknowledged message; queueing latency
= now − store time of the oldest message not yet handed out.  Retry and DLQ topics are
not counted in the in/out counters (RocketMQ's rule); the retry topic has its own lag
series with is_retry=true.

Cost (issue #6): the send path records two counters and two histograms per message.  Each
label set is resolved once into bound instruments (``Recorder.bind``) kept in small caches
keyed by what varies (topic and message type; RPC method, code and long-polling), so a message
costs a few dict lookups and float adds instead of building and hashing label dicts.  The
snapshot reuses its label dicts from one snapshot to the next, so /metrics can reuse the label
text it rendered for them.  Zero-valued lag series are kept: RocketMQ records them (lag 0,
latency 0 when nothing is unconsumed) and "lag == 0" is a state dashboards and alerts read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from rocketscope.names import READER_GROUP, RETRY_PREFIX, SYSTEM_GROUP_PREFIX, is_retry_or_dlq, is_system_topic
from rocketscope.telemetry import Telemetry

from .broker_stats import BrokerStats
from .clients import ClientType
from .pop import Delivery, origin_topic, retry_topic
from .remoting.mq_version import version_desc
from .store.message_store import PutResult, PutStatus
from .store.record import StoredMessage

if TYPE_CHECKING:
    from rocketscope.config import Settings

    from .clients import ClientRegistry
    from .controller.replicas import ReplicasManager
    from .dledger.node import DLedgerNode
    from .groups import GroupManager
    from .ha.master import ReplicationMaster
    from .offsets import OffsetManager
    from .pop import PopService
    from .store.message_store import MessageStore
    from .timer import TimerService
    from .topics import TopicManager
    from .transaction import TransactionService

log = logging.getLogger(__name__)
SNAPSHOT_INTERVAL_S = 2.0
BIND_CACHE_MAX = 65536  # label sets kept bound; cleared when exceeded (topics churn; the cap is elsewhere)
ROLE_VALUES = {"LEADER": 3, "FOLLOWER": 2, "CANDIDATE": 1, "PRE_CANDIDATE": 1}  # DLedger's numbering
# rocketmq_ha_role uses the same numbering for every mode (telemetry/catalogue.py ROLE_DOC), so that one alert
# rule, "max by (broker_group) < 3" = no master, holds for master/slave, controller and DLedger groups alike
HA_MASTER, HA_SLAVE = 3, 2
PROPOSED_MAX = 200_000  # DLedger entries whose propose time is kept until every peer acknowledged them
Labels = dict[str, Any]

_CONSUME_MODE: dict[int, str] = {ClientType.PUSH_CONSUMER: "push", ClientType.SIMPLE_CONSUMER: "pop",
                                 ClientType.PULL_CONSUMER: "pull"}


def snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def is_system(name: str) -> bool:
    return is_system_topic(name) or name.upper().startswith(SYSTEM_GROUP_PREFIX)


def is_tool_group(group: str) -> bool:
    """RocketScope's own reader (Spark, trace lookup) reads by offset: it is not a consumer, so it is left out
    of messages_out and lag (it would double every consumed count and show a lag nobody has)."""
    return group == READER_GROUP


def rocketmq_version(version: str) -> str:
    """RocketMQ's form of a client version for the connection gauges: lower-cased MQVersion name, "v5_1_2" (a
    remoting client's ordinal is named first, broker/remoting/mq_version.py; a gRPC client sends "5.1.2")."""
    v = (version or "").strip().lower()
    if not v:
        return "unknown"
    return v.replace(".", "_").replace("-", "_") if v.startswith("v") else "v" + v.replace(".", "_").replace("-", "_")


class MetricsSource(Protocol):
    """What the broker's metrics read (issue 17: this, not the whole Broker); read-only views."""

    @property
    def store(self) -> MessageStore: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def topics(self) -> TopicManager: ...
    @property
    def groups(self) -> GroupManager: ...
    @property
    def offsets(self) -> OffsetManager: ...
    @property
    def clients(self) -> ClientRegistry: ...
    @property
    def pop(self) -> PopService: ...
    @property
    def timer(self) -> TimerService: ...
    @property
    def transactions(self) -> TransactionService: ...
    @property
    def replication_master(self) -> ReplicationMaster: ...
    @property
    def dledger(self) -> DLedgerNode | None: ...
    @property
    def replicas(self) -> ReplicasManager | None: ...
    @property
    def broker_name(self) -> str: ...
    @property
    def internal_addr(self) -> str: ...
    @property
    def is_master(self) -> bool: ...


class BrokerMetrics:
    def __init__(self, broker: MetricsSource, telemetry: Telemetry) -> None:
        self.broker = broker
        self.t = telemetry
        self.enabled = telemetry.enabled
        # Apache's BrokerStatsManager counters (mqadmin statsAll): always on, whatever telemetry says
        self.stats = BrokerStats(getattr(broker, "cluster", ""))
        self.messages_in = telemetry.counter("rocketmq_messages_in_total")
        self.throughput_in = telemetry.counter("rocketmq_throughput_in_total")
        self.message_size = telemetry.histogram("rocketmq_message_size")
        self.messages_out = telemetry.counter("rocketmq_messages_out_total")
        self.throughput_out = telemetry.counter("rocketmq_throughput_out_total")
        self.dlq = telemetry.counter("rocketmq_send_to_dlq_messages_total")
        self.commits = telemetry.counter("rocketmq_commit_messages_total")
        self.rollbacks = telemetry.counter("rocketmq_rollback_messages_total")
        self.finish_latency = telemetry.histogram("rocketmq_finish_message_latency")
        self.delay_latency = telemetry.histogram("rocketmq_delay_message_latency")
        self.timer_enqueue = telemetry.counter("rocketmq_timer_enqueue_total")  # added to by broker/timer.py
        self.timer_dequeue = telemetry.counter("rocketmq_timer_dequeue_total")
        self.rpc_latency = telemetry.histogram("rocketmq_rpc_latency")
        self.append_latency = telemetry.histogram("dledger_append_entry_latency")
        self.elections = telemetry.counter("dledger_election_total")
        self.ha_throttled = telemetry.counter("rocketmq_ha_events_throttled_total")
        self.replicate_latency = telemetry.histogram("dledger_replicate_entry_latency")
        self.topic_create = telemetry.histogram("rocketmq_topic_create_execution_time")
        self.group_create = telemetry.histogram("rocketmq_consumer_group_create_execution_time")
        self._loop_lag = telemetry.histogram("rocketscope_event_loop_lag").bind({}).record if self.enabled else None
        self._proposed: dict[int, float] = {}  # DLedger index -> perf_counter() when the leader proposed it
        self._acked: dict[str, int] = {}  # DLedger peer -> highest index it acknowledged (this term)
        self._proposed_term = -1
        self._dlq_known: set[tuple[str, str]] = set()
        for manager, hook in (("topics", self.on_topic_created), ("groups", self.on_group_created)):
            if hasattr(broker, manager):  # bench/telemetry_bench.py passes a stand-in broker without them
                getattr(broker, manager).on_created = hook
        self._snapshot: dict[str, tuple[tuple[float, Labels], ...]] = {}
        self._task: asyncio.Task[None] | None = None
        self._registrations: list[Any] = []
        self.per_queue = telemetry.wants("rocketmq_consumer_queue_lag_messages")
        self._in: dict[tuple[str, str], tuple[Any, Any, Any] | None] = {}  # (count.add, bytes.add, size.record)
        self._out: dict[tuple[str, str, bool], tuple[Any, Any]] = {}
        self._rpc: dict[tuple[str, str, bool], Any] = {}
        self._labels: dict[tuple[Any, ...], Labels] = {}  # snapshot label dicts, reused between snapshots
        self._labels_next: dict[tuple[Any, ...], Labels] = {}

    def _bound_in(self, topic: str, message_type: str) -> tuple[Any, Any, Any] | None:
        if is_retry_or_dlq(topic):
            bound = None
        else:
            labels = {"topic": topic, "message_type": message_type.lower(), "is_system": is_system(topic)}
            # bound methods: the send path calls them directly (no attribute lookups per message)
            bound = (self.messages_in.bind(labels).add, self.throughput_in.bind(labels).add,
                     self.message_size.bind(labels).record)
        if len(self._in) >= BIND_CACHE_MAX:
            self._in.clear()
        self._in[(topic, message_type)] = bound
        return bound

    def _bound_out(self, topic: str, group: str, is_retry: bool) -> tuple[Any, Any]:
        labels = {"topic": topic, "consumer_group": group, "is_system": is_system(topic), "is_retry": is_retry}
        bound = (self.messages_out.bind(labels), self.throughput_out.bind(labels))
        if len(self._out) >= BIND_CACHE_MAX:
            self._out.clear()
        self._out[(topic, group, is_retry)] = bound
        return bound

    # ---------------------------------------------------------------- events
    def on_loop_lag(self, lag_s: float) -> None:
        if self._loop_lag is not None:
            self._loop_lag(lag_s * 1000.0)

    def on_put(self, results: Iterable[PutResult]) -> None:
        ok = PutStatus.PUT_OK
        self.on_stored([res.message for res in results if res.message is not None and res.status is ok])

    def on_stored(self, messages: list[StoredMessage]) -> None:
        """Messages stored (PUT_OK): the put counters and, with metrics on, the per-topic instruments.  Called
        with the messages themselves by a run of plain single sends (``Broker.put_plain_run``: no ``PutResult``
        per message), through ``on_put`` by every other put."""
        self.stats.on_stored(messages)
        if not self.enabled:
            return
        for msg in messages:
            props = msg.properties
            topic = props.get("REAL_TOPIC", msg.topic)
            message_type = props.get("__MSGTYPE", "NORMAL")
            try:
                bound = self._in[(topic, message_type)]
            except KeyError:
                bound = self._bound_in(topic, message_type)
            if bound is None:  # retry and DLQ topics are not counted
                continue
            count, throughput, record_size = bound
            size = msg.size
            count(1)
            throughput(size)
            record_size(size)

    def on_delivered(self, group: str, deliveries: Iterable[Delivery]) -> None:
        if not is_tool_group(group):
            self.stats.on_delivered(group, deliveries)
        if not self.enabled or is_tool_group(group):
            return
        known = self._dlq_known
        for d in deliveries:
            if (group, d.topic) not in known:  # before its first possible dead letter: see _lag
                self._dlq_zero(group, d.topic)
            is_retry = d.message.topic.startswith(RETRY_PREFIX)
            bound = self._out.get((d.topic, group, is_retry)) or self._bound_out(d.topic, group, is_retry)
            bound[0].add(1)
            bound[1].add(d.message.size)

    def on_pulled(self, group: str, messages: Iterable[StoredMessage]) -> None:
        if not is_tool_group(group):
            self.stats.on_pulled(group, messages)
        if not self.enabled or is_tool_group(group):
            return
        for m in messages:
            topic = origin_topic(m)
            if is_retry_or_dlq(m.topic):
                continue
            bound = self._out.get((topic, group, False)) or self._bound_out(topic, group, False)
            bound[0].add(1)
            bound[1].add(m.size)

    def _dlq_zero(self, group: str, topic: str) -> None:
        """The group's DLQ series exists from 0 before its first dead letter (at its first delivery, or once the
        snapshot sees the subscription): Prometheus' increase() takes a series' first sample as its baseline,
        so a series born at 1 would hide that first dead letter from the DLQ alert."""
        self._dlq_known.add((group, topic))
        self.dlq.add(0, {"consumer_group": group, "topic": topic, "is_system": is_system(topic)})

    def on_dead_lettered(self, group: str, msg: StoredMessage) -> None:
        topic = origin_topic(msg)
        self.dlq.add(1, {"consumer_group": group, "topic": topic, "is_system": is_system(topic)})

    def on_transaction(self, topic: str, committed: bool, latency_s: float) -> None:
        (self.commits if committed else self.rollbacks).add(1, {"topic": topic})
        self.finish_latency.record(latency_s, {"topic": topic})

    def on_delay_delivered(self, topic: str, late_ms: int) -> None:
        self.delay_latency.record(max(late_ms, 0) / 1000, {"topic": topic})

    def on_dledger_commit(self, latency_ms: float) -> None:
        d = self.broker.dledger
        if d is not None:
            self.append_latency.record(latency_ms, {"group": d.group, "self_id": d.self_id})

    def on_dledger_proposed(self, first: int, count: int, started: float) -> None:
        """The leader proposed entries ``first .. first+count-1`` at ``started`` (time.perf_counter())."""
        d = self.broker.dledger
        if not self.enabled or d is None:
            return
        if d.term != self._proposed_term:  # a new leadership: acks of an older term say nothing about these
            self._proposed.clear()
            self._acked.clear()
            self._proposed_term = d.term
        for i in range(first, first + count):
            self._proposed[i] = started
        while len(self._proposed) > PROPOSED_MAX:  # a peer that never acks: forget the oldest
            del self._proposed[next(iter(self._proposed))]

    def on_dledger_replica_ack(self, peer: str, index: int) -> None:
        """``peer`` acknowledged the leader's log up to ``index``: record, for each entry of this leader that the
        ack newly covers, the time from its proposal to this ack (dledger_replicate_entry_latency)."""
        d = self.broker.dledger
        if not self.enabled or d is None or not d.is_leader or not self._proposed or peer == d.self_id:
            return
        prev = self._acked.get(peer, -1)
        if index <= prev:
            return
        self._acked[peer] = index
        now = time.perf_counter()
        record = self.replicate_latency.bind({"group": d.group, "self_id": d.self_id, "remote_id": peer}).record
        proposed = self._proposed
        lo = max(prev + 1, next(iter(proposed)))
        for i in range(lo, index + 1):
            started = proposed.get(i)
            if started is not None:
                record((now - started) * 1000)
        if len(self._acked) >= len(d.peers) - 1:  # every peer has acked up to the minimum: forget those entries
            low = min(self._acked.values())
            while proposed:
                first = next(iter(proposed))
                if first > low:
                    break
                del proposed[first]

    def on_topic_created(self, topic: str, system: bool, elapsed_ms: float, ok: bool) -> None:
        self.topic_create.record(elapsed_ms, {"invocation_status": "success" if ok else "failure",
                                              "is_system": system or is_system(topic)})

    def on_group_created(self, group: str, elapsed_ms: float, ok: bool) -> None:
        self.group_create.record(elapsed_ms, {"invocation_status": "success" if ok else "failure"})

    def on_ha_event_throttled(self, event_type: str, n: int) -> None:
        """Replication events a newer one replaced inside its throttle interval (broker/ha/event_log.py)."""
        self.ha_throttled.add(n, {"broker_group": self.broker.broker_name, "event_type": event_type})

    def on_dledger_election(self, result: str) -> None:
        d = self.broker.dledger
        if d is not None:
            self.elections.add(1, {"group": d.group, "self_id": d.self_id, "election_result": result})

    def on_rpc(self, method: str, response_code: str, served: bool, seconds: float, long_polling: bool) -> None:
        """A gRPC request answered: ``response_code`` is the name of its v2 status code and ``served`` whether it
        counts as a success, as the gRPC door names them (broker/grpc_errors.py ``rpc_outcome``)."""
        if not self.enabled:
            return
        bound = self._rpc.get((method, response_code, long_polling))
        if bound is None:
            bound = self.rpc_latency.bind({
                "protocol_type": "grpc", "request_code": snake(method), "response_code": response_code,
                "is_long_polling": long_polling, "result": "success" if served else "process_request_failed"}).record
            if len(self._rpc) >= BIND_CACHE_MAX:
                self._rpc.clear()
            self._rpc[(method, response_code, long_polling)] = bound
        bound(seconds * 1000)

    # ----------------------------------------------------------------- gauges
    GAUGES = (
        "rocketmq_broker_permission", "rocketmq_topic_number", "rocketmq_consumer_group_number",
        "rocketmq_producer_connections", "rocketmq_consumer_connections", "rocketmq_consumer_lag_messages",
        "rocketmq_consumer_lag_latency", "rocketmq_consumer_inflight_messages", "rocketmq_consumer_queueing_latency",
        "rocketmq_consumer_ready_messages", "rocketmq_storage_size", "rocketmq_storage_flush_behind_bytes",
        "rocketmq_storage_dispatch_behind_bytes", "rocketmq_storage_message_reserve_time",
        "rocketmq_storage_disk_usage_ratio", "rocketmq_timing_messages", "rocketmq_half_messages",
        "rocketmq_timer_enqueue_lag", "rocketmq_timer_enqueue_latency", "rocketmq_timer_dequeue_lag",
        "rocketmq_timer_dequeue_latency", "rocketmq_timer_message_snapshot",
        "rocketmq_topic_max_offset", "rocketmq_consumer_committed_offset", "rocketmq_consumer_queue_lag_messages",
        "rocketmq_consumer_queue_lag_latency", "rocketmq_ha_role", "rocketmq_ha_replica_ack_offset",
        "rocketmq_ha_replication_lag_bytes", "rocketmq_ha_sync_state_set_size", "rocketmq_ha_master_epoch",
        "dledger_role", "dledger_term", "dledger_commit_index",
        "dledger_peer_lag_entries",
    )

    def _snapshot_reader(self, name: str) -> Callable[[], Any]:
        """The gauge callback of ``name``: reads the last snapshot (the exporter's thread never computes)."""
        return lambda: self._snapshot.get(name, ())

    def start(self) -> None:
        if not self.enabled:
            return
        for name in self.GAUGES:
            self._registrations.append(self.t.gauge(name, self._snapshot_reader(name)))
        self.take_snapshot()
        self._task = asyncio.get_running_loop().create_task(self._snapshot_loop(), name="metrics-snapshot")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for reg in self._registrations:
            reg.unregister()

    async def _snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(SNAPSHOT_INTERVAL_S)
            try:
                self.take_snapshot()
            except Exception:
                log.exception("metrics snapshot failed")

    def _lab(self, key: tuple[str, ...], names: tuple[str, ...], system: str | None = None,
             **extra: Any) -> Labels:
        """The label dict for ``key`` (kind, then the values of ``names``) from the previous
        snapshot, else a new one: identical label sets stay the same objects between snapshots,
        and /metrics caches the text it rendered for them by identity. ``system`` adds is_system."""
        labels = self._labels.get(key)
        if labels is None:
            labels = dict(zip(names, key[1:], strict=True))
            labels.update(extra)
            if system is not None:
                labels["is_system"] = is_system(system)
        self._labels_next[key] = labels
        return labels

    def take_snapshot(self) -> None:
        """Compute every gauge's points on the event loop; the reader thread only reads the result."""
        self._labels_next = {}
        try:
            self._take_snapshot()
        finally:
            self._labels = self._labels_next
        self.t.gauges_changed()

    def _take_snapshot(self) -> None:
        b = self.broker
        snap: dict[str, list[tuple[float, Labels]]] = {name: [] for name in self.GAUGES}
        snap["rocketmq_broker_permission"].append((b.settings.brokerPermission, {}))
        snap["rocketmq_topic_number"].append((len(b.topics.topics), {}))
        snap["rocketmq_consumer_group_number"].append((len(b.groups.groups), {}))
        self._connections(snap)
        self._lag(snap)
        self._storage(snap)
        self._ha(snap)
        timing = b.timer.pending_by_topic()  # kept by the timer index per topic (broker/timer_store.py)
        snap["rocketmq_timing_messages"] = [(n, {"topic": t}) for t, n in timing.items()]
        snap.update(b.timer.gauges())  # the timer wheel's lags and distribution (broker/timer.py)
        halves: dict[str, int] = {}
        for half in b.transactions.pending.values():
            halves[half.topic] = halves.get(half.topic, 0) + 1
        snap["rocketmq_half_messages"] = [(n, {"topic": t}) for t, n in halves.items()]
        for cfg in b.topics.all():
            total = sum(b.store.max_offset(cfg.name, q) for q in range(max(cfg.read_queue_nums, cfg.write_queue_nums)))
            snap["rocketmq_topic_max_offset"].append((total, self._lab(("max", cfg.name), ("topic",))))
        # tuples: immutable, and the same tuple until the next snapshot, so /metrics may reuse the
        # lines it rendered from it (GaugeRegistration)
        self._snapshot = {name: tuple(points) for name, points in snap.items()}

    def _connections(self, snap: dict[str, list[tuple[float, Labels]]]) -> None:
        producers: dict[tuple[str, str, str], int] = {}
        consumers: dict[tuple[str, str, str, str, str], int] = {}
        for c in self.broker.clients.clients.values():
            if c.protocol == "remoting":
                continue  # counted per group below: one remoting client id serves all its JVM's groups
            lang, ver = (c.language or "unknown").lower(), rocketmq_version(c.version)
            if c.client_type == ClientType.PRODUCER:
                producers[(lang, ver, c.protocol)] = producers.get((lang, ver, c.protocol), 0) + 1
            elif c.client_type != ClientType.CLIENT_TYPE_UNSPECIFIED and c.group:
                key = (c.group, lang, ver, _CONSUME_MODE.get(c.client_type, "pop"), c.protocol)
                consumers[key] = consumers.get(key, 0) + 1
        # remoting clients from the remoting front's group tables (broker/remoting/broker_handlers.py): Apache's
        # Java client shares one client id among the producers and consumers of a JVM (one MQClientInstance),
        # and Apache's broker counts a connection per group it heartbeats for
        front = getattr(self.broker, "remoting", None)
        for table, is_producer in ((getattr(front, "producers", {}), True), (getattr(front, "consumers", {}), False)):
            for group, members in table.items():
                for rc in members.values():
                    lang, ver = (rc.language or "unknown").lower(), rocketmq_version(version_desc(rc.version))
                    if is_producer:
                        producers[(lang, ver, "remoting")] = producers.get((lang, ver, "remoting"), 0) + 1
                    else:
                        ckey = (group, lang, ver, rc.consume_mode, "remoting")
                        consumers[ckey] = consumers.get(ckey, 0) + 1
        snap["rocketmq_producer_connections"] = [
            (n, {"language": lang, "version": ver, "protocol_type": proto})
            for (lang, ver, proto), n in producers.items()]
        snap["rocketmq_consumer_connections"] = [
            (n, {"consumer_group": g, "language": lang, "version": ver, "consume_mode": mode, "protocol_type": proto,
                 "is_system": is_system(g)}) for (g, lang, ver, mode, proto), n in consumers.items()]

    def subscriptions(self) -> set[tuple[str, str]]:
        """(group, topic) pairs with an online consumer or a consumption state on this broker."""
        b = self.broker
        pairs = {(c.group, t) for c in b.clients.consumers() for t in c.topics if c.group}
        pairs |= {(g, t) for (g, t, _) in b.pop.states if not t.startswith(RETRY_PREFIX)}
        pairs |= {(g, t) for (g, t, _) in b.offsets.offsets if not is_retry_or_dlq(t)}
        return {(g, t) for g, t in pairs if b.topics.get(t) is not None and not is_tool_group(g)}

    def _lag(self, snap: dict[str, list[tuple[float, Labels]]]) -> None:
        b = self.broker
        if not b.is_master:
            # a slave or follower holds copies of the offsets but serves no consumption: its lag would add the
            # group's lag a second time to every sum over brokers (the Grafana lag panel showed 2x the truth)
            return
        now = int(time.time() * 1000)
        for group, topic in sorted(self.subscriptions()):
            if (group, topic) not in self._dlq_known:
                self._dlq_zero(group, topic)
            cfg = b.topics.get(topic)
            queues = [(topic, q) for q in range(cfg.read_queue_nums)] if cfg else []
            for is_retry, qs in ((False, queues), (True, [(retry_topic(group), 0)])):
                lag = inflight = ready = 0
                oldest_unacked = oldest_unpulled = now
                committed_sum = 0
                for t, q in qs:
                    hi = b.store.max_offset(t, q)
                    st = b.pop.states.get((group, t, q))
                    committed = st.committed if st else (b.offsets.get(group, t, q) or 0)
                    next_pop = st.next_pop if st else committed
                    q_lag = max(0, hi - committed)
                    lag += q_lag
                    committed_sum += committed
                    inflight += len(st.inflight) if st else 0
                    ready += max(0, hi - next_pop)
                    if q_lag:
                        ts = b.store.store_time(t, q, committed)
                        oldest_unacked = min(oldest_unacked, ts or now)
                    if hi > next_pop:
                        ts = b.store.store_time(t, q, next_pop)
                        oldest_unpulled = min(oldest_unpulled, ts or now)
                    if self.per_queue and not is_retry:
                        labels = {"consumer_group": group, "topic": topic, "queue_id": q, "is_retry": False,
                                  "is_system": is_system(topic)}
                        snap["rocketmq_consumer_queue_lag_messages"].append((q_lag, labels))
                        q_latency = now - (b.store.store_time(t, q, committed) or now) if q_lag else 0
                        snap["rocketmq_consumer_queue_lag_latency"].append((q_latency, labels))
                if is_retry and lag == 0 and inflight == 0:
                    continue
                labels = self._lab(("lag" if is_retry else "lag-", group, topic), ("consumer_group", "topic"), topic,
                                   is_retry=is_retry)
                snap["rocketmq_consumer_lag_messages"].append((lag, labels))
                snap["rocketmq_consumer_inflight_messages"].append((inflight, labels))
                snap["rocketmq_consumer_ready_messages"].append((ready, labels))
                snap["rocketmq_consumer_lag_latency"].append((now - oldest_unacked, labels))
                snap["rocketmq_consumer_queueing_latency"].append((now - oldest_unpulled, labels))
                if not is_retry:
                    snap["rocketmq_consumer_committed_offset"].append(
                        (committed_sum, self._lab(("off", group, topic), ("consumer_group", "topic"))))

    def _ha(self, snap: dict[str, list[tuple[float, Labels]]]) -> None:
        """Replication gauges: who leads, how far each replica has acknowledged, how far behind it is."""
        b = self.broker
        group = {"broker_group": b.broker_name}
        role = {**group, "broker_addr": b.internal_addr}  # broker_addr: the legacy exporter's brokerIP
        end = b.store.commit_log.max_offset
        d = b.dledger
        if d is not None:
            labels = {"group": d.group, "self_id": d.self_id}
            snap["dledger_role"].append((ROLE_VALUES.get(str(d.role).upper(), 0), labels))
            snap["dledger_term"].append((d.term, labels))
            snap["dledger_commit_index"].append((d.commit_index, labels))
            snap["rocketmq_ha_role"].append((ROLE_VALUES.get(str(d.role).upper(), 0), role))
            if d.is_leader and d.node is not None and d.log is not None:
                for peer, (match, _next, _state) in d.node.progress().items():
                    if peer == d.self_id:
                        continue
                    snap["dledger_peer_lag_entries"].append(
                        (max(0, d.log.last_index() - match), {**labels, "remote_id": peer}))
                    acked = d.log.end_offset(min(match, d.log.last_index()))
                    replica = {**group, "replica": f"{d.group}-{peer}"}
                    snap["rocketmq_ha_replica_ack_offset"].append((acked, replica))
                    snap["rocketmq_ha_replication_lag_bytes"].append((max(0, end - acked), replica))
            return
        snap["rocketmq_ha_role"].append((HA_MASTER if b.is_master else HA_SLAVE, role))
        rm = b.replicas
        if rm is not None and rm.is_master:  # controller mode: the master states the group's set and epoch
            snap["rocketmq_ha_sync_state_set_size"].append((rm.sync_state_set_size, group))
            snap["rocketmq_ha_master_epoch"].append((rm.master_epoch, group))
        if b.is_master:
            for st in b.replication_master.slaves.values():
                replica = {**group, "replica": st.name}
                snap["rocketmq_ha_replica_ack_offset"].append((st.ack_offset, replica))
                snap["rocketmq_ha_replication_lag_bytes"].append((max(0, end - st.ack_offset), replica))

    def _storage(self, snap: dict[str, list[tuple[float, Labels]]]) -> None:
        store = self.broker.store
        labels = {"storage_type": "local", "storage_medium": "disk"}
        log_ = store.commit_log.log
        size = log_.disk_bytes() + sum(cq.log.disk_bytes() for cq in store.cqs.values())
        snap["rocketmq_storage_size"].append((size, labels))
        snap["rocketmq_storage_flush_behind_bytes"].append((log_.max_offset - log_.synced_offset, labels))
        snap["rocketmq_storage_dispatch_behind_bytes"].append((store.commit_log.max_offset - store.dispatched, labels))
        oldest = store.read_physical(store.commit_log.next_record_offset(store.commit_log.min_offset))
        reserve = int(time.time() * 1000) - oldest.store_timestamp if oldest else 0
        snap["rocketmq_storage_message_reserve_time"].append((reserve, labels))
        snap["rocketmq_storage_disk_usage_ratio"].append((store.disk_ratio(), labels))
