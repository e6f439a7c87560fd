"""One message's whole life, from its trace records and its group's replication events.

This is the answer to "where is my message?" (docs/TRACE.md): the sends, the
transaction ends, where it was stored, when each replica acknowledged it and when the
group committed it, and per consumer group every delivery with its retries, ending in
success, failure or the dead-letter queue.  The model follows rocketmq-dashboard's
``MessageTraceGraph`` (Apache RocketMQ's trace view) and adds the store and replication nodes
RocketMQ does not have.

It is a pure function of its inputs so that the CLI, the JSON API, the dashboard and
the tests all get the same answer: records may come in any order, repeated (trace
messages are delivered at least once) and mixed with records of other messages (the
index is a hash index and trace messages batch many messages).

Rules that differ from the dashboard, and why:

* a missing time or cost is ``None`` (JSON ``null``), not -1, so no one plots 1969;
* deliveries are sorted oldest first, because a timeline reads left to right;
* a dead-letter move comes from the store metadata (``StoreInfo.dlq``, which the
  broker knows when it moves the message) or from a Pub record of this msgId on a
  ``%DLQ%<group>`` topic (broker-side trace writes one).  SubBefore records cannot mark
  it: their format has no topic, and a SubAfter context code has no DLQ value;
* Pub records on ``%RETRY%<group>`` topics are the broker re-putting a message for
  redelivery: they count as retries scheduled for that group, not as sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from rocketscope.ha_events import COMMIT_ADVANCED, REPLICA_ACK, TRUNCATION, HaEvent
from rocketscope.names import DLQ_PREFIX, RETRY_PREFIX, is_retry_or_dlq
from rocketscope.trace.codec import (
    MSG_TYPE_NAMES,
    EndTransactionRecord,
    PubRecord,
    RecallRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
)
from rocketscope.trace.ids import parse_offset_msg_id

UNKNOWN_GROUP = "%UNKNOWN_GROUP%"

STATUS_SUCCESS = "success"
STATUS_FAILED = "failed"
STATUS_UNKNOWN = "unknown"

GROUP_CONSUMED = "consumed"
GROUP_DEAD_LETTERED = "dead_lettered"
GROUP_RETRYING = "retrying"
GROUP_UNKNOWN = "unknown"


# ---------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class DlqMove:
    """The message moved to a group's dead-letter topic."""

    group: str
    timestamp: int | None
    dlq_topic: str = ""
    host: str = ""
    source: str = "store"  # "store" (broker metadata) or "trace" (a Pub on %DLQ%<group>)


@dataclass(frozen=True)
class StoreInfo:
    """What the broker knows about where it stored the message.

    ``coerce`` also accepts a mapping with these keys or any object with these
    attributes (the broker's ``StoredMessage`` has all but ``broker_group``).
    """

    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    physical_offset: int = -1
    store_timestamp: int | None = None
    store_host: str = ""
    broker_group: str = ""
    dlq: tuple[DlqMove, ...] = ()

    @classmethod
    def coerce(cls, value: StoreInfo | Mapping[str, Any] | object) -> StoreInfo:
        if isinstance(value, StoreInfo):
            return value
        get = value.get if isinstance(value, Mapping) else lambda name, default=None: getattr(value, name, default)
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            raw = get(f.name, None)
            if raw is None:
                continue
            if f.name == "dlq":
                kwargs["dlq"] = tuple(_coerce_dlq(item) for item in (raw if isinstance(raw, list | tuple) else [raw]))
            elif f.name == "store_timestamp":
                kwargs[f.name] = int(raw) if int(raw) > 0 else None
            elif isinstance(f.default, int) and not isinstance(f.default, bool):
                kwargs[f.name] = int(raw)
            else:
                kwargs[f.name] = str(raw)
        return cls(**kwargs)


def _coerce_dlq(item: DlqMove | Mapping[str, Any]) -> DlqMove:
    if isinstance(item, DlqMove):
        return item
    group = str(item.get("group", ""))
    if not group:
        raise ValueError("a dlq entry of the store metadata needs its consumer 'group'")
    ts = item.get("timestamp")
    return DlqMove(
        group=group,
        timestamp=int(ts) if ts is not None else None,
        dlq_topic=str(item.get("dlq_topic") or DLQ_PREFIX + group),
        host=str(item.get("host", "")),
        source="store",
    )


