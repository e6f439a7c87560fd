"""POP consumption: hand messages out with an invisible deadline, take acks, redeliver.

The model of RocketMQ 5's gRPC consumers.  Per (group, topic, queue) we keep the
committed offset (everything below is acked, persisted), the next offset never handed
out, the in-flight hand-outs and the out-of-order acks above the committed offset.  An
in-flight message whose deadline passes is *revived*: copied into the group's retry
topic ``%RETRY%<group>`` with reconsume times + 1 (or into ``%DLQ%<group>`` once it has
been retried ``retryMaxTimes`` times) and the original is acked, so redelivery survives
a restart like any other message.  Back-off is the invisible duration the client asks
for (the push consumer sends the server's customized back-off through
ChangeInvisibleDuration), as in RocketMQ 5.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rocketscope.names import DLQ_PREFIX, RETRY_PREFIX

from .errors import BrokerError, ErrorKind
from .filter import MessageFilter, accepts
from .groups import GroupManager
from .offsets import OffsetManager
from .persistence import load_json, save_json
from .priority import LITE_TOPIC_PROPERTY, PRIORITY_TOPIC_TYPE, pop_order
from .receipt import SLAVE_ORIGIN, ReceiptHandle, ReceiptHandleError
from .store.message_store import MessageStore
from .store.multi_dispatch import LMQ_PREFIX
from .store.record import StoredMessage
from .topics import TopicManager
from .trace_hooks import NoTrace, TraceHooks

log = logging.getLogger(__name__)

RETRY_TOPIC_PROPERTY = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
RETRY_SCAN_LIMIT = 512
FIFO_SCAN_LIMIT = 2048
REVIVE_POLL_S = 0.1  # the revive loop's shortest sleep: how late past its deadline a message is revived at most
REVIVE_IDLE_S = 1.0  # its longest (nothing in flight, or the first deadline further away)
SHARDING_KEY = "__SHARDINGKEY"


def request_id(seq: int) -> str:
    return f"{seq:X}"


def retry_topic(group: str) -> str:
    return f"{RETRY_PREFIX}{group}"


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


def origin_topic(msg: StoredMessage) -> str:
    return msg.properties.get(RETRY_TOPIC_PROPERTY, msg.topic)


class PopError(BrokerError):
    """A refused POP operation (each front door maps its kind once: broker/errors.py)."""


@dataclass
class Inflight:
    seq: int
    deadline_ms: int
    handed_ms: int = 0


@dataclass
class QueueState:
    committed: int
    next_pop: int
    inflight: dict[int, Inflight] = field(default_factory=dict)
    acked: set[int] = field(default_factory=set)
    attempts: dict[int, int] = field(default_factory=dict)  # in-place redeliveries (FIFO groups)
    # FIFO: receipt sequence of a hand-out whose invisible time ran out, until the message is handed out again
    expired: dict[int, int] = field(default_factory=dict)

    def mark_acked(self, offset: int) -> bool:
        """Record an ack; return True when the committed offset moved."""
        self.inflight.pop(offset, None)
        self.attempts.pop(offset, None)
        self.expired.pop(offset, None)
        if offset < self.committed:
            return False
        self.acked.add(offset)
        moved = False
        while self.committed in self.acked:
            self.acked.discard(self.committed)
            self.committed += 1
            moved = True
        # nothing below next_pop can stay un-acked without being in flight (except retry scans)
        return moved

    def advance_to(self, offset: int) -> None:
        """Everything below ``offset`` is acked (a committed offset learnt from the replicated log)."""
        if offset <= self.committed:
            return
        self.committed = offset
        self.next_pop = max(self.next_pop, offset)
        self.acked = {o for o in self.acked if o >= offset}
        self.inflight = {o: e for o, e in self.inflight.items() if o >= offset}
        self.attempts = {o: n for o, n in self.attempts.items() if o >= offset}
        self.expired = {o: n for o, n in self.expired.items() if o >= offset}
        while self.committed in self.acked:
            self.acked.discard(self.committed)
            self.committed += 1


class PopJournal(Protocol):
    """Where a replicated broker records POP state changes (broker/pop_log.py)."""

    def op(self, kind: str, group: str, topic: str, queue_id: int, offset: int, committed: int,
           *extra: int) -> None: ...

    def mark_ordered(self, group: str, topic: str) -> None: ...

    def ready(self) -> bool: ...

    def serving(self) -> bool: ...

    def take_over(self) -> None: ...

    async def durable(self, timeout_s: float) -> bool: ...


@dataclass
class Delivery:
    message: StoredMessage
    handle: str
    attempt: int
    invisible_ms: int
    topic: str  # topic the consumer sees (the origin topic for retries)
    request_id: str = ""  # unique per hand-out: pairs trace records of one delivery


class PopService:
    def __init__(self, store: MessageStore, offsets: OffsetManager, groups: GroupManager, topics: TopicManager,
                 broker_name: str, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.offsets = offsets
        self.groups = groups
        self.topics = topics
        self.broker_name = broker_name
        self.clock = clock
        self.states: dict[tuple[str, str, int], QueueState] = {}
        # (group, topic) popped with order=true over remoting (Apache's ordered POP): FIFO by queue, see pop();
        # kept in <store>/config/popOrdered.json so that a restarted broker redelivers their hand-outs in place,
        # and written to the POP journal with the hand-outs, so that every replica knows them (learn_ordered)
        root = getattr(store, "root", None)
        self._ordered_path = Path(root) / "config" / "popOrdered.json" if root is not None else None
        self.ordered: set[tuple[str, str]] = set()
        if self._ordered_path is not None:
            marks = load_json(self._ordered_path, [])
            self.ordered = {(str(m[0]), str(m[1])) for m in marks if isinstance(m, list) and len(m) == 2}
        # (group, topic, queue) -> offset an admin reset moved it to, taken by the next remoting pull of that queue:
        # Apache 5.3.3's server-side reset (useServerSideResetOffset), see broker/admin_ops.py ResetOffset
        self.client_resets: dict[tuple[str, str, int], int] = {}
        self._seq = itertools.count(int(clock() * 1000) * 1000)
        self._deadlines: list[tuple[int, int, str, str, int, int]] = []
        self._topic_waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._rotation = itertools.count()
        # priority messages (broker/priority.py): (priorityOrderAsc, popFromRetryProbabilityForPriority), read at
        # every POP so that updateBrokerConfig changes them; the broker sets it
        self.priority_conf: Callable[[], tuple[bool, int]] = lambda: (True, 0)
        self._group_waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._revive_task: asyncio.Task[None] | None = None
        self.dlq_total: dict[tuple[str, str], int] = {}
        self._revive_wake = asyncio.Event()
        self._revive_at = 0.0  # now_ms() of the revive loop's next pass (a hand-out due earlier wakes it)
        self.trace: TraceHooks = NoTrace()
        self.on_dead_letter: Callable[[str, StoredMessage], None] | None = None
        self.writable: Callable[[], bool] = lambda: True
        # Whether this node may hand messages out now: the writer, or a slave acting for its master
        # (slaveReadEnable); the broker sets it.  A long poll that began while this node was the writer
        # must not hand out after a demotion: its POP state is the old writer's, blind to the new
        # writer's hand-outs and acks (a message acked there went out again as attempt 1, docs/CHAOS.md)
        self.hands_out: Callable[[], bool] = lambda: True
        # receipt origin this node writes into its handles: SLAVE_ORIGIN while a slave acts for its master
        self.issuer = ""
        # every state change goes through the log, replicated where the mode replicates (broker/pop_log.py)
        self.journal: PopJournal | None = None
        store.add_queue_listener(self._on_dispatch)

    # --------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self._revive_task = asyncio.get_running_loop().create_task(self._revive_loop(), name="pop-revive")

    async def stop(self) -> None:
        if self._revive_task:
            self._revive_task.cancel()
            try:
                await self._revive_task
            except asyncio.CancelledError:
                pass

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------ replicated state
    def ready(self) -> bool:
        """False while a new writer has not yet seen every record its predecessors committed."""
        return self.journal is None or self.journal.ready()

    def serving(self) -> bool:
        """``ready``, and sure to be the writer: a deposed leader or a demoted master must not hand messages out."""
        return self.hands_out() and (self.journal is None or self.journal.serving())

    async def until_ready(self, timeout_s: float) -> bool:
        """Wait (bounded) until ``ready``: an ack reaching a new writer waits for its predecessors' records."""
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def durable(self, timeout_s: float) -> bool:
        """Wait until every state change so far is in the replicated log; True at once when not replicated."""
        return True if self.journal is None else await self.journal.durable(timeout_s)

    def take_over(self) -> None:
        """This node became the writer: POP state comes from the replicated journal, or starts afresh."""
        if self.journal is not None:
            self.journal.take_over()
        else:
            self.states.clear()  # reload from the offsets synced from the old writer

    def adopt(self, states: dict[tuple[str, str, int], QueueState]) -> None:
        """Serve from ``states`` (rebuilt from the replicated log): deadlines and receipt sequence follow them."""
        self.states = states
        self._deadlines = []
        top = self.now_ms() * 1000
        for (group, topic, qid), st in states.items():
            committed = self.offsets.get(group, topic, qid)
            if committed is not None:
                st.advance_to(committed)
            marks = list(st.inflight) + list(st.acked)
            st.next_pop = max(st.committed, st.next_pop, max(marks) + 1 if marks else 0)
            for off, entry in st.inflight.items():
                heapq.heappush(self._deadlines, (entry.deadline_ms, entry.seq, group, topic, qid, off))
                top = max(top, entry.seq + 1)
        self._seq = itertools.count(top)  # never reissue a predecessor's receipt sequence
        self._revive_wake.set()

    # ------------------------------------------------------------------ states
    def state(self, group: str, topic: str, queue_id: int) -> QueueState:
        key = (group, topic, queue_id)
        st = self.states.get(key)
        if st is None:
            committed = self.offsets.get(group, topic, queue_id)
            if committed is None:
                lo = self.store.min_offset(topic, queue_id)
                committed = lo if lo == 0 or topic.startswith(RETRY_PREFIX) else self.store.max_offset(topic, queue_id)
            committed = max(committed, self.store.min_offset(topic, queue_id))
            st = QueueState(committed, committed)
            self.states[key] = st
        return st

    def _commit(self, group: str, topic: str, queue_id: int, st: QueueState) -> None:
        self.offsets.commit(group, topic, queue_id, st.committed)

    def _mark_acked(self, group: str, topic: str, queue_id: int, st: QueueState, offset: int) -> bool:
        """``st.mark_acked`` plus its record in the replicated journal (DLedger and controller mode)."""
        moved = st.mark_acked(offset)
        if self.journal is not None:
            self.journal.op("a", group, topic, queue_id, offset, st.committed)
        return moved

    # --------------------------------------------------------------- hand out
    def _hand_out(self, group: str, st: QueueState, topic: str, queue_id: int, msg: StoredMessage,
                  invisible_ms: int) -> Delivery:
        seq = next(self._seq)
        now = self.now_ms()
        deadline = now + invisible_ms
        st.inflight[msg.queue_offset] = Inflight(seq, deadline, now)
        st.expired.pop(msg.queue_offset, None)
        heapq.heappush(self._deadlines, (deadline, seq, group, topic, queue_id, msg.queue_offset))
        if deadline < self._revive_at:  # due before the revive loop's next pass
            self._revive_wake.set()
        if self.journal is not None:
            self.journal.op("h", group, topic, queue_id, msg.queue_offset, st.committed, seq, deadline)
        handle = ReceiptHandle(self.broker_name, topic, queue_id, msg.queue_offset, seq, deadline, self.issuer)
        attempt = msg.reconsume_times + 1
        if not topic.startswith(LMQ_PREFIX):  # Apache's lite POP does not count redeliveries in place (observed)
            attempt += st.attempts.get(msg.queue_offset, 0)
        return Delivery(msg, handle.encode(), attempt, invisible_ms, origin_topic(msg), request_id(seq))

    def pop(self, group: str, topic: str, queue_ids: list[int], batch: int, invisible_ms: int,
            tags: MessageFilter, order: bool = False) -> list[Delivery]:
        """Hand out up to ``batch`` visible messages: due retries of ``topic`` first, then new ones.

        Like RocketMQ's POP with queue id -1 (what its proxy asks for), every readable queue
        of the topic on this broker is served, starting from a rotating position so queues
        are drained fairly; the queue a client named only chose this broker.

        ``order`` (a remoting POP_MESSAGE with order=true, Apache's ordered POP): the queue is the
        unit of order, as for Apache's orderly producers, which choose a queue per business key and
        set no message group: a queue with a hand-out in flight gives nothing until it is acked or
        its invisible time ends (then the same messages come again, in place), and the group's
        redeliveries of ``topic`` stay in place from then on (``fifo``).
        """
        if not self.serving():
            return []  # a new writer: what its predecessors handed out and acked is not all known yet
        if order and (group, topic) not in self.ordered:
            self._add_ordered([(group, topic)])
            if self.journal is not None:  # before this pop's hand-out ops: a replica knowing those knows this
                self.journal.mark_ordered(group, topic)
            log.info("group %s pops %s in order (remoting order=true): its redeliveries stay in place", group, topic)
        fifo = order or self.fifo(group, topic)
        cfg = self.topics.get(topic)
        # a PRIORITY topic: its queues from the most urgent down, retries after them (broker/priority.py)
        by_priority = not fifo and cfg is not None and cfg.message_type == PRIORITY_TOPIC_TYPE
        highest_first, retry_first_percent = self.priority_conf() if by_priority else (True, 0)
        retries_first = not fifo and (not by_priority or random.randrange(100) < retry_first_percent)
        out = self._pop_retries(group, topic, batch, invisible_ms, tags) if retries_first else []
        if queue_ids:
            if by_priority:
                queue_ids = pop_order(queue_ids, highest_first)
            else:
                start = next(self._rotation) % len(queue_ids)
                queue_ids = queue_ids[start:] + queue_ids[:start]
            pop_queue = self._pop_ordered_queue if order else self._pop_fifo_queue if fifo else self._pop_queue
            for queue_id in queue_ids:
                if len(out) >= batch:
                    break
                out.extend(pop_queue(group, topic, queue_id, batch - len(out), invisible_ms, tags))
        if by_priority and not retries_first and len(out) < batch:
            out.extend(self._pop_retries(group, topic, batch - len(out), invisible_ms, tags))
        return out

    def _add_ordered(self, marks: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Add ordered-POP marks, persisted when any is new; returns the new ones."""
        new = [m for m in marks if m not in self.ordered]
        if new:
            self.ordered.update(new)
            if self._ordered_path is not None:
                save_json(self._ordered_path, sorted(self.ordered))
        return new

    def learn_ordered(self, marks: list[tuple[str, str]]) -> None:
        """Marks read from the replicated POP journal (broker/pop_log.py): a slave or follower that becomes
        the writer, or a slave handing out for its master, then redelivers those groups' hand-outs in place
        as the old writer would have, even before the group's next ordered pop reaches it."""
        for group, topic in self._add_ordered(marks):
            log.info("group %s pops %s in order (learnt from the replicated POP state): its redeliveries stay "
                     "in place", group, topic)

    def is_fifo(self, group: str) -> bool:
        cfg = self.groups.get(group)
        return bool(cfg and cfg.consume_message_orderly)

    def fifo(self, group: str, topic: str) -> bool:
        """Redeliveries in place: an orderly group (gRPC FIFO), a topic the group popped with order=true, or a lite
        queue (``%LMQ%$...``: Apache 5.5.0 pops each lite topic in order, broker/lite.py)."""
        return self.is_fifo(group) or (group, topic) in self.ordered or topic.startswith(LMQ_PREFIX)

    def _pop_ordered_queue(self, group: str, topic: str, queue_id: int, batch: int, invisible_ms: int,
                           tags: MessageFilter) -> list[Delivery]:
        """Ordered POP: nothing while the queue has a hand-out in flight (Apache's ConsumerOrderInfoManager
        blocks the queue so), else the next messages from the committed offset, as one message group."""
        if self.state(group, topic, queue_id).inflight:
            return []
        return self._pop_fifo_queue(group, topic, queue_id, batch, invisible_ms, tags, whole_queue=True)

    def rest(self, group: str, topic: str, queue_ids: list[int], order: bool, blocked: set[int]) -> int:
        """Messages of ``queue_ids`` not handed out yet (a remoting pop answer's ``restNum``); an ordered
        queue in ``blocked`` (a hand-out was in flight before the pop) counts nothing, as on Apache."""
        rest = 0
        for q in queue_ids:
            if order and q in blocked:
                continue
            st = self.state(group, topic, q)
            pos = (max(st.inflight) + 1 if st.inflight else st.committed) if order else st.next_pop
            rest += max(0, self.store.max_offset(topic, q) - max(pos, self.store.min_offset(topic, q)))
        return rest

    def _pop_fifo_queue(self, group: str, topic: str, queue_id: int, batch: int, invisible_ms: int,
                        tags: MessageFilter, whole_queue: bool = False) -> list[Delivery]:
        """FIFO: one run of each message group's messages in flight at a time, in queue order.

        The scan starts at the committed offset; a message group with a message in flight
        from an earlier receive (or an earlier message not yet acked) is blocked, so its
        next messages are handed out only after those are acked or dead-lettered.  One
        receive hands out a group's consecutive messages together, in order, as RocketMQ's
        orderly POP does and as the official clients expect (their FIFO push consumption
        runs a batch's messages of one group one after the other): one message per group
        and receive let a SimpleConsumer that polls several topics fall hundreds of
        messages behind its producer (tests/chaos, the "fifo_stalled" failures).  Messages
        without a message group are not ordered.  Redelivery happens in place (same
        offset), never through the retry topic, which would break the order.
        """
        st = self.state(group, topic, queue_id)
        end = self.store.max_offset(topic, queue_id)
        pos = max(st.committed, self.store.min_offset(topic, queue_id))
        out: list[Delivery] = []
        blocked: set[str] = set()
        scanned = 0
        moved = False
        while pos < end and len(out) < batch and scanned < FIFO_SCAN_LIMIT:
            got = self.store.get(topic, queue_id, pos, 64)
            returned = {m.queue_offset for m in got.messages}
            for off in range(pos, got.next_offset):
                if off not in returned and off >= st.committed and off not in st.inflight:
                    moved |= self._mark_acked(group, topic, queue_id, st, off)  # unreadable entry: nothing to deliver
            for msg in got.messages:
                scanned += 1
                off = msg.queue_offset
                if off in st.acked:
                    continue
                key = "" if whole_queue else msg.properties.get(SHARDING_KEY) or f"#{off}"
                if off in st.inflight or key in blocked:
                    blocked.add(key)  # in flight from an earlier receive: the rest of its group waits
                    continue
                if tags is not None and not accepts(tags, msg):
                    moved |= self._mark_acked(group, topic, queue_id, st, off)
                    continue
                out.append(self._hand_out(group, st, topic, queue_id, msg, invisible_ms))
                if len(out) >= batch:
                    break
            if got.next_offset <= pos:
                break
            pos = got.next_offset
        if moved:
            self._commit(group, topic, queue_id, st)
        return out

    def _pop_queue(self, group: str, topic: str, queue_id: int, batch: int, invisible_ms: int,
                   tags: MessageFilter) -> list[Delivery]:
        st = self.state(group, topic, queue_id)
        st.next_pop = max(st.next_pop, self.store.min_offset(topic, queue_id), st.committed)
        if st.next_pop >= self.store.max_offset(topic, queue_id):
            return []
        out: list[Delivery] = []
        got = self.store.get(topic, queue_id, st.next_pop, batch)
        moved = False
        for msg in got.messages:
            if msg.queue_offset in st.acked or msg.queue_offset in st.inflight:
                # acknowledged before this node handed it out, or given a new invisible time: both are hand-outs of
                # its acting slave (slaveReadEnable), forwarded here; the second comes back through revive
                continue
            if tags is not None and not accepts(tags, msg):
                moved |= self._mark_acked(group, topic, queue_id, st, msg.queue_offset)
                continue
            out.append(self._hand_out(group, st, topic, queue_id, msg, invisible_ms))
        # entries the store skipped (unreadable, corrupt) are consumed too: nothing to deliver
        returned = {m.queue_offset for m in got.messages}
        for off in range(st.next_pop, got.next_offset):
            if off not in returned and off not in st.inflight and off >= st.committed and off not in st.acked:
                moved |= self._mark_acked(group, topic, queue_id, st, off)
        st.next_pop = max(st.next_pop, got.next_offset)
        if moved:
            self._commit(group, topic, queue_id, st)
        return out

    def _pop_retries(self, group: str, topic: str, batch: int, invisible_ms: int,
                     tags: MessageFilter, wanted: Callable[[StoredMessage], bool] | None = None) -> list[Delivery]:
        """The group's due retries of ``topic``; ``wanted`` (a lite client's) leaves the others for another
        receiver instead of consuming them as a tag filter does."""
        rtopic = retry_topic(group)
        if self.store.max_offset(rtopic, 0) == 0:
            return []
        st = self.state(group, rtopic, 0)
        out: list[Delivery] = []
        pos = max(st.committed, self.store.min_offset(rtopic, 0))
        end = self.store.max_offset(rtopic, 0)
        scanned = 0
        moved = False
        while pos < end and len(out) < batch and scanned < RETRY_SCAN_LIMIT:
            got = self.store.get(rtopic, 0, pos, min(64, RETRY_SCAN_LIMIT - scanned))
            if not got.messages:
                pos = got.next_offset if got.next_offset > pos else pos + 1
                scanned += 1
                continue
            for msg in got.messages:
                scanned += 1
                off = msg.queue_offset
                if off in st.inflight or off in st.acked or origin_topic(msg) != topic:
                    continue
                if wanted is not None and not wanted(msg):
                    continue
                if tags is not None and not accepts(tags, msg):
                    moved |= self._mark_acked(group, rtopic, 0, st, off)
                    continue
                out.append(self._hand_out(group, st, rtopic, 0, msg, invisible_ms))
                if len(out) >= batch:
                    break
            pos = got.next_offset
        if moved:
            self._commit(group, rtopic, 0, st)
        return out

    async def receive(self, group: str, topic: str, queue_ids: list[int], batch: int, invisible_ms: int,
                      tags: MessageFilter, poll_s: float, order: bool = False) -> list[Delivery]:
        """``pop`` with long polling: wait up to ``poll_s`` for a message to arrive."""
        deadline = time.monotonic() + max(poll_s, 0.0)
        began_as_writer = self.hands_out()
        while True:
            out = self.pop(group, topic, queue_ids, batch, invisible_ms, tags, order)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            if began_as_writer and not self.hands_out():
                return out  # demoted during the poll: answer now, the client's next receive finds the new writer
            if not self.serving():
                await asyncio.sleep(min(remaining, 0.01))
                continue
            await self.wait_dispatch(group, topic, remaining)

    def pop_lite(self, group: str, topic: str, lite_topics: list[str], lite_queues: list[str], batch: int,
                 invisible_ms: int) -> list[Delivery]:
        """A lite consumer's POP (broker/lite.py): the group's due retries of ``topic`` (its LITE topic) whose lite
        topic the client subscribes (``lite_topics``; the others wait for a client that does; only copies made
        before lite queues were popped in order), then the LMQ queues ``lite_queues`` (queue 0 each, starting
        from a rotating position), each in order: redelivered in place, never through the retry topic."""
        if not self.serving():
            return []
        mine = set(lite_topics)
        out = self._pop_retries(group, topic, batch, invisible_ms, None,
                                lambda m: m.properties.get(LITE_TOPIC_PROPERTY) in mine)
        if lite_queues:
            start = next(self._rotation) % len(lite_queues)
            for lmq in lite_queues[start:] + lite_queues[:start]:
                if len(out) >= batch:
                    break
                # in order, as Apache's PopLiteMessageProcessor (its ConsumerOrderInfoManager): a lite queue with a
                # hand-out in flight gives nothing until it is acked or its invisible time ends (observed on 5.5.0)
                out.extend(self._pop_ordered_queue(group, lmq, 0, batch - len(out), invisible_ms, None))
        return out

    async def wait_dispatch(self, group: str, topic: str, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for a record of ``topic`` or of ``group``'s retry topic to be dispatched
        (or for ``wake``)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        qw = self._topic_waiters.setdefault(topic, set())
        gw = self._group_waiters.setdefault(group, set())
        qw.add(fut)
        gw.add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            qw.discard(fut)
            gw.discard(fut)

    def wake(self, topic: str) -> None:
        """End the long polls waiting on ``topic`` (a lite subscription changed what they may read)."""
        self._wake_topic(topic)

    async def wait_for_topic(self, topic: str, timeout_s: float, ready: Callable[[], bool]) -> bool:
        """Wait until ``ready()`` holds, woken by dispatches to ``topic``; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            waiters = self._topic_waiters.setdefault(topic, set())
            waiters.add(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                pass
            finally:
                waiters.discard(fut)
        return True

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set a group's committed offset (UpdateOffset, admin reset); in-flight hand-outs are dropped.

        A reset forward keeps the acks already taken above the new offset: an acting slave's hand-back
        (broker/slave_read.py) can reach the master after acks of the slave's hand-outs were forwarded
        there, and must not make those messages come again.  A reset backward drops them (re-consume).
        The journal records the reset and then each kept ack, so a replay rebuilds the same state."""
        old = self.states.get((group, topic, queue_id))
        kept = sorted(o for o in old.acked if o >= offset) if old is not None and offset >= old.committed else []
        st = QueueState(offset, offset)
        if self.journal is not None:
            self.journal.op("c", group, topic, queue_id, offset, offset)
        for o in kept:
            st.mark_acked(o)
            if self.journal is not None:
                self.journal.op("a", group, topic, queue_id, o, offset)
        st.next_pop = max(st.next_pop, st.committed)
        self.states[(group, topic, queue_id)] = st
        self.offsets.commit(group, topic, queue_id, st.committed)

    def _on_dispatch(self, queues: list[tuple[str, int]]) -> None:
        """Wake the POP waiters of the topics (a retry topic: its group) whose queues a dispatched batch grew
        (``MessageStore.add_queue_listener``): once per topic and batch."""
        if not (self._topic_waiters or self._group_waiters):
            return
        seen: set[str] = set()
        for topic, _ in queues:
            if topic in seen:
                continue
            seen.add(topic)
            if topic.startswith(RETRY_PREFIX):
                self._wake_group(topic[len(RETRY_PREFIX):])
            else:
                self._wake_topic(topic)

    def _wake_group(self, group: str) -> None:
        for fut in list(self._group_waiters.get(group, ())):
            if not fut.done():
                fut.set_result(None)

    def _wake_topic(self, topic: str) -> None:
        for fut in list(self._topic_waiters.get(topic, ())):
            if not fut.done():
                fut.set_result(None)

    # -------------------------------------------------------------------- acks
    def _resolve(self, group: str, handle_text: str) -> tuple[ReceiptHandle, QueueState]:
        try:
            handle = ReceiptHandle.decode(handle_text)
        except ReceiptHandleError as exc:
            raise PopError(ErrorKind.INVALID_RECEIPT_HANDLE, str(exc)) from None
        if handle.broker != self.broker_name:
            raise PopError(ErrorKind.INVALID_RECEIPT_HANDLE,
                           f"receipt_handle belongs to broker {handle.broker}, not {self.broker_name}")
        st = self.states.get((group, handle.topic, handle.queue_id))
        entry = st.inflight.get(handle.offset) if st else None
        if st is not None and entry is None and st.expired.get(handle.offset) == handle.seq:
            # FIFO: its invisible time ran out but it was not handed out again yet (an ack slowed by
            # replication under load): the hand-out is still the newest, so its ack counts
            entry = Inflight(handle.seq, handle.deadline_ms)
            st.inflight[handle.offset] = entry
        if st is None or entry is None or entry.seq != handle.seq:
            raise PopError(ErrorKind.INVALID_RECEIPT_HANDLE,
                           "receipt_handle has expired: the invisible duration passed and the message was "
                           "redelivered, or it was already acknowledged")
        return handle, st

    def _resolve_or_slave(self, group: str, handle_text: str) -> tuple[ReceiptHandle, QueueState, bool]:
        """``_resolve``, or, when this node writes again, a receipt its acting slave issued (the third value
        True): acks and new invisible times of such hand-outs reach the master (broker/slave_read.py)."""
        try:
            handle, st = self._resolve(group, handle_text)
        except PopError:
            slave = self._slave_receipt(handle_text)
            if slave is None:
                raise
            return slave, self.state(group, slave.topic, slave.queue_id), True
        return handle, st, False

    def ack(self, group: str, handle_text: str) -> tuple[ReceiptHandle, int]:
        """Acknowledge one hand-out; return its handle and when it was handed out (ms)."""
        handle, st, from_slave = self._resolve_or_slave(group, handle_text)
        if from_slave:
            self._ack_slave_hand_out(group, handle)
            return handle, 0
        handed_ms = st.inflight[handle.offset].handed_ms
        if self._mark_acked(group, handle.topic, handle.queue_id, st, handle.offset):
            self._commit(group, handle.topic, handle.queue_id, st)
        if self.fifo(group, handle.topic):
            self._wake_topic(handle.topic)  # the message group's next message is now visible
            if handle.topic.startswith(LMQ_PREFIX):  # a lite queue: its clients long-poll on the group (wait_dispatch)
                self._wake_group(group)
        return handle, handed_ms

    def _slave_receipt(self, handle_text: str) -> ReceiptHandle | None:
        """A receipt its acting slave issued (slaveReadEnable), when this node is the writer again: the slave
        forwards the acks of such receipts here once the master is back, and a client whose route moved to
        the master acks them here directly (broker/slave_read.py)."""
        try:
            handle = ReceiptHandle.decode(handle_text)
        except ReceiptHandleError:
            return None
        if handle.origin != SLAVE_ORIGIN or handle.broker != self.broker_name or self.issuer or not self.serving():
            return None
        return handle

    def _ack_slave_hand_out(self, group: str, handle: ReceiptHandle) -> None:
        """The slave's hand-out of ``handle.offset`` was consumed: that offset is acknowledged here, whether this
        node handed it out since (its own hand-out is then a duplicate whose ack will be refused) or not."""
        st = self.state(group, handle.topic, handle.queue_id)
        if handle.offset < st.committed or handle.offset in st.acked:
            return
        if self._mark_acked(group, handle.topic, handle.queue_id, st, handle.offset):
            self._commit(group, handle.topic, handle.queue_id, st)
        log.info("ack of %s offset %d queue %d for %s: handed out by the acting slave, applied here", handle.topic,
                 handle.offset, handle.queue_id, group)

    def change_invisible(self, group: str, handle_text: str, invisible_ms: int) -> str:
        handle, st, from_slave = self._resolve_or_slave(group, handle_text)
        # a hand-out of the acting slave (slaveReadEnable) is in flight here from now on, until the new deadline,
        # so it is not handed out again before the consumer's retry time (slave_read.py forward_change_invisible)
        if from_slave and (handle.offset < st.committed or handle.offset in st.acked):
            raise PopError(ErrorKind.INVALID_RECEIPT_HANDLE, "the slave's hand-out of this receipt_handle is "
                                                             "already acknowledged")
        seq = next(self._seq)
        deadline = self.now_ms() + invisible_ms
        st.inflight[handle.offset] = Inflight(seq, deadline)
        heapq.heappush(self._deadlines, (deadline, seq, group, handle.topic, handle.queue_id, handle.offset))
        if self.journal is not None:
            self.journal.op("h", group, handle.topic, handle.queue_id, handle.offset, st.committed, seq, deadline)
        self._revive_wake.set()
        return ReceiptHandle(self.broker_name, handle.topic, handle.queue_id, handle.offset, seq, deadline,
                             self.issuer).encode()

    async def forward_to_dlq(self, group: str, handle_text: str) -> StoredMessage:
        handle, st = self._resolve(group, handle_text)
        msg = self.store.message_at(handle.topic, handle.queue_id, handle.offset)
        if msg is None:
            raise PopError(ErrorKind.MESSAGE_NOT_FOUND, "the message of this receipt_handle is no longer stored")
        if not await self.dead_letter(group, msg):
            # not known to be stored: the message stays in flight (it comes back, or is moved again by revive)
            raise PopError(ErrorKind.INTERNAL, f"cannot store message {msg.msg_id} in the dead-letter queue now")
        if self._mark_acked(group, handle.topic, handle.queue_id, st, handle.offset):
            self._commit(group, handle.topic, handle.queue_id, st)
        self._wake_topic(handle.topic)
        return msg

    # ------------------------------------------------------------------ revive
    async def _revive_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._revive_wake.is_set():
                # until the first deadline (at least REVIVE_POLL_S, at most REVIVE_IDLE_S), or until woken: an
                # idle broker passed here every 0.1 s through wait_for (a task, a future and a timer each time)
                wait_s = self._revive_wait_s()
                self._revive_at = self.now_ms() + wait_s * 1000
                alarm = loop.call_later(wait_s, self._revive_wake.set)
                try:
                    await self._revive_wake.wait()
                finally:
                    alarm.cancel()
            self._revive_wake.clear()
            try:
                await self.revive_due()
            except Exception:
                log.exception("revive pass failed; will retry")

    def _revive_wait_s(self) -> float:
        """Seconds the revive loop may sleep: to the first deadline, bounded by REVIVE_POLL_S and REVIVE_IDLE_S.

        The upper bound keeps a node that becomes writable, or a clock that moves other than by time,
        from waiting long; a hand-out due before the loop's wake-up wakes it (``_revive_at``)."""
        if not self._deadlines:
            return REVIVE_IDLE_S
        until_s = (self._deadlines[0][0] - self.now_ms()) / 1000
        return min(max(until_s, REVIVE_POLL_S), REVIVE_IDLE_S)

    async def revive_due(self) -> int:
        if not self.writable() or not self.serving():
            return 0
        now = self.now_ms()
        revived = 0
        while self._deadlines and self._deadlines[0][0] <= now:
            _deadline, seq, group, topic, qid, offset = heapq.heappop(self._deadlines)
            st = self.states.get((group, topic, qid))
            entry = st.inflight.get(offset) if st else None
            if st is None or entry is None or entry.seq != seq:
                continue  # acked, or its deadline was changed
            if entry.handed_ms and not isinstance(self.trace, NoTrace):
                expired = self.store.message_at(topic, qid, offset)
                if expired is not None:
                    self.trace.on_expired(group, expired, request_id=request_id(seq), cost_ms=now - entry.handed_ms)
                entry.handed_ms = 0  # report each hand-out's expiry once
            if await self._revive_one(group, topic, qid, offset, st):
                revived += 1
            else:  # could not store the retry copy: try again in a second
                entry.deadline_ms = now + 1000
                heapq.heappush(self._deadlines, (entry.deadline_ms, seq, group, topic, qid, offset))
                break
        return revived

    async def _revive_one(self, group: str, topic: str, qid: int, offset: int, st: QueueState) -> bool:
        msg = self.store.message_at(topic, qid, offset)
        if msg is not None:
            cfg = self.groups.get(group)
            max_times = cfg.retry_max_times if cfg else 16
            redelivered = msg.reconsume_times + st.attempts.get(offset, 0)
            if self.fifo(group, topic) and not topic.startswith(RETRY_PREFIX) and redelivered < max_times:
                gone = st.inflight.pop(offset, None)  # redeliver in place, keeping the group's order
                if gone is not None:
                    st.expired[offset] = gone.seq
                st.attempts[offset] = st.attempts.get(offset, 0) + 1
                if self.journal is not None:
                    self.journal.op("r", group, topic, qid, offset, st.committed)
                self._wake_topic(topic)
                if topic.startswith(LMQ_PREFIX):  # a lite queue's clients long-poll on the group
                    self._wake_group(group)
                return True
            if redelivered >= max_times:
                if not await self.dead_letter(group, msg):
                    return False
            elif not await self._to_retry(group, msg):
                return False
        if self._mark_acked(group, topic, qid, st, offset):
            self._commit(group, topic, qid, st)
        return True

    def retry_copy(self, msg: StoredMessage, topic: str, reconsume: int) -> StoredMessage:
        """``msg`` as stored in a retry or dead-letter topic (its origin topic and message ID kept), with
        ``reconsume`` as its reconsume count: POP's retries and remoting's CONSUMER_SEND_MSG_BACK share it."""
        props = dict(msg.properties)
        props.setdefault(RETRY_TOPIC_PROPERTY, msg.topic)
        props.setdefault(ORIGIN_MESSAGE_ID, msg.msg_id)
        return StoredMessage(topic=topic, queue_id=0, body=msg.body, properties=props, flag=msg.flag,
                             sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                             reconsume_times=reconsume)

    async def _to_retry(self, group: str, msg: StoredMessage) -> bool:
        rtopic = retry_topic(group)
        self.topics.create_if_absent(rtopic, 1, system=True)
        (res,) = await self.store.put([self.retry_copy(msg, rtopic, msg.reconsume_times + 1)])
        if not res.stored:  # not known to be stored (PutResult.stored): a second copy later is the safe side
            log.error("cannot store retry copy of %s: %s", msg.msg_id, res.reason or res.status.value)
            return False
        log.debug("message %s of group %s will be redelivered (reconsume times %d)", msg.msg_id, group,
                  msg.reconsume_times + 1)
        return True

    async def dead_letter(self, group: str, msg: StoredMessage, copy_times: int | None = None) -> bool:
        """Move ``msg`` to the group's dead-letter topic; False when the copy is not known to be stored.

        ``copy_times``: the DLQ copy's reconsume count (default the message's; a remoting send-back passes
        one more, as Apache's consumerSendMsgBack stores it)."""
        dtopic = dlq_topic(group)
        self.topics.create_if_absent(dtopic, 1, system=True)
        copy = self.retry_copy(msg, dtopic, msg.reconsume_times if copy_times is None else copy_times)
        copy.properties[DLQ_ORIGIN_TOPIC] = origin_topic(msg)
        (res,) = await self.store.put([copy])
        if not res.stored:
            log.error("cannot move %s to %s: %s", msg.msg_id, dtopic, res.reason or res.status.value)
            return False
        log.info("message %s of group %s moved to %s after %d deliveries", msg.msg_id, group, dtopic,
                 msg.reconsume_times + 1)
        self.dlq_total[(group, origin_topic(msg))] = self.dlq_total.get((group, origin_topic(msg)), 0) + 1
        self.trace.on_dead_lettered(group, msg, attempts=msg.reconsume_times + 1)
        if self.on_dead_letter is not None:
            self.on_dead_letter(group, msg)
        return True

    # ---------------------------------------------------------------- progress
    def inflight_count(self, group: str, topic: str, queue_id: int) -> int:
        st = self.states.get((group, topic, queue_id))
        return len(st.inflight) if st else 0

    def committed(self, group: str, topic: str, queue_id: int) -> int | None:
        st = self.states.get((group, topic, queue_id))
        return st.committed if st else self.offsets.get(group, topic, queue_id)
