"""The store facade the broker talks to: put, get by queue offset, lookups, offsets.

It owns the commit log, the consume queues, the index and the checkpoint, and keeps
one invariant: a consume-queue entry exists only for a record that is in the commit
log, verified, and at or below the *confirm offset* (the end of what replication has
made safe: the written end when standalone, the Raft commit index in DLedger mode, the
SyncStateSet's ack in controller mode).  Consumers therefore only ever see confirmed
messages.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import shutil
import time
from collections import ChainMap, deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from rocketscope.names import HA_EVENTS_TOPIC

from ..speedups import compiled as _C
from ..speedups import records as _R
from . import multi_dispatch, record
from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .consume_queue import ENTRY, GAP, ConsumeQueue, tag_hash
from .flush import FlushService
from .index import IndexService
from .record import RecordError, StoredMessage
from .retention import RetentionPolicy

log = logging.getLogger(__name__)

_SPLIT_RECORDS = 16  # a group commit of at least this many records is split in two (see _append_group)
_TAG_HASHES: dict[str, int] = {}


def _tag_hash(tag: str) -> int:
    """``tag_hash`` through a small cache: a topic uses few tags."""
    h = _TAG_HASHES.get(tag)
    if h is None:
        if len(_TAG_HASHES) >= 4096:
            _TAG_HASHES.clear()
        h = _TAG_HASHES[tag] = tag_hash(tag)
    return h

ALL_TOPICS_KEY = "*"
# The widest gap (queue offsets with no record) the dispatch fills after a queue's last entry.  A record whose
# queue offset lies further past the queue's end is refused (not dispatched, one WARNING): a gap "should not
# happen" (ConsumeQueue.append), and a wild offset (damaged or hostile bytes, e.g. 10**16) would otherwise fill
# that many 20-byte GAP entries in memory, a MemoryError that stops the whole batch and every queue behind it.
# 1 << 20 is 20 MiB of GAP entries.  An empty queue (end 0) starts at its first record without a gap.  The same
# bound in C: SD_MAX_QUEUE_GAP, broker/store_dispatch.h (the compiled loops stop at such a record and leave it
# to _dispatch_one).
MAX_QUEUE_GAP = 1 << 20
_DISPATCH_CHUNK = 1024  # records per dispatch batch when they are read back from the log (see _dispatch_many)


class _Run:
    """One queue's new entries in a batch being dispatched (``MessageStore._dispatch_each``): packed in log
    order into ``packed``, the first at queue offset ``first`` (-1: none yet); ``end`` is the queue's next
    offset once they are written."""

    __slots__ = ("cq", "end", "first", "packed")

    def __init__(self, cq: ConsumeQueue) -> None:
        self.cq = cq
        self.end = cq.max_offset
        self.first = -1
        self.packed = bytearray()


class _BytesRun:
    """Whole commit-log records still in their bytes, pending dispatch (``MessageStore.add_pending_records``):
    ``data[pos:]`` lies at ``physical_offset`` in the commit log and is ``size`` bytes long.  The two names are
    those of a ``StoredMessage`` so that ``dispatch_confirmed`` and ``truncate_to`` measure either kind alike."""

    __slots__ = ("data", "physical_offset", "pos", "size")

    def __init__(self, data: bytes, pos: int, physical_offset: int) -> None:
        self.data = data
        self.pos = pos
        self.physical_offset = physical_offset
        self.size = len(data) - pos


_Pending = StoredMessage | _BytesRun


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    message: StoredMessage | None = None
    reason: str = ""

    @property
    def stored(self) -> bool:
        """Whether the write is known to be stored (and replicated as the mode requires): PUT_OK only.

        ``message`` alone does not say so: a DLedger entry not committed at a majority keeps its message in the
        result (status IN_SYNC_REPLICAS_NOT_ENOUGH) and may be truncated later; internal writers that took such
        a write for stored lost a transaction's commit (tests/test_transaction_uncommitted.py)."""
        return self.status is PutStatus.PUT_OK and self.message is not None


@dataclass
class StoreConfig:
    """Store settings; the broker maps its RocketMQ keys onto these (see broker/broker_config.py)."""

    root: Path
    commitlog_segment_size: int = 1 << 30
    cq_entries_per_segment: int = 300_000
    sync_flush: bool = False
    sync_flush_timeout_s: float = 5.0
    flush_interval_s: float = 0.5
    max_message_size: int = 4 * 1024 * 1024
    index_slot_num: int = 500_000
    index_num: int = 2_000_000
    checkpoint_interval_s: float = 1.0
    store_host: str = "127.0.0.1:10911"
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    multi_dispatch: bool = False
    """enableLmq and enableMultiDispatch: give records their LMQ offsets (broker/store/multi_dispatch.py)."""


@dataclass
class GetResult:
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int
    found: bool = True


RecordListener = Callable[[StoredMessage], None]
"""Told each dispatched record of one topic (``MessageStore.add_topic_listener``), body and properties included."""
QueueListener = Callable[[list[tuple[str, int]]], None]
"""Told once per dispatched batch which queues (topic or LMQ queue, queue id) got new entries
(``MessageStore.add_queue_listener``)."""
ReplicationWaiter = Callable[[int], Awaitable[PutStatus]]


@dataclass
class StoreHooks:
    """What the layers above plug into the store, given to its constructor (the broker builds it per HA mode).

    ``confirm_offset``: the initial confirm offset (None: confirm follows the written end; 0 in
    DLedger and controller mode, where nothing is visible until replication says so);
    ``replication_waiter(end)``: a put waits for its replicas (Master/Slave, controller mode);
    ``on_append()``: records were appended (the HA master wakes its streams);
    ``on_data(end)``: a non-system record now ends at ``end`` (HA events);
    ``replicated_writer(messages)``: DLedger mode, puts become Raft proposals;
    ``retention_floor()``: the offset below which retention may delete segments (DLedger mode: what every
    member applied); ``on_retention_deleted(min_offset)``: segments below ``min_offset`` were deleted (DLedger
    compacts its Raft index).
    """

    confirm_offset: int | None = None
    replication_waiter: ReplicationWaiter | None = None
    on_append: Callable[[], None] | None = None
    on_data: Callable[[int], None] | None = None
    replicated_writer: Callable[[list[StoredMessage]], Awaitable[list[PutResult]]] | None = None
    retention_floor: Callable[[], int] | None = None
    on_retention_deleted: Callable[[int], None] | None = None


_Group = tuple[list[PutResult], "asyncio.Future[tuple[list[PutResult], bool]]"]


def _resolve_groups(groups: list[_Group], synced: bool) -> None:
    """Hand each put of a SYNC_FLUSH group commit its results and whether their fsync came in time (called by
    ``FlushService.when_synced``)."""
    for part, fut in groups:
        if not fut.done():
            fut.set_result((part, synced))


