"""A TCP proxy between two nodes that a test can cut and heal (network partitions on loopback)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from conftest import free_port


class FaultProxy:
    """Listens on ``port`` and forwards to ``target``; ``cut()`` drops every connection and refuses new ones."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self.blocked = False
        self._writers: set[asyncio.StreamWriter] = set()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not self.blocked:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
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
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    def cut(self) -> None:
        self.blocked = True
        for w in list(self._writers):
            w.close()

    def heal(self) -> None:
        self.blocked = False


class ProxyLoop:
    """Runs proxies on their own event loop in a thread; cut/heal are thread-safe."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def proxy(self, target_port: int) -> FaultProxy:
        p = FaultProxy(target_port)
        asyncio.run_coroutine_threadsafe(p.start(), self.loop).result(5)
        return p

    def call(self, fn, *args) -> None:  # type: ignore[no-untyped-def]
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@contextmanager
def proxy_loop() -> Iterator[ProxyLoop]:
    pl = ProxyLoop()
    try:
        yield pl
    finally:
        pl.stop()
