"""Broker-side trace: turns TraceHooks calls into trace records and writes them to the trace topic.

Hooks run synchronously on the broker's event loop and only buffer; ``start()`` runs a task that
batches the buffer every ``flush_interval_s`` with ``rocketscope.trace.batching`` and awaits
``append(trace_topic, body, keys)``.  ``stop()`` flushes what is left.

Times are the broker's own clock readings in milliseconds, never the client's: the official
Python client sets ``born_timestamp`` from ``int(time.time())`` (whole seconds), and a Pub record
stamped with it put every send up to a second before its store (docs/TRACE.md, "What each time
measures").  A Pub record's timestamp is when the broker received the SendMessage request, its
cost time how long until the broker stored it locally (timestamp + cost = the message's store
timestamp; replication after that is in the replication events); SubBefore is the hand-out,
SubAfter the ack or the expiry.

The buffer is bounded (``queue_size`` records): a broker whose trace writes cannot keep up drops
records rather than growing without limit, and counts every drop in
``rocketscope_trace_records_dropped_total{source="broker",reason="queue_full"}`` (the series the
RocketScopeTraceRecordsDropped alert watches); failed appends go to
``rocketscope_trace_records_failed_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rocketscope.names import DLQ_PREFIX, RETRY_PREFIX, TRACE_TOPIC
from rocketscope.trace.batching import build_batches
from rocketscope.trace.codec import (
    EndTransactionRecord,
    PubRecord,
    RecallRecord,
    SubAfterRecord,
    SubBeforeRecord,
)
from rocketscope.trace.ids import make_offset_msg_id, split_address

log = logging.getLogger(__name__)

_MSG_TYPES = {"NORMAL": 0, "TRANSACTION": 1, "DELAY": 3, "FIFO": 4}
CLIENT_TRACED_MEMORY = 200_000
"""Open client-traced deliveries and transactions the tracer remembers (a few MB at most)."""

Append = Callable[[str, str, list[str], str], Awaitable[Any]]
"""``append(trace_topic, body, keys, original_topic)``: store one trace message (tag = original topic)."""


SOURCE = "broker"
"""The ``source`` label of the broker's trace-pipeline series (``client`` for the client wrappers)."""
DEFAULT_QUEUE_SIZE = 100_000
"""Records buffered between flushes (brokerTraceQueueSize): about 20 MB at worst, far above what a
0.2 s flush interval needs at the broker's top rate."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Counters:
    """The trace-pipeline series of one broker on its own telemetry (cluster, node labels included).

    Every series is created at start with 0 so that ``increase()`` in the alert and the Grafana
    panels has a series on a healthy broker, not only after the first drop.
    """

    def __init__(self, telemetry: Any, depth: Callable[[], int]) -> None:
        self.enabled = telemetry is not None and getattr(telemetry, "enabled", False)
        if not self.enabled:
            return
        src = {"source": SOURCE}
        self.written = telemetry.counter("rocketscope_trace_records_written_total").bind(src)
        self.failed = telemetry.counter("rocketscope_trace_records_failed_total").bind(src)
        dropped = telemetry.counter("rocketscope_trace_records_dropped_total")
        self.dropped = {reason: dropped.bind({**src, "reason": reason}) for reason in ("queue_full", "encode")}
        for c in (self.written, self.failed, *self.dropped.values()):
            c.add(0)
        self._gauge = telemetry.gauge("rocketscope_trace_queue_depth", lambda: [(depth(), src)])

    def add_written(self, n: int) -> None:
        if self.enabled and n:
            self.written.add(n)

    def add_failed(self, n: int) -> None:
        if self.enabled and n:
            self.failed.add(n)

    def add_dropped(self, n: int, reason: str) -> None:
        if self.enabled and n:
            self.dropped[reason].add(n)


def _msg_type(msg: Any) -> int:
    return _MSG_TYPES.get(msg.properties.get("__MSGTYPE", "NORMAL"), 0)


def _origin_topic(msg: Any) -> str:
    props = msg.properties
    return props.get("RETRY_TOPIC") or props.get("REAL_TOPIC") or msg.topic


class BrokerTracer:
    def __init__(self, append: Append, region_id: str, store_host: str, trace_topic: str = TRACE_TOPIC,
                 flush_interval_s: float = 0.2, batch: int = 64, queue_size: int = DEFAULT_QUEUE_SIZE,
                 telemetry: Any = None) -> None:
        """``telemetry``: the broker's Telemetry; the written, dropped and failed counts go there."""
        self._append = append
        self.region_id = region_id or "DefaultRegion"
        self.store_host = store_host
        self.trace_topic = trace_topic
        self.flush_interval_s = flush_interval_s
        self.batch = batch
        self._buf: list[tuple[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.queue_size = max(1, int(queue_size))
        self.written = 0
        self.dropped = 0
        self.failed = 0
        self._counters = _Counters(telemetry, lambda: len(self._buf))
        # deliveries and transactions an instrumented client traces itself (see _remember): the broker
        # must not add its own SubAfter at expiry or EndTransaction at resolution, or they exist twice
        self._client_deliveries: dict[str, None] = {}
        self._client_transactions: dict[str, None] = {}

    # --- buffering -------------------------------------------------------------------------------
    def _add(self, topic: str, record: Any) -> None:
        if len(self._buf) >= self.queue_size:
            self._drop(1, "queue_full")
            return
        self._buf.append((topic, record))

    def _drop(self, n: int, reason: str) -> None:
        self.dropped += n
        self._counters.add_dropped(n, reason)

    def _offset_msg_id(self, msg: Any) -> str:
        try:
            host, port = split_address(self.store_host or msg.store_host)
            return make_offset_msg_id(host, port, max(msg.physical_offset, 0))
        except Exception:
            return ""

    @staticmethod
    def _remember(seen: dict[str, None], key: str) -> None:
        """Bounded insertion-ordered set: deliveries that are never acked nor expire (broker restart)
        must not grow it forever; the oldest are forgotten first."""
        seen[key] = None
        if len(seen) > CLIENT_TRACED_MEMORY:
            for old in list(itertools.islice(seen, CLIENT_TRACED_MEMORY // 10)):
                seen.pop(old, None)

    # --- hooks -----------------------------------------------------------------------------------
    def on_stored(self, msg: Any, *, client_id: str, client_traced: bool, cost_ms: int, status: str) -> None:
        if client_traced and msg.properties.get("__MSGTYPE") == "TRANSACTION":
            self._remember(self._client_transactions, msg.msg_id)  # its EndTransaction is the client's too
        if client_traced or msg.topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            return  # the broker's own re-put of a retry or dead letter is not a send
        props = msg.properties
        topic = props.get("REAL_TOPIC") or msg.topic
        # the hook runs when the answer is ready, ``cost_ms`` after the request arrived: the send's
        # start as the broker saw it (never born_timestamp: the official client sets it in seconds).
        # Both readings are whole ms, so the difference can land 1 ms past the store time, which the
        # request cannot have followed
        received = _now_ms() - int(cost_ms)
        stored = msg.store_timestamp or received + int(cost_ms)
        received = min(received, stored)
        # cost = receive to local store, so timestamp + cost is the store time the broker wrote into the
        # message (the Spark jobs' stored_ts); replication after it is in the replication events
        self._add(topic, PubRecord(
            timestamp=received, region_id=self.region_id, group=props.get("PGROUP", ""),
            topic=topic, msg_id=msg.msg_id, tags=props.get("TAGS", ""), keys=props.get("KEYS", ""),
            store_host=self.store_host, body_length=len(msg.body), cost_time=stored - received,
            msg_type=_msg_type(msg), offset_msg_id=self._offset_msg_id(msg), success=True))

    def on_send_failed(self, topic: str, msg_id: str, tags: str, keys: str, body_length: int, *, client_id: str,
                       client_traced: bool, code: int, reason: str) -> None:
        if client_traced:
            return
        self._add(topic, PubRecord(
            timestamp=_now_ms(), region_id=self.region_id, group="", topic=topic, msg_id=msg_id, tags=tags or "",
            keys=keys or "", store_host=self.store_host, body_length=int(body_length), cost_time=0, msg_type=0,
            offset_msg_id="", success=False))

    def on_delivered(self, group: str, msg: Any, *, attempt: int, request_id: str, client_id: str,
                     client_traced: bool) -> None:
        if client_traced:
            self._remember(self._client_deliveries, request_id)
            return
        self._add(_origin_topic(msg), SubBeforeRecord(
            timestamp=_now_ms(), region_id=self.region_id, group=group, request_id=request_id, msg_id=msg.msg_id,
            retry_times=max(attempt - 1, 0), keys=msg.properties.get("KEYS", "")))

    def _sub_after(self, group: str, msg: Any, request_id: str, cost_ms: int, success: bool, code: int) -> None:
        self._add(_origin_topic(msg), SubAfterRecord(
            request_id=request_id, msg_id=msg.msg_id, cost_time=int(cost_ms), success=success,
            keys=msg.properties.get("KEYS", ""), context_code=code, timestamp=_now_ms(), group=group))

    def on_acked(self, group: str, load: Callable[[], Any], *, request_id: str, cost_ms: int, client_id: str,
                 client_traced: bool) -> None:
        if self._client_deliveries.pop(request_id, 0) is None or client_traced:
            return
        msg = load()
        if msg is not None:
            self._sub_after(group, msg, request_id, cost_ms, True, 0)

    def on_expired(self, group: str, msg: Any, *, request_id: str, cost_ms: int) -> None:
        if self._client_deliveries.pop(request_id, 0) is None:
            return  # handed to an instrumented client: it writes the failed SubAfter (timeout or nack) itself
        self._sub_after(group, msg, request_id, cost_ms, False, 1)

    def on_dead_lettered(self, group: str, msg: Any, *, attempts: int) -> None:
        dlq = DLQ_PREFIX + group
        self._add(_origin_topic(msg), PubRecord(
            timestamp=_now_ms(), region_id=self.region_id, group=group, topic=dlq, msg_id=msg.msg_id,
            tags=msg.properties.get("TAGS", ""), keys=msg.properties.get("KEYS", ""), store_host=self.store_host,
            body_length=len(msg.body), cost_time=0, msg_type=_msg_type(msg), offset_msg_id="", success=True))

    def on_transaction_end(self, half: Any, *, state: str, transaction_id: str, from_check: bool) -> None:
        if half.msg_id in self._client_transactions:
            if state != "UNKNOW":
                self._client_transactions.pop(half.msg_id, None)
            return  # an instrumented producer sent the half message: it writes EndTransaction itself
        props = half.properties
        topic = props.get("REAL_TOPIC") or half.topic
        self._add(topic, EndTransactionRecord(
            timestamp=_now_ms(), region_id=self.region_id, group=props.get("PGROUP", ""), topic=topic,
            msg_id=half.msg_id, tags=props.get("TAGS", ""), keys=props.get("KEYS", ""), store_host=self.store_host,
            msg_type=1, transaction_id=transaction_id or "", transaction_state=state, from_check=bool(from_check)))

    def on_recalled(self, topic: str, msg_id: str, *, success: bool) -> None:
        self._add(topic, RecallRecord(timestamp=_now_ms(), region_id=self.region_id, group="", topic=topic,
                                      msg_id=msg_id, success=bool(success)))

    def on_delay_delivered(self, msg: Any, *, late_ms: int) -> None:
        pass

    # --- writing ---------------------------------------------------------------------------------
    async def flush(self) -> None:
        async with self._lock:
            while self._buf:
                chunk, self._buf = self._buf[: self.batch], self._buf[self.batch:]
                try:
                    plan = build_batches(chunk)
                except Exception:
                    log.exception("broker trace: cannot encode %d records", len(chunk))
                    self._drop(len(chunk), "encode")
                    continue
                self._drop(len(plan.oversize), "encode")
                for b in plan.batches:
                    try:
                        # the tag carries the original topic (RocketMQ's trace messages do the same;
                        # Sub records name no topic, and the Spark jobs read it from here)
                        await self._append(self.trace_topic, b.body, list(b.keys), b.topic)
                        self.written += len(b.records)
                        self._counters.add_written(len(b.records))
                    except Exception:
                        log.exception("broker trace: append failed")
                        self.failed += len(b.records)
                        self._counters.add_failed(len(b.records))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            await self.flush()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
