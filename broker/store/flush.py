"""Group commit: many sends, one fsync, and the next batch gathering while the disk works.

SYNC_FLUSH senders wait on ``wait_synced(end_offset)`` or ``when_synced``.  The first waiter finding no sync
under way starts one at once; the senders that append while that fdatasync runs wait for the next one, which
starts the moment the first ends and covers all of them.  So the event loop encodes batch k+1 while the disk
syncs batch k, and the disk's fsync rate bounds batches, not messages.  A periodic sync (``interval_s``) covers
ASYNC_FLUSH and retries after a failed fsync (its waiters time out with FLUSH_DISK_TIMEOUT meanwhile).

A round is planned on the event loop (``plan``: the offset it will cover and the file descriptors to
fdatasync), synced in another thread, and ended on the event loop (``mark``: that offset is on disk, then the
waiters at or below it run).  The thread is the compiled one of broker/fastpath.c when it is there
(``_CompiledRunner``: it never takes the GIL, and tells the loop through an eventfd); a Python worker thread
otherwise (``_ExecutorRunner``, the reference).  Session 20 measured the worker thread's hand-offs at ~8 GIL
transfers and two chained futures per round, taken from a busy event loop (docs/BENCHMARKS.md "SYNC_FLUSH per
fsync round").  For the same reason a waiter is a callback in a heap, with one timer for all of them (armed at
the earliest deadline, usually seconds away), not a future and a timer each.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import os
from collections.abc import Callable

from ..speedups import compiled as _C

log = logging.getLogger(__name__)

Plan = Callable[[], tuple[int, list[int]]]
Done = Callable[[int], None]  # the round's errno: 0 once every fdatasync succeeded


def _fdatasync_all(fds: list[int]) -> int:
    """The reference round, in a worker thread: fdatasync each descriptor in order; the first failure's errno."""
    for fd in fds:
        try:
            os.fdatasync(fd)
        except OSError as exc:
            return exc.errno or 5  # EIO when the OS gave none
    return 0


class _ExecutorRunner:
    """Rounds through ``loop.run_in_executor`` (the reference: ROCKETSCOPE_PURE_PYTHON=1, no eventfd)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        self._loop = loop
        self._done = done

    def submit(self, fds: list[int]) -> None:
        self._loop.run_in_executor(None, _fdatasync_all, fds).add_done_callback(self._ended)

    def _ended(self, fut: asyncio.Future[int]) -> None:
        try:
            err = fut.result()
        except BaseException:  # the executor shut down under us, or worse: a failed round, logged
            log.exception("commit log fsync round failed")
            err = 5
        self._done(err)

    def close(self) -> None:
        pass


class _CompiledRunner:
    """Rounds in broker/fastpath.c's fsync thread; the loop watches its eventfd (one read per round)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        assert _C is not None
        self._loop = loop
        self._done = done
        self._handle = _C.syncer_new()
        self._fd: int = _C.syncer_fd(self._handle)
        loop.add_reader(self._fd, self._ready)

    def submit(self, fds: list[int]) -> None:
        assert _C is not None
        _C.syncer_submit(self._handle, fds)

    def _ready(self) -> None:
        assert _C is not None
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            return
        self._done(_C.syncer_result(self._handle))

    def close(self) -> None:
        assert _C is not None
        self._loop.remove_reader(self._fd)
        _C.syncer_close(self._handle)


def compiled_available() -> bool:
    """Whether rounds can run in broker/fastpath.c's thread (the compiled module, Linux's eventfd)."""
    return _C is not None and hasattr(_C, "syncer_new") and hasattr(os, "eventfd")


def _runner(loop: asyncio.AbstractEventLoop, done: Done, kind: str) -> _ExecutorRunner | _CompiledRunner:
    if kind != "executor" and compiled_available():
        try:
            return _CompiledRunner(loop, done)
        except NotImplementedError:  # a loop without add_reader
            pass
    return _ExecutorRunner(loop, done)


