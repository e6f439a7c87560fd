"""Group commit: many sends, one fsync.

SYNC_FLUSH senders wait on ``wait_synced(end_offset)``; a single flusher task syncs the
commit log in a worker thread and wakes every waiter whose bytes are now durable.  While
one fsync runs, the next batch accumulates, so the disk's fsync rate bounds batches,
not messages.  ASYNC_FLUSH only runs the periodic flush.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class FlushService:
    def __init__(self, sync: Callable[[], int], synced: Callable[[], int], interval_s: float) -> None:
        self._sync = sync
        self._synced = synced
        self._interval = interval_s
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="commitlog-flush")

    async def wait_synced(self, offset: int, timeout_s: float) -> bool:
        """True once every byte below ``offset`` is on disk; False after ``timeout_s``."""
        if self._synced() >= offset:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), fut))
        self._wake.set()
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return False

    async def _run(self) -> None:
        while not self._closing:
            try:
                await asyncio.wait_for(self._wake.wait(), self._interval)
            except TimeoutError:
                pass
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        try:
            synced = await asyncio.to_thread(self._sync)
        except OSError as exc:  # a failing disk: waiters time out with FLUSH_DISK_TIMEOUT
            log.error("commit log fsync failed: %s", exc)
            return
        while self._waiters and self._waiters[0][0] <= synced:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(True)
        if self._waiters:
            self._wake.set()

    async def stop(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task:
            await self._task
        await self.flush()
