"""Emit replication events into the replicated RMQ_SYS_HA_EVENTS topic, from every node.

Only a node whose commit log is authoritative (a master, a Raft leader) may append to its
own log.  Every other node (slave, follower, candidate) *forwards* its events to the
current writer (``forward``, the writer's admin ``AppendHaEvents``), which appends them
unchanged, so the topic holds every node's events, a follower's truncations included, and
is replicated like any other topic.  Until an event is in the topic (written here or
accepted by the writer) it waits in ``pending`` and in a spool file next to the store
(``spool``), so a restart re-sends what was not delivered; overflow of the bounded buffer
drops the oldest events, counted in ``dropped``.  The writer may receive an event twice
(an answer lost after the append): readers deduplicate identical events.

Two event types would flood the topic and are throttled (docs/STORAGE.md, "Replication
events"): ``replica_ack`` at most one per replica every ``haEventAckIntervalMillis`` and
``commit_advanced`` at most one every ``haEventCommitIntervalMillis``.  A throttled event
is not lost: the newest one of an interval is emitted when the interval ends, with its own
time (not the interval's end), and carries in ``steps`` the offset and time of every event
of the interval it replaced (rocketscope/ha_events.py, ``HaEvent.expand``), so per-message
replication times stay exact to the millisecond while the topic gets at most one event per
interval.  Each replaced event is counted in ``throttled`` (the metric
``rocketmq_ha_events_throttled_total``: folded into a later event, not written on its own).
At most ``MAX_STEPS`` are kept per event (the oldest beyond are dropped: a message behind
one of those is then timed by the next step kept, an upper bound).

Delivery is batched by time on every node: a follower or slave forwards at most every
``FORWARD_LINGER_S`` and the writer appends at most every ``WRITE_LINGER_S`` (unless 256 events
wait).  On a DLedger leader each append is a Raft proposal of its own, replicated and dispatched
on every member; written as each event was recorded, the leader's own throttled events (three
keys, each due at its own time) made about 30 proposals a second beside the data's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

from rocketscope.ha_events import COMMIT_ADVANCED, REPLICA_ACK, HaEvent, HaEventError
from rocketscope.names import HA_EVENTS_TOPIC

log = logging.getLogger(__name__)

Append = Callable[[list[HaEvent]], Awaitable[bool]]
THROTTLED_TYPES = (REPLICA_ACK, COMMIT_ADVANCED)
MAX_STEPS = 4096  # folded advances kept per throttled event (about 25 bytes of JSON each)
FORWARD_LINGER_S = 0.25  # a slave or follower sends its events to the writer at most this often (unless 256 wait)
WRITE_LINGER_S = 0.1  # the writer appends its pending events to the topic at most this often (unless 256 wait)
LINGER_MAX_PENDING = 256  # this many pending events are delivered at once, linger or not (one delivery's batch)


def _folded(deferred: dict[str, Any] | None, before_offset: int) -> list[tuple[int, int]]:
    """The (offset, ts) steps a newer event at ``before_offset`` takes over from the deferred one it
    supersedes: the deferred event's own steps, then the deferred event itself; the newest
    MAX_STEPS that lie below ``before_offset`` (an offset going back, after a truncation, drops the rest).

    The superseded event is dropped, so its list is extended in place: offsets normally only grow, and
    copying and filtering every step on every Raft ack (as this did) cost work growing with the
    interval's steps on the DLedger leader's data path (issue 20).  Only when the new offset is not
    past the newest step (a truncation) are the steps filtered."""
    if deferred is None:
        return []
    steps: list[tuple[int, int]] = deferred["_steps"]
    steps.append((int(deferred.get("offset", -1)), int(deferred["_at"])))
    if steps[-1][0] >= before_offset:  # the earlier steps lie below the superseded event's offset
        return [step for step in steps if step[0] < before_offset][-MAX_STEPS:]
    if len(steps) > MAX_STEPS:
        del steps[:-MAX_STEPS]
    return steps


class HaEventLog:
    """``append``: write events into this node's log (only while ``writable()``); ``forward``: hand them to the
    writer (broker/ha/event_relay.py); ``context()``: the term/epoch for events that name none; ``spool``: the
    file undelivered events survive a restart in, loaded by :meth:`start`; ``on_throttled(type, n)``: counts
    events folded into a later one."""

    def __init__(self, cluster: str, group: str, node: str, address: str, append: Append,
                 writable: Callable[[], bool], ack_interval_ms: int = 100, capacity: int = 100_000,
                 commit_interval_ms: int = 100, *, forward: Append | None = None,
                 context: Callable[[], dict[str, int]] = dict,
                 on_throttled: Callable[[str, int], None] | None = None, spool: Path | None = None) -> None:
        self.cluster, self.group, self.node, self.address = cluster, group, node, address
        self._append = append
        self._writable = writable
        self.ack_interval_ms = ack_interval_ms
        self.commit_interval_ms = commit_interval_ms
        self.pending: deque[HaEvent] = deque(maxlen=capacity)
        self.dropped = 0
        self.written = 0
        self.forwarded = 0
        self.throttled: dict[str, int] = {REPLICA_ACK: 0, COMMIT_ADVANCED: 0}
        self.recent: deque[HaEvent] = deque(maxlen=1000)  # status pages; admin haEvents reads the topic
        self.recent_changes: deque[HaEvent] = deque(maxlen=1000)
        self._last_emit: dict[str, int] = {}
        self._last_offset: dict[str, int] = {}
        self._deferred: dict[str, dict[str, Any]] = {}  # newest throttled event per key, emitted at interval end
        self._keys: dict[tuple[str, str], str] = {}  # (type, replica) -> its throttle key (``advance``)
        self._unreported: dict[str, int] = {REPLICA_ACK: 0, COMMIT_ADVANCED: 0}  # folded, not yet on_throttled
        self.data_end = 0  # end of the newest record that is not itself a replication event
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.listeners: list[Callable[[HaEvent], None]] = []
        self.forward = forward
        self.context = context
        self.on_throttled: Callable[[str, int], None] = on_throttled or (lambda type_, n: None)
        self._spool_path = spool
        self.spool: Path | None = None  # in use once start() loaded it
        self._spool_fh: IO[str] | None = None  # the spool opened for appending, kept open (see _spool_append)
        self._last_delivery = 0.0  # time.monotonic() of the last append or forward (the linger's start)

    def note_data(self, end_offset: int) -> None:
        """A record other than a replication event now ends at ``end_offset``."""
        self.data_end = max(self.data_end, end_offset)

    # ------------------------------------------------------------------ emit
    def _interval_ms(self, type_: str) -> int:
        return self.ack_interval_ms if type_ == REPLICA_ACK else self.commit_interval_ms

    def emit(self, type_: str, **fields: Any) -> HaEvent | None:
        if type_ in THROTTLED_TYPES:
            return self._throttled(type_, self._key(type_, fields.get("replica", "")), int(fields.get("offset", -1)),
                                   fields)  # emit's own keyword dict: nobody else holds it
        return self._record(type_, int(time.time() * 1000), fields)

    def advance(self, type_: str, offset: int, term: int, replica: str = "") -> HaEvent | None:
        """``emit(type_, term=term, replica=replica, offset=offset)`` for a throttled type (``replica`` only for
        ``replica_ack``): the same path without the keyword dict and its look-ups (tests/test_ha_event_advance.py).

        Why an entry of its own: a DLedger leader reports an ack per follower and a commit advance per Ready
        (thousands a second), and nearly all of them are dropped or folded into the event waiting for its
        interval's end (docs/BENCHMARKS.md, session 26).
        """
        fields: dict[str, Any] = {"term": term, "replica": replica, "offset": offset} if type_ == REPLICA_ACK \
            else {"term": term, "offset": offset}
        return self._throttled(type_, self._key(type_, replica), offset, fields)

    def _key(self, type_: str, replica: str) -> str:
        """The throttle key of a (type, replica), made once."""
        key = self._keys.get((type_, replica))
        if key is None:
            key = self._keys[(type_, replica)] = f"{type_}:{replica}"
        return key

    def _throttled(self, type_: str, key: str, offset: int, fields: dict[str, Any]) -> HaEvent | None:
        """An ack or commit advance: dropped, folded into the event waiting for its interval's end, or recorded."""
        # events are records too: an ack or commit that only covers event records says nothing new
        # (and would feed back: its own event record would be acked again)
        last = self._last_offset.get(key, -1)
        if self.data_end <= last or offset <= last:
            return None
        deferred = self._deferred.get(key)
        if deferred is not None:
            if offset <= int(deferred.get("offset", -1)):
                return None  # no advance: the offset was first reached when the waiting event says
            del self._deferred[key]
            steps = _folded(deferred, offset)  # superseded: written only as a step of this newer event
            self.throttled[type_] += 1
            self._unreported[type_] += 1
        else:
            steps = []
        now = int(time.time() * 1000)
        if now - self._last_emit.get(key, 0) < self._interval_ms(type_):
            fields["_type"], fields["_at"], fields["_steps"] = type_, now, steps
            self._deferred[key] = fields
            if deferred is None:  # a new due time for _run; a replaced event keeps its key's due time
                self._wake.set()
            return None
        if steps:
            fields["steps"] = tuple(steps)
        self._last_emit[key] = now
        self._last_offset[key] = offset
        return self._record(type_, now, fields)

    def _report_throttled(self) -> None:
        """Hand the events folded since the last report to ``on_throttled``, one call per type.

        Why batched: it was one call per folded event (a metric update with its attributes, thousands a
        second on a DLedger leader); the folded events are now counted when an event is recorded (the one
        carrying them, or any other) and when the log stops.  ``throttled`` is counted at once as before."""
        for type_, n in self._unreported.items():
            if n:
                self._unreported[type_] = 0
                self.on_throttled(type_, n)

    def _record(self, type_: str, now: int, fields: dict[str, Any]) -> HaEvent:
        if self._unreported[REPLICA_ACK] or self._unreported[COMMIT_ADVANCED]:
            self._report_throttled()
        ctx = self.context()
        for name in ("term", "epoch"):
            if int(fields.get(name, -1)) < 0 and int(ctx.get(name, -1)) >= 0:
                fields[name] = ctx[name]
        event = HaEvent(type=type_, cluster=self.cluster, group=self.group, node=self.node, ts=now,
                        address=self.address, **fields)
        if len(self.pending) == self.pending.maxlen:
            self.dropped += 1
        self.pending.append(event)
        self._spool_append([event])
        self.recent.append(event)
        if type_ not in THROTTLED_TYPES:
            self.recent_changes.append(event)
            log.info("ha event %s: %s", type_, {k: v for k, v in fields.items() if v not in ("", -1, ())})
        for listener in self.listeners:
            listener(event)
        self._wake.set()
        return event

    def _emit_due_deferred(self) -> float:
        """Emit throttled events whose interval ended; return seconds until the next one is due."""
        now = int(time.time() * 1000)
        wait = 0.5
        for key, fields in list(self._deferred.items()):
            type_ = fields["_type"]
            due = self._last_emit.get(key, 0) + self._interval_ms(type_)
            if now >= due:
                del self._deferred[key]
                rest = {k: v for k, v in fields.items() if not k.startswith("_")}
                if fields["_steps"]:
                    rest["steps"] = tuple(fields["_steps"])
                self._last_emit[key] = now
                self._last_offset[key] = int(rest.get("offset", -1))
                self._record(type_, fields["_at"], rest)  # the time it happened, not the interval's end
            else:
                wait = min(wait, (due - now) / 1000)
        return max(wait, 0.005)

    def latest(self, limit: int) -> list[HaEvent]:
        """This process's newest ``limit`` events plus older remembered changes, oldest first (status pages)."""
        tail = list(self.recent)[-limit:] if limit > 0 else []
        shown = {id(e) for e in tail}
        return sorted([e for e in self.recent_changes if id(e) not in shown] + tail, key=lambda e: e.ts)

    # ----------------------------------------------------------------- spool
    def load_spool(self, path: Path) -> int:
        """Use ``path`` as the spool; queue the events a previous run left undelivered."""
        self.spool = path
        loaded = 0
        try:
            lines = path.read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                self.pending.append(HaEvent.from_json(line))
                loaded += 1
            except HaEventError:
                continue  # a torn last line after a crash
        if loaded:
            log.info("%d replication events from the previous run are queued for %s", loaded, HA_EVENTS_TOPIC)
        self._rewrite_spool()
        return loaded

    def _spool_append(self, events: list[HaEvent]) -> None:
        """Append ``events`` to the spool through a handle kept open (one ``write`` per call).

        Why kept open: an ``open`` and ``close`` per recorded event, on the disk the Raft log fsyncs,
        was most of what recording an event cost the DLedger leader (docs/BENCHMARKS.md, session 21).
        The handle is dropped whenever the file is replaced (``_rewrite_spool``) or a write fails, and
        opened again by the next append.
        """
        if self.spool is None:
            return
        try:
            fh = self._spool_fh
            if fh is None:
                fh = self._spool_fh = open(self.spool, "a")  # noqa: SIM115 - kept open across calls on purpose
            fh.write("".join(e.to_json() + "\n" for e in events))
            fh.flush()  # in the file (the page cache) at once, as when it was closed after each append
        except OSError as exc:
            log.warning("replication event spool %s: %s", self.spool, exc)
            self._close_spool()

    def _close_spool(self) -> None:
        fh, self._spool_fh = self._spool_fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()

    def _rewrite_spool(self) -> None:
        """The spool holds ``pending`` and nothing else: emptied in place when everything was delivered (the
        usual case after a delivery), else written aside and renamed over, so a crash leaves the old or the new.

        Emptying in place is safe: a crash before it only re-sends delivered events, which readers merge."""
        if self.spool is None:
            return
        if not self.pending and self._spool_fh is not None:
            try:
                self._spool_fh.truncate(0)  # no temporary file and rename per delivery (a journaled metadata change)
                return
            except OSError:
                pass  # written anew below
        self._close_spool()  # the open handle would keep appending to the file replaced below
        tmp = self.spool.with_suffix(".tmp")
        try:
            with open(tmp, "w") as fh:
                fh.write("".join(e.to_json() + "\n" for e in self.pending))
            os.replace(tmp, self.spool)
        except OSError as exc:
            log.warning("replication event spool %s: %s", self.spool, exc)

    # -------------------------------------------------------------- delivery
    def start(self) -> None:
        """Queue what the spool holds from the previous run (events emitted before this are spooled with it),
        then deliver."""
        if self._spool_path is not None and self.spool is None:
            self.load_spool(self._spool_path)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ha-events")

    async def stop(self) -> None:
        """Stop delivering, then deliver what is pending (2 s at most) and leave the rest in the spool.

        ``_stopping`` ends the task too: Python 3.11's ``wait_for`` returns normally when the task is
        cancelled just as the awaited wake-up fires (an event recorded right before ``stop``), so the
        cancellation alone let the task run on and ``stop`` wait for it for ever (a broker's stop then
        gave up on this step after its 3 s, broker/broker.py ``_stop_step``)."""
        self._stopping = True
        self._report_throttled()
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.pending:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.flush(), 2.0)
        self._rewrite_spool()
        self._close_spool()

    async def _run(self) -> None:
        wait = 0.5
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()
            if self._stopping:
                return
            wait = self._emit_due_deferred() if self._deferred else 0.5
            if self.pending and len(self.pending) < LINGER_MAX_PENDING:
                # batch the events: one forward RPC (follower, slave) or one append (writer) per linger
                linger = WRITE_LINGER_S if self._writable() else FORWARD_LINGER_S
                since = time.monotonic() - self._last_delivery
                if since < linger:
                    wait = min(wait, linger - since)
                    continue
            if self.pending:
                try:
                    await self.flush()
                except Exception as exc:
                    log.warning("delivering replication events to %s failed (%s); keeping them", HA_EVENTS_TOPIC,
                                exc)
                    wait = min(wait, 0.5)

    async def flush(self) -> None:
        """Write pending events (writer) or hand them to the writer (everyone else), oldest first."""
        delivered = False
        try:
            while self.pending:
                writable = self._writable()
                deliver = self._append if writable else self.forward
                if deliver is None:
                    return
                self._last_delivery = time.monotonic()
                batch = [self.pending.popleft() for _ in range(min(len(self.pending), LINGER_MAX_PENDING))]
                try:
                    ok = await deliver(batch)
                except BaseException:
                    self.pending.extendleft(reversed(batch))
                    raise
                if not ok:
                    self.pending.extendleft(reversed(batch))
                    return
                delivered = True
                if writable:
                    self.written += len(batch)
                else:
                    self.forwarded += len(batch)
        finally:
            if delivered:
                self._rewrite_spool()

    async def accept(self, events: list[HaEvent]) -> bool:
        """Events another node forwarded: append them as they are (only the writer may)."""
        if not self._writable():
            return False
        ok = await self._append(events)
        if ok:
            self.written += len(events)
        return ok
