"""A listening framed peer port (broker/peer_frames/wire.py): TLS, the hello and its checks, then a session.

Two ports are built on it: DLedger's Raft port (broker/dledger/peer_port.py: one-way ``RaftBatch`` frames
in) and Master/Slave replication on ``haListenPort`` (broker/ha/master.py: ``SlaveReport`` frames in,
``TransferChunk`` frames out).  Each connection is an ``asyncio.Protocol`` that parses frames as bytes
arrive and hands each payload to its session synchronously: no coroutine, no future and no RPC state per
frame (grpc.aio cost most of a replicated send's CPU, issue 20).

Who may talk to a port (the gRPC ports' guarantees, kept):

* TLS as the other internal ports: ``tls.server.mode`` with the ``tls.internal.need.client.auth`` rule
  (``TlsServerConfig.for_internal``), terminated here with a ``ReloadingSslContext`` (certificate files
  re-read when they change, as on the remoting port).  ``permissive`` peeks at the first byte (0x16 = a
  TLS handshake) and accepts both; ``enforcing`` refuses plaintext with a log line;
* ``internalPeerSecret`` (rocketscope/peer_auth.py's rule): the hello must carry the cluster's secret,
  compared in constant time; a client without it is answered with a text naming the missing or wrong
  secret and the connection is closed;
* bad input never crashes or hangs the port: a wrong magic or version, a frame above the maximum, a
  hello that does not parse, a payload the session cannot parse, another group, or no hello within
  ``HELLO_TIMEOUT_S`` -> one log line naming the problem and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any, Protocol

from rocketscope.peer_auth import refusal
from rocketscope.tls import TlsMode, TlsServerConfig

from ..security.listener import TLS_RECORD_HANDSHAKE, accept_forever, host_port, peek
from ..security.tls_context import ReloadingSslContext
from . import wire

log = logging.getLogger(__name__)
HELLO_TIMEOUT_S = 10.0  # a connection that has not said hello by then is closed (also bounds the TLS handshake)
HIGH_WATER = 1 << 20  # bytes buffered in a connection's transport before its session is told to stop writing


class Session(Protocol):
    """What a port does with one accepted connection after its hello: called on the loop, synchronously."""

    def frame(self, payload: bytes) -> None:
        """One frame's payload; call ``conn.drop`` for bad input."""

    def writable(self, yes: bool) -> None:
        """The transport's buffer went above ``HIGH_WATER`` (False) or drained below its low mark (True)."""

    def closed(self) -> None:
        """The connection is gone (dropped, closed by the peer, or the port stopped)."""