# ---------------------------------------------------------------------------------------
# Nodes of the answer


@dataclass(frozen=True)
class SendNode:
    """One Pub record: a send attempt as the producer saw it."""

    group: str
    topic: str
    tags: str
    keys: str
    region_id: str
    store_host: str
    client_host: str
    begin: int
    end: int
    cost_time: int
    status: str
    msg_type: int
    msg_type_name: str
    offset_msg_id: str


@dataclass(frozen=True)
class TransactionNode:
    """One EndTransaction record: commit, rollback or unknown, possibly answering a check-back."""

    group: str
    timestamp: int
    state: str
    transaction_id: str
    from_check: bool
    store_host: str


@dataclass(frozen=True)
class RecallNode:
    group: str
    timestamp: int
    status: str


@dataclass(frozen=True)
class StoreNode:
    """Where the message lives; ``source`` says whether the broker told us or we decoded the offsetMsgId."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int | None
    store_host: str
    broker_group: str
    source: str


@dataclass(frozen=True)
class ReplicaAck:
    """The first ack of one replica past the message: an upper bound of when it held a copy."""

    replica: str
    node: str
    timestamp: int
    offset: int
    latency_ms: int | None


@dataclass(frozen=True)
class Truncation:
    """A truncation in the message's group whose cut range covers the message: it may be lost on that node."""

    node: str
    timestamp: int
    from_offset: int
    to_offset: int


@dataclass(frozen=True)
class ReplicationNode:
    broker_group: str
    physical_offset: int
    replicas: tuple[ReplicaAck, ...]
    pending_replicas: tuple[str, ...]
    commit_timestamp: int | None
    commit_offset: int | None
    commit_latency_ms: int | None
    truncations: tuple[Truncation, ...]


@dataclass(frozen=True)
class DeliveryNode:
    """One delivery to a consumer: a SubBefore and its SubAfter, joined on request id."""

    request_id: str
    group: str
    begin: int | None
    end: int | None
    cost_time: int | None
    retry_times: int | None
    status: str
    context_code: int | None
    region_id: str


@dataclass(frozen=True)
class GroupNode:
    """Everything one consumer group did with the message."""

    group: str
    status: str
    deliveries: tuple[DeliveryNode, ...]
    retries_scheduled: tuple[int, ...]
    dlq: DlqMove | None


@dataclass(frozen=True)
class TimelineEvent:
    """A flat, time-ordered view for charts: one bar (or point when begin == end)."""

    kind: str
    label: str
    begin: int
    end: int
    status: str


