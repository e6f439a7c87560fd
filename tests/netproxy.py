"""The one TCP proxy of the tests and benchmarks: a directed link between two nodes on loopback
that a test can cut, cut one way, or delay.

Partition tests (tests/test_e2e_dledger.py, test_e2e_controller.py) cut links both ways; the
accuracy tests and bench/accuracy_bench.py (tests/truth_harness.py) delay one direction by a
known amount, their injected truth; the chaos nemesis (tests/chaos/) also cuts one way (a node
that hears its peers but is not heard) and slows links.  So the two directions of each proxied
connection are handled separately:

* ``up`` is what the connecting node sends (requests), ``down`` what it gets back (answers);
* ``refuse`` cuts both ways: every connection is closed and new ones are refused;
* a blocked direction stops forwarding (bytes stay unread, like packets lost in the
  network); when the link heals, every connection that lost bytes is closed, because a
  gRPC/HTTP2 stream with a hole in it cannot continue: both ends reconnect cleanly;
* a delay holds every chunk for ``delay`` seconds (both ways) plus ``delay_up`` (the up
  direction only) before forwarding it, in order; a chunk keeps the deadline it was given
  when the delay changes.  Put in front of a DLedger follower's peer port on the leader's
  side, ``delay_up`` makes every AppendEntries reach that follower, and so its
  acknowledgement reach the leader, exactly that much later.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from conftest import free_port


@dataclass
class _Conn:
    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]
    stalled: bool = False


@dataclass
class LinkProxy:
    """Listens on ``port`` and forwards to ``target_port`` on loopback."""

    target_port: int
    port: int = field(default_factory=free_port)
    refuse: bool = False  # both directions cut: existing connections closed, new ones refused
    block_up: bool = False
    block_down: bool = False
    delay: float = 0.0  # seconds added to every chunk, both directions
    delay_up: float = 0.0  # seconds added to every chunk the connecting node sends
    chunks_delayed: int = 0  # chunks forwarded with a delay (a test checks its delay was applied)
    _conns: set[int] = field(default_factory=set)
    _by_id: dict[int, _Conn] = field(default_factory=dict)
    _wake: asyncio.Event | None = None

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _pipe(self, conn: _Conn, up: bool, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def sender() -> None:
            while True:
                item = await queue.get()
                if item is None:
                    return
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        task = asyncio.create_task(sender())
        try:
            while not self.refuse:
                while (self.block_up if up else self.block_down) and not self.refuse:
                    conn.stalled = True  # bytes are left unread: lost, as far as the peer can tell
                    await asyncio.sleep(0.02)
                data = await reader.read(65536)
                if not data:
                    break
                if conn.stalled:  # healed after a loss: the caller closes this connection
                    break
                delay = self.delay + (self.delay_up if up else 0.0)
                if delay > 0:
                    self.chunks_delayed += 1
                await queue.put((time.monotonic() + delay, data))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            await queue.put(None)
            try:
                await asyncio.wait_for(task, timeout=self.delay + self.delay_up + 5)
            except (Exception, asyncio.CancelledError):
                task.cancel()
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        conn = _Conn((writer, up_writer))
        self._by_id[id(conn)] = conn
        try:
            _done, pending = await asyncio.wait(
                [asyncio.create_task(self._pipe(conn, True, reader, up_writer)),
                 asyncio.create_task(self._pipe(conn, False, up_reader, writer))],
                return_when=asyncio.FIRST_COMPLETED)
            for w in conn.writers:  # one side ended: end the other, as a real connection would
                w.close()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            self._by_id.pop(id(conn), None)

    def _close_all(self, only_stalled: bool) -> None:
        for conn in list(self._by_id.values()):
            if conn.stalled or not only_stalled:
                for w in conn.writers:
                    w.close()

    # ---- called on the proxy loop's thread (ProxyLoop.call) ----
    def set(self, *, refuse: bool | None = None, block_up: bool | None = None, block_down: bool | None = None,
            delay: float | None = None, delay_up: float | None = None) -> None:
        if refuse is not None:
            self.refuse = refuse
            if refuse:
                self._close_all(only_stalled=False)
        if block_up is not None:
            self.block_up = block_up
        if block_down is not None:
            self.block_down = block_down
        if delay is not None:
            self.delay = delay
        if delay_up is not None:
            self.delay_up = delay_up
        if not (self.block_up or self.block_down):
            self._close_all(only_stalled=True)

    def heal(self) -> None:
        self.set(refuse=False, block_up=False, block_down=False, delay=0.0, delay_up=0.0)


class LinkLoop:
    """Runs link proxies on their own event loop in a thread; ``set`` is thread-safe and waits until applied."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="chaos-links")
        self.thread.start()

    def proxy(self, target_port: int) -> LinkProxy:
        p = LinkProxy(target_port)
        asyncio.run_coroutine_threadsafe(p.start(), self.loop).result(10)
        return p

    def set(self, proxy: LinkProxy, **kw: object) -> None:
        async def apply() -> None:
            proxy.set(**kw)  # type: ignore[arg-type]
        asyncio.run_coroutine_threadsafe(apply(), self.loop).result(10)

    def cut(self, proxy: LinkProxy, cut: bool = True) -> None:
        """Cut ``proxy`` both ways (``cut``) or heal it."""
        if cut:
            self.set(proxy, refuse=True)
        else:
            self.heal(proxy)

    def heal(self, proxy: LinkProxy) -> None:
        async def apply() -> None:
            proxy.heal()
        asyncio.run_coroutine_threadsafe(apply(), self.loop).result(10)

    def stop(self) -> None:
        """Cancel every proxied connection first, so no coroutine outlives its loop."""
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


@contextmanager
def link_loop() -> Iterator[LinkLoop]:
    ll = LinkLoop()
    try:
        yield ll
    finally:
        ll.stop()
