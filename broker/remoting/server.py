"""The asyncio remoting server, and the listener that serves remoting and gRPC on one port.

Each connection's frames are split by an ``asyncio.Protocol`` as its bytes arrive
(``_FrameProtocol``); every request runs in its own task (the sends of one read share one),
so a suspended PULL_MESSAGE (long polling) never holds up the heartbeats and sends that
share its connection, as with Netty's processor pools; past ``PAUSE_ABOVE`` unfinished
requests the connection is not read until they fall to ``RESUME_BELOW``.  A frame that cannot be decoded gets a
SYSTEM_ERROR answer naming the problem (with the request's opaque when it could be read)
and the connection is closed, like Netty's decoder does (it closes without an answer);
an unknown code gets REQUEST_CODE_NOT_SUPPORTED; a handler that fails gets SYSTEM_ERROR
with the exception text.  A connection idle for ``idle_s`` (or stalled inside a frame
that long) is closed, so a lying length never leaves a connection hanging.

``SharedPortListener`` owns the public port when remoting and gRPC share it (the name
server's 9876, the broker's listenPort): it reads the first byte of each connection.  A
remoting frame starts with its length's high byte, 0x00 or 0x01 (frames are below
32 MiB); anything else (gRPC's "PRI * HTTP/2.0" preface, 'P') is spliced to the gRPC
server, which then listens on a loopback port only.  See docs/REMOTING.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..security.listener import TLS_RECORD_HANDSHAKE, peer_string, splice_to_local
from ..speedups import compiled as _C
from .codec import (
    DEFAULT_MAX_FRAME,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameError,
    HeaderError,
    RemotingCommand,
    ResponseCode,
    check_length,
    decode,
    encode,
)

log = logging.getLogger(__name__)

Handler = Callable[[RemotingCommand, "Connection"], Awaitable[RemotingCommand | None]]
Recorder = Callable[[int, int, float], None]
# a group handler's answers, one per request: a command, a SUCCESS answer's frame already encoded
# (codec.encode_response: no command object per single send), or None (no answer); or all of them SUCCESS
# answers, one bytes of their frames in request order (none for a oneway request)
GroupAnswers = list[RemotingCommand | bytes | None] | bytes
GroupHandler = Callable[[list[RemotingCommand], "Connection"], Awaitable[GroupAnswers]]


class Later:
    """What a now-handler returns when it took the group and answers it later, through its ``reply``."""


LATER = Later()
# a group handler's synchronous first try: the answers when it handled the whole group without waiting, LATER when
# it took the group and will call ``reply(answers)`` once (from a later callback, or before it returns), else None
# having changed nothing (the group then goes to its GroupHandler in a task)
GroupReply = Callable[[GroupAnswers], None]
GroupHandlerNow = Callable[[list[RemotingCommand], "Connection", GroupReply], "GroupAnswers | Later | None"]
# back-pressure per connection: reading stops at PAUSE_ABOVE requests in flight, resumes at RESUME_BELOW
PAUSE_ABOVE = 1024
RESUME_BELOW = 256
_DRAIN_ABOVE = 1 << 16  # asyncio's default high-water mark of a transport's write buffer
_I32 = struct.Struct(">i")


class Connection:
    """One client connection: its peer, its transport, and requests the server sends to the client."""

    _ids = itertools.count(1)

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self.transport = transport
        self.id = next(self._ids)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "unknown"
        self.closed = False
        self.client_id = ""  # the clientID its heartbeats carry (broker side)
        self.on_close: list[Callable[[Connection], None]] = []
        self._opaque = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        # requests parked without work to do (long-polling pulls): cancelled when the connection closes,
        # while every other request already read still runs to the end, as Netty's processors do
        self.holding: set[asyncio.Task[Any]] = set()
        self.last_read = time.monotonic()
        self.loop = asyncio.get_running_loop()
        # answers encoded during one event-loop iteration, written with one write (one send syscall for
        # all the sends a batch of requests completed, instead of one each: issue 20's profile)
        self._out: list[bytes] = []
        # set while answers made inside a read's callback are queued: the caller writes them itself before the
        # callback returns (RemotingServer.answer_now), so no flush is scheduled for them
        self.writing_now = False
        # set while the transport's write buffer is above its high-water mark (the protocol's pause_writing)
        self.write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    def send(self, cmd: RemotingCommand) -> None:
        if self.closed or self.transport.is_closing():
            return
        try:
            data = encode(cmd)
        except FrameError as exc:  # e.g. a code that does not fit the binary header: answer in JSON
            log.warning("cannot encode answer in type %d (%s); answering in JSON", cmd.serialize_type, exc)
            cmd.serialize_type = 0
            data = encode(cmd)
        if not self._out and not self.writing_now:
            self.loop.call_soon(self.flush)
        self._out.append(data)

    def send_frames(self, frames: list[bytes]) -> None:
        """Queue answer frames already encoded (``codec.encode_response``), in order, after what ``send`` queued."""
        if not frames or not frames[0] or self.closed or self.transport.is_closing():
            return
        if not self._out and not self.writing_now:
            self.loop.call_soon(self.flush)
        self._out.extend(frames)

    def flush(self) -> None:
        """Write what ``send`` queued (called once per event-loop iteration that queued something)."""
        out, self._out = self._out, []
        if out and not self.closed and not self.transport.is_closing():
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    async def drain(self) -> None:
        """Wait while the socket's buffer is above its high-water mark (a client that stops reading)."""
        if not self.write_paused:
            if sum(map(len, self._out)) < _DRAIN_ABOVE:
                return  # the common case: no coroutine switch per answer
            self.flush()
            if not self.write_paused:
                return
        fut: asyncio.Future[None] = self.loop.create_future()
        self._drain_waiters.append(fut)
        await fut

    def writable(self) -> None:
        """The write buffer went below its low-water mark, or the connection is gone: wake ``drain``."""
        self.write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def notify(self, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"") -> None:
        """A oneway request from the server to the client (NOTIFY_CONSUMER_IDS_CHANGED, ...)."""
        self.send(RemotingCommand(code=code, ext_fields=ext_fields, body=body, opaque=next(self._opaque),
                                  flag=FLAG_ONEWAY))

    async def invoke(self, code: int, ext_fields: dict[str, str] | None, body: bytes, timeout_s: float
                     ) -> RemotingCommand:
        """A request from the server to the client that waits for the client's answer."""
        opaque = next(self._opaque)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[opaque] = fut
        try:
            self.send(RemotingCommand(code=code, ext_fields=ext_fields, body=body, opaque=opaque))
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._pending.pop(opaque, None)

    def on_response(self, cmd: RemotingCommand) -> None:
        fut = self._pending.get(cmd.opaque)
        if fut is not None and not fut.done():
            fut.set_result(cmd)

    def close(self) -> None:
        """Close after writing what is queued (the transport sends its buffer before it closes the socket)."""
        if not self.closed:
            with contextlib.suppress(Exception):
                self.flush()
            self.closed = True
            with contextlib.suppress(Exception):
                self.transport.close()