class Conn(asyncio.Protocol):
    """One inbound connection: preamble, hello, then frames for its ``Session``."""

    def __init__(self, port: FramedPort, peer: str) -> None:
        self.port = port
        self.peer = peer
        self.sender = ""
        self.transport: asyncio.Transport | None = None
        self.decoder = wire.FrameDecoder(port.max_frame)
        self.preamble = bytearray()
        self.ready = False  # the hello was accepted
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None
        self.session: Session | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=HIGH_WATER)
        self.port.conns.add(self)
        self.timer = asyncio.get_running_loop().call_later(self.port.hello_timeout_s, self._hello_overdue)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.port.conns.discard(self)
        if self.timer is not None:
            self.timer.cancel()
        if self.ready:
            log.info("%s port: %s %s (%s) disconnected%s", self.port.name, self.port.who, self.sender, self.peer,
                     f": {exc}" if exc else "")
        if self.session is not None:
            session, self.session = self.session, None
            session.closed()

    def pause_writing(self) -> None:
        if self.session is not None:
            self.session.writable(False)

    def resume_writing(self) -> None:
        if self.session is not None:
            self.session.writable(True)

    def _hello_overdue(self) -> None:
        if not self.ready:
            self.drop(f"no hello within {self.port.hello_timeout_s:g} s")

    def drop(self, why: str, answer: str = "") -> None:
        """Log ``why`` once, send ``answer`` (a REFUSED reply) if given, and close the connection."""
        if self.closed:
            return
        self.closed = True
        self.port.refused += 1
        log.warning("%s port: closing the connection from %s%s: %s", self.port.name, self.peer,
                    f" ({self.sender})" if self.sender else "", why)
        t = self.transport
        if t is not None:
            if answer:
                with contextlib.suppress(Exception):
                    t.write(wire.reply(answer))
            t.close()
        if self.session is not None:
            session, self.session = self.session, None
            session.closed()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if len(self.preamble) < 5:
            need = 5 - len(self.preamble)
            self.preamble += data[:need]
            data = data[need:]
            if len(self.preamble) < 5:
                if self.preamble[:4] != self.port.magic[:len(self.preamble)]:
                    self.drop(f"not {self.port.protocol} (first bytes {bytes(self.preamble)!r})")
                return
            try:
                wire.check_preamble(bytes(self.preamble), self.port.magic, self.port.protocol)
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
            elif self.session is not None:
                self.session.frame(payload)

    def _hello(self, payload: bytes) -> None:
        port = self.port
        try:
            group, sender, secret = wire.parse_hello(payload)
        except wire.WireError as exc:
            self.drop(str(exc), str(exc))
            return
        self.sender = sender[:64]
        # the secret first: a stranger learns nothing, not even this port's group name
        why = refusal(secret, port.secret)
        if why is not None:
            self.drop(f"refused with {why}", f"{port.name} port: the hello carries {why} (internalPeerSecret): "
                                             "only members of this cluster may connect")
            return
        if port.group is not None and group != port.group:
            self.drop(f"group {group!r} is not {port.group!r}", f"{port.name} port: group {group!r} is not "
                      f"{port.group!r}")
            return
        self.ready = True
        if self.timer is not None:
            self.timer.cancel()
        assert self.transport is not None
        self.transport.write(wire.reply())
        tls = self.transport.get_extra_info("sslcontext") is not None
        log.info("%s port: %s %s (%s) connected%s", port.name, port.who, self.sender, self.peer,
                 " over TLS" if tls else "")
        self.session = port.open_session(self)

    def write(self, data: bytes) -> None:
        """Send ``data`` (whole frames) unless the connection is closed."""
        if not self.closed and self.transport is not None:
            self.transport.write(data)


class FramedPort:
    """A listening framed port: ``bind`` (at start-up, so a taken port fails loudly), ``start``, ``stop``.

    ``name`` ("Raft", "HA") starts its log lines, ``who`` names its clients in them ("member", "slave");
    ``group``: the hello's group must equal it (None: the session checks who the client is);
    ``open_session(conn)`` is called once a hello passed and returns the connection's session.
    """

    def __init__(self, name: str, magic: bytes, protocol: str, group: str | None,
                 open_session: Callable[[Conn], Session], *, who: str = "member", key: str = "dLegerPeers",
                 secret: str = "", tls: TlsServerConfig | None = None, max_frame: int = wire.MAX_FRAME,
                 hello_timeout_s: float = HELLO_TIMEOUT_S) -> None:
        self.name = name
        self.magic = magic
        self.protocol = protocol
        self.who = who
        self.key = key
        self.group = group
        self.open_session = open_session
        self.secret = secret.encode()
        self.tls = tls or TlsServerConfig()
        self.ssl_ctx = ReloadingSslContext(self.tls) if self.tls.enabled else None
        self.max_frame = max_frame
        self.hello_timeout_s = hello_timeout_s
        self.address = ""
        self.port = 0
        self.refused = 0  # connections closed for bad input or a failed check
        self.conns: set[Conn] = set()
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def bind(self, host: str, port: int) -> None:
        """Listen on ``host:port``; an OSError naming the config key, the address and the likely cause if it
        is taken."""
        key = self.key
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
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(),
                                                                 name=f"{self.name.lower()}-port")
        log.info("%s port on %s (%s, TLS %s, peer secret %s)", self.name, self.address, "plain TCP frames",
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
        await accept_forever(self._sock, self._serve, self._tasks, f"{self.name} port on {self.address}")

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
                                "connection", self.name, peer)
                    conn.close()
                    return
            if use_tls:
                assert self.ssl_ctx is not None
                await loop.connect_accepted_socket(lambda: Conn(self, peer), conn, ssl=self.ssl_ctx.get(),
                                                   ssl_handshake_timeout=self.hello_timeout_s)
            else:
                await loop.connect_accepted_socket(lambda: Conn(self, peer), conn)
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            log.info("%s port: connection from %s failed before its hello: %s", self.name, peer, exc)
            with contextlib.suppress(OSError):
                conn.close()
