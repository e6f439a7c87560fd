"""A DLedger member's outbound link to one peer's Raft port: length-prefixed frames over TCP (or TLS).

The byte format is broker/dledger/peer_wire.py.  One connection per peer carries batches of up to
``BATCH_MESSAGES`` queued messages (or ``BATCH_BYTES`` of entry data) per frame; nothing is acknowledged
per message because Raft tolerates loss, duplication and reordering.  A write is plain bytes: no RPC
call object, no per-message future (grpc.aio's client stream write was 35 % of the leader's event loop,
issue 20).  On plain TCP the frames go to a writer thread per link (broker/dledger/socket_writer.py) that
does the ``send`` syscalls with the GIL released: from the loop they cost the leader ~20 % of its loop on
one host and its rate fell below the gRPC version's (session 17, docs/BENCHMARKS.md); over TLS the loop
writes through its transport.

A peer that is down is retried with back-off (``BACKOFF_MIN_S`` doubling to ``BACKOFF_MAX_S``);
messages queued beyond ``QUEUE_LIMIT`` are dropped (counted in ``dropped``), and the queue is emptied
when the link goes down, because the leader's next heartbeat or append replaces whatever was in it.
When the peer reads slower than we write, the socket's buffer fills, the link stops writing until it
drains below 1 MiB, and the queue's bound applies: Raft's own flow control (``max_inflight``) keeps that rare.

The log lines "dledger: link to X (addr) down: reason" and "... up" are read by bench/datapath_bench.py
(its NOTABLE pattern) and by people reading a chaos run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections import deque
from collections.abc import Callable

from rocketscope.broker.protocol import dledger_pb2
from rocketscope.broker.raft import Message
from rocketscope.tls import TlsClientConfig

from ..peer_frames.dial import LinkRefused, dial, reason
from . import peer_wire as wire
from .raft_codec import encode_frame
from .socket_writer import SocketWriter

log = logging.getLogger(__name__)
QUEUE_LIMIT = 4096
BATCH_MESSAGES = 64
BATCH_BYTES = 4 << 20  # entry bytes per frame: far below the port's 64 MiB frame limit
CONNECT_TIMEOUT_S = 1.0  # connect, TLS handshake and the hello's answer together
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 0.5
THREAD_WRITER = True  # plain TCP sends in a thread per link (socket_writer.py); False: from the loop, as TLS
_DRAIN_ABOVE = 1 << 20  # wait for the socket once this much is buffered in the transport


__all__ = ["LinkRefused", "PeerLink"]


class PeerLink:
    """The outbound connection to one peer.

    ``send`` only queues and, while connected, schedules one ``_flush`` on the loop (``call_soon``): every
    message the driver sends in one loop iteration leaves in the same frame, and no task wakes per message.
    """

    def __init__(self, peer_id: str, address: str, header: Callable[[], dledger_pb2.RaftBatch],
                 tls: TlsClientConfig | None = None, name: str = "dledger") -> None:
        """``header`` is an empty RaftBatch with this member's group, id and addresses; ``tls`` the
        broker's client settings (TLS and ``internalPeerSecret``); ``name`` starts the link's log lines
        ("controller" for the controllers' Raft, broker/controller/node.py)."""
        self.peer_id = peer_id
        self.name = name
        self.address = address
        self.header = header
        self.tls = tls or TlsClientConfig()
        self.queue: deque[Message] = deque()
        self.dropped = 0
        self.connected = False
        self._writer: asyncio.StreamWriter | None = None  # set while connected
        self._thread_writer: SocketWriter | None = None  # plain TCP: the sends happen in this thread
        self._scheduled = False  # a _flush is on the loop
        self._draining: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._head: bytes | None = None  # ``header()`` serialised, made once: it is the same for every frame

    def send(self, m: Message) -> None:
        q = self.queue
        if len(q) >= QUEUE_LIMIT:
            q.popleft()
            self.dropped += 1
        q.append(m)
        if self._writer is not None and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Write the queue as frames of up to BATCH_MESSAGES messages; stop while the socket is backed up."""
        self._scheduled = False
        writer = self._writer
        if writer is None or self._draining is not None:
            return
        transport = writer.transport
        if transport.is_closing():
            return
        q = self.queue
        tw = self._thread_writer
        if tw is not None:
            if tw.backed_up:
                return
            frames = []
            entries = False
            while q:
                frame, carries = self._frame(q)
                frames.append(frame)
                entries = entries or carries
            tw.write(frames[0] if len(frames) == 1 else b"".join(frames), direct=not entries)
            return
        while q:
            transport.write(self._frame(q)[0])
            if transport.get_write_buffer_size() > _DRAIN_ABOVE:
                self._draining = asyncio.get_running_loop().create_task(self._drain(writer))
                return

    def _wake_from_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        """The writer thread made room: flush what queued meanwhile, on the loop."""
        loop.call_soon_threadsafe(self._flush)

    def _frame(self, q: deque[Message]) -> tuple[bytes, bool]:
        """One frame of the oldest queued messages (up to BATCH_MESSAGES, or BATCH_BYTES of entries), and
        whether any of them carries entries (the writer thread sends those; see ``SocketWriter.write``).

        The bytes come from broker/dledger/raft_codec.py (compiled: no protobuf objects per frame)."""
        head = self._head
        if head is None:
            head = self._head = self.header().SerializeToString()
        frame, count, carries = encode_frame(head, list(q) if len(q) > 1 else (q[0],), BATCH_MESSAGES, BATCH_BYTES)
        if count == len(q):
            q.clear()
        else:
            for _ in range(count):
                q.popleft()
        return frame, carries

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        try:
            await writer.drain()
        except (OSError, RuntimeError):  # the connection failed: _run sees it through its reader
            return
        finally:
            self._draining = None
        if self._writer is writer:
            self._flush()

    def start(self) -> None:
        """Run the link (connect, send, reconnect with back-off) as a task of the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"{self.name}-link-{self.peer_id}")

    async def stop(self) -> None:
        """Cancel the link's task and wait for it, so its socket is closed when this returns."""
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        failures = 0
        while True:
            writer: asyncio.StreamWriter | None = None
            try:
                reader, connected = await asyncio.wait_for(self._connect(), CONNECT_TIMEOUT_S)
                writer = connected
                self.connected = True
                if failures:
                    log.info("%s: link to %s (%s) up", self.name, self.peer_id, self.address)
                failures = 0
                self._writer = connected
                if THREAD_WRITER and connected.get_extra_info("sslcontext") is None:
                    loop = asyncio.get_running_loop()
                    self._thread_writer = SocketWriter(
                        connected.get_extra_info("socket").fileno(), f"dledger-link-{self.peer_id}",
                        functools.partial(self._wake_from_thread, loop), _DRAIN_ABOVE)
                self._flush()  # what the driver queued while we connected
                raise ConnectionResetError(await _closed(reader))
            except (OSError, TimeoutError, ssl.SSLError, asyncio.IncompleteReadError, LinkRefused,
                    wire.WireError) as exc:
                if failures == 0:
                    if isinstance(exc, LinkRefused):
                        log.error("%s: peer %s refused our messages: %s", self.name, self.peer_id, exc)
                    log.warning("%s: link to %s (%s) down: %s", self.name, self.peer_id, self.address, reason(exc))
                failures += 1
            finally:
                self.connected = False
                self._writer = None
                if self._thread_writer is not None:
                    self._thread_writer.close()
                    self._thread_writer = None
                if self._draining is not None:
                    self._draining.cancel()
                    self._draining = None
                if writer is not None:
                    writer.transport.abort()
            self.queue.clear()  # stale while disconnected: Raft resends what matters
            await asyncio.sleep(min(BACKOFF_MIN_S * 2 ** max(failures - 1, 0), BACKOFF_MAX_S))

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        head = self.header()
        return await dial(self.address, self.tls, wire.hello(head.group, head.sender, self.tls.peer_secret),
                          wire.PROTOCOL)


async def _closed(reader: asyncio.StreamReader) -> str:
    """Wait until the peer closes the connection; its reason (a refusal frame's text, or 'closed by the peer')."""
    data = await reader.read(1 << 16)
    if len(data) > 5 and data[4] == wire.REFUSED:
        return "the peer refused: " + data[5:].decode(errors="replace")
    return "closed by the peer" if not data else f"the peer sent {len(data)} unexpected bytes"

