"""A TCP proxy that delays one direction of a link by a known amount: the injected truth of the
accuracy tests and of bench/accuracy_bench.py.

Bytes from the client side (the node that opened the connection) to the target are held for
``delay_s`` and then written in their original order; bytes coming back pass at once.  Put in
front of a DLedger follower's peer port on the leader's side, every AppendEntries reaches that
follower ``delay_s`` later, so its acknowledgements reach the leader ``delay_s`` later than they
would have: one round trip longer by exactly the injected delay.  The delay can change while
connections are open (``set_delay``); chunks already queued keep the deadline they were given.
"""

from __future__ import annotations

import asyncio
import contextlib

from faultproxy import FaultProxy


class DelayProxy(FaultProxy):
    """A FaultProxy (cut and heal still work) whose forward direction is a delay line."""

    def __init__(self, target_port: int, delay_s: float = 0.0) -> None:
        super().__init__(target_port)
        self.delay_s = delay_s
        self.chunks_delayed = 0

    def set_delay(self, delay_s: float) -> None:
        """Thread-safe enough: a float assignment, read by the proxy loop for each new chunk."""
        self.delay_s = delay_s

    async def _delayed_pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        line: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                item = await line.get()
                if item is None:
                    break
                due, data = item
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while not self.blocked:
                data = await reader.read(65536)
                if not data:
                    break
                if self.delay_s > 0:
                    self.chunks_delayed += 1
                line.put_nowait((loop.time() + self.delay_s, data))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            line.put_nowait(None)
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await sender
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.blocked:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._delayed_pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._writers -= {writer, up_writer}
