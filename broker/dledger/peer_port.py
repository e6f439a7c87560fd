"""DLedger's Raft port (``dLegerPeers``): accepts the other members' links and hands their batches to the node.

The byte format is broker/dledger/peer_wire.py.  Each connection is an ``asyncio.Protocol`` that parses
frames as bytes arrive and calls ``on_batch`` synchronously: no coroutine, no future and no RPC state per
frame (grpc.aio's ``PeerServicer.Send`` cost the followers most of their CPU per message, issue 20).

Who may talk to the port (the gRPC version's guarantees, kept):

* TLS as the other internal ports: ``tls.server.mode`` with the ``tls.internal.need.client.auth`` rule
  (``TlsServerConfig.for_internal``), terminated here with a ``ReloadingSslContext`` (certificate files
  re-read when they change, as on the remoting port).  ``permissive`` peeks at the first byte (0x16 = a
  TLS handshake) and accepts both; ``enforcing`` refuses plaintext with a log line;
* ``internalPeerSecret`` (rocketscope/peer_auth.py's rule): the hello must carry the cluster's secret,
  compared in constant time; a member without it is answered with a text naming the missing or wrong
  secret and the connection is closed;
* bad input never crashes or hangs the port: a wrong magic or version, a frame above the maximum, a
  hello that does not parse, a payload that is not a ``RaftBatch``, another group's batch, or no hello
  within ``HELLO_TIMEOUT_S`` -> one log line naming the problem and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from rocketscope.broker.protocol import dledger_pb2
from rocketscope.tls import TlsMode, TlsServerConfig

from ..security.listener import TLS_RECORD_HANDSHAKE, accept_forever, host_port, peek
from ..security.tls_context import ReloadingSslContext
from . import peer_wire as wire

log = logging.getLogger(__name__)
HELLO_TIMEOUT_S = 10.0  # a connection that has not said hello by then is closed (also bounds the TLS handshake)
PORT_NAME = "Raft"


class _Conn(asyncio.Protocol):
    """One member's inbound link: preamble, hello, then frames of RaftBatch."""

    def __init__(self, port: PeerPort, peer: str) -> None:
        self.port = port
        self.peer = peer
        self.sender = ""
        self.transport: asyncio.Transport | None = None
        self.decoder = wire.FrameDecoder(port.max_frame)
        self.preamble = bytearray()
        self.ready = False  # the hello was accepted
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.port.conns.add(self)
        self.timer = asyncio.get_running_loop().call_later(self.port.hello_timeout_s, self._hello_overdue)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.port.conns.discard(self)
        if self.timer is not None:
            self.timer.cancel()
        if self.ready:
            log.info("%s port: member %s (%s) disconnected%s", PORT_NAME, self.sender, self.peer,
                     f": {exc}" if exc else "")

    def _hello_overdue(self) -> None:
        if not self.ready:
            self.drop(f"no hello within {self.port.hello_timeout_s:g} s")

    def drop(self, why: str, answer: str = "") -> None:
        """Log ``why`` once, send ``answer`` (a REFUSED reply) if given, and close the connection."""
        if self.closed:
            return
        self.closed = True
        self.port.refused += 1
        log.warning("%s port: closing the connection from %s%s: %s", PORT_NAME, self.peer,
                    f" ({self.sender})" if self.sender else "", why)
        t = self.transport
        if t is not None:
            if answer:
                with contextlib.suppress(Exception):
                    t.write(wire.reply(answer))
            t.close()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if len(self.preamble) < 5:
            need = 5 - len(self.preamble)
            self.preamble += data[:need]
            data = data[need:]
            if len(self.preamble) < 5:
                if self.preamble[:4] != wire.MAGIC[:len(self.preamble)]:
                    self.drop(f"not the Raft peer protocol (first bytes {bytes(self.preamble)!r})")
                return
            try:
                wire.check_preamble(bytes(self.preamble))
            except wire.WireError as exc:
                self.drop(str(exc))
                return
        try:
            payloads = self.decoder.feed(data)
        except wire.WireError as exc:
            self.drop(str(exc))
            return
        for payload in payloads:
            if self.closed:
                return
            if not self.ready:
                self._hello(payload)
            else:
                self._batch(payload)

    def _hello(self, payload: bytes) -> None:
        port = self.port
        try:
            group, sender, secret = wire.parse_hello(payload)
        except wire.WireError as exc:
            self.drop(str(exc), str(exc))
            return
        self.sender = sender[:64]
        # the secret first: a stranger learns nothing, not even this port's group name
        if port.secret and not hmac.compare_digest(secret.encode(), port.secret):
            why = "no peer secret" if not secret else "a wrong peer secret"
            self.drop(f"refused with {why}", f"{PORT_NAME} port: the hello carries {why} (internalPeerSecret): "
                                             "only members of this cluster may connect")
            return
        if group != port.group:
            self.drop(f"group {group!r} is not {port.group!r}", f"{PORT_NAME} port: group {group!r} is not "
                      f"{port.group!r}")
            return
        self.ready = True
        if self.timer is not None:
            self.timer.cancel()
        assert self.transport is not None
        self.transport.write(wire.reply())
        tls = self.transport.get_extra_info("sslcontext") is not None
        log.info("%s port: member %s (%s) connected%s", PORT_NAME, self.sender, self.peer, " over TLS" if tls else "")

    def _batch(self, payload: bytes) -> None:
        try:
            batch = dledger_pb2.RaftBatch.FromString(payload)
        except DecodeError as exc:
            self.drop(f"a frame of {len(payload)} bytes is not a RaftBatch: {exc}")
            return
        if batch.group != self.port.group:
            self.drop(f"a batch of group {batch.group!r}, not {self.port.group!r}")
            return
        try:
            self.port.on_batch(batch)
        except Exception:  # the node's bug, not the peer's bytes: say so, keep the connection
            log.exception("%s port: a batch from %s (%s) failed", PORT_NAME, self.sender, self.peer)


