"""POP state through the replicated log, so a new writer knows what was handed out and acked (issue 15).

The POP engine (broker/pop.py) keeps, per (group, topic, queue), the committed offset, the
acks above it and the hand-outs in flight.  Consumer offsets alone were replicated
(broker/offset_log.py); the acks above the committed offset and the hand-outs lived in the
writer's memory, so after a leader change the new writer handed out again messages a
consumer had acknowledged: 162 such duplicates in one chaos run (tests/chaos, DLedger, six
faults), committed transactional messages among them.

RocketMQ 5 writes a checkpoint record for every hand-out and an ack record for every ack
into its revive topic, in the commit log, and rebuilds from them.  Here, in the same
spirit, every change of that state is an *op* appended to the system topic
``RMQ_SYS_POP_STATE``:

* ``h`` a hand-out (or a new invisible time): offset, receipt sequence, deadline;
* ``a`` an ack (also a skip by tag, a revive into the retry topic, a dead-lettering);
* ``r`` a FIFO message put back in place for redelivery;
* ``c`` an offset reset.

A record also carries, in ``m``, the (group, topic) pairs first popped in order (remoting
``order=true``) since the last record, and a snapshot record all of them: the marks that make
a writer redeliver such a group's hand-outs in place (broker/pop.py ``ordered``).  They travel
with the hand-outs they govern, so a node that adopts an ordered hand-out also knows to keep it
in place; the metadata copy every few seconds (broker/ha/slave.py) would leave a window in which
the new writer knows the hand-out but not the mark and sends it to the retry topic, which ordered
pops never read.

Ops are grouped into one record per write: the ops made in one event-loop turn (acks
arriving together) share a record and its commit wait; records are pipelined (up to
``MAX_INFLIGHT`` in flight, then the ops gather into the next), so an ack waits for one
replication round rather than for the record ahead of it and then its own; and every
``popStateSnapshotInterval`` ms a record also carries a snapshot of the whole state, so a
node that restarts replays only from its last snapshot.
Every node applies the committed records to a *shadow* of the state; a node that becomes
the writer serves from a copy of that shadow once it has seen every record its
predecessors committed (until then it hands out nothing and acks wait).

**An ack is answered only once its op is committed** (``durable``): an acknowledged ack
survives any leader change, so an acknowledged message is never handed out again, and an
ack that could not be replicated is answered with a retryable error, after which the
client may see the message again (at-least-once, which the client expects).  Hand-outs
are replicated without waiting: one lost with the old writer is handed out again at once.
What a failover can still redeliver: the messages in flight whose hand-out was not yet
committed, and those whose invisible time ran out meanwhile.

**Every mode keeps the journal**, not only the replicated ones: a standalone broker or a
Master/Slave master that restarts (SIGTERM or kill -9) rebuilds its acks and hand-outs from it,
as RocketMQ rebuilds from its revive topic.  Without it the acks above a queue's committed
offset lived in memory, and a restart handed every such acknowledged message out again
(tests/test_pop_restart.py; 86 in one Master/Slave restart of bench/chaos_bench.py).  In
Master/Slave mode the records reach the slave through HA like any message, so a promoted slave
serves from them too; a slave handing out under slaveReadEnable keeps its changes local.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rocketscope.names import POP_STATE_TOPIC

from .pop import Inflight, QueueState
from .store.record import StoredMessage

if TYPE_CHECKING:
    from .pop import PopService
    from .store.message_store import MessageStore
    from .topics import TopicManager

log = logging.getLogger(__name__)
SNAPSHOT_TAG = "snapshot"
OPS_TAG = "ops"
REPLAY_LIMIT = 200_000  # records scanned back for the last snapshot at start-up
# Records in flight at once.  One is written as soon as ops are waiting (no linger), so an ack
# waits for one replication round, not for the record ahead of it and then its own; past this
# many, ops gather into the next record until the oldest is answered (coalescing under load).
MAX_INFLIGHT = 4
Key = tuple[str, str, int]
States = dict[Key, QueueState]


def _copy(st: QueueState) -> QueueState:
    return QueueState(st.committed, st.next_pop, {o: Inflight(e.seq, e.deadline_ms) for o, e in st.inflight.items()},
                      set(st.acked), dict(st.attempts))


def snapshot_of(states: States) -> list[list[Any]]:
    """The state as JSON rows: [group, topic, queue, committed, acked, [[offset, seq, deadline]], [[offset, n]]]."""
    return [[g, t, q, st.committed, sorted(st.acked), [[o, e.seq, e.deadline_ms] for o, e in st.inflight.items()],
             [[o, n] for o, n in st.attempts.items()]] for (g, t, q), st in states.items()]


def states_of(rows: list[list[Any]]) -> States:
    out: States = {}
    for g, t, q, committed, acked, inflight, attempts in rows:
        out[(str(g), str(t), int(q))] = QueueState(
            int(committed), int(committed), {int(o): Inflight(int(s), int(d)) for o, s, d in inflight},
            {int(o) for o in acked}, {int(o): int(n) for o, n in attempts})
    return out


def apply_ops(states: States, ops: list[list[Any]]) -> int:
    """Apply ops to ``states`` (the shadow); returns how many were applied."""
    n = 0
    for op in ops:
        kind, g, t, q, off, committed = op[0], str(op[1]), str(op[2]), int(op[3]), int(op[4]), int(op[5])
        key = (g, t, q)
        st = states.get(key)
        if kind == "c":
            states[key] = QueueState(off, off)
            n += 1
            continue
        if st is None:
            st = states[key] = QueueState(committed, committed)
        st.advance_to(committed)
        if kind == "h":
            if off >= st.committed:
                st.inflight[off] = Inflight(int(op[6]), int(op[7]))
        elif kind == "a":
            st.mark_acked(off)
        elif kind == "r":
            st.inflight.pop(off, None)
            st.attempts[off] = st.attempts.get(off, 0) + 1
        else:
            continue
        n += 1
    return n


class PopStateLog:
    """The POP engine's journal, in every mode (see the module docstring).

    Given what it uses (issue 17): the store it writes and follows, the topics (its own is created at
    start), the POP engine whose state it journals and adopts, ``is_writer()`` (master or Raft leader),
    ``lease_held()`` (the writer role is still certain), ``master_slave`` (no Raft log and no controller: a
    record counts once on the master's disk) and the snapshot interval."""

    def __init__(self, store: MessageStore, topics: TopicManager, pop: PopService, is_writer: Callable[[], bool],
                 lease_held: Callable[[], bool], master_slave: bool, snapshot_s: float) -> None:
        self.store = store
        self.topics = topics
        self.pop = pop
        self.is_writer = is_writer
        self.lease_held = lease_held
        self.master_slave = master_slave
        self.snapshot_s = snapshot_s
        self.shadow: States = {}
        self.token = ""  # this node's writer incarnation: records carrying it are its own
        self._ops: list[list[Any]] = []
        self._marks: list[list[str]] = []  # ordered-POP marks not written yet
        self._appended = 0  # ops handed to the journal so far
        self._durable = 0  # ops known to be in the committed log
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        # records written and not yet answered, oldest first: (ops up to, the put); answered in this order
        self._inflight: deque[tuple[int, asyncio.Task[bool]]] = deque()
        self._slot = asyncio.Event()  # set when a record in flight was answered
        self._wake = asyncio.Event()
        self._dirty = False  # ops since the last snapshot
        self._last_snapshot = 0.0
        self._ready_at: int | None = None  # log end when this node took over, until it has confirmed it
        self._task: asyncio.Task[None] | None = None
        self.records_written = 0
        self.ops_applied = 0
        self.ack_waits_failed = 0

    # ------------------------------------------------------------ lifecycle
    def start(self) -> asyncio.Task[None]:
        """Rebuild the shadow from the last snapshot on, then follow the log's dispatches and write ops."""
        self.topics.create_if_absent(POP_STATE_TOPIC, 1, system=True)
        replayed = self._replay()
        self.store.add_topic_listener(POP_STATE_TOPIC, self.on_dispatch)  # no await since the replay: nothing missed
        self.pop.journal = self
        if replayed:
            log.info("POP state rebuilt from %d records of %s: %d queues", replayed, POP_STATE_TOPIC,
                     len(self.shadow))
        if self.is_writer():
            self.take_over()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="pop-state-log")
        return self._task

    def _replay(self) -> int:
        store = self.store
        lo, end = store.min_offset(POP_STATE_TOPIC, 0), store.max_offset(POP_STATE_TOPIC, 0)
        start = lo
        off = end - 1
        while off >= max(lo, end - REPLAY_LIMIT):
            got = store.get(POP_STATE_TOPIC, 0, off, 1)
            if got.messages and got.messages[0].tags == SNAPSHOT_TAG:
                start = off
                break
            off -= 1
        pos, n = start, 0
        while pos < end:
            got = store.get(POP_STATE_TOPIC, 0, pos, 256)
            for msg in got.messages:
                self._apply(msg, replay=True)
                n += 1
            pos = got.next_offset if got.next_offset > pos else pos + 1
        return n

    # --------------------------------------------------------------- writer
    def take_over(self) -> None:
        """A role change made this node the writer: serve from the shadow once the predecessors' log is confirmed."""
        self.token = uuid.uuid4().hex[:12]
        self._ready_at = self.store.commit_log.max_offset
        self._fail_waiters()
        self._ops = []
        self._wake.set()  # an entry of this writer's own commits what its predecessors left (Raft)
        log.info("POP state: taking over as writer (token %s); serving once the log up to %d is confirmed",
                 self.token, self._ready_at)

    def serving(self) -> bool:
        """Ready, and sure of the role: what gates hand-outs and revives (acks need ``ready`` only)."""
        return self.ready() and self.lease_held()

    def ready(self) -> bool:
        """True once this writer serves from the replicated state (adopted after its predecessors' log)."""
        if self._ready_at is None:
            return True
        store = self.store
        if min(store.confirm_offset, store.dispatched) < min(self._ready_at, store.commit_log.max_offset):
            return False
        self._ready_at = None
        self.pop.adopt({k: _copy(st) for k, st in self.shadow.items()})
        self._dirty = True  # the next record carries a snapshot of what this writer serves from
        log.info("POP state: serving as writer from the replicated state of %d queues (%d in flight)",
                 len(self.shadow), sum(len(st.inflight) for st in self.shadow.values()))
        return True

    def _slave_acting(self) -> bool:
        """A Master/Slave slave handing out under slaveReadEnable: its changes stay local (no journal to
        write; broker/slave_read.py hands its progress back to the master), so its acks need no wait."""
        return self.master_slave and not self.is_writer()

    def op(self, kind: str, group: str, topic: str, queue_id: int, offset: int, committed: int, *extra: int) -> None:
        if self._slave_acting():
            return
        self._ops.append([kind, group, topic, queue_id, offset, committed, *extra])
        self._appended += 1
        self._dirty = True
        self._wake.set()

    def mark_ordered(self, group: str, topic: str) -> None:
        """``group`` pops ``topic`` in order: into the next record, ahead of that pop's hand-out ops."""
        if self._slave_acting():
            return
        self._marks.append([group, topic])
        self._dirty = True
        self._wake.set()

    async def durable(self, timeout_s: float) -> bool:
        """True once every op so far is committed; False when that did not happen within ``timeout_s``."""
        target = self._appended
        if self._durable >= target or self._slave_acting():
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, fut))
        self._wake.set()
        try:
            ok = await asyncio.wait_for(asyncio.shield(fut), max(0.001, timeout_s))
        except TimeoutError:
            ok = False
        if not ok:
            self.ack_waits_failed += 1
        return ok

    def _resolve(self, upto: int, ok: bool) -> None:
        keep = []
        for target, fut in self._waiters:
            if target <= upto:
                if not fut.done():
                    fut.set_result(ok)
            else:
                keep.append((target, fut))
        self._waiters = keep

    def _fail_waiters(self) -> None:
        self._resolve(self._appended, False)

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), max(self.snapshot_s, 0.05))
            except TimeoutError:
                pass
            self._wake.clear()
            while len(self._inflight) >= MAX_INFLIGHT:  # coalesce: the ops gather until a record is answered
                self._slot.clear()
                await self._slot.wait()
            try:
                self._write()
            except Exception:
                log.exception("writing POP state to the replicated log failed; will retry")
                self._fail_waiters()

    def _write(self) -> None:
        """Start one record with the ops gathered so far (and a snapshot when due); do not wait for it.

        Records are pipelined: the put of each starts at once, in order, so the log holds them
        in the order written (DLedger's ``propose`` and the store's append take their place
        before their first await) and a snapshot still follows every op it covers.  Their
        answers are taken in the same order (``_answered``), so an ack is confirmed exactly as
        with one record at a time: when the record holding its ops was committed.
        """
        if not self.is_writer():
            self._ops, self._marks = [], []
            self._fail_waiters()
            return
        batch, self._ops = self._ops, []
        marks, self._marks = self._marks, []
        upto = self._appended
        snap = None
        now = time.monotonic()
        ready = self.ready()  # adopts the shadow once the predecessors' log is confirmed
        if ready and self._dirty and now - self._last_snapshot >= self.snapshot_s:
            snap = snapshot_of(self.pop.states)  # taken with the batch: it covers exactly the ops written so far
            self._last_snapshot, self._dirty = now, False
        if not batch and not marks and snap is None and ready:
            return
        body: dict[str, Any] = {"w": self.token, "o": batch}
        if snap is not None:
            body["s"] = snap
            marks = [[g, t] for g, t in sorted(self.pop.ordered)]  # a replay starts at a snapshot: all of them
        if marks:
            body["m"] = marks
        msg = StoredMessage(topic=POP_STATE_TOPIC, queue_id=0, body=json.dumps(body, separators=(",", ":")).encode(),
                            properties={"TAGS": SNAPSHOT_TAG if snap is not None else OPS_TAG})
        task = asyncio.get_running_loop().create_task(self._put(msg, len(batch)), name="pop-state-record")
        self._inflight.append((upto, task))
        task.add_done_callback(self._answered)

    async def _put(self, msg: StoredMessage, ops: int) -> bool:
        try:
            # Master/Slave: a record counts once on the master's disk (it reaches the slave with the HA
            # stream), as RocketMQ's ack records there; waiting for the slave would hold every ack for
            # slaveTimeout while no slave is connected
            (res,) = await self.store.put([msg], wait_replicas=not self.master_slave)
        except Exception:
            log.exception("writing POP state to the replicated log failed")
            return False
        ok = res.stored
        if not ok:
            log.debug("POP state record not replicated (%s): %d ops", res.reason or res.status, ops)
        return ok

    def _answered(self, _task: asyncio.Task[bool]) -> None:
        """Take the answers of the records in flight in the order they were written."""
        while self._inflight and self._inflight[0][1].done():
            upto, task = self._inflight.popleft()
            ok = not task.cancelled() and task.exception() is None and task.result()
            if ok:
                self.records_written += 1
                self._durable = max(self._durable, upto)
            else:
                self._dirty = True  # the next snapshot carries what this record lost
            self._resolve(upto, ok)
        self._slot.set()

    # --------------------------------------------------------------- apply
    def on_dispatch(self, msg: StoredMessage) -> None:
        if msg.topic == POP_STATE_TOPIC:
            self._apply(msg)

    def _apply(self, msg: StoredMessage, replay: bool = False) -> None:
        try:
            rec = json.loads(msg.body)
            ops = rec.get("o", [])
            snap = rec.get("s")
            marks = rec.get("m") or []
        except (ValueError, AttributeError):
            log.warning("bad POP state record at queue offset %d; skipped", msg.queue_offset)
            return
        try:
            if marks:
                self.pop.learn_ordered([(str(g), str(t)) for g, t in marks])
            if snap is not None:
                self.shadow = states_of(snap)  # taken after this record's ops: it already holds them
            else:
                self.ops_applied += apply_ops(self.shadow, ops)
        except (ValueError, TypeError, IndexError):
            log.warning("malformed POP state record at queue offset %d; skipped", msg.queue_offset)