@dataclass(frozen=True)
class Timeline:
    msg_id: str
    topic: str
    tags: str
    keys: str
    sends: tuple[SendNode, ...]
    transactions: tuple[TransactionNode, ...]
    recalls: tuple[RecallNode, ...]
    store: StoreNode | None
    replication: ReplicationNode | None
    groups: tuple[GroupNode, ...]
    warnings: tuple[str, ...]
    ignored_records: int

    @property
    def producer(self) -> SendNode | None:
        """The send that stored the message: the first successful one, else the last attempt."""
        for send in self.sends:
            if send.status == STATUS_SUCCESS:
                return send
        return self.sends[-1] if self.sends else None

    def events(self) -> list[TimelineEvent]:
        out: list[TimelineEvent] = []
        for s in self.sends:
            out.append(TimelineEvent("send", s.group, s.begin, s.end, s.status))
        for t in self.transactions:
            out.append(TimelineEvent("transaction", f"{t.group} {t.state}", t.timestamp, t.timestamp, t.state))
        for r in self.recalls:
            out.append(TimelineEvent("recall", r.group, r.timestamp, r.timestamp, r.status))
        if self.store is not None and self.store.store_timestamp is not None:
            ts = self.store.store_timestamp
            out.append(TimelineEvent("store", self.store.store_host, ts, ts, STATUS_SUCCESS))
        if self.replication is not None:
            for a in self.replication.replicas:
                out.append(TimelineEvent("replica_ack", a.replica, a.timestamp, a.timestamp, STATUS_SUCCESS))
            if self.replication.commit_timestamp is not None:
                ts = self.replication.commit_timestamp
                out.append(TimelineEvent("commit", self.replication.broker_group, ts, ts, STATUS_SUCCESS))
        for g in self.groups:
            for d in g.deliveries:
                begin = d.begin if d.begin is not None else d.end
                end = d.end if d.end is not None else begin
                if begin is not None and end is not None:
                    out.append(TimelineEvent("deliver", g.group, begin, end, d.status))
            if g.dlq is not None and g.dlq.timestamp is not None:
                out.append(TimelineEvent("dlq", g.group, g.dlq.timestamp, g.dlq.timestamp, STATUS_FAILED))
        out.sort(key=lambda e: (e.begin, e.end))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: dicts, lists, str, int, bool and None only."""
        data = _plain(self)
        data["producer"] = _plain(self.producer)
        data["events"] = [_plain(e) for e in self.events()]
        return data


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------
# Building


def build_timeline(
    msg_id: str,
    records: Iterable[TraceRecord],
    ha_events: Iterable[HaEvent] = (),
    store: StoreInfo | Mapping[str, Any] | object | None = None,
) -> Timeline:
    """The timeline of ``msg_id``; records of other msgIds (index hash collisions) are dropped."""
    warnings: list[str] = []
    unique: list[TraceRecord] = []
    seen: set[TraceRecord] = set()
    ignored = duplicates = 0
    for record in records:
        if record.msg_id != msg_id:
            ignored += 1
        elif record in seen:
            duplicates += 1
        else:
            seen.add(record)
            unique.append(record)
    if duplicates:
        warnings.append(f"{duplicates} duplicate trace records ignored")

    pubs = [r for r in unique if isinstance(r, PubRecord)]
    sends = tuple(sorted((_send_node(p) for p in pubs if not is_retry_or_dlq(p.topic)),
                         key=lambda s: (s.begin, s.end)))
    retry_pubs = [p for p in pubs if p.topic.startswith(RETRY_PREFIX)]
    trace_dlq = [
        DlqMove(p.topic[len(DLQ_PREFIX):], p.timestamp, p.topic, p.store_host, "trace")
        for p in pubs if p.topic.startswith(DLQ_PREFIX)
    ]
    transactions = tuple(sorted(
        (TransactionNode(t.group, t.timestamp, t.transaction_state, t.transaction_id, t.from_check, t.store_host)
         for t in unique if isinstance(t, EndTransactionRecord)),
        key=lambda t: t.timestamp))
    recalls = tuple(sorted(
        (RecallNode(r.group, r.timestamp, STATUS_SUCCESS if r.success else STATUS_FAILED)
         for r in unique if isinstance(r, RecallRecord)),
        key=lambda r: r.timestamp))

    ok_offsets = {s.offset_msg_id for s in sends if s.status == STATUS_SUCCESS and s.offset_msg_id}
    if len(ok_offsets) > 1:
        warnings.append(f"message stored {len(ok_offsets)} times (producer retries): offsetMsgIds {sorted(ok_offsets)}")

    events = list(ha_events)
    info = StoreInfo.coerce(store) if store is not None else None
    producer = next((s for s in sends if s.status == STATUS_SUCCESS), sends[-1] if sends else None)
    store_node = _store_node(info, producer, events, warnings)
    lower_bound = store_node.store_timestamp if store_node and store_node.store_timestamp is not None else (
        sends[0].begin if sends else None)
    replication = _replication(store_node, events, lower_bound) if store_node else None

    dlq_moves = list(info.dlq if info else ()) + trace_dlq
    groups = _groups(unique, retry_pubs, dlq_moves, warnings)

    first = producer or None
    topic = (info.topic if info and info.topic else "") or (first.topic if first else "") or next(
        (t.topic for t in unique if isinstance(t, EndTransactionRecord | RecallRecord)), "")
    tags = first.tags if first else next((t.tags for t in unique if isinstance(t, EndTransactionRecord)), "")
    keys = first.keys if first else next(
        (r.keys for r in unique if isinstance(r, EndTransactionRecord | SubBeforeRecord | SubAfterRecord) and r.keys),
        "")
    return Timeline(
        msg_id=msg_id,
        topic=topic,
        tags=tags,
        keys=keys,
        sends=sends,
        transactions=transactions,
        recalls=recalls,
        store=store_node,
        replication=replication,
        groups=groups,
        warnings=tuple(warnings),
        ignored_records=ignored,
    )


def _send_node(p: PubRecord) -> SendNode:
    return SendNode(
        group=p.group,
        topic=p.topic,
        tags=p.tags,
        keys=p.keys,
        region_id=p.region_id,
        store_host=p.store_host,
        client_host=p.client_host,
        begin=p.timestamp,
        end=p.timestamp + max(p.cost_time, 0),
        cost_time=p.cost_time,
        status=STATUS_SUCCESS if p.success else STATUS_FAILED,
        msg_type=p.msg_type,
        msg_type_name=MSG_TYPE_NAMES.get(p.msg_type, str(p.msg_type)),
        offset_msg_id=p.offset_msg_id,
    )


def _store_node(
    info: StoreInfo | None, producer: SendNode | None, events: Sequence[HaEvent], warnings: list[str]
) -> StoreNode | None:
    """From the broker's metadata when given, else decoded from the successful send's offsetMsgId."""
    if info is not None and (info.physical_offset >= 0 or info.store_host or info.topic):
        group = info.broker_group or _group_of_address(info.store_host, events)
        return StoreNode(info.topic, info.queue_id, info.queue_offset, info.physical_offset,
                         info.store_timestamp, info.store_host, group, "store")
    if producer is None or producer.status != STATUS_SUCCESS or not producer.offset_msg_id:
        return None
    try:
        host, port, offset = parse_offset_msg_id(producer.offset_msg_id)
    except ValueError as exc:
        warnings.append(f"offsetMsgId of the send cannot be decoded: {exc}")
        return None
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    store_host = producer.store_host or address
    group = _group_of_address(address, events) or _group_of_address(producer.store_host, events)
    return StoreNode(producer.topic, -1, -1, offset, None, store_host, group, "offsetMsgId")


def _group_of_address(address: str, events: Sequence[HaEvent]) -> str:
    if not address:
        return ""
    for event in events:
        if event.address == address:
            return event.group
    return ""


def _ordered(events: Iterable[HaEvent]) -> list[HaEvent]:
    return sorted(events, key=lambda e: e.ts)  # stable: equal times keep their input order


def _replication(store: StoreNode, events: Sequence[HaEvent], lower_bound: int | None) -> ReplicationNode | None:
    """Each replica's first ack past the message, the first commit past it, truncations covering it.

    Offsets in the events are end-exclusive record boundaries (rocketscope/ha_events.py), so
    an ack of offset ``> p`` means the replica holds the record stored at ``p``.  Events
    older than the store time (or, without it, the first send) are ignored: after a
    truncation an offset can be reused by another message.
    """
    p = store.physical_offset
    if not store.broker_group or p < 0:
        return None
    # a throttled event stands for several advances (its steps): each is joined with its own time
    relevant = [x for e in events if e.group == store.broker_group for x in e.expand()]
    recent = _ordered(e for e in relevant if lower_bound is None or e.ts >= lower_bound)
    first_ack: dict[str, HaEvent] = {}
    for event in recent:
        if event.type == REPLICA_ACK and event.offset > p and event.replica not in first_ack:
            first_ack[event.replica] = event
    known = {e.replica for e in relevant if e.type == REPLICA_ACK and e.replica}
    base = store.store_timestamp
    replicas = tuple(
        ReplicaAck(name, e.node, e.ts, e.offset, e.ts - base if base is not None else None)
        for name, e in sorted(first_ack.items(), key=lambda item: (item[1].ts, item[0]))
    )
    commit = next((e for e in recent if e.type == COMMIT_ADVANCED and e.offset > p), None)
    truncations = tuple(
        Truncation(e.node, e.ts, e.from_offset, e.to_offset) for e in recent if e.type == TRUNCATION and _cuts(e, p)
    )
    return ReplicationNode(
        broker_group=store.broker_group,
        physical_offset=p,
        replicas=replicas,
        pending_replicas=tuple(sorted(known - set(first_ack))),
        commit_timestamp=commit.ts if commit else None,
        commit_offset=commit.offset if commit else None,
        commit_latency_ms=commit.ts - base if commit and base is not None else None,
        truncations=truncations,
    )


def _cuts(event: HaEvent, p: int) -> bool:
    """Whether a truncation removed offset ``p``: the bytes between from_offset and to_offset
    (in either order), or everything from ``offset`` on when the range is not given."""
    if event.from_offset >= 0 and event.to_offset >= 0:
        low, high = sorted((event.from_offset, event.to_offset))
        return low <= p < high
    return 0 <= event.offset <= p


def _groups(
    records: Sequence[TraceRecord], retry_pubs: Sequence[PubRecord], dlq_moves: Sequence[DlqMove],
    warnings: list[str],
) -> tuple[GroupNode, ...]:
    befores: dict[str, SubBeforeRecord] = {}
    afters: dict[str, SubAfterRecord] = {}
    order: list[str] = []
    conflicts = 0
    for index, record in enumerate(records):
        if not isinstance(record, SubBeforeRecord | SubAfterRecord):
            continue
        key = record.request_id or f"\x00unpaired-{index}"  # an empty request id joins nothing
        if key not in befores and key not in afters:
            order.append(key)
        if isinstance(record, SubBeforeRecord):
            kept = befores.get(key)
            if kept is not None:
                conflicts += 1
            if kept is None or record.timestamp < kept.timestamp:
                befores[key] = record
        else:
            kept_after = afters.get(key)
            if kept_after is not None:
                conflicts += 1
            if kept_after is None or _after_rank(record) < _after_rank(kept_after):
                afters[key] = record
    if conflicts:
        warnings.append(f"{conflicts} deliveries traced more than once with different values; the earliest kept")

    by_group: dict[str, list[DeliveryNode]] = {}
    for key in order:
        before, after = befores.get(key), afters.get(key)
        node = _delivery(before, after)
        by_group.setdefault(node.group, []).append(node)

    retries: dict[str, list[int]] = {}
    for p in retry_pubs:
        retries.setdefault(p.topic[len(RETRY_PREFIX):], []).append(p.timestamp)
    dlq_by_group: dict[str, DlqMove] = {}
    for move in sorted(dlq_moves, key=lambda m: (m.source != "store", m.timestamp is None, m.timestamp or 0)):
        dlq_by_group.setdefault(move.group, move)

    names = sorted(set(by_group) | set(retries) | set(dlq_by_group))
    groups = []
    for name in names:
        deliveries = tuple(sorted(by_group.get(name, []), key=_delivery_order))
        dlq = dlq_by_group.get(name)
        groups.append(GroupNode(name, _group_status(deliveries, dlq), deliveries,
                                tuple(sorted(retries.get(name, []))), dlq))
    return tuple(groups)


def _after_rank(record: SubAfterRecord) -> tuple[bool, int]:
    """Prefer a SubAfter that carries its end time, then the earliest."""
    return (record.timestamp <= 0, record.timestamp)


def _delivery(before: SubBeforeRecord | None, after: SubAfterRecord | None) -> DeliveryNode:
    group = (before.group if before else "") or (after.group if after else "") or UNKNOWN_GROUP
    begin = before.timestamp if before else None
    if after is not None and after.timestamp > 0:
        end: int | None = after.timestamp
    elif after is not None and begin is not None:
        end = begin + max(after.cost_time, 0)
    else:
        end = None
    status = STATUS_UNKNOWN if after is None else STATUS_SUCCESS if after.success else STATUS_FAILED
    return DeliveryNode(
        request_id=first.request_id if (first := before or after) is not None else "",
        group=group,
        begin=begin,
        end=end,
        cost_time=after.cost_time if after else None,
        retry_times=before.retry_times if before else None,
        status=status,
        context_code=after.context_code if after else None,
        region_id=before.region_id if before else "",
    )


def _delivery_order(d: DeliveryNode) -> tuple[int, int, int, str]:
    moment = d.begin if d.begin is not None else d.end
    return (moment is None, moment or 0, d.retry_times or 0, d.request_id)


def _group_status(deliveries: Sequence[DeliveryNode], dlq: DlqMove | None) -> str:
    if any(d.status == STATUS_SUCCESS for d in deliveries):
        return GROUP_CONSUMED
    if dlq is not None:
        return GROUP_DEAD_LETTERED
    if deliveries and deliveries[-1].status == STATUS_FAILED:
        return GROUP_RETRYING
    return GROUP_UNKNOWN