class FlushService:
    def __init__(self, plan: Plan, mark: Callable[[int], None], synced: Callable[[], int],
                 interval_s: float, runner: str = "auto") -> None:
        """``runner``: "auto" (the compiled thread when available), or "executor" (the reference; tests and
        bench/store_dispatch_micro.py compare the two)."""
        self._kind = runner
        self._plan = plan
        self._mark = mark
        self._synced = synced
        self._interval = interval_s
        # (offset, seq, callback, deadline): a heap by offset; ``seq`` keeps callbacks from being compared
        self._waiters: list[tuple[int, int, Callable[[bool], None], float]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None  # at the earliest deadline of a waiter, when there is one
        self._timer_at = 0.0
        self._round: int | None = None  # the offset the round under way covers; None: no sync runs
        self._round_ends: list[asyncio.Future[None]] = []  # flush() callers waiting for the end of a round
        self._runner: _ExecutorRunner | _CompiledRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.syncs = 0  # fdatasync rounds started (each covers every segment with unsynced bytes)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="commitlog-flush")

    @property
    def idle(self) -> bool:
        """No sync is running."""
        return self._round is None

    @property
    def runner(self) -> str:
        """Which thread syncs: "compiled" (broker/fastpath.c) or "executor" (a Python worker); "" before the first."""
        if self._runner is None:
            return ""
        return "compiled" if isinstance(self._runner, _CompiledRunner) else "executor"

    def start_sync(self) -> None:
        """Start a sync now unless one is running (a group just appended: no need to wait for
        its waiter's task to run first)."""
        if self._round is None:
            self._kick()

    def _add_waiter(self, offset: int, timeout_s: float, callback: Callable[[bool], None]) -> None:
        """``callback(True)`` once ``offset`` is synced, ``callback(False)`` at the deadline; starts a sync if
        none is running."""
        loop = self._loop or self._bind()
        deadline = loop.time() + timeout_s
        heapq.heappush(self._waiters, (offset, next(self._seq), callback, deadline))
        if self._timer is None or deadline < self._timer_at:
            self._arm(deadline)
        if self._round is None:
            self._kick()

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._expire)

    def _expire(self) -> None:
        """The earliest deadline passed: every waiter whose deadline has passed gets False."""
        self._timer = None
        assert self._loop is not None
        now = self._loop.time()
        expired = [w for w in self._waiters if w[3] <= now]
        if expired:
            self._waiters = [w for w in self._waiters if w[3] > now]
            heapq.heapify(self._waiters)
            for w in expired:
                _call(w[2], False)
        if self._waiters:
            self._arm(min(w[3] for w in self._waiters))

    async def wait_synced(self, offset: int, timeout_s: float) -> bool:
        """True once every byte below ``offset`` is on disk; False after ``timeout_s``."""
        if self._synced() >= offset:
            return True
        fut: asyncio.Future[bool] = (self._loop or self._bind()).create_future()

        def resolve(ok: bool) -> None:
            if not fut.done():
                fut.set_result(ok)

        self._add_waiter(offset, timeout_s, resolve)
        return await fut

    def when_synced(self, offset: int, timeout_s: float, callback: Callable[[bool], None]) -> None:
        """Call ``callback(True)`` once every byte below ``offset`` is on disk, ``callback(False)`` after
        ``timeout_s``: ``wait_synced`` without a task to await it.  A SYNC_FLUSH group commit waits this way
        (broker/store/message_store.py ``_append_group``): a task per group cost its creation and two steps of
        the event loop, for a wait that only hands the outcome on (issue 20)."""
        if self._synced() >= offset:
            callback(True)
            return
        self._add_waiter(offset, timeout_s, callback)

    def _bind(self) -> asyncio.AbstractEventLoop:
        self._loop = loop = asyncio.get_running_loop()
        return loop

    def _kick(self) -> None:
        """Start a round unless one is running: plan it here, sync it in the runner's thread."""
        if self._round is not None:
            return
        loop = self._loop or self._bind()
        if self._runner is None:
            self._runner = _runner(loop, self._ended, self._kind)
        target, fds = self._plan()
        self.syncs += 1
        self._round = target
        if fds:
            self._runner.submit(fds)
        else:  # nothing unsynced below target: end the round in the next iteration, as a thread would
            loop.call_soon(self._ended, 0)

    def _ended(self, err: int) -> None:
        """A round ended (in the event loop): mark its offset synced, run the waiters it covers, start the next."""
        target, self._round = self._round, None
        ends, self._round_ends = self._round_ends, []
        for f in ends:
            if not f.done():
                f.set_result(None)
        if target is None:
            return
        if err:  # a failing disk: waiters time out with FLUSH_DISK_TIMEOUT; the tick retries
            log.error("commit log fsync failed: %s", os.strerror(err))
            return
        self._mark(target)
        synced = self._synced()
        waiters = self._waiters
        while waiters and waiters[0][0] <= synced:
            _call(heapq.heappop(waiters)[2], True)
        if not waiters and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if waiters and not self._closing:
            self._kick()  # records appended during this sync: the next group, now

    async def _run(self) -> None:
        while not self._closing:
            await asyncio.sleep(self._interval)
            if not self._closing:
                await self.flush()

    async def _round_end(self) -> None:
        fut: asyncio.Future[None] = (self._loop or self._bind()).create_future()
        self._round_ends.append(fut)
        await fut

    async def flush(self) -> None:
        """One sync that starts after this call (after the one running, if any), waiters woken."""
        if self._round is not None:
            await self._round_end()
        self._kick()
        await self._round_end()

    async def stop(self) -> None:
        self._closing = True
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._runner is not None:
            self._runner.close()
            self._runner = None


def _call(callback: Callable[[bool], None], ok: bool) -> None:
    """Run a waiter's callback; one that raises must not keep the others from theirs."""
    try:
        callback(ok)
    except Exception:
        log.exception("flush waiter failed")
