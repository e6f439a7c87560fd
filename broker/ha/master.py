"""The master side of Master/Slave replication: stream the commit log to slaves, count acks.

Each slave holds one connection to ``haListenPort`` (framed TCP, broker/ha/wire.py; the port's TLS,
peer secret and bad-input rules are broker/peer_frames/port.py's).  The master sends raw commit-log bytes from
the slave's reported end, cut on record boundaries (a segment-end filler is sent whole,
never split: a slave whose copy ended inside one and was then promoted wrote after the
torn filler, and readers skipped its records), and the slave reports its new end after
every chunk.  Acks drive
SYNC_MASTER sends: a send is acknowledged once ``inSyncReplicas`` copies (the master
counts as one) hold it, else FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``.

Why no task per slave: a connection's reports are parsed in its protocol's ``data_received`` and resolve
the waiting sends right there, and chunks are written from the loop callback that follows an append
(``notify_appended``), from the transport's ``resume_writing`` or from the heartbeat timer.  A SYNC_MASTER
send's ack costs one small frame read and no coroutine switch (the grpc.aio stream it replaces cost
~180-210 µs of CPU per message, bench/grpc_floor.py).
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from google.protobuf.message import DecodeError

from rocketscope.broker.protocol import ha_pb2
from rocketscope.broker.store.message_store import PutStatus
from rocketscope.broker.store.record import BLANK_MAGIC, FIXED_SIZE, MESSAGE_MAGIC, MIN_BLANK
from rocketscope.ha_events import REPLICA_ACK, ROLE_CHANGE

from ..peer_frames.wire import frame

if TYPE_CHECKING:
    from rocketscope.broker.store.commitlog import CommitLog
    from rocketscope.broker.store.message_store import MessageStore
    from rocketscope.config import Settings

    from ..peer_frames.port import Conn
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


class _SlaveSession:
    """One slave's connection after its hello: its first report opens the session, later ones are acks."""

    def __init__(self, master: ReplicationMaster, conn: Conn) -> None:
        self.master = master
        self.conn = conn
        self.state: SlaveState | None = None
        self.pos = 0  # where the next chunk starts
        self.writable_now = True
        self.last_sent = time.monotonic()
        self.timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------- inbound
    def frame(self, payload: bytes) -> None:
        try:
            report = ha_pb2.SlaveReport.FromString(payload)
        except DecodeError as exc:
            self.conn.drop(f"a frame of {len(payload)} bytes is not a SlaveReport: {exc}")
            return
        if self.state is None:
            self._open(report)
            return
        state = self.state
        state.last_report_at = time.monotonic()
        if report.max_offset > state.ack_offset:
            self.master.acked(state, report.max_offset)

    def _refuse(self, why: str) -> None:
        """The old stream's refusal: one chunk with ``error`` (the slave logs it), then close."""
        self.conn.write(frame(ha_pb2.TransferChunk(error=why).SerializeToString()))
        self.conn.drop(why)

    def _open(self, first: ha_pb2.SlaveReport) -> None:
        m = self.master
        b = m.broker
        if not b.is_master:
            self._refuse(f"{b.node_id} is not a master ({b.role})")
            return
        if first.broker_name != b.broker_name or first.broker_id == b.broker_id:
            self._refuse(f"slave {first.broker_name}#{first.broker_id} does not belong to "
                         f"group {b.broker_name} or reuses the master's id")
            return
        store = b.store
        start = first.max_offset
        if start > store.commit_log.max_offset:
            self._refuse(f"slave is ahead of the master ({start} > {store.commit_log.max_offset}):"
                         " wipe its store or use controller mode, which truncates")
            return
        start = max(start, store.commit_log.min_offset)
        state = SlaveState(first.broker_id, first.address, start)
        self.state = state
        m.slaves[first.broker_id] = state
        m.sessions.add(self)
        log.info("slave %s#%d connected, replicating from offset %d", first.address, first.broker_id, start)
        b.ha_events.emit(ROLE_CHANGE, role="SLAVE", replica=state.name, offset=start)
        self.pos = start
        self.pump()
        self._schedule_heartbeat()

    # ------------------------------------------------------------ outbound
    def pump(self) -> None:
        """Write chunks from ``pos`` until the log's end or until the transport's buffer is full."""
        if self.state is None or self.conn.closed:
            return
        store = self.master.broker.store
        while self.writable_now and not self.conn.closed:
            data = self.master.read_chunk(self.pos)
            if not data:
                return
            self._send(ha_pb2.TransferChunk(offset=self.pos, data=data, master_max_offset=store.commit_log.max_offset,
                                            confirm_offset=store.confirm_offset))
            self.pos += len(data)

    def _send(self, chunk: ha_pb2.TransferChunk) -> None:
        self.conn.write(frame(chunk.SerializeToString()))
        self.last_sent = time.monotonic()

    def _schedule_heartbeat(self) -> None:
        heartbeat_s = self.master.broker.settings.haSendHeartbeatInterval / 1000
        delay = max(0.0, self.last_sent + heartbeat_s - time.monotonic())
        self.timer = asyncio.get_running_loop().call_later(delay, self._heartbeat)

    def _heartbeat(self) -> None:
        """An idle slave still hears from the master (and answers: the master takes silence for gone)."""
        if self.conn.closed:
            return
        heartbeat_s = self.master.broker.settings.haSendHeartbeatInterval / 1000
        if time.monotonic() - self.last_sent >= heartbeat_s and self.writable_now:
            store = self.master.broker.store
            self._send(ha_pb2.TransferChunk(offset=self.pos, master_max_offset=store.commit_log.max_offset,
                                            confirm_offset=store.confirm_offset))
        self._schedule_heartbeat()

    def writable(self, yes: bool) -> None:
        self.writable_now = yes
        if yes:
            self.pump()

    def closed(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.master.sessions.discard(self)
        state = self.state
        if state is None:
            return
        state.connected = False
        log.info("slave %s#%d disconnected at ack offset %d", state.address, state.broker_id, state.ack_offset)
        self.master.resolve_waiters()


@dataclass(slots=True)
class _Waiter:
    """A put waiting for ``needed`` copies of everything below ``offset`` until ``deadline`` (monotonic)."""

    offset: int
    needed: int
    deadline: float
    done: Callable[[bool], None] | None  # dropped once called: what it holds (a run's messages) is freed at once

    def answer(self, ok: bool) -> None:
        done, self.done = self.done, None
        if done is not None:
            done(ok)

    @property
    def finished(self) -> bool:
        return self.done is None


class ReplicationMaster:
    def __init__(self, broker: MasterHost) -> None:
        self.broker = broker
        self.slaves: dict[int, SlaveState] = {}
        self.sessions: set[_SlaveSession] = set()
        self._pump_scheduled = False
        # the puts waiting for their copies, by offset (an ack answers a prefix), and by deadline (one timer for
        # the earliest: puts register in time order with the same slaveTimeout, so it rarely moves)
        self._waiters: list[tuple[int, int, _Waiter]] = []
        self._deadlines: list[tuple[float, int, _Waiter]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self.on_ack: list[Callable[[SlaveState], None]] = []

    def open_session(self, conn: Conn) -> _SlaveSession:
        """The HA port's session factory (broker/peer_frames/port.py): one per slave connection."""
        return _SlaveSession(self, conn)

    # ------------------------------------------------------------------ data
    def notify_appended(self) -> None:
        """Records were appended: send them once this loop iteration's appends are all in (one chunk for
        the puts of one iteration, not one each)."""
        if self.sessions and not self._pump_scheduled:
            self._pump_scheduled = True
            asyncio.get_running_loop().call_soon(self._pump_all)

    def _pump_all(self) -> None:
        self._pump_scheduled = False
        for session in list(self.sessions):
            session.pump()

    def read_chunk(self, offset: int) -> bytes:
        return read_chunk(self.broker.store.commit_log, offset)

    def acked(self, state: SlaveState, offset: int) -> None:
        """A slave holds everything below ``offset``: event, callbacks, and the sends waiting for it."""
        state.ack_offset = offset
        state.last_ack_at = time.time()
        self.broker.ha_events.emit(REPLICA_ACK, replica=state.name, offset=offset)
        for cb in self.on_ack:
            cb(state)
        self.resolve_waiters()

    # ------------------------------------------------------------------ acks
    def copies(self, offset: int) -> int:
        """How many copies (master included) hold every byte below ``offset``."""
        return 1 + sum(1 for s in self.slaves.values() if s.connected and s.ack_offset >= offset)

    def _held_by(self, needed: int) -> int:
        """The offset below which ``needed`` copies (master included) hold every byte: the (needed-1)-th
        largest ack of the connected slaves (0 when fewer are connected)."""
        if needed <= 1:
            return 1 << 62
        acks = sorted((st.ack_offset for st in self.slaves.values() if st.connected), reverse=True)
        return acks[needed - 2] if len(acks) >= needed - 1 else 0

    def resolve_waiters(self) -> None:
        """Answer every waiting put whose copies are in (the waiters are by offset: a prefix of them; a put that
        registered under another ``inSyncReplicas``, changed at run time, can wait for the next ack behind one
        that needs more copies)."""
        waiters = self._waiters
        if not waiters:
            return
        held: dict[int, int] = {}
        i = 0
        while i < len(waiters):
            offset, _seq, w = waiters[i]
            if w.finished:
                i += 1
                continue
            bound = held.get(w.needed)
            if bound is None:
                bound = held[w.needed] = self._held_by(w.needed)
            if offset > bound:
                break
            w.answer(True)
            i += 1
        if i:
            del waiters[:i]
            # and from the deadlines: the answered are their first entries in the common case (puts register in log
            # order with one slaveTimeout), so the heap stays as small as the puts still waiting
            deadlines = self._deadlines
            while deadlines and deadlines[0][2].finished:
                heapq.heappop(deadlines)

    def when_replicated(self, offset: int, done: Callable[[bool], None]) -> None:
        """Call ``done(True)`` once ``inSyncReplicas`` copies hold everything below ``offset``, or ``done(False)``
        after ``slaveTimeout`` (SYNC_MASTER's rule); at once when they already do.

        Why a callback: a SYNC_MASTER put's wait was a future, ``asyncio.wait_for`` (its own timer) and the
        awaiting task's wake-up per put; a run of plain single sends answered from the read's callback
        (broker/remoting/broker_handlers.py ``send_group_now``) writes its answers from here instead, and one timer
        serves every waiting put."""
        s = self.broker.settings
        needed = s.inSyncReplicas
        if needed <= 1 or self.copies(offset) >= needed:
            done(True)
            return
        loop = asyncio.get_running_loop()
        seq = next(self._seq)
        w = _Waiter(offset, needed, loop.time() + s.slaveTimeout / 1000, done)
        waiters = self._waiters
        if not waiters or waiters[-1][0] <= offset:
            waiters.append((offset, seq, w))  # the common case: puts register in log order
        else:
            bisect.insort(waiters, (offset, seq, w))
        heapq.heappush(self._deadlines, (w.deadline, seq, w))
        if self._timer is None:
            self._timer = loop.call_at(w.deadline, self._expire)

    def _expire(self) -> None:
        """Answer ``False`` to every put whose ``slaveTimeout`` passed; arm the timer for the next deadline."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][2].finished or deadlines[0][0] <= now):
            _deadline, _seq, w = heapq.heappop(deadlines)
            w.answer(False)
        if deadlines:
            self._timer = loop.call_at(deadlines[0][0], self._expire)
        if self._waiters and self._waiters[0][2].finished:
            self._waiters = [x for x in self._waiters if not x[2].finished]

    async def wait_replicated(self, offset: int) -> PutStatus:
        """SYNC_MASTER's rule: ``inSyncReplicas`` copies within ``slaveTimeout``."""
        s = self.broker.settings
        if s.inSyncReplicas <= 1 or self.copies(offset) >= s.inSyncReplicas:
            return PutStatus.PUT_OK
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def done(ok: bool) -> None:
            if not fut.done():  # the awaiting task may have been cancelled
                fut.set_result(ok)

        self.when_replicated(offset, done)
        return PutStatus.PUT_OK if await fut else PutStatus.FLUSH_SLAVE_TIMEOUT

    def status(self) -> list[dict[str, object]]:
        end = self.broker.store.commit_log.max_offset
        return [{"brokerId": s.broker_id, "address": s.address, "ackOffset": s.ack_offset, "connected": s.connected,
                 "lagBytes": max(0, end - s.ack_offset), "lastAck": int(s.last_ack_at * 1000)}
                for s in sorted(self.slaves.values(), key=lambda s: s.broker_id)]
