"""Binding a grpc.aio server to its port in each TLS mode, including permissive (TLS and plaintext on one port).

gRPC serves one kind of transport per port, but RocketMQ's ``tls.server.mode=permissive``
means "accept TLS and plaintext on the same port" (Netty peeks at the first byte).  We do
the same in front of gRPC: the server listens on two loopback-only ports (one TLS, one
plaintext) and a small asyncio front end owns the public port, reads the first byte of
each connection (0x16 = a TLS handshake record) and splices the connection to the
matching internal port.  The front end never decrypts anything: TLS still terminates in
gRPC with the same credentials as in enforcing mode.

The cost: every byte of a permissive connection is copied once more through the event
loop, and gRPC sees the front end (127.0.0.1) as the peer.  ``real_peer`` maps that back
to the client's address for the ACL address checks and logs.  Permissive is meant for
migrating a cluster to TLS, not as a permanent mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import grpc

from rocketscope.tls import TlsMode, TlsServerConfig

log = logging.getLogger(__name__)
TLS_RECORD_HANDSHAKE = 0x16
_CHUNK = 256 * 1024
_PEEK_RETRY_S = 0.005  # a first record split over segments: peek again shortly (loopback: practically never)

# internal-connection local port -> the real client peer ("ipv4:10.0.0.7:53422"); process-wide
_PEERS: dict[int, str] = {}


def real_peer(peer: str) -> str:
    """The client's peer string for a connection that came through a permissive front end, else ``peer``."""
    if not _PEERS or not peer.startswith(("ipv4:127.0.0.1:", "ipv6:[::1]:", "ipv6:%5B::1%5D:")):
        return peer
    try:
        port = int(peer.rpartition(":")[2])
    except ValueError:
        return peer
    return _PEERS.get(port, peer)


def peer_string(addr: tuple[object, ...] | None) -> str:
    """A socket's peer address the way grpc names peers (``ipv4:h:p`` / ``ipv6:[h]:p``), for :func:`real_peer`."""
    if not addr:
        return "unknown"
    host, port = str(addr[0]), addr[1]
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


