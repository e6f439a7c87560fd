"""Delayed messages: stored in the timer topic, indexed on disk, delivered once by the writer.

As in RocketMQ 5, a delayed message (5.x delivery timestamp, or a remoting DELAY level,
which broker/remoting/broker_handlers.py turns into a delivery time) is stored in the
system topic ``rmq_sys_wheel_timer`` with its real topic, queue and delivery time as
properties, so it is replicated like any message (DLedger, Master/Slave, controller).

Every node, writer or not, reads that topic in order ("enqueue") into a disk-backed timer
log and timer wheel (broker/timer_store.py): memory does not grow with the number of
pending messages, and a restart only enqueues what arrived since the last checkpoint.
Only the writer ("dequeue") walks the wheel slot by slot, holds the current slot's units
in a small heap and puts each message to its real topic at its delivery time.

Exactly once across restarts and leader changes:

* a delivered message carries ``TIMER_QOFFSET`` (its timer-queue offset);
* the writer records its progress as a *claim* (T, E) — every timer message below queue
  offset E whose slot is below T was delivered or recalled — in the local checkpoint and,
  about once a second while it delivers, as a record in the timer topic itself, so
  replicas learn it through the replicated log;
* a new writer (after a restart or a role change) first waits until it has confirmed the
  log it took over and enqueued all of it, starts at the best claim it knows, reads the
  timer messages from E on that fell below T, and checks every message due before the
  takeover against the store's index (``UNIQ_KEY`` in the real topic with the same
  ``TIMER_QOFFSET``) before putting it, so what the old writer delivered is not sent again;
* a put that did not return PUT_OK but was written (replication or flush timeout) is not
  retried: it is "in doubt" until the confirm offset passes it, and the claim stays below
  it; a put that was not written at all is retried.

Delays longer than the roll window (timerRollWindowSlot slots) are written again into the
timer topic when the window reaches them (RocketMQ's "roll"), so no timer message has to
outlive the commit log's retention.
"""

from __future__ import annotations

import asyncio
import base64
import heapq
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rocketscope.names import TIMER_PROGRESS_GROUP, TIMER_TOPIC

from .errors import BrokerError, ErrorKind
from .store.message_store import PutStatus
from .store.record import StoredMessage
from .timer_store import KIND_DELETE, KIND_NORMAL, KIND_ROLL, TimerIndex

if TYPE_CHECKING:
    from rocketscope.config import Settings
    from rocketscope.telemetry.instruments import Recorder

    from .offsets import OffsetManager
    from .store.message_store import MessageStore
    from .topics import TopicManager

log = logging.getLogger(__name__)

REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
DELIVER_MS = "TIMER_DELIVER_MS"
RECALL_OF = "TIMER_RECALL_OF"
SLOT_MS = "TIMER_SLOT_MS"  # a recall's slot: where the recalled unit lies
CHECKPOINT = "TIMER_CHECKPOINT"  # "T,E": the writer's delivery claim, replicated
QOFFSET = "TIMER_QOFFSET"  # on a delivered message (and a rolled copy): the timer-queue offset it came from
ROLL_OF = "TIMER_ROLL_OF"
ROLL_TIMES = "TIMER_ROLL_TIMES"
START_DELIVER_TIME = "__STARTDELIVERTIME"
RECALL_HANDLE = "__RECALL_HANDLE"
TIMER_PROPS = (REAL_TOPIC, REAL_QID, DELIVER_MS, ROLL_OF, ROLL_TIMES)
# an idle writer's claim, moving with the clock over empty slots, is saved at most this often (TimerIndex.flush)
CLAIM_SAVE_SLACK_MS = 60_000
HEAP_BUDGET = 20_000  # units of the current slot held in memory at once (the rest stay on disk)
CHECK_MARGIN_MS = 2_000  # messages due this long after a takeover are still checked against the log
TIMER_BOUNDS_S = (5, 60, 300, 900, 3600, 14400, 28800, 86400)  # Apache's TimerMetrics distribution (timer_bound_s)
DIST_REFRESH_S = 5.0  # the distribution scans a day of wheel slots: at most this often
DUE_SCAN_SLOTS = 86_400  # dequeue lag: wheel slots below now counted at most (a writer far behind is far behind)
STORE_LABELS = {"storage_type": "local", "storage_medium": "disk"}


class RecallError(BrokerError):
    """A refused RecallMessage (each front door maps its kind once: broker/errors.py)."""


def make_recall_handle(broker: str, topic: str, deliver_ms: int, msg_id: str) -> str:
    raw = f"r1 {broker} {topic} {deliver_ms} {msg_id}".encode()
    return base64.urlsafe_b64encode(raw).decode()


