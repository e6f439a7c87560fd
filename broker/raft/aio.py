"""Production adapters for the Raft driver (broker/raft/driver.py): the asyncio clock and a threaded fsync.

The simulator injects its own (tests/sim/node.py); these two are all that ties the driver
to asyncio, so that DLedger and the controller run exactly the code the simulator checks.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class AsyncioClock:
    """``time.monotonic`` and the running loop's timers (the loop is looked up when first needed)."""

    def now(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, fn: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay, fn)

    def call_soon(self, fn: Callable[[], None]) -> None:
        asyncio.get_running_loop().call_soon(fn)


class ThreadSyncer:
    """Runs each fsync in a worker thread (the event loop keeps serving), then its callback in the loop.

    A failed fsync is logged and its callback never runs: the driver then holds the Ready
    unsent, as it must (its messages would promise state that may not be on disk).

    One thread of its own, fed through a ``SimpleQueue``, rather than ``asyncio.to_thread``: the
    driver hands over one fsync per Ready (thousands a second on every member), and ``to_thread``
    costs a task, a context copy, an executor future and its wrapper each time (session 19,
    docs/BENCHMARKS.md).  The thread ends after ``IDLE_S`` without work and is started again on
    the next call, so a member that stops (or a test that never drains) leaves no thread behind.
    """

    IDLE_S = 1.0

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, Callable[[], None],
                                             Callable[[], None]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._in_flight = 0  # handed to the thread, not yet back on the loop (read and written on the loop)

    def __call__(self, fn: Callable[[], None] | None, done: Callable[[], None]) -> None:
        if fn is None:  # nothing to make durable: go on at once, as the Ready contract allows
            done()
            return
        self._in_flight += 1
        with self._lock:
            self._queue.put((asyncio.get_running_loop(), fn, done))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=f"{self.name}-fsync", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        q = self._queue
        while True:
            try:
                loop, fn, done = q.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    if q.empty():  # a call that queued after the timeout sees ``_thread`` None and starts one
                        self._thread = None
                        return
                continue
            try:
                fn()
            except OSError:
                log.exception("%s: fsync of the Raft log failed; this member stops answering", self.name)
                callback = self._failed
            else:
                callback = functools.partial(self._done, done)
            try:
                loop.call_soon_threadsafe(callback)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def _done(self, done: Callable[[], None]) -> None:
        self._in_flight -= 1
        done()

    def _failed(self) -> None:
        self._in_flight -= 1

    async def drain(self) -> None:
        """Wait for the fsyncs in flight (before closing the files they sync)."""
        while self._in_flight > 0:
            await asyncio.sleep(0.005)