class MessageStore:
    def __init__(self, config: StoreConfig, hooks: StoreHooks | None = None) -> None:
        hooks = hooks or StoreHooks()
        self.config = config
        self.root = Path(config.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.commit_log = CommitLog(self.root / "commitlog", config.commitlog_segment_size)
        self.index = IndexService(self.root / "index", config.index_slot_num, config.index_num)
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self.queue_next: dict[tuple[str, int], int] = {}
        self.dispatched = 0
        self._pending: deque[_Pending] = deque()
        self._confirm: int | None = hooks.confirm_offset  # None: confirm follows the written end
        # dispatch listeners (add_topic_listener, add_queue_listener): none of them is told per record of
        # the other topics, so a batch of ordinary messages costs them one call per queue, not per record
        self._topic_listeners: dict[str, list[RecordListener]] = {}
        self._queue_listeners: list[QueueListener] = []
        self.replication_waiter = hooks.replication_waiter
        self.on_append = hooks.on_append
        self.on_data = hooks.on_data  # a non-system record now ends at this offset
        # DLedger mode: puts become Raft proposals; the log is written by the Raft layer
        self.replicated_writer = hooks.replicated_writer
        self._retention_floor = hooks.retention_floor
        self._on_retention_deleted = hooks.on_retention_deleted
        seglog = self.commit_log.log
        self.flush = FlushService(seglog.sync_plan, seglog.mark_synced, lambda: seglog.synced_offset,
                                  config.flush_interval_s)
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        # the loop the store was started on, for the put path: Python 3.11's asyncio.get_running_loop() makes a
        # getpid() system call each time, ~9 % of the event loop's CPU on SYNC_FLUSH single puts (py-spy, issue 20)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.put_lock = asyncio.Lock()
        # the checkpoint task's write in its worker thread: cancelling the task does not stop the thread, and
        # shutdown's own checkpoint must not run beside it (both write checkpoint.tmp, then rename it)
        self._checkpointing: asyncio.Future[None] | None = None
        # SYNC_FLUSH group commit of concurrent puts (see ``put``)
        self._put_queue: list[tuple[list[StoredMessage], asyncio.Future[tuple[list[PutResult], bool]]]] = []
        self._put_scheduled = False

    # --------------------------------------------------------------- lifecycle
    def recover(self) -> None:
        """Verify the commit log, truncate a torn tail, rebuild queues and index past the checkpoint."""
        started = time.monotonic()
        cp = Checkpoint.load(self.root / "checkpoint")
        self._load_consume_queues()
        safe = min(cp.dispatched, self.commit_log.max_offset)
        scan = self.commit_log.recover(min(safe, self.commit_log.max_offset))
        end = scan.end
        safe = min(safe, end)
        for cq in self.cqs.values():
            cq.truncate_physical(safe)
        for (topic, qid), cq in self.cqs.items():
            self.queue_next[(topic, qid)] = cq.max_offset
        self.dispatched = safe
        replayed = 0
        bound = end if self._confirm is None else min(end, self._confirm)

        def counted() -> Iterator[StoredMessage]:
            nonlocal replayed
            for msg in self.commit_log.iter_messages(safe, bound):
                replayed += 1
                yield msg

        self._dispatch_many(counted())  # in batches, as puts are (see _dispatch_each)
        if self._confirm is None:
            self.dispatched = end
        self._save_checkpoint()
        log.info("store recovered in %.2fs: commit log [%d, %d), %d records re-dispatched, "
                 "%d corrupt ranges, %d queues", time.monotonic() - started, self.commit_log.min_offset, end,
                 replayed, len(scan.corrupt), len(self.cqs))

    def _load_consume_queues(self) -> None:
        root = self.root / "consumequeue"
        if not root.exists():
            return
        for topic_dir in root.iterdir():
            for qdir in topic_dir.iterdir():
                if qdir.name.isdigit():
                    key = (topic_dir.name, int(qdir.name))
                    self.cqs[key] = ConsumeQueue(root, key[0], key[1], self.config.cq_entries_per_segment)

    async def start(self) -> None:
        self.recover()
        self.flush.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._checkpoint_loop(), name="store-checkpoint"))
        self._tasks.append(loop.create_task(self._retention_loop(), name="store-retention"))
        self._running = True
        self._loop = loop

    async def shutdown(self) -> None:
        self._running = False
        self._loop = None
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        if self._checkpointing is not None:
            await asyncio.wait([self._checkpointing])
        await self.flush.stop()
        self._save_checkpoint()
        for cq in self.cqs.values():
            cq.close()
        self.index.close()
        self.commit_log.close()
        log.info("store closed at commit-log offset %d", self.dispatched)

    # -------------------------------------------------------------------- puts
    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.queue_next.get((topic, queue_id), 0)

    def append(self, msg: StoredMessage) -> PutResult:
        """Append one message to the commit log without waiting for flush or replication."""
        return self.append_batch([msg])[0]

    def append_batch(self, messages: Iterable[StoredMessage]) -> list[PutResult]:
        """Append messages in order without waiting for flush or replication; one result each.

        A message that cannot be stored gets its own failure and takes no queue offset; the
        others are encoded into one buffer and written with one ``pwrite`` (one per segment
        when the batch rolls the log).  A disk error fails every message of the batch.
        """
        results: list[PutResult] = []
        ok: list[StoredMessage] = []
        heads: list[bytes] = []
        config = self.config
        max_body = config.max_message_size
        max_record = self.commit_log.max_record_size
        store_host = config.store_host
        queue_next = self.queue_next
        # the batch's queue offsets, assigned in one pass and made the store's only once the batch is in the
        # log (a disk error leaves queue_next as it was: nothing to restore)
        nexts: dict[tuple[str, int], int] = {}
        seen = ChainMap(nexts, queue_next) if config.multi_dispatch else None  # LMQ offsets read through it
        prepare = record.prepare
        put_ok = PutStatus.PUT_OK
        now = 0
        for msg in messages:
            body_len = len(msg.body)
            if body_len > max_body:
                results.append(PutResult(PutStatus.MESSAGE_ILLEGAL,
                                         reason=f"body of {body_len} bytes exceeds maxMessageSize"))
                continue
            topic = msg.topic
            key = (topic, msg.queue_id)
            qoff = nexts.get(key)
            if qoff is None:
                qoff = queue_next.get(key, 0)
            msg.queue_offset = qoff
            if not msg.store_timestamp:
                msg.store_timestamp = now or (now := int(time.time() * 1000))
            if not msg.store_host:
                msg.store_host = store_host
            lmq = multi_dispatch.assign(topic, msg.properties, seen) if seen is not None else []
            try:
                head = prepare(msg)
                size = msg.size
                if size > max_record:
                    raise RecordError(f"record of {size} bytes is larger than a commit-log segment")
            except RecordError as exc:
                status = PutStatus.PROPERTIES_SIZE_EXCEEDED if "properties" in str(exc) else PutStatus.MESSAGE_ILLEGAL
                results.append(PutResult(status, reason=str(exc)))
                continue
            nexts[key] = qoff + 1
            if seen is not None:
                for k in lmq:  # its LMQ queues (multi-dispatch)
                    nexts[k] = seen.get(k, 0) + 1
            ok.append(msg)
            heads.append(head)
            results.append(PutResult(put_ok, msg))
        if not ok:
            return results
        try:
            self.commit_log.append_batch(ok, heads)
        except OSError as exc:
            log.error("commit log append failed: %s", exc)
            for r in results:
                if r.status is PutStatus.PUT_OK:
                    r.status, r.message, r.reason = PutStatus.SERVICE_NOT_AVAILABLE, None, f"disk error: {exc}"
            return results
        self._appended(ok, nexts)
        return results

    def _appended(self, messages: list[StoredMessage], nexts: dict[tuple[str, int], int]) -> None:
        """What follows a successful append of ``messages``: their queues' next offsets, the messages pending
        dispatch, and the hooks told (``on_data`` with the end of the last data record, HA events not counted)."""
        self.queue_next.update(nexts)
        self._pending.extend(messages)
        if self.on_data is not None:
            data_end = 0
            for msg in messages:
                if msg.topic != HA_EVENTS_TOPIC:
                    data_end = msg.physical_offset + msg.size
            if data_end:
                self.on_data(data_end)
        if self.on_append is not None:
            self.on_append()

    @property
    def takes_plain_runs(self) -> bool:
        """Whether ``append_plain_run`` can store a run here: a store whose put waits for no flush (ASYNC_FLUSH),
        is not a Raft proposal, assigns no LMQ offsets and makes records visible as written (no confirm offset).
        The replication wait is the caller's to judge (the broker knows whether its role has one)."""
        return (self.replicated_writer is None and not self.config.sync_flush and not self.config.multi_dispatch
                and self._confirm is None)

    def append_plain_run(self, messages: list[StoredMessage]) -> bool:
        """Store a run of messages that all succeed or all go elsewhere: True when every one is in the log and
        dispatched (its queue offset, physical offset, size and store time set on it), False when the store
        declined the run and changed nothing (then ``put`` stores it and says what failed).

        The put of a run of plain single sends (issue 20): what ``put`` does for them on an ASYNC_FLUSH store
        (``append_batch`` then ``dispatch_confirmed``, no wait), without a ``PutResult`` per message or the
        awaits of ``put`` and ``_finish_put``: the caller knows each message's fate from the return value.
        It never calls ``replication_waiter``: a caller whose puts must wait for replicas (a SYNC_MASTER, a
        controller-mode master) uses ``put``.
        The records, queue entries and index keys are those ``put`` writes for the same messages
        (tests/test_store_plain_run.py compares the bytes).  A message ``put`` would refuse (its body over
        ``maxMessageSize``, properties that cannot be stored, a record larger than a segment) and a disk error
        decline the whole run before anything is written or assigned.
        """
        if not messages or not self.takes_plain_runs:
            return False
        config = self.config
        max_body = config.max_message_size
        max_record = self.commit_log.max_record_size
        store_host = config.store_host
        queue_next = self.queue_next
        nexts: dict[tuple[str, int], int] = {}
        now = int(time.time() * 1000)
        heads: list[bytes] | None = None
        if _C is not None:  # the loop below compiled (broker/fastpath.c plan_run); None: not its common case
            heads = _C.plan_run(messages, queue_next, nexts, now, store_host, max_body, max_record,
                                record.prefix_cache())
        if heads is None:
            heads = self._plan_plain_run(messages, nexts, now)
            if heads is None:
                return False
        try:
            self.commit_log.append_batch(messages, heads)
        except OSError as exc:
            log.error("commit log append failed: %s", exc)
            return False  # nothing of the run stays in the log: ``put`` tries again and reports the failure
        self._appended(messages, nexts)
        self.dispatch_confirmed()
        return True

    def _plan_plain_run(self, messages: list[StoredMessage], nexts: dict[tuple[str, int], int],
                        now: int) -> list[bytes] | None:
        """``append_plain_run``'s plan of a run, the reference for the compiled ``plan_run``: each message's queue
        offset (``nexts[key]`` moved past it), store time and host when it has none, record head and size; None
        when ``put`` would refuse one of them (nothing of the store is changed; ``nexts`` starts empty)."""
        nexts.clear()
        config = self.config
        max_body = config.max_message_size
        max_record = self.commit_log.max_record_size
        store_host = config.store_host
        queue_next = self.queue_next
        heads: list[bytes] = []
        prepare = record.prepare
        for msg in messages:
            if len(msg.body) > max_body:
                return None
            key = (msg.topic, msg.queue_id)
            qoff = nexts.get(key)
            if qoff is None:
                qoff = queue_next.get(key, 0)
            msg.queue_offset = qoff
            if not msg.store_timestamp:
                msg.store_timestamp = now
            if not msg.store_host:
                msg.store_host = store_host
            try:
                heads.append(prepare(msg))
            except RecordError:
                return None
            if msg.size > max_record:
                return None
            nexts[key] = qoff + 1
        return heads

    def prepare(self, msg: StoredMessage, cursor: int) -> bytes:
        """Encode ``msg`` for a replicated log whose end will be ``cursor`` (a Raft leader's proposal).

        Assigns the queue offset and the physical offset the record will have once the log
        holds everything proposed before it; raises RecordError for a message that cannot
        be stored.
        """
        if len(msg.body) > self.config.max_message_size:
            raise RecordError(f"body of {len(msg.body)} bytes exceeds maxMessageSize")
        key = (msg.topic, msg.queue_id)
        msg.queue_offset = self.queue_next.get(key, 0)
        lmq = multi_dispatch.assign(msg.topic, msg.properties, self.queue_next) if self.config.multi_dispatch else []
        if not msg.store_timestamp:
            msg.store_timestamp = int(time.time() * 1000)
        msg.store_host = msg.store_host or self.config.store_host
        msg.physical_offset = cursor
        data = record.encode(msg)
        if len(data) > self.commit_log.max_record_size:  # would fail every replica's append, not only ours
            raise RecordError(f"message of {len(data)} bytes does not fit a commit-log segment "
                              f"(mappedFileSizeCommitLog {self.commit_log.log.segment_size})")
        planned = self.commit_log.planned_offset(cursor, len(data))
        if planned != cursor:
            msg.physical_offset = planned
            data = record.encode(msg)
        self.queue_next[key] = msg.queue_offset + 1
        for k in lmq:
            self.queue_next[k] = self.queue_next.get(k, 0) + 1
        if self.on_data is not None and msg.topic != HA_EVENTS_TOPIC:
            self.on_data(msg.physical_offset + len(data))
        return data

    def prepare_run(self, messages: list[StoredMessage], cursor: int, max_bytes: int
                    ) -> tuple[list[bytes], list[int], int] | None:
        """``prepare`` for a whole proposal, compiled: the Raft entries (``datas``), each message's entry
        (``entry_of``) and the log end after them, as a DLedger leader's ``plan_entries`` builds them with
        ``prepare`` one message at a time (an entry is consecutive records of one segment, cut where a record
        rolls to the next segment or the entry would pass ``max_bytes``; a record larger than that is an entry
        of its own).  The same bytes, offsets, store times, store hosts, queue offsets and ``on_data``
        (tests/test_dledger_prepare_run.py).

        Why: ``prepare`` encoded each record in Python (``record.encode``), and a second copy joined a group's
        records into its entry; session 25's profile of the DLedger leader under single sends put
        ``plan_entries`` at ~6 % of its busy samples.  Here ``fastpath.plan_run`` (the plain-run planner of
        ``append_plain_run``) gives the records' heads and queue offsets and ``fastpath.encode_run`` lays them
        out into one buffer, cut into entries.

        None, with nothing of the store changed, when it does not take the group: no compiled module, LMQ
        dispatch on (``prepare`` assigns LMQ offsets), a message ``prepare`` would refuse (the caller's loop then
        refuses that one and stores the others), a field ``encode_run`` does not lay out.  The messages' fields
        may then have been set (queue offset, store time and host, size): ``prepare`` sets them again."""
        if _C is None or self.config.multi_dispatch or not messages or type(messages) is not list:
            return None
        config = self.config
        nexts: dict[tuple[str, int], int] = {}
        heads = _C.plan_run(messages, self.queue_next, nexts, int(time.time() * 1000), config.store_host,
                            config.max_message_size, self.commit_log.max_record_size, record.prefix_cache())
        if heads is None:
            return None
        n = len(messages)
        buf = bytearray(sum(m.size for m in messages))
        planned, crc32, encode_run = self.commit_log.planned_offset, record.crc32, _C.encode_run
        datas: list[bytes] = []
        entry_of: list[int] = []
        i = pos = 0
        while i < n:  # one entry per turn, from messages[i] on
            size = messages[i].size
            cursor = planned(cursor, size)  # past the segment's end when the record does not fit its rest
            seg = self.commit_log.log.segment_size
            room = min(seg - cursor % seg, max_bytes) if size <= max_bytes else size
            start = pos
            j, pos, cursor, _room = encode_run(buf, pos, messages, heads, i, room, cursor, crc32)
            if j == i:
                return None  # a record it does not lay out: prepare's record.encode says why
            entry_of.extend([len(datas)] * (j - i))
            datas.append(bytes(buf) if start == 0 and pos == len(buf) else bytes(buf[start:pos]))
            i = j
        queue_next = self.queue_next
        for key, nxt in nexts.items():
            queue_next[key] = nxt
        if self.on_data is not None:
            for m in reversed(messages):  # the newest record that is not a replication event
                if m.topic != HA_EVENTS_TOPIC:
                    self.on_data(m.physical_offset + m.size)
                    break
        return datas, entry_of, cursor

    def add_pending(self, messages: list[StoredMessage]) -> None:
        """Queue records a replicated writer encoded with ``prepare`` for dispatch once confirmed.

        A DLedger leader's proposal (broker/dledger/node.py): its records reach the commit log
        through the Raft log, and dispatching these objects spares decoding them back from it.
        They are dispatched only below the confirm offset.
        """
        self._pending.extend(messages)

    def add_pending_records(self, physical_offset: int, data: bytes) -> None:
        """Queue whole records still in their bytes (``data``, at ``physical_offset`` in the commit log) for
        dispatch once confirmed, as ``add_pending`` queues decoded ones.

        A DLedger follower's appended entry (broker/dledger/node.py ``_pend_appended``): the dispatch builds
        their consume-queue entries and index keys from the bytes (broker/raftpath.c ``dispatch_records``)
        and decodes a record into a ``StoredMessage`` only where it must (a topic with a topic listener, LMQ
        offsets); decoding every record first was most of a follower's dispatch (docs/BENCHMARKS.md, sessions
        22-23).  The caller has checked that every record decodes (``raft_codec.check_records``)."""
        if data:
            self._pending.append(_BytesRun(data, 0, physical_offset))

    def drop_pending(self) -> None:
        """Forget records queued by ``add_pending`` or ``add_pending_records`` (a deposed leader's: others may
        replace them).

        Always safe: ``dispatched`` never passes a pending record, so whatever of them the log
        still holds is read back from it when confirmed, like a replica's records.
        """
        self._pending.clear()

    def rebuild_queue_offsets(self) -> None:
        """Queue offsets past the dispatched part, from the log itself (a new Raft leader's uncommitted tail).

        Every planned offset is forgotten first: a queue with no consume queue yet, whose every record so far
        was this member's own uncommitted proposal (truncated since, when another leader took over), would
        otherwise keep its planned offsets, and its next committed record would start past a gap (the
        dledger simulator's consume-queue check, seeds 207 and 601 of 0-1000, session 19).
        """
        self.queue_next.clear()
        for key, cq in self.cqs.items():
            self.queue_next[key] = cq.max_offset
        for msg in self.commit_log.iter_messages(self.dispatched, self.commit_log.max_offset):
            key = (msg.topic, msg.queue_id)
            self.queue_next[key] = max(self.queue_next.get(key, 0), msg.queue_offset + 1)
            for lmq, off in multi_dispatch.entries(msg.topic, msg.properties):
                k = (lmq, multi_dispatch.LMQ_QUEUE_ID)
                self.queue_next[k] = max(self.queue_next.get(k, 0), off + 1)

    async def put(self, messages: Iterable[StoredMessage], wait_replicas: bool = True) -> list[PutResult]:
        """Append a batch, make it visible once confirmed, and wait for flush and replication.

        ``wait_replicas=False`` skips the Master/Slave or controller-mode replication wait (never
        DLedger's, whose writes are Raft proposals): for internal records that count once on this
        node's disk and reach the slaves with the stream (the Master/Slave POP journal).

        Every message of one call shares one commit-log write, one wait for the fsync that
        covers them (SYNC_FLUSH) and one wait for replication: a caller holding several
        messages (a SendMessage request with many entries, internal re-puts) should pass
        them together rather than call ``put`` once per message.

        SYNC_FLUSH also groups *concurrent* calls (group commit of the CPU work, not only
        of the fsync): a call queues its messages and the puts queued during one event-loop
        iteration are appended together, in call order, by one ``append_batch``, dispatched
        together, and wait for their fsync with one waiter.  Results, offsets and statuses
        are those of the same calls made one after the other.
        """
        if self.replicated_writer is not None:
            return await self.replicated_writer(list(messages))
        if self.config.sync_flush:  # queued for _append_group (inline: this runs for every send)
            loop = self._loop or asyncio.get_running_loop()  # a store not started (tests): the caller's loop
            fut: asyncio.Future[tuple[list[PutResult], bool]] = loop.create_future()
            self._put_queue.append((list(messages), fut))
            if not self._put_scheduled:
                self._put_scheduled = True
                loop.call_soon(self._append_group)
            grouped, flushed = await fut
            if flushed and (self.replication_waiter is None or not wait_replicas):
                return grouped
            return await self._finish_put(grouped, flushed, wait_replicas)
        results = self.append_batch(messages)
        self.dispatch_confirmed()
        return await self._finish_put(results, None, wait_replicas)

    async def _finish_put(self, results: list[PutResult], flushed: bool | None,
                          wait_replicas: bool = True) -> list[PutResult]:
        """Wait for flush (unless ``flushed`` says how that went) and replication; set the statuses."""
        end = 0
        for r in results:
            if r.message is not None:
                end = r.message.physical_offset + r.message.size  # appended in order: the last is the end
        if not end:
            return results
        status = PutStatus.PUT_OK
        if flushed is None and self.config.sync_flush:
            flushed = await self.flush.wait_synced(end, self.config.sync_flush_timeout_s)
        if flushed is False and self.commit_log.log.synced_offset < end:
            status = PutStatus.FLUSH_DISK_TIMEOUT
        if self.replication_waiter is not None and wait_replicas:
            repl = await self.replication_waiter(end)
            if repl is not PutStatus.PUT_OK:
                status = repl
        if status is not PutStatus.PUT_OK:
            for r in results:
                if r.status is PutStatus.PUT_OK:
                    r.status = status
        return results

    def _append_group(self) -> None:
        """Append every queued put as one batch and start the one wait for its fsync."""
        self._put_scheduled = False
        queue = self._put_queue
        if not queue:
            return
        total = sum(len(msgs) for msgs, _ in queue) if len(queue) > 1 else 0
        if total >= _SPLIT_RECORDS and self.flush.idle:
            # the disk is idle: append about half now so its fsync starts at once, the rest in
            # the next iteration while that fsync runs (CPU and disk overlap: a pipeline of two)
            half = n = 0
            while half < len(queue) - 1 and n < total // 2:
                n += len(queue[half][0])
                half += 1
            queue, self._put_queue = queue[:half], queue[half:]
            self._put_scheduled = True
            asyncio.get_running_loop().call_soon(self._append_group)
        else:
            self._put_queue = []
        try:
            everything = queue[0][0] if len(queue) == 1 else [m for msgs, _ in queue for m in msgs]
            results = self.append_batch(everything)
            self.dispatch_confirmed()
        except BaseException as exc:
            for _, fut in queue:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        if len(queue) == 1:
            groups: list[_Group] = [(results, queue[0][1])]
        else:
            groups, i = [], 0
            for msgs, fut in queue:
                groups.append((results[i:i + len(msgs)], fut))
                i += len(msgs)
        end = 0
        for r in reversed(results):  # appended in order: the last stored record ends the group
            if r.message is not None:
                end = r.message.physical_offset + r.message.size
                break
        if not end:
            for part, fut in groups:
                if not fut.done():
                    fut.set_result((part, True))
            return
        if self.commit_log.log.synced_offset < end:
            self.flush.start_sync()  # before the rest of a split group is appended (see above)
        self.flush.when_synced(end, self.config.sync_flush_timeout_s, functools.partial(_resolve_groups, groups))

    def append_replicated(self, offset: int, data: bytes) -> int:
        """Append bytes copied from the master (same offsets) and dispatch the records they complete.

        With a confirm offset set (controller mode: the master's, carried by the stream) only
        records up to it are dispatched, so a replica's consume queues, like the master's,
        hold confirmed messages only; ``set_confirm_offset`` dispatches the rest as it moves.
        """
        end = self.copy_replicated(offset, data)
        self.dispatch_copied(offset, data)
        return end

    def copy_replicated(self, offset: int, data: bytes) -> int:
        """The first half of ``append_replicated``: write the copied bytes; return the log's end.

        A Master/Slave slave reports its copy to the master between the halves (broker/ha/slave.py): the master
        waits for the copy, not for the slave's queues, and the slave's dispatch then runs while the answer
        travels (Apache's slave reports its written offset, its dispatch runs apart)."""
        self.commit_log.append_raw(offset, data)
        return self.commit_log.max_offset

    def dispatch_copied(self, offset: int, data: bytes) -> None:
        """The second half of ``append_replicated``: dispatch the records the copy completed (up to the confirm
        offset); ``data`` is the chunk copied at ``offset``, whose records are dispatched from its bytes when
        dispatch stands at its start (``_copied_runs``), else read back from the log."""
        end = self.commit_log.max_offset
        bound = end if self._confirm is None else min(end, self._confirm)
        if self.dispatched < bound:
            runs = self._copied_runs(offset, data, bound) if self.dispatched == offset else None
            if runs is None:
                self._dispatch_many(self.commit_log.iter_messages(self.dispatched, bound))
            elif runs:
                self._dispatch_mixed(runs)  # type: ignore[arg-type]
        after_filler = self.commit_log.next_record_offset(self.dispatched)
        if after_filler <= bound:  # a filler copied only in part is not passed (see trim_torn_tail)
            self.dispatched = max(self.dispatched, after_filler)

    def _copied_runs(self, offset: int, data: bytes, bound: int) -> list[_BytesRun] | None:
        """The whole records of a chunk just copied (``data`` at ``offset``, where dispatch stands) that end at or
        below ``bound``, as runs of adjacent records for ``_dispatch_mixed``; None when the read-back must take it.

        Why: a Master/Slave replica dispatched every copied record by reading it back from its log and decoding
        it into a ``StoredMessage`` (``CommitLog.iter_messages``), most of a slave's CPU; the records are in hand,
        and ``dispatch_records`` (broker/raftpath.c, a DLedger follower's dispatch) builds their queue entries
        and index keys from the bytes.  The walk keeps the read-back's rules: a segment-end filler or a zero
        tail too short for one ends a run and is stepped over, a record is taken only whole, only with a
        right magic, a right CRC and fields that decode, and the first that is not ends the walk (the read-back
        stops there too, and ``dispatched`` stays at it).  Without the compiled module: None (the reference).
        """
        if _R is None or any(s < bound and e > offset for s, e in self.commit_log.corrupt):
            return None
        runs: list[_BytesRun] = []
        segment = self.commit_log.log.segment_size
        pos, n, at = 0, len(data), offset
        start = 0  # where the run being built starts in ``data``

        def close(upto: int) -> bool:
            if upto > start:
                run = data[start:upto]
                if not _R.check_records(run):
                    return False
                runs.append(_BytesRun(run, 0, offset + start))
            return True

        while at < bound:
            limit = at - at % segment + segment
            size, magic = record.peek_header(data, pos)
            if limit - at < record.MIN_BLANK or magic == record.BLANK_MAGIC:
                if not close(pos):
                    return None
                if limit > bound:  # a filler copied only in part is not passed (trim_torn_tail)
                    break
                pos, at = pos + limit - at, limit
                start = pos
                continue
            if magic != record.MESSAGE_MAGIC or size < record.FIXED_SIZE or at + size > bound or pos + size > n \
                    or not record.crc_ok(data, pos, size):
                break
            pos, at = pos + size, at + size
        if not close(pos):
            return None
        return runs

    def trim_torn_tail(self) -> int:
        """Cut a replica's log back to its last whole record before it starts writing; return the bytes cut.

        Replication copies bytes, so a replica's log can end inside a record or inside the
        filler that closes a segment.  Appending after either would corrupt the log for
        every reader: a torn filler still announces its full size, and readers jump over
        whatever the new writer puts in its range (seen as acknowledged messages that no
        consumer ever got).  ``dispatched`` is a record boundary on a replica (it ends at
        the last whole record copied), so the scan starts there.
        """
        end = self.commit_log.max_offset
        start = min(self.dispatched, end)
        good = self.commit_log.whole_records_end(start)
        if good >= end:
            return 0
        log.warning("commit log ended in a torn record or filler at %d: cut back to %d before writing", end, good)
        return self.truncate_to(good)

    def truncate_to(self, offset: int) -> int:
        """Cut the commit log at ``offset`` and every consume-queue entry past it; return the bytes removed."""
        end = self.commit_log.max_offset
        if offset >= end:
            return 0
        self.commit_log.truncate(offset)
        for cq in self.cqs.values():
            cq.truncate_physical(offset)
        self.queue_next.clear()
        self.queue_next.update({k: cq.max_offset for k, cq in self.cqs.items()})
        # a run of records in their bytes that crosses ``offset`` goes whole: what is left of it below
        # ``offset`` is read back from the log when confirmed (``drop_pending``'s rule)
        self._pending = deque(m for m in self._pending if m.physical_offset + m.size <= offset)
        self.dispatched = min(self.dispatched, offset)
        if self._confirm is not None:
            self._confirm = min(self._confirm, offset)
        return end - offset

    # ---------------------------------------------------------------- dispatch
    @property
    def confirm_offset(self) -> int:
        return self.commit_log.max_offset if self._confirm is None else self._confirm

    @property
    def confirm_bound(self) -> int | None:
        """The confirm offset set by replication, or None while confirm follows the written end."""
        return self._confirm

    def advance_confirm_offset(self, offset: int) -> None:
        """Move the visibility bound forward to ``offset`` (capped at the log end), never back."""
        offset = min(offset, self.commit_log.max_offset)
        if self._confirm is None or offset > self._confirm:
            self.set_confirm_offset(offset)

    def add_topic_listener(self, topic: str, listener: RecordListener) -> None:
        """Call ``listener`` with every record of ``topic`` the store dispatches, in log order, after its
        batch's entries are in their queues (replays at recovery included, as the record is read back).

        For readers of a record's body or properties (the POP-state and consumer-offset journals, the trace
        indexer): naming the topic lets the store skip a batch none of whose queues is of that topic without
        looking at its records, and leaves room to build a record's object only for these topics."""
        self._topic_listeners.setdefault(topic, []).append(listener)

    def add_queue_listener(self, listener: QueueListener) -> None:
        """Call ``listener`` once per dispatched batch with the queues that got new entries in it
        (``(topic, queue_id)``, LMQ queues included; replays adding nothing are not reported).

        For wake-ups (held pulls, POP waiters), which only need to know that a queue grew: one call per
        batch and queue instead of one per record (issue 20)."""
        self._queue_listeners.append(listener)

    def _tell_listeners(self, msgs: Sequence[StoredMessage], runs: dict[tuple[str, int], _Run]) -> None:
        """The dispatch listeners of a batch whose entries are in their queues: the topic listeners with
        their topic's records in log order, then the queue listeners with the queues that grew.  A listener
        that raises is logged and skipped: it must never stop the store."""
        by_topic = self._topic_listeners
        if by_topic and any(key[0] in by_topic for key in runs):
            for msg in msgs:
                fns = by_topic.get(msg.topic)
                if fns:
                    for fn in fns:
                        try:
                            fn(msg)
                        except Exception:
                            log.exception("dispatch listener failed for %s", msg.msg_id)
        if self._queue_listeners:
            grown = [key for key, run in runs.items() if run.first >= 0]
            if grown:
                for listener in self._queue_listeners:
                    try:
                        listener(grown)
                    except Exception:
                        log.exception("dispatch listener failed for queues %s", grown[:4])

    def set_confirm_offset(self, offset: int | None) -> None:
        """Move the visibility bound (None: follow the written end) and dispatch up to it."""
        self._confirm = offset
        self.dispatch_confirmed()

    def dispatch_confirmed(self) -> None:
        """Consume-queue entries and index keys for everything up to the confirm offset, in log order.

        Two sources: records this store appended (``_pending``: decoded records, or records still in their
        bytes) and records below the first of them that it did not dispatch when they arrived (a promoted
        replica's copy past its old confirm offset).  The copied ones go first: their queue offsets come first.
        """
        bound = self.confirm_offset
        pending = self._pending
        first = pending[0].physical_offset if pending else bound
        upto = min(bound, first)
        if self.dispatched < upto:  # records this store did not append (copied by replication): read them back
            self._dispatch_many(self.commit_log.iter_messages(self.dispatched, upto))
        if not pending or upto < first:
            return  # nothing appended here, or all of it lies past the bound
        self.dispatched = max(self.dispatched, first)  # only whole records and fillers lie below ``first``
        ready: list[_Pending]
        if pending[-1].physical_offset + pending[-1].size <= bound:
            ready = list(pending)
            pending.clear()
        else:
            ready = []
            while pending and pending[0].physical_offset + pending[0].size <= bound:
                ready.append(pending.popleft())
            if pending and type(pending[0]) is _BytesRun:  # records of it may end within the bound
                head = self._split_run(pending[0], bound)  # type: ignore[arg-type]
                if head is not None:
                    ready.append(head)
        if not ready:
            return
        if all(type(m) is StoredMessage for m in ready):
            self._dispatch_many(ready)  # type: ignore[arg-type]
            return
        try:
            self._dispatch_mixed(ready)
        except RecordError as exc:  # the caller checked the bytes (add_pending_records): not expected
            log.error("pending records at %d do not decode (%s): read back from the commit log instead",
                      self.dispatched, exc)
            pending.clear()
            self.dispatch_confirmed()

    @staticmethod
    def _split_run(run: _BytesRun, bound: int) -> _BytesRun | None:
        """The records of ``run`` that end at or below ``bound``, as a run of their own (None: not one);
        ``run`` keeps the rest."""
        data, pos = run.data, run.pos
        limit = pos + bound - run.physical_offset
        cut = pos
        while cut < len(data):
            size = record.peek_header(data, cut)[0]
            if size <= 0 or cut + size > limit:
                break
            cut += size
        if cut == pos:
            return None
        head = _BytesRun(data[:cut], pos, run.physical_offset)
        run.physical_offset += cut - pos
        run.pos = cut
        run.size = len(data) - cut
        return head

    def _dispatch_many(self, msgs: Iterable[StoredMessage]) -> None:
        """Consume-queue entries and index keys for ``msgs`` (in log order); moves ``dispatched``.

        A list (the records a put appended) is dispatched as one batch; any other iterable (records read
        back from the log: a replica's copy, a recovery) in batches of ``_DISPATCH_CHUNK``, so a long
        range never sits in memory at once.
        """
        if isinstance(msgs, list | tuple):
            if msgs:
                self._dispatch_each(msgs)
            return
        it = iter(msgs)
        while chunk := list(islice(it, _DISPATCH_CHUNK)):
            self._dispatch_each(chunk)

    def _dispatch_each(self, msgs: Sequence[StoredMessage]) -> None:
        """Dispatch one batch: each queue's new entries packed into one buffer and written with one call,
        the index keys of the whole batch with one call, ``dispatched`` moved once (issue 20: done one
        record at a time, these calls were most of the store's CPU on a batch).

        Which entries are new is decided as ``ConsumeQueue.append`` decides it one by one (an entry below
        the queue's end, a replay, is left as is and indexes nothing; a gap is filled), so the queues,
        offsets and index are those of the records dispatched one after the other
        (tests/test_store_dispatch_batch.py).  Consume-queue entries are buffered by their queue (written
        when read, at a checkpoint, or every 64 KiB): the checkpoint's ``dispatched`` only ever covers
        entries on disk, and recovery rebuilds the rest from the commit log.  Listeners run after the
        batch's entries are in their queues, in log order.
        """
        runs: dict[tuple[str, int], _Run] = {}
        keys: list[tuple[str, int, int]] = []  # (topic#key, phy, store time) of the whole batch: one index call
        if _C is None or type(msgs) is not list:
            for msg in msgs:
                self._dispatch_one(msg, runs, keys)
        else:  # the compiled loop (broker/fastpath.c dispatch_run); a record it does not take: _dispatch_one
            i, n, new_run = 0, len(msgs), self._run
            while i < n:
                i = _C.dispatch_run(msgs, i, runs, new_run, _tag_hash, keys)
                if i < n:
                    self._dispatch_one(msgs[i], runs, keys)
                    i += 1
        last = msgs[-1]
        self._finish_batch(runs, keys, msgs, lambda: msgs, last.physical_offset + last.size)

    def _finish_batch(self, runs: dict[tuple[str, int], _Run], keys: list[tuple[str, int, int]],
                      told: Sequence[StoredMessage], every: Callable[[], Sequence[StoredMessage]], end: int) -> None:
        """The writes of a batch whose runs and keys are built: each queue's run, the index keys, the listeners
        (``told``: the batch's records that exist as objects, in log order, every record of a listened topic
        among them), ``dispatched`` moved to ``end``.  ``every()`` gives all the batch's records, for the rare
        consume-queue write that fails part way (``_keys_in_queues``)."""
        queue_next = self.queue_next
        try:
            for key, run in runs.items():
                if run.first >= 0:
                    run.cq.append_packed(run.first, run.packed)
                    if queue_next.get(key, 0) < run.end:
                        queue_next[key] = run.end
        except BaseException:
            if keys:
                self.index.put_entries(self._keys_in_queues(every(), keys))
            raise
        if keys:
            self.index.put_entries(keys)
        if self._topic_listeners or self._queue_listeners:
            self._tell_listeners(told, runs)
        self.dispatched = end

    def _dispatch_mixed(self, items: list[_Pending]) -> None:
        """Dispatch one batch of pending items, some of them records still in their bytes: as ``_dispatch_each``
        does for the same records decoded (the same queues, offsets, index keys, listener calls and
        ``dispatched``; tests/test_dispatch_bytes_equivalence.py), without decoding a record unless it must.

        The compiled ``dispatch_records`` takes every record it can and stops at one it does not (a record of
        a topic with a topic listener, one with LMQ offsets, bytes ``record.decode`` refuses); that one is
        decoded and dispatched by ``_dispatch_one`` (``record.decode`` raises RecordError on bad bytes).
        Without the compiled module every record is decoded: the reference."""
        runs: dict[tuple[str, int], _Run] = {}
        keys: list[tuple[str, int, int]] = []
        told: list[StoredMessage] = []
        new_run, listened = self._run, self._topic_listeners
        for item in items:
            if type(item) is not _BytesRun:
                self._dispatch_one(item, runs, keys)  # type: ignore[arg-type]
                told.append(item)  # type: ignore[arg-type]
                continue
            data, pos = item.data, item.pos
            n = len(data)
            while pos < n:
                if _R is not None:
                    pos = _R.dispatch_records(data, pos, runs, new_run, _tag_hash, keys, listened)
                    if pos >= n:
                        break
                msg = record.decode(data, pos, verify=False)
                self._dispatch_one(msg, runs, keys)
                told.append(msg)
                pos += msg.size
        last = items[-1]

        def every() -> list[StoredMessage]:
            out: list[StoredMessage] = []
            for item in items:
                if type(item) is _BytesRun:
                    out.extend(record.decode_run(item.data, item.pos))
                else:
                    out.append(item)  # type: ignore[arg-type]
            return out

        self._finish_batch(runs, keys, told, every, last.physical_offset + last.size)

    def _keys_in_queues(self, msgs: Sequence[StoredMessage],
                        keys: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
        """The index keys of a batch whose consume-queue write failed part way: those of the records whose
        entry is in its queue now, and only those.

        The batch is not marked dispatched, so it is dispatched again (read back from the log, or at
        recovery); that replay indexes a record's keys exactly when it adds its entry (an entry already in
        the queue indexes nothing).  Indexing here what the replay will skip, and nothing it will add, makes
        the pair index every key once (tests/test_store_dispatch_fault.py)."""
        present: set[int] = set()
        for msg in msgs:
            cq = self.cqs.get((msg.topic, msg.queue_id))
            if cq is not None and msg.queue_offset < cq.max_offset:
                present.add(msg.physical_offset)
        return [k for k in keys if k[1] in present]

    def _dispatch_one(self, msg: StoredMessage, runs: dict[tuple[str, int], _Run],
                      keys: list[tuple[str, int, int]]) -> None:
        """One record of ``_dispatch_each``: its entry added to its queue's run when its queue offset is new (the
        test of ``ConsumeQueue.append``: an entry below the queue's end, a replay, is left as is and indexes
        nothing; a gap is filled), its index keys to ``keys``, its LMQ entries.  A record whose queue offset is
        more than ``MAX_QUEUE_GAP`` past its queue's end is refused whole, with one WARNING.  The reference for
        the compiled loops (broker/fastpath.c ``dispatch_run``, broker/raftpath.c ``dispatch_records``, their core
        in broker/store_dispatch.h; tests/test_fastpath_equivalence.py and tests/test_dispatch_bytes_equivalence.py
        run them against it)."""
        topic = msg.topic
        key = (topic, msg.queue_id)
        run = runs.get(key)
        if run is None:
            run = runs[key] = self._run(key)
        props = msg.properties
        qoff = msg.queue_offset
        expected = run.end
        if expected > 0 and qoff - expected > MAX_QUEUE_GAP:
            log.warning("dispatch refused a record of %s queue %d at queue offset %d: the queue ends at %d, a gap "
                        "over %d (commit-log offset %d)", topic, msg.queue_id, qoff, expected, MAX_QUEUE_GAP,
                        msg.physical_offset)
            return  # no entry, no index keys, no LMQ entries: the record is not dispatched
        if qoff >= expected:
            phy = msg.physical_offset
            if run.first < 0:
                run.first = qoff  # the queue fills a gap up to its first entry (append_packed)
            elif qoff > expected:
                run.packed += GAP * (qoff - expected)
            run.packed += ENTRY.pack(phy, msg.size, _tag_hash(props.get("TAGS", "")))
            run.end = qoff + 1
            # the same keys in the same order as IndexService.put("*", [id]) then put(topic, keys + [id])
            kstr = props.get("KEYS")
            msg_id = props.get("UNIQ_KEY", "")
            ts = msg.store_timestamp
            if msg_id:
                keys.append((f"{ALL_TOPICS_KEY}#{msg_id}", phy, ts))
            if kstr:
                for k in kstr.split(" "):
                    if k:
                        keys.append((f"{topic}#{k}", phy, ts))
            if msg_id:
                keys.append((f"{topic}#{msg_id}", phy, ts))
        if multi_dispatch.MULTI_QUEUE_OFFSET in props:
            self._dispatch_lmq(msg, runs)

    def _run(self, key: tuple[str, int]) -> _Run:
        """A batch's run of entries for the queue of ``key`` (opened when seen for the first time)."""
        cq = self.cqs.get(key)
        if cq is None:
            cq = self._open_cq(self.cqs, key)
        return _Run(cq)

    def _open_cq(self, cqs: dict[tuple[str, int], ConsumeQueue], key: tuple[str, int]) -> ConsumeQueue:
        """The consume queue of ``key`` (topic or LMQ queue, queue id) seen for the first time in a dispatch."""
        cq = cqs[key] = ConsumeQueue(self.root / "consumequeue", key[0], key[1], self.config.cq_entries_per_segment)
        return cq

    def _dispatch_lmq(self, msg: StoredMessage, runs: dict[tuple[str, int], _Run]) -> None:
        """The record's extra entries in the LMQ queues its properties name (broker/store/multi_dispatch.py),
        added to the batch's runs; an entry already there (a replay) is left as is."""
        entry = ENTRY.pack(msg.physical_offset, msg.size, _tag_hash(msg.properties.get("TAGS", "")))
        for lmq, off in multi_dispatch.entries(msg.topic, msg.properties):
            key = (lmq, multi_dispatch.LMQ_QUEUE_ID)
            run = runs.get(key)
            if run is None:
                run = runs[key] = self._run(key)
            expected = run.end
            if off < expected:
                continue
            if expected > 0 and off - expected > MAX_QUEUE_GAP:
                log.warning("dispatch refused an LMQ entry of %s in %s at queue offset %d: the queue ends at %d, "
                            "a gap over %d (commit-log offset %d)", msg.topic, lmq, off, expected, MAX_QUEUE_GAP,
                            msg.physical_offset)
                continue
            if run.first < 0:
                run.first = off
            elif off > expected:
                run.packed += GAP * (off - expected)
            run.packed += entry
            run.end = off + 1

    # ------------------------------------------------------------------- reads
    def get(self, topic: str, queue_id: int, offset: int, max_count: int,
            tags: AbstractSet[str] | None = None, max_bytes: int = 8 * 1024 * 1024,
            record_offsets: bool = False) -> GetResult:
        """Up to ``max_count`` messages from ``offset`` on; ``tags`` None means every tag.  Each message's
        ``queue_offset`` is its offset in the queue read, unless ``record_offsets``: then the one its record
        holds (its own topic's), which is what a remoting pull of an LMQ queue answers, as Apache's broker
        sends the stored record unchanged (its LMQ offsets are in INNER_MULTI_QUEUE_OFFSET)."""
        cq = self.cqs.get((topic, queue_id))
        if cq is None:
            return GetResult([], offset, 0, 0, found=False)
        lo, hi = cq.min_offset, cq.max_offset
        offset = max(offset, lo)
        hashes = {tag_hash(t) for t in tags} if tags else None
        out: list[StoredMessage] = []
        nbytes = 0
        pos = offset
        while pos < hi and len(out) < max_count and nbytes < max_bytes:
            entries = cq.get(pos, max(max_count - len(out), 16))
            if not entries:
                break
            for e in entries:
                pos = e.queue_offset + 1
                if hashes is not None and e.tag_hash not in hashes:
                    continue
                msg = self.commit_log.read(e.physical_offset, e.size)
                if msg is None or (tags is not None and msg.tags not in tags):
                    continue
                if not record_offsets:
                    msg.queue_offset = e.queue_offset
                out.append(msg)
                nbytes += e.size
                if len(out) >= max_count or nbytes >= max_bytes:
                    break
        return GetResult(out, pos, lo, hi)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def message_at(self, topic: str, queue_id: int, queue_offset: int) -> StoredMessage | None:
        cq = self.cqs.get((topic, queue_id))
        e = cq.entry(queue_offset) if cq else None
        if e is None:
            return None
        msg = self.commit_log.read(e.physical_offset, e.size)
        if msg is not None:
            msg.queue_offset = queue_offset
        return msg

    def store_time(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        msg = self.message_at(topic, queue_id, queue_offset)
        return msg.store_timestamp if msg else None

    def offset_by_time(self, topic: str, queue_id: int, ts_ms: int) -> int:
        """The first queue offset whose store time is >= ``ts_ms`` (max offset if none)."""
        lo, hi = self.min_offset(topic, queue_id), self.max_offset(topic, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            t = self.store_time(topic, queue_id, mid)
            if t is not None and t >= ts_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def read_physical(self, offset: int) -> StoredMessage | None:
        return self.commit_log.read(offset)

    def lookup(self, topic: str | None, key: str, limit: int = 32,
               begin_ms: int = 0, end_ms: int = 2**62) -> list[StoredMessage]:
        """Messages whose id or one of whose keys equals ``key`` (hash collisions filtered out)."""
        offsets = self.index.query(topic or ALL_TOPICS_KEY, key, limit * 4, begin_ms, end_ms)
        out: list[StoredMessage] = []
        seen: set[int] = set()
        for off in offsets:
            if off in seen or off >= self.dispatched:
                continue
            seen.add(off)
            msg = self.commit_log.read(off)
            if msg is None or (topic is not None and msg.topic != topic):
                continue
            if key == msg.msg_id or key in msg.keys:
                out.append(msg)
                if len(out) >= limit:
                    break
        return out

    def clear_queue(self, topic: str, queue_id: int) -> int:
        """Empty one queue in place (its entries become gaps, its offsets go on): a lite queue's expiry
        (broker/lite_expiry.py).  A replay of the commit log does not bring the entries back (they are below the
        queue's next offset).  Returns the entries cleared."""
        cq = self.cqs.get((topic, queue_id))
        return cq.blank() if cq is not None else 0

    def topics_and_queues(self) -> list[tuple[str, int]]:
        return sorted(self.cqs)

    # ------------------------------------------------------- background tasks
    def _save_checkpoint(self, done: int | None = None) -> None:
        """Sync queues and index, then record ``done`` (default: ``dispatched``) as safe.

        In a worker thread pass ``done`` taken on the event loop, where the queues' entry
        buffers live (they are empty between dispatch batches).
        """
        if done is None:
            for cq in self.cqs.values():
                cq.flush()
            done = self.dispatched
        for cq in list(self.cqs.values()):
            cq.sync()
        self.index.flush()
        Checkpoint(done, self.commit_log.log.synced_offset, int(time.time() * 1000)).save(self.root / "checkpoint")

    async def _checkpoint_loop(self) -> None:
        saved: tuple[int, int] | None = None  # (dispatched, commit log synced) of the last checkpoint written
        while True:
            await asyncio.sleep(self.config.checkpoint_interval_s)
            try:
                done = (self.dispatched, self.commit_log.log.synced_offset)
                if done == saved:
                    continue  # nothing dispatched or synced since: an idle broker skips the fsyncs (issue 20)
                for cq in self.cqs.values():
                    cq.flush()
                self._checkpointing = asyncio.ensure_future(asyncio.to_thread(self._save_checkpoint, done[0]))
                await asyncio.shield(self._checkpointing)
                self._checkpointing = None
                saved = done
            except OSError as exc:
                log.error("checkpoint failed: %s", exc)

    async def _retention_loop(self) -> None:
        policy = self.config.retention
        while True:
            await asyncio.sleep(policy.interval_s)
            try:
                self.apply_retention()
            except OSError as exc:
                log.error("retention failed: %s", exc)

    def disk_ratio(self) -> float:
        usage = shutil.disk_usage(self.root)
        return usage.used / usage.total if usage.total else 0.0

    def apply_retention(self, now: float | None = None) -> int:
        """Delete expired or over-quota commit-log segments and what points into them."""
        deleted = self.config.retention.select(self.commit_log.log, self.disk_ratio, now, self._retention_floor,
                                               self._on_retention_deleted)
        if not deleted:
            return 0
        min_phy = self.commit_log.min_offset
        for cq in self.cqs.values():
            cq.delete_below_physical(min_phy)
        self.index.delete_below(min_phy)
        return deleted