def parse_recall_handle(handle: str) -> tuple[str, str, int, str]:
    """The fields of a handle from make_recall_handle; a BAD_REQUEST naming the field for anything else.

    The message says what is wrong in the client's terms (not base64, not a recall handle) rather than passing
    on the decoder's exception text, which named Python internals (session 13's differential suite, row 55).
    """
    try:
        raw = base64.urlsafe_b64decode(handle.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        raise RecallError(ErrorKind.BAD_REQUEST, "recall_handle is not one this broker issued "
                          "(not URL-safe base64 text)") from None
    parts = raw.split(" ")
    if len(parts) != 5 or parts[0] != "r1" or not parts[3].isdigit():
        raise RecallError(ErrorKind.BAD_REQUEST, "recall_handle is not one this broker issued "
                          "(not a recall handle's layout)")
    return parts[1], parts[2], int(parts[3]), parts[4]


@dataclass(order=True, slots=True)
class Due:
    """One unit waiting in the writer's heap: ordered by the time it is due."""

    due_ms: int
    queue_offset: int
    phy: int
    size: int
    kind: int
    topic: str
    deliver_ms: int
    slot_ms: int
    check: bool  # maybe delivered by an earlier writer: look in the log first


class TimerMetrics(Protocol):
    """The two counters the timer adds to (``BrokerMetrics``, broker/metrics.py)."""

    timer_enqueue: Recorder
    timer_dequeue: Recorder


class TimerHost(Protocol):
    """What the timer uses of its broker (issue 17: this, not the whole Broker)."""

    store: MessageStore
    topics: TopicManager
    offsets: OffsetManager
    settings: Settings
    broker_name: str
    metrics: TimerMetrics  # replaced when telemetry starts: read at each use

    @property
    def is_master(self) -> bool: ...

    def writer_lease_held(self) -> bool: ...

    def on_delay_delivered(self, msg: StoredMessage, late_ms: int) -> None: ...


class TimerService:
    def __init__(self, broker: TimerHost) -> None:
        s = broker.settings
        self.broker = broker
        self.store = broker.store
        self.enabled = bool(s.timerWheelEnable)
        self.precision = int(s.timerPrecisionMs)
        self.roll_window_ms = int(s.timerRollWindowSlot) * self.precision
        self.flush_interval_s = s.timerFlushIntervalMs / 1000
        self.progress_interval_s = s.timerProgressReplicateIntervalMs / 1000
        self.tick_s = min(0.05, self.precision / 4000)
        self.index: TimerIndex | None = None
        self.read_ms = 0  # writer: slots below are loaded; replica: the claim's T
        self.claim = (0, 0)  # best (T, E) known: from the local checkpoint or the replicated records
        self.enqueue_offset = 0
        self.near: list[Due] = []
        self.in_doubt: list[tuple[int, Due]] = []  # (commit-log end of the put, unit)
        self.recalled: dict[int, int] = {}  # timer-queue offset -> slot, recalls the writer must honour
        self._cursor: tuple[int, int, int] | None = None  # (slot, next unit, units left) of a slot loaded in part
        self._slot_seen: set[int] = set()
        self._slot_deleted: set[int] = set()
        self._takeover = True
        self._ready_at = 0
        self._check_until = 0
        self._open_offset = 0  # enqueue offset when the index was opened: what came before is not in _below
        self._below: dict[int, Due] = {}  # replica: units enqueued under its read time (a new writer needs them)
        self._below_recalls: dict[int, int] = {}
        self._skip = (0, 0)  # writer: units in a slot below T and below offset E are the claim's (delivered)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._last_flush = 0.0
        self._last_record = 0.0
        self._recorded_claim = (0, 0)
        self._delivered_since_record = 0
        self.enqueued_total = 0
        self.delivered_total = 0
        self.rolled_total = 0
        self.deduplicated_total = 0
        self.last_takeover_s = 0.0
        self._dist: list[tuple[float, dict[str, str]]] = []
        self._dist_at = 0.0

    # ------------------------------------------------------------------ start
    def _open(self) -> None:
        self.broker.topics.create_if_absent(TIMER_TOPIC, 1, system=True)
        root = self.store.root / "timer"
        idx = TimerIndex(root, self.precision)
        self.index = idx
        if idx.fresh:
            # no index yet: start where the in-memory timer (before the wheel) had delivered everything
            start = max(self.broker.offsets.get(TIMER_PROGRESS_GROUP, TIMER_TOPIC, 0) or 0,
                        self.store.min_offset(TIMER_TOPIC, 0))
            idx.cp.enqueue_offset = start
            idx.cp.claim_t, idx.cp.claim_e = 0, start
        self.enqueue_offset = max(idx.cp.enqueue_offset, self.store.min_offset(TIMER_TOPIC, 0))
        self.claim = (idx.cp.claim_t, idx.cp.claim_e)
        self.read_ms = idx.cp.claim_t
        self._open_offset = self.enqueue_offset
        log.info("timer index opened: enqueued up to timer offset %d, delivered below %d (offset %d), %d pending "
                 "by the checkpoint, timer log %d bytes%s", self.enqueue_offset, self.claim[0], self.claim[1],
                 idx.pending, idx.log.end - idx.log.min_pos, " (new index: rebuilt from the timer topic)"
                 if idx.fresh else "")

    def recover(self) -> None:
        """Start-up and every role change: forget the writer's memory; the loop takes over when it may."""
        if self.index is None:
            self._open()
        self._takeover = True
        self._ready_at = 0
        self._reset_writer()
        self._wake.set()  # a sleeping loop (``_next_pass_s``) starts the takeover now

    def _reset_writer(self) -> None:
        self.near = []
        self.in_doubt = []
        self.recalled = {}
        self._cursor = None
        self._slot_seen = set()
        self._slot_deleted = set()
        self.read_ms = self.claim[0]

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="timer")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self.index is not None:
            self._flush()
            self.index.close()
            self.index = None

    @property
    def pending(self) -> int:
        """Delayed messages not yet delivered (by the index's per-topic counts)."""
        return self.index.pending if self.index is not None else 0

    def status(self) -> dict[str, str]:
        """The timer's part of brokerStatus (strings, like the rest of that table)."""
        behind = self.store.max_offset(TIMER_TOPIC, 0) - self.enqueue_offset
        return {"timerPending": str(self.pending), "timerOffsetBehind": str(behind),
                "timerReadMs": str(self.read_ms), "timerWriterReady": str(self.broker.is_master and not self._takeover),
                "timerDelivered": str(self.delivered_total), "timerDeduplicated": str(self.deduplicated_total),
                "timerLogBytes": str(self.index.log.end - self.index.log.min_pos) if self.index else "0"}

    def pending_by_topic(self) -> dict[str, int]:
        return dict(self.index.cp.topic_counts) if self.index is not None else {}

    def gauges(self) -> dict[str, list[tuple[float, dict[str, str]]]]:
        """RocketMQ 5's timer gauges from the wheel's real state (broker/metrics.py samples them):
        enqueue lag and latency (timer-topic records not yet indexed, and the oldest one's age), dequeue lag
        and latency (messages due and not delivered, and how late the oldest is; the writer only, 0 elsewhere)
        and the distribution of wheel units over Apache's bounds from now."""
        idx = self.index
        if idx is None:
            return {}
        now = int(time.time() * 1000)
        lo = max(self.enqueue_offset, self.store.min_offset(TIMER_TOPIC, 0))
        enq_lag = max(0, self.store.max_offset(TIMER_TOPIC, 0) - lo)
        enq_ms = max(0, now - (self.store.store_time(TIMER_TOPIC, 0, lo) or now)) if enq_lag else 0
        deq_lag, oldest = 0, now
        if self.broker.is_master and not self._takeover:
            for d in self.near:  # loaded units (at most HEAP_BUDGET)
                if d.due_ms <= now:
                    deq_lag += 1
                    oldest = min(oldest, d.due_ms)
            if self.read_ms <= now:  # slots not loaded yet although their time came
                counts = idx.wheel.counts(self.read_ms, min((now - self.read_ms) // self.precision + 1,
                                                            DUE_SCAN_SLOTS))
                if self._cursor is not None and counts:  # the slot being loaded: only what is still on disk
                    counts[0] = self._cursor[2]
                for k, c in enumerate(counts):
                    if c:
                        deq_lag += c
                        oldest = min(oldest, self.read_ms + k * self.precision)
        if time.monotonic() - self._dist_at >= DIST_REFRESH_S or not self._dist:
            self._dist_at = time.monotonic()
            per_slot = idx.wheel.counts(now, TIMER_BOUNDS_S[-1] * 1000 // self.precision)
            self._dist, prev = [], 0
            for bound in TIMER_BOUNDS_S:
                end = bound * 1000 // self.precision
                self._dist.append((sum(per_slot[prev:end]), {"timer_bound_s": str(bound), **STORE_LABELS}))
                prev = end
        return {"rocketmq_timer_enqueue_lag": [(enq_lag, STORE_LABELS)],
                "rocketmq_timer_enqueue_latency": [(enq_ms, STORE_LABELS)],
                "rocketmq_timer_dequeue_lag": [(deq_lag, STORE_LABELS)],
                "rocketmq_timer_dequeue_latency": [(now - oldest, STORE_LABELS)],
                "rocketmq_timer_message_snapshot": list(self._dist)}

    # ----------------------------------------------------------------- accept
    def wrap(self, msg: StoredMessage, deliver_ms: int) -> None:
        """Turn a message into its timer-topic form (in place) before it is stored."""
        msg.properties[REAL_TOPIC] = msg.topic
        msg.properties[REAL_QID] = str(msg.queue_id)
        msg.properties[DELIVER_MS] = str(deliver_ms)
        msg.properties[RECALL_HANDLE] = make_recall_handle(self.broker.broker_name, msg.topic, deliver_ms, msg.msg_id)
        msg.topic = TIMER_TOPIC
        msg.queue_id = 0

    def accepted(self, msg: StoredMessage) -> None:
        self._wake.set()

    # ---------------------------------------------------------------- enqueue
    def _slot_of(self, deliver_ms: int, store_ms: int) -> tuple[int, int]:
        """(slot time, kind): beyond the roll window the unit waits at the window's end and is rolled there."""
        if deliver_ms - store_ms > self.roll_window_ms:
            t = store_ms + self.roll_window_ms
            return t - t % self.precision, KIND_ROLL
        return deliver_ms - deliver_ms % self.precision, KIND_NORMAL

    def _enqueue(self, budget: int = 4096) -> bool:
        """Index up to ``budget`` timer-topic records; True when caught up with the topic."""
        idx = self.index
        assert idx is not None
        end = self.store.max_offset(TIMER_TOPIC, 0)
        pos = max(self.enqueue_offset, self.store.min_offset(TIMER_TOPIC, 0))
        writing = self.broker.is_master and not self._takeover
        per_topic: dict[str, int] = {}
        while pos < end and budget > 0:
            got = self.store.get(TIMER_TOPIC, 0, pos, min(256, budget))
            for msg in got.messages:
                topic = self._enqueue_one(msg, writing)
                if topic is not None:
                    per_topic[topic] = per_topic.get(topic, 0) + 1
            budget -= max(len(got.messages), 1)
            pos = got.next_offset if got.next_offset > pos else pos + 1
        self.enqueue_offset = pos
        counter = self.broker.metrics.timer_enqueue
        for topic, n in per_topic.items():  # rocketmq_timer_enqueue_total: one add per topic and pass
            counter.add(n, {"topic": topic, **STORE_LABELS})
        return pos >= end

    def _enqueue_one(self, msg: StoredMessage, writing: bool) -> str | None:
        """Index one timer-topic record; the real topic of a delay message seen for the first time (not a rolled
        copy, a recall or a progress record), which rocketmq_timer_enqueue_total counts."""
        idx = self.index
        assert idx is not None
        p = msg.properties
        if CHECKPOINT in p:
            try:
                t, e = (int(x) for x in p[CHECKPOINT].split(","))
            except ValueError:
                return None
            if (t, e) > self.claim:
                self.claim = (t, e)
                if not self.broker.is_master:
                    self._follow_to(t)
                for q in [q for q, d in self._below.items() if q < e and d.slot_ms < t]:
                    del self._below[q]
                for q in [q for q, slot in self._below_recalls.items() if q < e and slot < t]:
                    del self._below_recalls[q]
            return None
        if RECALL_OF in p:
            target, topic = int(p[RECALL_OF]), p.get(REAL_TOPIC, "")
            slot = int(p.get(SLOT_MS, "0") or 0)
            if slot >= self.read_ms and slot:
                idx.add(slot, 0, target, 0, 0, KIND_DELETE, topic)
                idx.count_down(topic)
            if writing:
                self.recalled[target] = slot
            elif slot < self.read_ms:
                self._below_recalls[target] = slot
            return None
        topic = p.get(REAL_TOPIC, "")
        deliver_ms = int(p.get(DELIVER_MS, "0") or 0)
        slot, kind = self._slot_of(deliver_ms, msg.store_timestamp)
        self.enqueued_total += 1
        # a replica indexes only slots at or above its read time (a new writer re-reads the rest from its
        # claim's E); the writer indexes everything, so any claim it makes covers what its wheel holds
        if slot >= self.read_ms or writing:
            idx.add(slot, deliver_ms, msg.queue_offset, msg.physical_offset, msg.size, kind, topic)
        if writing and (slot < self.read_ms or (self._cursor is not None and slot == self._cursor[0])):
            # its slot was (or is being) loaded: straight into the heap too
            self._slot_seen.add(msg.queue_offset)
            heapq.heappush(self.near, Due(slot if kind == KIND_ROLL else deliver_ms, msg.queue_offset,
                                          msg.physical_offset, msg.size, kind, topic, deliver_ms, slot, False))
        elif not writing and slot < self.read_ms:  # kept for a takeover (few: late arrivals only)
            self._below[msg.queue_offset] = Due(slot if kind == KIND_ROLL else deliver_ms, msg.queue_offset,
                                                msg.physical_offset, msg.size, kind, topic, deliver_ms, slot, True)
        return None if ROLL_OF in p else topic

    def _follow_to(self, t: int) -> None:
        """A replica moves its read time to the writer's claim, counting the slots passed as delivered."""
        idx = self.index
        assert idx is not None
        start = max(self.read_ms, t - idx.wheel.span_ms + self.precision)
        idx.count_down_passed(start - start % self.precision, t)
        self.read_ms = max(self.read_ms, t)

    # ---------------------------------------------------------------- the loop
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._wake.is_set():
                # the next pass is due at the next due time, slot or flush (``_next_pass_s``), or when woken;
                # a timer handle that sets the event, not ``wait_for`` (a task, a future and a timer per tick)
                alarm = loop.call_later(self._next_pass_s(), self._wake.set)
                try:
                    await self._wake.wait()
                finally:
                    alarm.cancel()
            self._wake.clear()
            try:
                await self._step()
            except Exception:
                log.exception("timer pass failed; will retry")
                await asyncio.sleep(0.5)

    def _next_pass_s(self) -> float:
        """Seconds until the loop has work nobody wakes it for (issue 20: an idle broker ran it every 50 ms).

        A writer that delivers sleeps until its heap's first due time, the next slot it would load
        while the wheel holds units (``_load_slots`` looks ``2 * tick_s`` ahead), or the next flush
        interval (``read_ms`` moves on and the claim is flushed); a new delay message or a recall wakes
        it (``accepted``, ``recall``).  A replica indexes what replication appended once per flush
        interval (nothing wakes it; it only counts and keeps units for a takeover, and a takeover
        indexes the rest first); a role change wakes it (``recover``).  A writer-to-be (waiting for its
        lease and for the log it took over) keeps the short tick."""
        idx = self.index
        if idx is None:
            return self.tick_s
        if not self.broker.is_master:
            return max(self.flush_interval_s, self.tick_s)
        if self._takeover or not self.enabled:
            return self.tick_s
        if self._cursor is not None or self.in_doubt:
            return self.tick_s
        now_ms = time.time() * 1000
        wait_ms = self.flush_interval_s * 1000
        if self.near:
            wait_ms = min(wait_ms, self.near[0].due_ms - now_ms)
        if idx.pending > len(self.near) and len(self.near) < HEAP_BUDGET:  # units wait in slots not loaded yet
            wait_ms = min(wait_ms, self.read_ms - self.tick_s * 2000 - now_ms)
        return min(max(wait_ms / 1000, 0.0), self.flush_interval_s)

    async def _step(self) -> None:
        if self.index is None:
            return
        caught_up = self._enqueue()
        if not caught_up:  # a long backlog (a rebuilt index): index it in slices, serving meanwhile
            started, first = time.monotonic(), self.enqueue_offset
            while not caught_up:
                await asyncio.sleep(0)
                caught_up = self._enqueue()
            log.info("timer: indexed %d timer-topic records in %.2f s (caught up at offset %d, %d pending)",
                     self.enqueue_offset - first, time.monotonic() - started, self.enqueue_offset, self.pending)
        b = self.broker
        if not b.is_master:
            self._ready_at = 0
            if not self._takeover:
                self._takeover = True
                self._reset_writer()
        elif self.enabled:
            if self._takeover:
                if self.may_deliver(for_takeover=True):
                    await self._take_over()
            elif self.may_deliver():
                self._check_in_doubt()
                self._load_slots()
                await self.deliver_due()
                await self._record_progress()
        now = time.monotonic()
        if now - self._last_flush >= self.flush_interval_s:
            self._last_flush = now
            self._flush()

    def may_deliver(self, for_takeover: bool = False) -> bool:
        """Only a writer sure of its role, that has confirmed the log it took over, puts due messages."""
        b = self.broker
        if not b.is_master or not b.writer_lease_held():
            return False
        if for_takeover:
            store = self.store
            if self._ready_at == 0:
                self._ready_at = store.commit_log.max_offset
            return store.confirm_offset >= min(self._ready_at, store.commit_log.max_offset)
        return True

    async def _take_over(self) -> None:
        """Become the writer: start from the best claim, re-read what fell below it, check what is due.

        The wheel is walked from this node's own read time (every unit at or above it is in the
        wheel), skipping units the claim covers; what this process enqueued below its read time is
        in ``_below``; what an earlier process enqueued from the claim's E on is read again from
        the timer topic (little, unless the claim is old).
        """
        started = time.monotonic()
        if not self._enqueue(budget=1 << 30):
            return
        enq_read = self.read_ms
        below, below_recalls = self._below, self._below_recalls
        self._reset_writer()
        idx = self.index
        assert idx is not None
        own = (idx.cp.claim_t, idx.cp.claim_e)
        t, e = max(own, self.claim)
        now = int(time.time() * 1000)
        floor = now - idx.wheel.span_ms + self.precision
        start = min(enq_read, t)
        if t == 0 and idx.pending == 0:
            # no writer ever delivered and nothing is indexed: no slot before now can hold anything.
            # Walking the whole wheel from now - span (604,800 empty slots at the default precision)
            # kept a fresh leader's loop busy past its election timeout, so it stepped down.
            start = max(start, now)
        self.read_ms = max(start - start % self.precision, floor - floor % self.precision)
        self.claim = (t, e)
        self._skip = (t, e)
        self._check_until = now + CHECK_MARGIN_MS
        self.recalled.update({q: slot for q, slot in below_recalls.items() if q >= e or slot >= t})
        late = 0
        for d in below.values():
            if d.queue_offset >= e and d.slot_ms < self.read_ms:
                heapq.heappush(self.near, d)
                late += 1
        pos = max(e, self.store.min_offset(TIMER_TOPIC, 0))
        end = min(self._open_offset, self.enqueue_offset)
        while pos < end:
            got = self.store.get(TIMER_TOPIC, 0, pos, 256)
            for msg in got.messages:
                p = msg.properties
                if RECALL_OF in p:
                    self.recalled[int(p[RECALL_OF])] = int(p.get(SLOT_MS, "0") or 0)
                elif CHECKPOINT not in p:
                    deliver_ms = int(p.get(DELIVER_MS, "0") or 0)
                    slot, kind = self._slot_of(deliver_ms, msg.store_timestamp)
                    if slot < self.read_ms and msg.queue_offset not in below:
                        topic = p.get(REAL_TOPIC, "")
                        heapq.heappush(self.near, Due(slot if kind == KIND_ROLL else deliver_ms, msg.queue_offset,
                                                      msg.physical_offset, msg.size, kind, topic, deliver_ms, slot,
                                                      True))
                        late += 1
            pos = got.next_offset if got.next_offset > pos else pos + 1
            await asyncio.sleep(0)  # a long re-read (an old claim) must not stall the broker
        self._below, self._below_recalls = {}, {}
        self._takeover = False
        self._ready_at = 0
        self._recorded_claim = (t, e)
        self.last_takeover_s = time.monotonic() - started
        log.info("timer: writer from slot %d (claim %d, offset %d), %d messages below it re-read, %d pending; "
                 "took %.3f s", self.read_ms, t, e, late, idx.pending, self.last_takeover_s)

    def _load_slots(self) -> None:
        """Move the units of every slot that starts within the next tick into the heap (bounded)."""
        idx = self.index
        assert idx is not None
        horizon = int(time.time() * 1000) + int(self.tick_s * 2000)
        loaded = 0
        while len(self.near) < HEAP_BUDGET and loaded < 4 * HEAP_BUDGET:
            if self._cursor is None:
                if self.read_ms > horizon:
                    return
                _first, last, num = idx.wheel.get(self.read_ms)
                if num == 0:
                    self.read_ms += self.precision
                    loaded += 1
                    continue
                self._cursor = (self.read_ms, last, num)
                self._slot_seen, self._slot_deleted = set(), set()
            slot, pos, left = self._cursor
            while pos >= 0 and left > 0 and len(self.near) < HEAP_BUDGET:
                u = idx.log.read(pos)
                if u is None:
                    left = 0
                    break
                pos, left = u.prev, left - 1
                loaded += 1
                if u.kind == KIND_DELETE:
                    self._slot_deleted.add(u.queue_offset)
                    continue
                if u.queue_offset in self._slot_seen or u.queue_offset in self._slot_deleted:
                    continue  # enqueued twice (a crash before the checkpoint), or recalled
                if slot < self._skip[0] and u.queue_offset < self._skip[1]:
                    idx.count_down(idx.topic_name(u.topic_id))
                    continue  # the claim says it was delivered
                self._slot_seen.add(u.queue_offset)
                due = slot if u.kind == KIND_ROLL else u.deliver_ms
                heapq.heappush(self.near, Due(due, u.queue_offset, u.phy, u.size, u.kind,
                                              idx.topic_name(u.topic_id), u.deliver_ms, slot,
                                              due <= self._check_until))
            if pos < 0 or left <= 0:
                self._cursor = None
                self.read_ms = slot + self.precision
            else:
                self._cursor = (slot, pos, left)
                return

    # ---------------------------------------------------------------- deliver
    async def deliver_due(self) -> int:
        """Put every message now due (up to 256 in one write); return how many were delivered."""
        if not self.broker.is_master or self._takeover or self.index is None:
            return 0
        now = int(time.time() * 1000)
        batch: list[tuple[Due, StoredMessage]] = []
        idx = self.index
        while self.near and self.near[0].due_ms <= now and len(batch) < 256:
            d = heapq.heappop(self.near)
            if d.queue_offset in self.recalled:
                idx.count_down(d.topic)
                continue
            timer_msg = self.store.read_physical(d.phy)
            if timer_msg is None or timer_msg.topic != TIMER_TOPIC:
                log.error("timer message at commit-log offset %d (timer offset %d) is gone; skipped", d.phy,
                          d.queue_offset)
                idx.count_down(d.topic)
                continue
            timer_msg.queue_offset = d.queue_offset
            if d.check and self._already_written(d, timer_msg):
                self.deduplicated_total += 1
                idx.count_down(d.topic)
                continue
            batch.append((d, self._roll(d, timer_msg) if d.kind == KIND_ROLL else self._unwrap(d, timer_msg)))
        if not batch:
            return 0
        try:
            results = await self.store.put([m for _, m in batch])
        except Exception:
            for d, _m in batch:  # written or not, nobody knows: look in the log before writing again
                d.check = True
                heapq.heappush(self.near, d)
            raise
        delivered = 0
        for (d, out), res in zip(batch, results, strict=True):
            if res.message is None:  # not written: try again on the next pass
                heapq.heappush(self.near, d)
                log.warning("cannot deliver delayed message %s yet: %s", out.msg_id, res.reason or res.status.value)
            elif res.status is not PutStatus.PUT_OK:  # written, not yet confirmed: never written twice
                self.in_doubt.append((res.message.physical_offset + res.message.size, d))
                log.warning("delayed message %s written with status %s: delivered once the log confirms it",
                            out.msg_id, res.status.value)
            else:
                self._done(d, out, now)
                delivered += 1
        return delivered

    def _done(self, d: Due, out: StoredMessage, now: int) -> None:
        assert self.index is not None
        self._delivered_since_record += 1
        if d.kind == KIND_ROLL:
            self.rolled_total += 1  # counted again when the rolled copy is enqueued and delivered
            self.index.count_down(d.topic)
            return
        self.index.count_down(d.topic)
        self.delivered_total += 1
        self.broker.metrics.timer_dequeue.add(1, {"topic": d.topic, **STORE_LABELS})
        self.broker.on_delay_delivered(out, now - d.deliver_ms)

    def _check_in_doubt(self) -> None:
        if not self.in_doubt:
            return
        store = self.store
        bound = min(store.confirm_offset, store.dispatched)
        keep = []
        now = int(time.time() * 1000)
        for end, d in self.in_doubt:
            if end <= bound:
                msg = store.read_physical(d.phy)
                out = msg if msg is not None else StoredMessage(topic=d.topic, queue_id=0, body=b"")
                out.topic = d.topic
                self._done(d, out, now)
            else:
                keep.append((end, d))
        self.in_doubt = keep

    def _already_written(self, d: Due, timer_msg: StoredMessage) -> bool:
        """Did an earlier writer put this unit already?  Asked of the index, by UNIQ_KEY and TIMER_QOFFSET."""
        key = timer_msg.msg_id
        if not key:
            return False
        topic, prop = (TIMER_TOPIC, ROLL_OF) if d.kind == KIND_ROLL else (d.topic, QOFFSET)
        want = str(d.queue_offset)
        begin = min(d.deliver_ms, d.slot_ms) - 60_000
        return any(m.properties.get(prop) == want for m in self.store.lookup(topic, key, 16, begin_ms=begin))

    def _unwrap(self, d: Due, msg: StoredMessage) -> StoredMessage:
        props = {k: v for k, v in msg.properties.items() if k not in TIMER_PROPS}
        props[QOFFSET] = str(d.queue_offset)
        return StoredMessage(topic=msg.properties.get(REAL_TOPIC, d.topic),
                             queue_id=int(msg.properties.get(REAL_QID, "0") or 0), body=msg.body, properties=props,
                             flag=msg.flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                             reconsume_times=msg.reconsume_times)

    def _roll(self, d: Due, msg: StoredMessage) -> StoredMessage:
        props = dict(msg.properties)
        props[ROLL_OF] = str(d.queue_offset)
        props[ROLL_TIMES] = str(int(props.get(ROLL_TIMES, "0") or 0) + 1)
        return StoredMessage(topic=TIMER_TOPIC, queue_id=0, body=msg.body, properties=props, flag=msg.flag,
                             born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                             reconsume_times=msg.reconsume_times)

    # --------------------------------------------------------------- progress
    def writer_claim(self) -> tuple[int, int]:
        """(T, E) this writer can vouch for: nothing in its heap, cursor or doubt list lies below T."""
        t = self.read_ms if self._cursor is None else self._cursor[0]
        for d in self.near:
            t = min(t, d.slot_ms)
        for _end, d in self.in_doubt:
            t = min(t, d.slot_ms)
        return t, self.enqueue_offset

    async def _record_progress(self) -> None:
        """About once a second while delivering: the claim as a record in the timer topic (replicated)."""
        now = time.monotonic()
        if now - self._last_record < self.progress_interval_s:
            return
        claim = self.writer_claim()
        if claim <= self._recorded_claim or (not self._delivered_since_record
                                             and claim[0] - self._recorded_claim[0] < 60_000):
            return
        self._last_record = now
        rec = StoredMessage(topic=TIMER_TOPIC, queue_id=0, body=b"",
                            properties={CHECKPOINT: f"{claim[0]},{claim[1]}", "UNIQ_KEY": uuid.uuid4().hex.upper()})
        (res,) = await self.store.put([rec])
        if res.stored:
            self._recorded_claim = claim
            self._delivered_since_record = 0

    def _flush(self) -> None:
        idx = self.index
        if idx is None:
            return
        if self.broker.is_master and not self._takeover:
            t, e = self.writer_claim()
            if (t, e) > (idx.cp.claim_t, idx.cp.claim_e) or t >= idx.cp.claim_t:
                idx.cp.claim_t, idx.cp.claim_e = t, e
        elif self.claim > (idx.cp.claim_t, idx.cp.claim_e):
            idx.cp.claim_t, idx.cp.claim_e = self.claim
        idx.flush(self.enqueue_offset, CLAIM_SAVE_SLACK_MS)
        idx.delete_expired_segments()

    # ----------------------------------------------------------------- recall
    async def recall(self, topic: str, handle: str) -> str:
        broker, h_topic, _deliver_ms, msg_id = parse_recall_handle(handle)
        if broker != self.broker.broker_name:
            raise RecallError(ErrorKind.BAD_REQUEST,
                              f"recall_handle belongs to broker {broker}, not {self.broker.broker_name}")
        if h_topic != topic:
            raise RecallError(ErrorKind.BAD_REQUEST, f"recall_handle is for topic {h_topic}, not {topic}")
        store = self.store
        copies = [m for m in store.lookup(TIMER_TOPIC, msg_id, 16)
                  if m.properties.get(REAL_TOPIC) == topic and RECALL_OF not in m.properties]
        gone = RecallError(ErrorKind.NOT_FOUND, f"message {msg_id} was already delivered, recalled, or never delayed")
        if not copies or store.lookup(TIMER_TOPIC, f"{msg_id}-recall", 1):
            raise gone
        offsets = {str(m.queue_offset) for m in copies}
        if any(m.properties.get(QOFFSET) in offsets for m in store.lookup(topic, msg_id, 16)):
            raise gone
        target = max(copies, key=lambda m: m.physical_offset)
        deliver_ms = int(target.properties.get(DELIVER_MS, "0") or 0)
        slot, _kind = self._slot_of(deliver_ms, target.store_timestamp)
        tomb = StoredMessage(topic=TIMER_TOPIC, queue_id=0, body=b"recall",
                             properties={RECALL_OF: str(target.queue_offset), SLOT_MS: str(slot), REAL_TOPIC: topic,
                                         "UNIQ_KEY": f"{msg_id}-recall"})
        (res,) = await store.put([tomb])
        if not res.stored:
            raise RecallError(ErrorKind.INTERNAL, f"cannot record the recall: {res.reason or res.status.value}")
        self.recalled[target.queue_offset] = slot
        self._wake.set()
        log.info("delayed message %s of topic %s recalled", msg_id, topic)
        return msg_id
