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
import logging
import shutil
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from . import record
from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .consume_queue import ConsumeQueue, tag_hash
from .flush import FlushService
from .index import IndexService
from .record import RecordError, StoredMessage
from .retention import RetentionPolicy

log = logging.getLogger(__name__)

ALL_TOPICS_KEY = "*"
HA_EVENTS_TOPIC = "RMQ_SYS_HA_EVENTS"  # index key prefix under which every message id is also indexed


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"


@dataclass
class PutResult:
    status: PutStatus
    message: StoredMessage | None = None
    reason: str = ""


@dataclass
class StoreConfig:
    """Store settings; the broker maps its RocketMQ keys onto these (see broker/config.py)."""

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


@dataclass
class GetResult:
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int
    found: bool = True


DispatchListener = Callable[[StoredMessage], None]
ReplicationWaiter = Callable[[int], Awaitable[PutStatus]]


class MessageStore:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.root = Path(config.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.commit_log = CommitLog(self.root / "commitlog", config.commitlog_segment_size)
        self.index = IndexService(self.root / "index", config.index_slot_num, config.index_num)
        self.cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self.queue_next: dict[tuple[str, int], int] = {}
        self.dispatched = 0
        self._pending: deque[StoredMessage] = deque()
        self._confirm: int | None = None  # None: confirm follows the written end
        self.dispatch_listeners: list[DispatchListener] = []
        self.replication_waiter: ReplicationWaiter | None = None
        self.on_append: Callable[[], None] | None = None
        self.on_data: Callable[[int], None] | None = None  # a non-system record now ends at this offset
        # DLedger mode: puts become Raft proposals; the log is written by the Raft layer
        self.replicated_writer: Callable[[list[StoredMessage]], Awaitable[list[PutResult]]] | None = None
        self.flush = FlushService(self.commit_log.log.sync, lambda: self.commit_log.log.synced_offset,
                                  config.flush_interval_s)
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        self.put_lock = asyncio.Lock()

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
        for msg in self.commit_log.iter_messages(safe, bound):
            self._dispatch(msg)
            self.dispatched = msg.physical_offset + msg.size
            replayed += 1
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

    async def shutdown(self) -> None:
        self._running = False
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
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
        if len(msg.body) > self.config.max_message_size:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, reason=f"body of {len(msg.body)} bytes exceeds maxMessageSize")
        key = (msg.topic, msg.queue_id)
        msg.queue_offset = self.queue_next.get(key, 0)
        if not msg.store_timestamp:
            msg.store_timestamp = int(time.time() * 1000)
        msg.store_host = msg.store_host or self.config.store_host
        try:
            self.commit_log.append(msg)
        except RecordError as exc:
            status = PutStatus.PROPERTIES_SIZE_EXCEEDED if "properties" in str(exc) else PutStatus.MESSAGE_ILLEGAL
            return PutResult(status, reason=str(exc))
        except OSError as exc:
            log.error("commit log append failed: %s", exc)
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=f"disk error: {exc}")
        self.queue_next[key] = msg.queue_offset + 1
        self._pending.append(msg)
        if self.on_data is not None and msg.topic != HA_EVENTS_TOPIC:
            self.on_data(msg.physical_offset + msg.size)
        if self.on_append is not None:
            self.on_append()
        return PutResult(PutStatus.PUT_OK, msg)

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
        if not msg.store_timestamp:
            msg.store_timestamp = int(time.time() * 1000)
        msg.store_host = msg.store_host or self.config.store_host
        msg.physical_offset = cursor
        data = record.encode(msg)
        planned = self.commit_log.planned_offset(cursor, len(data))
        if planned != cursor:
            msg.physical_offset = planned
            data = record.encode(msg)
        self.queue_next[key] = msg.queue_offset + 1
        if self.on_data is not None and msg.topic != HA_EVENTS_TOPIC:
            self.on_data(msg.physical_offset + len(data))
        return data

    def rebuild_queue_offsets(self) -> None:
        """Queue offsets past the dispatched part, from the log itself (a new Raft leader's uncommitted tail)."""
        for key, cq in self.cqs.items():
            self.queue_next[key] = cq.max_offset
        for msg in self.commit_log.iter_messages(self.dispatched, self.commit_log.max_offset):
            key = (msg.topic, msg.queue_id)
            self.queue_next[key] = max(self.queue_next.get(key, 0), msg.queue_offset + 1)

    async def put(self, messages: Iterable[StoredMessage]) -> list[PutResult]:
        """Append a batch, make it visible once confirmed, and wait for flush and replication."""
        if self.replicated_writer is not None:
            return await self.replicated_writer(list(messages))
        results = [self.append(m) for m in messages]
        self.dispatch_confirmed()
        end = max((r.message.physical_offset + r.message.size for r in results if r.message), default=0)
        if not end:
            return results
        status = PutStatus.PUT_OK
        if self.config.sync_flush and not await self.flush.wait_synced(end, self.config.sync_flush_timeout_s):
            status = PutStatus.FLUSH_DISK_TIMEOUT
        if self.replication_waiter is not None:
            repl = await self.replication_waiter(end)
            if repl is not PutStatus.PUT_OK:
                status = repl
        if status is not PutStatus.PUT_OK:
            for r in results:
                if r.status is PutStatus.PUT_OK:
                    r.status = status
        return results

    def append_replicated(self, offset: int, data: bytes) -> int:
        """Append bytes copied from the master (same offsets) and dispatch the records they complete."""
        self.commit_log.append_raw(offset, data)
        end = self.commit_log.max_offset
        for msg in self.commit_log.iter_messages(self.dispatched, end):
            self._dispatch(msg)
            self.dispatched = msg.physical_offset + msg.size
        self.dispatched = max(self.dispatched, self.commit_log.next_record_offset(self.dispatched))
        return end

    # ---------------------------------------------------------------- dispatch
    @property
    def confirm_offset(self) -> int:
        return self.commit_log.max_offset if self._confirm is None else self._confirm

    def set_confirm_offset(self, offset: int | None) -> None:
        """Move the visibility bound (None: follow the written end) and dispatch up to it."""
        self._confirm = offset
        self.dispatch_confirmed()

    def dispatch_confirmed(self) -> None:
        bound = self.confirm_offset
        while self._pending and self._pending[0].physical_offset + self._pending[0].size <= bound:
            msg = self._pending.popleft()
            self._dispatch(msg)
            self.dispatched = msg.physical_offset + msg.size
        if not self._pending and self.dispatched < bound:  # written by replication: read it back
            for msg in self.commit_log.iter_messages(self.dispatched, bound):
                self._dispatch(msg)
                self.dispatched = msg.physical_offset + msg.size

    def _dispatch(self, msg: StoredMessage) -> None:
        key = (msg.topic, msg.queue_id)
        cq = self.cqs.get(key)
        if cq is None:
            cq = ConsumeQueue(self.root / "consumequeue", msg.topic, msg.queue_id, self.config.cq_entries_per_segment)
            self.cqs[key] = cq
        if cq.append(msg.queue_offset, msg.physical_offset, msg.size, tag_hash(msg.tags)):
            if self.queue_next.get(key, 0) < msg.queue_offset + 1:
                self.queue_next[key] = msg.queue_offset + 1
            keys = msg.keys
            msg_id = msg.msg_id
            if msg_id:
                keys = [*keys, msg_id]
                self.index.put(ALL_TOPICS_KEY, [msg_id], msg.physical_offset, msg.store_timestamp)
            self.index.put(msg.topic, keys, msg.physical_offset, msg.store_timestamp)
        for listener in self.dispatch_listeners:
            try:
                listener(msg)
            except Exception:  # a listener must never stop the store
                log.exception("dispatch listener failed for %s", msg.msg_id)

    # ------------------------------------------------------------------- reads
    def get(self, topic: str, queue_id: int, offset: int, max_count: int,
            tags: set[str] | None = None, max_bytes: int = 8 * 1024 * 1024) -> GetResult:
        """Up to ``max_count`` messages from ``offset`` on; ``tags`` None means every tag."""
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

    def topics_and_queues(self) -> list[tuple[str, int]]:
        return sorted(self.cqs)

    # ------------------------------------------------------- background tasks
    def _save_checkpoint(self) -> None:
        done = self.dispatched
        for cq in list(self.cqs.values()):
            cq.sync()
        self.index.flush()
        Checkpoint(done, self.commit_log.log.synced_offset, int(time.time() * 1000)).save(self.root / "checkpoint")

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.checkpoint_interval_s)
            try:
                await asyncio.to_thread(self._save_checkpoint)
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
        deleted = self.config.retention.select(self.commit_log.log, self.disk_ratio, now)
        if not deleted:
            return 0
        min_phy = self.commit_log.min_offset
        for cq in self.cqs.values():
            cq.delete_below_physical(min_phy)
        self.index.delete_below(min_phy)
        return deleted