class _FrameProtocol(asyncio.Protocol):
    """One remoting connection as an ``asyncio.Protocol``: frames are split and started in ``data_received``.

    No reader coroutine: no buffer copy into a StreamReader, no future and task wake-up per read
    (issue 20's profile of session 12).  Every whole frame of one read is decoded at once; the sends
    among them go to one handler call.  Back-pressure: when ``PAUSE_ABOVE`` requests (tasks) of this
    connection are unfinished, frames stay in the buffer and the transport stops reading (the kernel's
    socket buffer, then TCP's window, hold the client back) until they fall to ``RESUME_BELOW``; so
    at most ``PAUSE_ABOVE`` tasks plus one grouped call per read (a read is at most 256 KiB) are
    pending per connection, and memory at most one read beyond that.
    """

    def __init__(self, server: RemotingServer, prefix: bytes = b"") -> None:
        self.server = server
        self.buf = bytearray(prefix)
        self.conn: Connection | None = None
        self.inflight: set[asyncio.Future[None]] = set()  # tasks, and groups answered later (answer_now)
        self.paused = False  # reading paused by us (PAUSE_ABOVE), not by the transport
        self.broken = False  # a bad frame was answered: nothing more is read
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        server = self.server
        conn = self.conn = Connection(transport)
        server.connections[conn.id] = conn
        self.watchdog = conn.loop.call_later(server.idle_s, server.idle_check, conn, self)
        if self.buf:
            self._consume(self.buf, True)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is None or self.broken:
            return
        conn.last_read = time.monotonic()
        if self.buf or self.paused:
            self.buf += data
            self._consume(self.buf, True)
        else:  # the common case: frames decoded straight from the read's bytes, only a tail is kept
            self._consume(data, False)

    def _consume(self, data: bytes | bytearray, buffered: bool, limit: int = 0) -> None:
        """Start every whole frame of ``data`` (up to the in-flight limit); keep the rest in ``self.buf``."""
        conn = self.conn
        assert conn is not None
        server = self.server
        try:
            pos, grouped, full = server.frames(data, self, limit or PAUSE_ABOVE)
        except FrameError as exc:
            self.broken = True
            self.buf.clear()
            log.warning("%s remoting: bad frame from %s: %s; closing the connection", server.name, conn.peer, exc)
            conn.send(RemotingCommand(code=ResponseCode.SYSTEM_ERROR, remark=f"bad frame: {exc}",
                                      opaque=exc.opaque or 0, flag=FLAG_RESPONSE))
            conn.close()
            return
        if buffered:
            if pos:
                del self.buf[:pos]
        elif pos < len(data):
            self.buf += memoryview(data)[pos:]
        loop = conn.loop
        # the groups of a read are stored in the order they are started (a task's first step stores its group): once
        # one goes to a task, the later ones follow it there rather than overtake it inside this callback
        now_handlers = server.group_handlers_now
        for code, cmds in grouped.items():
            now = now_handlers.get(code)
            if now is not None and server.answer_now(now, code, cmds, conn, self.track):
                continue
            now_handlers = {}
            task = loop.create_task(server.dispatch_group(code, cmds, conn))
            self.track(task)
        if full and not self.paused:
            self.paused = True
            with contextlib.suppress(Exception):
                conn.transport.pause_reading()  # type: ignore[attr-defined]
            log.info("%s remoting: %s has %d requests in flight; reading paused until %d", server.name, conn.peer,
                     len(self.inflight), RESUME_BELOW)

    def track(self, task: asyncio.Future[None]) -> None:
        self.inflight.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Future[None]) -> None:
        self.inflight.discard(task)
        if self.paused and len(self.inflight) <= RESUME_BELOW and self.conn is not None and not self.conn.closed:
            self.paused = False
            if self.buf:
                self._consume(self.buf, True)
            if not self.paused:
                with contextlib.suppress(Exception):
                    self.conn.transport.resume_reading()  # type: ignore[attr-defined]

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.write_paused = True

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.writable()

    def eof_received(self) -> bool | None:
        return None  # close: what was read runs to its end, its answers are dropped (as with Netty)

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if self.watchdog is not None:
            self.watchdog.cancel()
        if conn is None:
            return
        if self.buf and not self.broken:
            # frames held back by the in-flight limit: run them, as a reset connection's unread requests
            # are run (the UPDATE_CONSUMER_OFFSETs a Go consumer sends right before it closes)
            with contextlib.suppress(FrameError):
                self.server.frames_unlimited(self.buf, self)
            self.buf.clear()
        for task in list(conn.holding):
            task.cancel()
        conn.close()
        conn.writable()
        self.server.connections.pop(conn.id, None)
        for cb in conn.on_close:
            try:
                cb(conn)
            except Exception:
                log.exception("remoting close callback failed")
        if not self.done.done():
            self.done.set_result(None)