class PeerPort:
    """The listening Raft port: ``bind`` (at start-up, so a taken port fails loudly), ``start``, ``stop``."""

    def __init__(self, group: str, on_batch: Callable[[dledger_pb2.RaftBatch], None], *, secret: str = "",
                 tls: TlsServerConfig | None = None, max_frame: int = wire.MAX_FRAME,
                 hello_timeout_s: float = HELLO_TIMEOUT_S) -> None:
        self.group = group
        self.on_batch = on_batch
        self.secret = secret.encode()
        self.tls = tls or TlsServerConfig()
        self.ssl_ctx = ReloadingSslContext(self.tls) if self.tls.enabled else None
        self.max_frame = max_frame
        self.hello_timeout_s = hello_timeout_s
        self.address = ""
        self.port = 0
        self.refused = 0  # connections closed for bad input or a failed check
        self.conns: set[_Conn] = set()
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def bind(self, host: str, port: int, key: str = "dLegerPeers") -> None:
        """Listen on ``host:port``; an OSError naming ``key``, the address and the likely cause if it is taken."""
        self.address = host_port(host, port)
        bare = host.strip("[]")
        try:
            sock = socket.create_server((bare, port), family=socket.AF_INET6 if ":" in bare else socket.AF_INET,
                                        backlog=128)
        except OSError as exc:
            cause = "the port is in use" if exc.errno == errno.EADDRINUSE else \
                f"the address is not local or the port is in use ({exc.strerror or exc})"
            raise OSError(f"config key {key}: cannot listen on {self.address}: {cause}") from None
        sock.setblocking(False)
        self._sock = sock
        self.port = int(sock.getsockname()[1])

    async def start(self) -> None:
        if self._sock is None or self._accepting is not None:
            return
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(), name="dledger-raft-port")
        log.info("%s port on %s (%s, TLS %s, peer secret %s)", PORT_NAME, self.address, "plain TCP frames",
                 self.tls.mode.value, "required" if self.secret else "off")

    async def stop(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
            self._accepting = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for t in list(self._tasks):
            t.cancel()
        for c in list(self.conns):
            if c.transport is not None:
                c.transport.abort()

    async def _accept_loop(self) -> None:
        assert self._sock is not None
        await accept_forever(self._sock, self._serve, self._tasks, f"{PORT_NAME} port on {self.address}")

    async def _serve(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        peer = "unknown"
        try:
            addr = conn.getpeername()
            peer = host_port(str(addr[0]), int(addr[1]))
            use_tls = False
            if self.ssl_ctx is not None:
                first = await peek(conn, 1, loop.time() + self.hello_timeout_s)
                if not first:
                    conn.close()
                    return
                use_tls = first[0] == TLS_RECORD_HANDSHAKE
                if not use_tls and self.tls.mode is TlsMode.ENFORCING:
                    log.warning("%s port: %s sent plaintext while tls.server.mode=enforcing: closing the "
                                "connection", PORT_NAME, peer)
                    conn.close()
                    return
            if use_tls:
                assert self.ssl_ctx is not None
                await loop.connect_accepted_socket(lambda: _Conn(self, peer), conn, ssl=self.ssl_ctx.get(),
                                                   ssl_handshake_timeout=self.hello_timeout_s)
            else:
                await loop.connect_accepted_socket(lambda: _Conn(self, peer), conn)
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            log.info("%s port: connection from %s failed before its hello: %s", PORT_NAME, peer, exc)
            with contextlib.suppress(OSError):
                conn.close()
