"""The master side of Master/Slave replication: stream the commit log to slaves, count acks.

Each slave holds one bidirectional stream.  The master sends raw commit-log bytes from
the slave's reported end, cut on record boundaries (a segment-end filler is sent whole,
never split: a slave whose copy ended inside one and was then promoted wrote after the
torn filler, and readers skipped its records), and the slave reports its new end after
every chunk.  Acks drive
SYNC_MASTER sends: a send is acknowledged once ``inSyncReplicas`` copies (the master
counts as one) hold it, else FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import grpc

from rocketscope.broker.protocol import ha_pb2, ha_pb2_grpc
from rocketscope.broker.store.message_store import PutStatus
from rocketscope.broker.store.record import BLANK_MAGIC, FIXED_SIZE, MESSAGE_MAGIC, MIN_BLANK
from rocketscope.ha_events import REPLICA_ACK, ROLE_CHANGE

if TYPE_CHECKING:
    from rocketscope.broker.store.commitlog import CommitLog
    from rocketscope.broker.store.message_store import MessageStore
    from rocketscope.config import Settings

    from .event_log import HaEventLog

log = logging.getLogger(__name__)
CHUNK_BYTES = 256 * 1024


def record_aligned(raw: bytes) -> int:
    """How many leading bytes of ``raw`` are whole records and whole segment-end fillers."""
    pos = 0
    while pos < len(raw):
        if len(raw) - pos < MIN_BLANK:
            # fewer than 8 bytes can only be a segment's zero tail (too short for a filler); also when the
            # read starts there (a caught-up slave at the last record of a segment), or it would never advance
            return len(raw) if raw[pos:].strip(b"\x00") == b"" else pos
        size, magic = struct.unpack_from(">II", raw, pos)
        if magic == MESSAGE_MAGIC and size >= FIXED_SIZE:
            if pos + size > len(raw):
                return pos
            pos += size
        elif magic == BLANK_MAGIC and size >= MIN_BLANK:  # a segment-end filler: whole, and the segment ends
            return pos + size if pos + size <= len(raw) else pos
        else:  # bytes no reader serves (a corrupt range kept by recovery): copied as they are
            return len(raw)
    return pos


def read_chunk(commit_log: CommitLog, offset: int, max_bytes: int = CHUNK_BYTES) -> bytes:
    """The next whole records of ``commit_log`` from ``offset`` (at most one segment, ``max_bytes``)."""
    if offset >= commit_log.max_offset:
        return b""
    raw = commit_log.read_raw(offset, max_bytes)
    n = record_aligned(raw)
    if n == 0 and len(raw) >= 4:  # one record (or filler) larger than a chunk
        size = struct.unpack_from(">I", raw, 0)[0]
        raw = commit_log.read_raw(offset, size)
        n = len(raw) if len(raw) == size else 0
    return raw[:n]


@dataclass
class SlaveState:
    broker_id: int
    address: str
    ack_offset: int
    connected_at: float = field(default_factory=time.time)
    last_ack_at: float = field(default_factory=time.time)
    connected: bool = True
    # monotonic time of the slave's last report of any kind (it answers every chunk, heartbeats included): a
    # SIGSTOP'd or cut-off slave keeps its TCP connection, so silence is how the master tells it is gone
    last_report_at: float = field(default_factory=time.monotonic)

    def silent_for(self, now: float) -> float:
        return now - self.last_report_at

    @property
    def name(self) -> str:
        return f"{self.address}#{self.broker_id}"


class MasterHost(Protocol):
    """What the HA master uses of its broker (issue 17: this, not the whole Broker)."""

    store: MessageStore
    settings: Settings
    ha_events: HaEventLog
    broker_name: str

    @property
    def is_master(self) -> bool: ...

    @property
    def broker_id(self) -> int: ...

    @property
    def node_id(self) -> str: ...

    @property
    def role(self) -> str: ...


class ReplicationMaster(ha_pb2_grpc.ReplicationServicer):
    def __init__(self, broker: MasterHost) -> None:
        self.broker = broker
        self.slaves: dict[int, SlaveState] = {}
        self._wakeups: set[asyncio.Event] = set()  # one per slave stream: a shared event would lose wake-ups
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self.on_ack: list[Callable[[SlaveState], None]] = []

    # ------------------------------------------------------------------ data
    def notify_appended(self) -> None:
        for event in self._wakeups:
            event.set()

    def read_chunk(self, offset: int) -> bytes:
        return read_chunk(self.broker.store.commit_log, offset)

    # ---------------------------------------------------------------- stream
    async def Stream(self, request_iterator: AsyncIterator[ha_pb2.SlaveReport],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[ha_pb2.TransferChunk]:
        b = self.broker
        try:
            first = await request_iterator.__anext__()
        except (StopAsyncIteration, grpc.aio.AioRpcError):
            return
        if not b.is_master:
            yield ha_pb2.TransferChunk(error=f"{b.node_id} is not a master ({b.role})")
            return
        if first.broker_name != b.broker_name or first.broker_id == b.broker_id:
            yield ha_pb2.TransferChunk(error=f"slave {first.broker_name}#{first.broker_id} does not belong to "
                                             f"group {b.broker_name} or reuses the master's id")
            return
        store = b.store
        start = first.max_offset
        if start > store.commit_log.max_offset:
            yield ha_pb2.TransferChunk(error=f"slave is ahead of the master ({start} > {store.commit_log.max_offset}):"
                                             " wipe its store or use controller mode, which truncates")
            return
        start = max(start, store.commit_log.min_offset)
        state = SlaveState(first.broker_id, first.address, start)
        self.slaves[first.broker_id] = state
        log.info("slave %s#%d connected, replicating from offset %d", first.address, first.broker_id, start)
        b.ha_events.emit(ROLE_CHANGE, role="SLAVE", replica=state.name, offset=start)
        acks = asyncio.get_running_loop().create_task(self._read_acks(request_iterator, state))
        pos = start
        heartbeat_s = b.settings.haSendHeartbeatInterval / 1000
        last_sent = time.monotonic()
        appended = asyncio.Event()
        self._wakeups.add(appended)
        try:
            while not acks.done():
                data = self.read_chunk(pos)
                if data:
                    yield ha_pb2.TransferChunk(offset=pos, data=data, master_max_offset=store.commit_log.max_offset,
                                               confirm_offset=store.confirm_offset)
                    pos += len(data)
                    last_sent = time.monotonic()
                    continue
                appended.clear()  # no await since the empty read: nothing appended in between
                try:
                    await asyncio.wait_for(appended.wait(), heartbeat_s)
                except TimeoutError:
                    pass
                if time.monotonic() - last_sent >= heartbeat_s:
                    yield ha_pb2.TransferChunk(offset=pos, master_max_offset=store.commit_log.max_offset,
                                               confirm_offset=store.confirm_offset)
                    last_sent = time.monotonic()
        finally:
            self._wakeups.discard(appended)
            acks.cancel()
            state.connected = False
            log.info("slave %s#%d disconnected at ack offset %d", state.address, state.broker_id, state.ack_offset)
            self._resolve_waiters()

    async def _read_acks(self, reports: AsyncIterator[ha_pb2.SlaveReport], state: SlaveState) -> None:
        try:
            async for report in reports:
                state.last_report_at = time.monotonic()
                if report.max_offset > state.ack_offset:
                    state.ack_offset = report.max_offset
                    state.last_ack_at = time.time()
                    self.broker.ha_events.emit(REPLICA_ACK, replica=state.name, offset=state.ack_offset)
                    for cb in self.on_ack:
                        cb(state)
                    self._resolve_waiters()
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass

    # ------------------------------------------------------------------ acks
    def copies(self, offset: int) -> int:
        """How many copies (master included) hold every byte below ``offset``."""
        return 1 + sum(1 for s in self.slaves.values() if s.connected and s.ack_offset >= offset)

    def _resolve_waiters(self) -> None:
        keep = []
        for offset, needed, fut in self._waiters:
            if fut.done():
                continue
            if self.copies(offset) >= needed:
                fut.set_result(True)
            else:
                keep.append((offset, needed, fut))
        self._waiters = keep

    async def wait_replicated(self, offset: int) -> PutStatus:
        """SYNC_MASTER's rule: ``inSyncReplicas`` copies within ``slaveTimeout``."""
        s = self.broker.settings
        needed = s.inSyncReplicas
        if needed <= 1 or self.copies(offset) >= needed:
            return PutStatus.PUT_OK
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, needed, fut))
        try:
            await asyncio.wait_for(fut, s.slaveTimeout / 1000)
            return PutStatus.PUT_OK
        except TimeoutError:
            return PutStatus.FLUSH_SLAVE_TIMEOUT

    def status(self) -> list[dict[str, object]]:
        end = self.broker.store.commit_log.max_offset
        return [{"brokerId": s.broker_id, "address": s.address, "ackOffset": s.ack_offset, "connected": s.connected,
                 "lagBytes": max(0, end - s.ack_offset), "lastAck": int(s.last_ack_at * 1000)}
                for s in sorted(self.slaves.values(), key=lambda s: s.broker_id)]