@dataclass
class Listener:
    """A bound port; ``start()`` after ``server.start()``, ``stop()`` before or after ``server.stop()``."""

    address: str
    mode: TlsMode
    port: int
    tls_port: int = 0
    plain_port: int = 0
    _server: asyncio.base_events.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        if self.mode is not TlsMode.PERMISSIVE or self._server is not None:
            return
        host, _, port = self.address.rpartition(":")
        self._server = await asyncio.start_server(self._accept, host.strip("[]") or None, int(port),
                                                  reuse_address=True)
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])
        log.info("permissive TLS front end on %s (TLS -> 127.0.0.1:%d, plaintext -> 127.0.0.1:%d)", self.address,
                 self.tls_port, self.plain_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            first = await reader.read(1)
            if not first:
                return
            target = self.tls_port if first[0] == TLS_RECORD_HANDSHAKE else self.plain_port
            await splice_to_local(reader, writer, target, peer_string(writer.get_extra_info("peername")), first)
        except (OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)


async def splice_to_local(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: int, peer: str,
                          first: bytes = b"") -> None:
    """Relay a client's connection to ``127.0.0.1:target`` both ways until either side closes, ``first`` (the bytes
    already read to pick the target) sent ahead.  While it lasts, :func:`real_peer` answers ``peer`` for the
    relayed connection, so the server behind sees the real client (ACL, logs).  Shared by every front end that
    sniffs a port's first byte (this module's permissive listener, broker/remoting/server.py and
    broker/remoting/tls_listener.py); the caller closes ``writer``."""
    local_port = 0
    try:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        local_port = int(up_writer.get_extra_info("sockname")[1])
        _PEERS[local_port] = peer
        if first:
            up_writer.write(first)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        if local_port:
            _PEERS.pop(local_port, None)


async def accept_forever(sock: socket.socket, serve: Callable[[socket.socket], Coroutine[Any, Any, None]],
                         tasks: set[asyncio.Task[None]], what: str) -> None:
    """Accept connections on a listening non-blocking ``sock`` and run ``serve(conn)`` as a task each.

    The ports that speak raw TCP themselves (remoting's TLS sniffing port, DLedger's Raft port) share
    this loop: an ``accept`` that fails (EMFILE and friends) is logged and retried, never ends the port;
    every connection gets TCP_NODELAY (small answers must not wait for Nagle); ``tasks`` holds the
    connections' tasks so the port can cancel them when it stops.
    """
    loop = asyncio.get_running_loop()
    while True:
        try:
            conn, _ = await loop.sock_accept(sock)
        except OSError as exc:
            log.warning("%s: accept failed: %s", what, exc)
            await asyncio.sleep(0.1)
            continue
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = loop.create_task(serve(conn))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


def _set_once(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def peek(conn: socket.socket, want: int, deadline: float) -> bytes:
    """At least ``want`` bytes of a non-blocking ``conn`` without consuming them (fewer only when it closed).

    The ports that choose TLS or plaintext by a connection's first bytes (remoting's sniffing port, DLedger's
    Raft port in permissive mode) look before asyncio reads anything; TimeoutError once the loop's clock
    passes ``deadline``.
    """
    loop = asyncio.get_running_loop()
    while True:
        try:
            data: bytes | None = conn.recv(want, socket.MSG_PEEK)
        except BlockingIOError:
            data = None
        if data is not None and (len(data) >= want or not data):
            return data
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError("the connection sent too little before the timeout")
        if data is None:  # nothing yet: wait until readable
            ready: asyncio.Future[None] = loop.create_future()
            # the reader may fire again before this task runs, or after wait_for gave up: set the result once
            loop.add_reader(conn.fileno(), _set_once, ready)
            try:
                await asyncio.wait_for(ready, left)
            finally:
                loop.remove_reader(conn.fileno())
        else:
            await asyncio.sleep(_PEEK_RETRY_S)


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await src.read(_CHUNK)
            if not data:
                break
            dst.write(data)
            await dst.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            dst.close()


def bind_server(server: grpc.aio.Server, address: str, tls: TlsServerConfig) -> Listener:
    """Add the port(s) for ``address`` ('0.0.0.0:8081') to ``server`` per ``tls.mode``; OSError if a bind fails.

    disabled: add_insecure_port; enforcing: add_secure_port; permissive: a TLS and a plaintext
    port on 127.0.0.1 plus the front end started by ``Listener.start()``.
    """
    mode = tls.mode
    if mode is TlsMode.DISABLED:
        port = _add_port(lambda: server.add_insecure_port(address))
        if not port:
            raise OSError(f"cannot bind {address}")
        return Listener(address, mode, port)
    creds = tls.server_credentials()
    if mode is TlsMode.ENFORCING:
        port = _add_port(lambda: server.add_secure_port(address, creds))
        if not port:
            raise OSError(f"cannot bind {address} (TLS)")
        return Listener(address, mode, port)
    tls_port = server.add_secure_port("127.0.0.1:0", creds)
    plain_port = server.add_insecure_port("127.0.0.1:0")
    if not tls_port or not plain_port:
        raise OSError(f"cannot bind the internal loopback ports for permissive TLS on {address}")
    return Listener(address, mode, int(address.rpartition(":")[2]), tls_port, plain_port)


def _add_port(add: Callable[[], int]) -> int:
    """grpc reports a failed bind as RuntimeError (newer releases) or as port 0: both become 0."""
    try:
        return add()
    except RuntimeError:
        return 0


def host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 literal in brackets."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def bind_listener(server: grpc.aio.Server, key: str, host: str, port: int, tls: TlsServerConfig) -> Listener:
    """``bind_server`` on ``host:port``; a failure is an OSError naming the config key, address and likely cause."""
    address = host_port(host, port)
    try:
        return bind_server(server, address, tls)
    except OSError:
        pass
    cause = "the port is in use" if _in_use(host, port) else "the address is not local or the port is in use"
    raise OSError(f"config key {key}: cannot listen on {address}: {cause}") from None


def _in_use(host: str, port: int) -> bool:
    import socket

    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as exc:
            return exc.errno == 98  # EADDRINUSE
    return False
