"""Production adapters for the Raft driver (broker/raft/driver.py): the asyncio clock and a threaded fsync.

The simulator injects its own (tests/sim/node.py); these two are all that ties the driver
to asyncio, so that DLedger and the controller run exactly the code the simulator checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._task: asyncio.Task[None] | None = None

    def __call__(self, fn: Callable[[], None] | None, done: Callable[[], None]) -> None:
        if fn is None:  # nothing to make durable: go on at once, as the Ready contract allows
            done()
            return
        self._task = asyncio.get_running_loop().create_task(self._run(fn, done), name=f"{self.name}-fsync")

    async def _run(self, fn: Callable[[], None], done: Callable[[], None]) -> None:
        try:
            await asyncio.to_thread(fn)
        except OSError:
            log.exception("%s: fsync of the Raft log failed; this member stops answering", self.name)
            return
        done()

    async def drain(self) -> None:
        """Wait for an fsync in flight (before closing the files it syncs)."""
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await task
