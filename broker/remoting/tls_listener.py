"""Remoting over TLS: one port for plaintext remoting, remoting over TLS, gRPC and gRPC over TLS.

RocketMQ's remoting server looks at the first byte of a connection (its ``TlsModeHandler``):
0x16 starts a TLS handshake, which it accepts unless ``tls.server.mode=disabled``; anything
else is plaintext, which it closes with a warning in ``enforcing`` mode.  ``permissive``
accepts both on one port.  We do the same, with one more question because the port is
shared with gRPC (docs/REMOTING.md, "Ports"): a TLS connection may carry gRPC or remoting.
gRPC clients always offer ALPN ``h2`` in their ClientHello; remoting clients (Apache's Java
client through Netty's ``SslContextBuilder.forClient()``, the Go client through
``crypto/tls`` without ``NextProtos``) offer none.  So the listener *peeks* (MSG_PEEK, nothing
is consumed) at the first TLS record, and

* ALPN ``h2``: splices the connection, still encrypted, to gRPC's loopback TLS port, so gRPC
  keeps terminating its own TLS (credentials, client-certificate rule and rotation unchanged);
* no ``h2``: terminates TLS here (``ReloadingSslContext``, the ``tls.server.*`` pair and
  ``tls.server.need.client.auth``) and serves remoting frames over it;
* first byte 0x00/0x01 (a remoting frame length): plaintext remoting, refused in enforcing mode;
* anything else (gRPC's ``PRI * HTTP/2.0``): spliced to gRPC's plaintext loopback port, which
  exists only in permissive mode.

Peeking needs the raw socket before asyncio reads from it, hence an accept loop of our own
(``loop.sock_accept``) and ``loop.connect_accepted_socket`` to hand the socket to asyncio,
with or without TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
from typing import TYPE_CHECKING, Any

from rocketscope.tls import TlsMode

from ..security.listener import TLS_RECORD_HANDSHAKE, accept_forever, peek, peer_string, splice_to_local
from ..security.tls_context import ReloadingSslContext

if TYPE_CHECKING:  # server.py builds SniffingListener: a runtime import would be a circle
    from .server import RemotingServer

log = logging.getLogger(__name__)
_MAX_RECORD = 16384 + 2048  # a TLS record's plaintext limit plus the largest expansion TLS allows
_HANDSHAKE_TIMEOUT_S = 10.0


def offers_h2(record: bytes) -> bool | None:
    """Whether the ClientHello in ``record`` (a whole TLS record) offers ALPN ``h2``; None if it does not parse."""
    try:
        if len(record) < 9 or record[0] != TLS_RECORD_HANDSHAKE or record[5] != 1:  # handshake, ClientHello
            return None
        pos = 9 + 2 + 32  # record header 5, handshake header 4, client version 2, random 32
        pos += 1 + record[pos]  # session id
        (n,) = struct.unpack_from(">H", record, pos)
        pos += 2 + n  # cipher suites
        pos += 1 + record[pos]  # compression methods
        if pos == len(record):
            return False  # no extensions
        (ext_len,) = struct.unpack_from(">H", record, pos)
        pos += 2
        end = min(len(record), pos + ext_len)
        while pos + 4 <= end:
            ext_type, size = struct.unpack_from(">HH", record, pos)
            pos += 4
            if ext_type == 16:  # application_layer_protocol_negotiation
                (list_len,) = struct.unpack_from(">H", record, pos)
                p, stop = pos + 2, pos + 2 + list_len
                while p < stop:
                    name_len = record[p]
                    if record[p + 1:p + 1 + name_len] == b"h2":
                        return True
                    p += 1 + name_len
                return False
            pos += size
        return False
    except (IndexError, struct.error):
        return None


class SniffingListener:
    """A public port in a TLS mode: remoting (plain or TLS) served here, gRPC spliced to its loopback ports.

    ``grpc_port``/``grpc_tls_port`` are gRPC's plaintext and TLS loopback ports (0: none, as
    on a remoting-only port).  Same interface as ``security.listener.Listener``.
    """

    def __init__(self, address: str, remoting: RemotingServer, mode: TlsMode, ssl_ctx: ReloadingSslContext,
                 grpc_port: int = 0, grpc_tls_port: int = 0) -> None:
        self.address = address
        self.remoting = remoting
        self.mode = mode
        self.ssl_ctx = ssl_ctx
        self.grpc_port = grpc_port
        self.grpc_tls_port = grpc_tls_port
        host, _, port = address.rpartition(":")
        self.host = host.strip("[]")
        self.port = int(port)
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        if self._sock is not None:
            return
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host, self.port), family=family, backlog=1024)
        sock.setblocking(False)
        self._sock = sock
        self.port = int(sock.getsockname()[1])
        self.remoting.port = self.port
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop())
        log.info("%s: remoting over TLS (%s) on %s:%d%s", self.remoting.name, self.mode.value, self.host, self.port,
                 f", gRPC -> 127.0.0.1:{self.grpc_tls_port} (TLS)" + (f" and :{self.grpc_port}" if self.grpc_port
                                                                      else "") if self.grpc_tls_port else "")

    async def stop(self) -> None:
        if self._sock is None:
            return
        if self._accepting is not None:
            self._accepting.cancel()
        self._sock.close()
        self._sock = None
        await self.remoting.stop()
        for t in list(self._tasks):
            t.cancel()

    async def _accept_loop(self) -> None:
        assert self._sock is not None
        await accept_forever(self._sock, self._route, self._tasks, f"{self.remoting.name} on {self.address}")

    async def _streams(self, conn: socket.socket, tls: bool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        if tls:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn, ssl=self.ssl_ctx.get(),
                                                              ssl_handshake_timeout=_HANDSHAKE_TIMEOUT_S)
        else:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn)
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def _route(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        peer = "unknown"
        try:
            addr = conn.getpeername()
            peer = f"{addr[0]}:{addr[1]}"
            deadline = loop.time() + self.remoting.idle_s
            first = await peek(conn, 1, deadline)
            if not first:
                conn.close()
                return
            if first[0] == TLS_RECORD_HANDSHAKE:
                header = await peek(conn, 5, deadline)
                size = 5 + min(struct.unpack_from(">H", header, 3)[0], _MAX_RECORD) if len(header) == 5 else 0
                record = await peek(conn, size, deadline) if size else header
                if offers_h2(record) and self.grpc_tls_port:
                    await self._splice(conn, self.grpc_tls_port, addr)
                    return
                try:
                    reader, writer = await self._streams(conn, tls=True)
                except (OSError, ssl.SSLError, TimeoutError) as exc:
                    log.info("%s remoting: TLS handshake with %s failed: %s", self.remoting.name, peer, exc)
                    conn.close()
                    return
                await self.remoting.serve(reader, writer)
                return
            if first[0] <= 0x01:
                if self.mode is TlsMode.ENFORCING:
                    log.warning("%s remoting: %s sent plaintext while tls.server.mode=enforcing: closing the "
                                "connection", self.remoting.name, peer)
                    conn.close()
                    return
                reader, writer = await self._streams(conn, tls=False)
                await self.remoting.serve(reader, writer)
                return
            if self.grpc_port:
                await self._splice(conn, self.grpc_port, addr)
                return
            log.info("%s: %s sent neither a remoting frame nor TLS (first byte 0x%02x) in %s mode: closing",
                     self.remoting.name, peer, first[0], self.mode.value)
            conn.close()
        except (OSError, TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(OSError):
                conn.close()

    async def _splice(self, conn: socket.socket, target: int, addr: Any) -> None:
        reader, writer = await self._streams(conn, tls=False)
        try:
            await splice_to_local(reader, writer, target, peer_string(addr))
        finally:
            with contextlib.suppress(Exception):
                writer.close()

