"""A remoting connection's reads pause while too many of its requests are unfinished (issue 20).

The server reads connections through an ``asyncio.Protocol`` (broker/remoting/server.py
``_FrameProtocol``); a client that pipelines more requests than ``PAUSE_ABOVE`` while the earlier
ones are still running must not make the server start them all: the frames beyond the limit stay
unread until the running ones fall to ``RESUME_BELOW``, then every request is answered exactly once.
Ground truth is what the test sent in one ``sendall`` (N blocking requests with known opaques, then
one quick request) and what its handler saw; a real server on a loopback socket, in this process,
so the test can hold the handlers.  Runs in about a second.
"""

from __future__ import annotations

import asyncio
import struct

from rocketscope.broker.remoting.codec import RemotingCommand, decode, encode
from rocketscope.broker.remoting.server import PAUSE_ABOVE, RESUME_BELOW, Connection, RemotingServer

HOLD, QUICK = 9001, 9002
SENT = PAUSE_ABOVE + 300


async def _wait(cond: object, what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def _read_answers(reader: asyncio.StreamReader, count: int) -> list[RemotingCommand]:
    out = []
    for _ in range(count):
        (length,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
        out.append(decode(await asyncio.wait_for(reader.readexactly(length), 10)))
    return out


async def _scenario() -> None:
    release = asyncio.Event()
    started: list[int] = []

    async def hold(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        started.append(cmd.opaque)
        await release.wait()
        return cmd.response()

    async def quick(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        started.append(cmd.opaque)
        return cmd.response()

    server = RemotingServer("bp", {HOLD: hold, QUICK: quick})
    await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        frames = [encode(RemotingCommand(code=HOLD, opaque=i)) for i in range(1, SENT + 1)]
        frames.append(encode(RemotingCommand(code=QUICK, opaque=SENT + 1)))
        writer.write(b"".join(frames))
        await writer.drain()
        await _wait(lambda: len(started) >= PAUSE_ABOVE, f"{PAUSE_ABOVE} requests started")
        (conn,) = server.connections.values()
        transport = conn.transport
        await _wait(lambda: not transport.is_reading(), "the connection's reads paused")  # type: ignore[attr-defined]
        await asyncio.sleep(0.2)  # give a server that ignores the limit the time to start more
        assert len(started) == PAUSE_ABOVE, "requests beyond the limit were started while the others ran"
        assert SENT + 1 not in started

        release.set()
        answers = await _read_answers(reader, SENT + 1)
        assert sorted(a.opaque for a in answers) == list(range(1, SENT + 2)), "each request answered once"
        assert all(a.is_response and a.code == 0 for a in answers)
        assert sorted(started) == list(range(1, SENT + 2))
        assert transport.is_reading()  # type: ignore[attr-defined]
        assert RESUME_BELOW < PAUSE_ABOVE
    finally:
        writer.close()
        await server.stop()


def test_reads_pause_at_the_in_flight_limit_and_every_request_is_answered_once() -> None:
    asyncio.run(_scenario())