class RemotingServer:
    """Frames in, handlers, frames out; one ``_FrameProtocol`` per connection."""

    def __init__(self, name: str, handlers: dict[int, Handler], *, max_frame: int = DEFAULT_MAX_FRAME,
                 idle_s: float = 120.0, recorder: Recorder | None = None,
                 group_handlers: dict[int, GroupHandler] | None = None,
                 group_handlers_now: dict[int, GroupHandlerNow] | None = None) -> None:
        self.name = name
        self.handlers = handlers
        # codes whose requests, when several arrive in one read of a connection, are handled by one call
        # (the sends of a pipelining producer: one store put, one task, one write for all of them)
        self.group_handlers = group_handlers or {}
        # tried first, inside the read's callback: a group they handle costs no task, no coroutine and no later
        # loop iteration, and its answers leave before the callback returns (``answer_now``)
        self.group_handlers_now = group_handlers_now or {}
        self.max_frame = max_frame
        self.idle_s = idle_s
        self.recorder = recorder
        self.connections: dict[int, Connection] = {}
        # the access check run on every request before its handler (broker/security/remoting_acl.py when
        # aclEnable): None lets it through, else the answer to send instead
        self.gate: Callable[[RemotingCommand, Connection], RemotingCommand | None] | None = None
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        """Listen on a port of its own (when remoting does not share the gRPC port)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _FrameProtocol(self), host or None, port,
                                                reuse_address=True)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("%s remoting server listening on %s:%d", self.name, host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections.values()):
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, prefix: bytes = b"") -> None:
        """Take over a connection a first-byte sniffer opened as streams (plain or TLS) and serve it to its end.

        The transport is handed to a ``_FrameProtocol`` (``set_protocol``) with ``prefix`` and what the
        StreamReader had buffered, so the sniffer's one read costs nothing per frame afterwards.  ``writer``
        stays referenced here until the connection ends (a collected StreamWriter closes its transport).
        """
        transport = writer.transport
        buffered = bytes(getattr(reader, "_buffer", b""))
        eof = bool(getattr(reader, "_eof", False))
        proto = _FrameProtocol(self, bytes(prefix) + buffered)
        transport.set_protocol(proto)
        proto.connection_made(transport)
        me = asyncio.current_task()
        if me is not None:
            self._tasks.add(me)
        try:
            if eof:
                proto.connection_lost(None)
            elif not transport.is_closing() and not transport.is_reading():  # type: ignore[attr-defined]
                transport.resume_reading()  # type: ignore[attr-defined]  # StreamReader had paused it
            await asyncio.shield(proto.done)
        except asyncio.CancelledError:
            pass
        finally:
            if proto.conn is not None:
                proto.conn.close()
            if me is not None:
                self._tasks.discard(me)

    def frames(self, data: bytes | bytearray, proto: _FrameProtocol, limit: int
                ) -> tuple[int, dict[int, list[RemotingCommand]], bool]:
        """Decode and start whole frames of ``data`` while fewer than ``limit`` tasks are in flight.

        Returns the bytes consumed, the grouped requests and whether the limit stopped it."""
        pos, end = 0, len(data)
        grouped: dict[int, list[RemotingCommand]] = {}
        conn, inflight, track = proto.conn, proto.inflight, proto.track
        assert conn is not None
        loop = conn.loop
        max_frame = self.max_frame
        # a request of a grouped code goes straight to its group when no gate checks it (_start does the rest)
        group_codes = self.group_handlers if self.gate is None else {}
        view = memoryview(data)  # frames are decoded in place (one copy of each body), released before return
        try:
            while end - pos >= 4:
                if len(inflight) >= limit:
                    return pos, grouped, True
                cmds: list[RemotingCommand] | None = None
                if _C is not None:
                    # the compiled loop: whole frames up to and including the first one not to group (a send's
                    # fields read with its frame, RemotingCommand.send); it stops before what this loop must do
                    # itself (a bad length, a partial frame, a header decode_python reads)
                    pos, cmds = _C.decode_frames(data, pos, max_frame, RemotingCommand, group_codes)
                    if not cmds and end - pos < 4:
                        break
                if not cmds:
                    (length,) = _I32.unpack_from(data, pos)
                    if length < 4 or length + 4 > max_frame:
                        check_length(length, max_frame)  # raises, naming the problem
                    if end - pos - 4 < length:
                        break
                    with view[pos + 4:pos + 4 + length] as frame:  # released: the caller resizes ``data``
                        cmds = [decode(frame)]
                    pos += 4 + length
                for cmd in cmds:
                    code = cmd.code
                    if code in group_codes and not cmd.flag & FLAG_RESPONSE:
                        run = grouped.get(code)
                        if run is None:
                            grouped[code] = [cmd]
                        else:
                            run.append(cmd)
                    else:
                        self._start(cmd, conn, track, grouped, loop)
        finally:
            view.release()
        return pos, grouped, False

    def frames_unlimited(self, data: bytearray, proto: _FrameProtocol) -> None:
        """Start every whole frame of ``data`` regardless of the in-flight limit (a connection that closed)."""
        conn = proto.conn
        assert conn is not None
        _pos, grouped, _full = self.frames(data, proto, 1 << 62)
        for _code, cmds in grouped.items():
            for cmd in cmds:
                conn.loop.create_task(self._dispatch(cmd, conn))

    def _start(self, cmd: RemotingCommand, conn: Connection, track: Callable[[asyncio.Task[None]], None],
               grouped: dict[int, list[RemotingCommand]], loop: asyncio.AbstractEventLoop) -> None:
        """Route one decoded frame: an answer to its waiter, a request to its group or its own task."""
        if cmd.is_response:
            conn.on_response(cmd)
            return
        if self.gate is not None and self._refused(cmd, conn):
            return
        if cmd.code in self.group_handlers:
            grouped.setdefault(cmd.code, []).append(cmd)
            return
        track(loop.create_task(self._dispatch(cmd, conn)))

    def _refused(self, cmd: RemotingCommand, conn: Connection) -> bool:
        """Run the gate; answer a refused request (unless oneway) and say so."""
        assert self.gate is not None
        resp = self.gate(cmd, conn)
        if resp is None:
            return False
        if self.recorder is not None:
            with contextlib.suppress(Exception):
                self.recorder(cmd.code, resp.code, 0.0)
        if not cmd.is_oneway:
            resp.opaque = cmd.opaque
            resp.flag |= FLAG_RESPONSE
            conn.send(resp)
        return True

    def idle_check(self, conn: Connection, proto: _FrameProtocol) -> None:
        """Close a connection that sent nothing for ``idle_s`` (or stalled inside a frame that long).

        One that we stopped reading (requests in flight at the limit) is not idle: its clock restarts."""
        if conn.closed:
            return
        if proto.paused:
            conn.last_read = time.monotonic()
        idle = time.monotonic() - conn.last_read
        if idle >= self.idle_s:
            log.info("%s remoting: closing %s, idle for %.0f s", self.name, conn.peer, idle)
            conn.close()
            return
        proto.watchdog = conn.loop.call_later(self.idle_s - idle, self.idle_check, conn, proto)

    async def dispatch_group(self, code: int, cmds: list[RemotingCommand], conn: Connection) -> None:
        """Requests of one code that arrived together: one handler call, every answer written in one write."""
        if len(cmds) == 1 and code in self.handlers:
            await self._dispatch(cmds[0], conn)
            return
        started = time.perf_counter()
        resps: GroupAnswers
        try:
            resps = await self.group_handlers[code](cmds, conn)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            resps = self._group_failed(code, cmds, conn, exc)
        self._answer_group(code, cmds, resps, conn, time.perf_counter() - started)
        await conn.drain()

    def answer_now(self, handler: GroupHandlerNow, code: int, cmds: list[RemotingCommand], conn: Connection,
                   track: Callable[[asyncio.Future[None]], None]) -> bool:
        """Handle a group inside the read's callback when ``handler`` can (True: answered, the answers written before
        it returns, or taken and answered later); False when it declined and changed nothing.

        Why: a read of plain single sends on a broker whose store takes them without a wait (broker/remoting/
        broker_handlers.py ``send_group_now``) spent a task, four coroutine frames, a done callback and two more
        loop iterations (the task's step, the answers' flush) on top of the work itself: ~15-20 µs per read, most of
        a send's cost when a client's reads hold a few sends each (Apache's Go client: ~4 at depth 64).  A group
        answered later (a SYNC_MASTER's, once its copies are in) holds a future in ``track`` meanwhile, so the
        connection's in-flight limit counts it as it counts a task.  Not when the client stopped reading (the
        answers would pile up: the task path waits in ``drain``)."""
        if conn.write_paused:
            return False
        started = time.perf_counter()
        held: list[asyncio.Future[None]] = []
        replied = False

        def reply(resps: GroupAnswers) -> None:
            nonlocal replied
            replied = True
            self._answer_group(code, cmds, resps, conn, time.perf_counter() - started)
            if held:
                held[0].set_result(None)

        try:
            resps = handler(cmds, conn, reply)
        except Exception as exc:
            resps = self._group_failed(code, cmds, conn, exc)
        if resps is None:
            return False
        if isinstance(resps, Later):
            if not replied:
                held.append(conn.loop.create_future())
                track(held[0])
            return True
        conn.writing_now = True
        try:
            self._answer_group(code, cmds, resps, conn, time.perf_counter() - started)
        finally:
            conn.writing_now = False
        conn.flush()
        return True

    def _group_failed(self, code: int, cmds: list[RemotingCommand], conn: Connection, exc: Exception
                      ) -> GroupAnswers:
        log.exception("%s remoting: %d requests of code %d from %s failed", self.name, len(cmds), code, conn.peer,
                      exc_info=exc)
        return [cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}") for cmd in cmds]

    def _answer_group(self, code: int, cmds: list[RemotingCommand], resps: GroupAnswers, conn: Connection,
                      elapsed: float) -> None:
        """Record and queue the answers of a group (``resps`` one per command, or all their frames in order)."""
        recorder = self.recorder
        if isinstance(resps, bytes):  # every request answered SUCCESS, the frames already in order
            if recorder is not None:
                try:
                    for _cmd in cmds:
                        recorder(code, ResponseCode.SUCCESS, elapsed)
                except Exception:
                    log.debug("remoting recorder failed", exc_info=True)
            conn.send_frames([resps])
            return
        frames: list[bytes] = []  # encoded answers not yet queued: written in order with the commands'
        for cmd, resp in zip(cmds, resps, strict=True):
            if recorder is not None:
                try:  # a metric must never lose an answer (try costs nothing in 3.11; contextlib.suppress did)
                    recorder(code, 0 if resp is None or isinstance(resp, bytes) else resp.code, elapsed)
                except Exception:
                    log.debug("remoting recorder failed", exc_info=True)
            if resp is None or cmd.flag & FLAG_ONEWAY:
                continue
            if isinstance(resp, bytes):
                frames.append(resp)
                continue
            if frames:
                conn.send_frames(frames)
                frames = []
            resp.opaque = cmd.opaque
            resp.flag |= FLAG_RESPONSE
            conn.send(resp)
        conn.send_frames(frames)

    async def _dispatch(self, cmd: RemotingCommand, conn: Connection) -> None:
        started = time.perf_counter()
        handler = self.handlers.get(cmd.code)
        resp: RemotingCommand | None
        if handler is None:
            resp = cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        else:
            try:
                resp = await handler(cmd, conn)
            except HeaderError as exc:
                resp = cmd.response(exc.code, str(exc))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("%s remoting: request code %d from %s failed", self.name, cmd.code, conn.peer)
                resp = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if self.recorder is not None:
            try:
                self.recorder(cmd.code, resp.code if resp is not None else 0, time.perf_counter() - started)
            except Exception:
                log.debug("remoting recorder failed", exc_info=True)
        if resp is None or cmd.flag & FLAG_ONEWAY:
            return
        resp.opaque = cmd.opaque
        resp.flag |= FLAG_RESPONSE
        conn.send(resp)
        await conn.drain()


class SharedPortListener:
    """One public port, two protocols: remoting frames served here, everything else spliced to gRPC.

    Same interface as ``security.listener.Listener`` (``start``, ``stop``, ``port``).
    """

    def __init__(self, address: str, remoting: RemotingServer, grpc_port: int, grpc_tls_port: int = 0) -> None:
        self.address = address
        self.remoting = remoting
        self.grpc_port = grpc_port
        self.grpc_tls_port = grpc_tls_port
        host, _, port = address.rpartition(":")
        self.host = host.strip("[]")
        self.port = int(port)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._accept, self.host or None, self.port, reuse_address=True,
                                                  limit=1 << 20)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self.remoting.port = self.port
        log.info("%s: remoting and gRPC share %s (gRPC -> 127.0.0.1:%d)", self.remoting.name, self.address,
                 self.grpc_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self.remoting.stop()
            for t in list(self._tasks):
                t.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            first = await asyncio.wait_for(reader.read(1), self.remoting.idle_s)
            if not first:
                return
            if first[0] <= 0x01:
                await self.remoting.serve(reader, writer, first)
                return
            target = self.grpc_tls_port if first[0] == TLS_RECORD_HANDSHAKE else self.grpc_port
            if not target:
                return
            await splice_to_local(reader, writer, target, peer_string(writer.get_extra_info("peername")), first)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
            if task is not None:
                self._tasks.discard(task)


def bind_with_remoting(server: Any, address: str, tls: Any, remoting: RemotingServer | None,
                       remoting_port: int = 0, remoting_tls: Any = None) -> Any:
    """Bind ``server`` (grpc.aio) for ``address`` and put ``remoting`` beside it.

    With ``remoting_port`` 0 both share ``address``: ``SharedPortListener`` with TLS off,
    ``tls_listener.SniffingListener`` in permissive or enforcing mode (gRPC then listens on
    loopback ports only, TLS still terminated by gRPC with ``tls``; remoting over TLS is
    terminated with ``remoting_tls``, the client-port rule of ``tls.server.need.client.auth``).
    Otherwise gRPC binds as ``security.listener.bind_server`` does and remoting listens on
    ``remoting_port`` of its own once the returned listener starts.
    """
    from rocketscope.tls import TlsMode

    from ..security.listener import bind_server

    if remoting is None:
        return bind_server(server, address, tls)
    rtls = remoting_tls if remoting_tls is not None else tls
    if remoting_port == 0 and tls.mode is TlsMode.DISABLED:
        grpc_port = server.add_insecure_port("127.0.0.1:0")
        if not grpc_port:
            raise OSError("cannot bind the internal loopback gRPC port")
        return SharedPortListener(address, remoting, grpc_port)
    if remoting_port == 0:
        from ..security.tls_context import ReloadingSslContext
        from .tls_listener import SniffingListener

        grpc_tls_port = server.add_secure_port("127.0.0.1:0", tls.server_credentials())
        grpc_port = server.add_insecure_port("127.0.0.1:0") if tls.mode is TlsMode.PERMISSIVE else 0
        if not grpc_tls_port or (tls.mode is TlsMode.PERMISSIVE and not grpc_port):
            raise OSError("cannot bind the internal loopback gRPC ports")
        return SniffingListener(address, remoting, tls.mode, ReloadingSslContext(rtls), grpc_port, grpc_tls_port)
    inner = bind_server(server, address, tls)
    return _BesideListener(inner, remoting, address.rpartition(":")[0], remoting_port, rtls)


class _BesideListener:
    """gRPC's listener plus remoting on a port of its own."""

    def __init__(self, inner: Any, remoting: RemotingServer, host: str, port: int, tls: Any = None) -> None:
        self.inner = inner
        self.remoting = remoting
        self.host = host.strip("[]")
        self.remoting_port = port
        self.tls = tls
        self._sniffer: Any = None

    @property
    def port(self) -> int:
        return int(self.inner.port)

    async def start(self) -> None:
        await self.inner.start()
        if self.tls is None or not self.tls.enabled:
            await self.remoting.start(self.host, self.remoting_port)
            return
        from ..security.tls_context import ReloadingSslContext
        from .tls_listener import SniffingListener

        address = f"[{self.host}]:{self.remoting_port}" if ":" in self.host else f"{self.host}:{self.remoting_port}"
        self._sniffer = SniffingListener(address, self.remoting, self.tls.mode, ReloadingSslContext(self.tls))
        await self._sniffer.start()

    async def stop(self) -> None:
        if self._sniffer is not None:
            await self._sniffer.stop()
        await self.remoting.stop()
        await self.inner.stop()
