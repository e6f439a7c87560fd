"""Group commit: many sends, one fsync, and the next batch gathering while the disk works.

SYNC_FLUSH senders wait on ``wait_synced(end_offset)``.  The first waiter finding no sync
under way starts one at once in a worker thread (no hop through a flusher task); the
senders that append while that fdatasync runs (the GIL is released meanwhile) wait for
the next one, which starts the moment the first returns and covers all of them.  So the
event loop encodes batch k+1 while the disk syncs batch k, and the disk's fsync rate
bounds batches, not messages.  (A worker thread needs the GIL back when its fdatasync
returns; a busy event loop can hold it for up to the interpreter's switch interval, which
is part of what a group commit costs here: see docs/BENCHMARKS.md.)  A periodic sync
(``interval_s``) covers ASYNC_FLUSH and retries after a failed fsync (its waiters time out
with FLUSH_DISK_TIMEOUT meanwhile).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class FlushService:
    def __init__(self, sync: Callable[[], int], synced: Callable[[], int], interval_s: float) -> None:
        self._sync = sync
        self._synced = synced
        self._interval = interval_s
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._seq = itertools.count()
        self._inflight: asyncio.Future[int] | None = None  # the sync running in a worker thread
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.syncs = 0  # fdatasync rounds started (each covers every segment with unsynced bytes)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="commitlog-flush")

    @property
    def idle(self) -> bool:
        """No sync is running."""
        return self._inflight is None

    def start_sync(self) -> None:
        """Start a sync now unless one is running (a group just appended: no need to wait for
        its waiter's task to run first)."""
        if self._inflight is None:
            self._kick(asyncio.get_running_loop())

    def _waiter(self, offset: int, timeout_s: float) -> tuple[asyncio.Future[bool], asyncio.TimerHandle]:
        """A future resolved when ``offset`` is synced, and its expiry timer: one future and one timer per
        waiter (cheaper than ``wait_for(shield(...))``, the same outcome); starts a sync if none is running."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), fut))
        if self._inflight is None:
            self._kick(loop)
        return fut, loop.call_later(timeout_s, _expire, fut)

    async def wait_synced(self, offset: int, timeout_s: float) -> bool:
        """True once every byte below ``offset`` is on disk; False after ``timeout_s``."""
        if self._synced() >= offset:
            return True
        fut, timer = self._waiter(offset, timeout_s)
        try:
            return await fut
        finally:
            timer.cancel()

    def when_synced(self, offset: int, timeout_s: float, callback: Callable[[bool], None]) -> None:
        """Call ``callback(True)`` once every byte below ``offset`` is on disk, ``callback(False)`` after
        ``timeout_s``: ``wait_synced`` without a task to await it.  A SYNC_FLUSH group commit waits this way
        (broker/store/message_store.py ``_append_group``): a task per group cost its creation and two steps of
        the event loop, for a wait that only hands the outcome on (issue 20)."""
        if self._synced() >= offset:
            callback(True)
            return
        fut, timer = self._waiter(offset, timeout_s)

        def done(f: asyncio.Future[bool]) -> None:
            timer.cancel()
            callback(not f.cancelled() and f.result())

        fut.add_done_callback(done)

    def _kick(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[int]:
        """Start a sync in a worker thread unless one is running; return the running one."""
        if self._inflight is None:
            self.syncs += 1
            self._inflight = loop.run_in_executor(None, self._sync)
            self._inflight.add_done_callback(self._done)
        return self._inflight

    def _done(self, fut: asyncio.Future[int]) -> None:
        self._inflight = None
        try:
            synced = fut.result()
        except OSError as exc:  # a failing disk: waiters time out with FLUSH_DISK_TIMEOUT; the tick retries
            log.error("commit log fsync failed: %s", exc)
            return
        except Exception:  # never leave the waiters without a flusher
            log.exception("commit log fsync failed")
            return
        waiters = self._waiters
        while waiters and waiters[0][0] <= synced:
            _, _, w = heapq.heappop(waiters)
            if not w.done():
                w.set_result(True)
        if waiters and not self._closing:
            self._kick(fut.get_loop())  # records appended during this sync: the next group, now

    async def _run(self) -> None:
        while not self._closing:
            await asyncio.sleep(self._interval)
            if not self._closing:
                await self.flush()

    async def flush(self) -> None:
        """One sync that starts after this call (after the one running, if any), waiters woken."""
        loop = asyncio.get_running_loop()
        if self._inflight is not None:
            await asyncio.wait([self._inflight])
        await asyncio.wait([self._kick(loop)])

    async def stop(self) -> None:
        self._closing = True
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.flush()
