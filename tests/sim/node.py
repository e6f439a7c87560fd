"""A simulated server: the production Raft driver (broker/raft/driver.py) on simulated storage, clock and network.

What is simulated is only what the driver has injected: the log (tests/sim/storage.py:
durable and unsynced parts), the clock (virtual time in ticks, timers fired by the
scenario, so a paused or skewed node simply misses them), the transport (the seeded
network of tests/sim/network.py) and the fsync runner (the scenario decides when a
pending fsync completes, and a crash before then loses it).  Everything else — the Ready
order, when messages may leave, applying, proposal waiters, role changes — is the code
DLedger and the controller run.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from rocketscope.broker.raft import Entry, RaftConfig, RaftNode, Ready
from rocketscope.broker.raft.driver import RaftDriver, ReadyObserver, Transport

from .storage import SimLog


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class SimClock:
    """Virtual time read from the scenario in ticks; timers fire only when it says so.

    ``unit`` is one tick in the clock's seconds: 1.0 for the in-memory family (its driver ticks
    every 1.0), DLedger's tick for the DLedger family, whose member reads the clock in seconds
    (its lease, the Raft log's lazy commit writes) as in production.
    """

    def __init__(self, now: Callable[[], int], unit: float = 1.0) -> None:
        self._now = now
        self.unit = unit
        self._timers: list[tuple[float, int, _Timer, Callable[[], None]]] = []
        self._seq = 0
        self._soon: list[Callable[[], None]] = []

    def now(self) -> float:
        return self._now() * self.unit

    def call_later(self, delay: float, fn: Callable[[], None]) -> _Timer:
        handle = _Timer()
        heapq.heappush(self._timers, (self._now() + delay / self.unit, self._seq, handle, fn))
        self._seq += 1
        return handle

    def call_soon(self, fn: Callable[[], None]) -> None:
        self._soon.append(fn)

    def fire_due(self) -> None:
        """Run the timers due by now (a skipped or paused node runs them late, once)."""
        timers, now = self._timers, self._now()
        while timers and timers[0][0] <= now:
            _, _, handle, fn = heapq.heappop(timers)
            if not handle.cancelled:
                fn()

    def run_soon(self) -> None:
        while self._soon:
            soon, self._soon = self._soon, []
            for fn in soon:
                fn()


class DeferredSync:
    """The fsync runner both simulated nodes give their driver: every Ready waits in ``pending_sync``
    until the scenario completes it (``finish_sync``) or a crash drops it."""

    pending_sync: tuple[Callable[[], None] | None, Callable[[], None]] | None = None
    # the pending Ready sent appends with entries before its fsync (ready.py early_messages): the scenario's
    # pipeline profile crashes leaders in that window
    early_unsynced = False

    def _defer_sync(self, fn: Callable[[], None] | None, done: Callable[[], None]) -> None:
        """Every Ready waits here, fsync or not: the process may stall or die between a write and its send."""
        self.pending_sync = (fn, done)

    def finish_sync(self) -> None:
        """The pending fsync (if the Ready needs one) completes: the driver sends, applies and goes on writing."""
        pending = self.pending_sync
        assert pending is not None
        self.pending_sync = None
        self.early_unsynced = False
        fn, done = pending
        if fn is not None:
            fn()
            self._synced()
        done()

    def _synced(self) -> None:
        """After a completed fsync: what the node remembers of it (nothing here)."""


class SimNode(DeferredSync):
    def __init__(self, config: RaftConfig, lazy_commit: bool = False) -> None:
        self.id = config.node_id
        self.config = config
        self.log = SimLog(lazy_commit)
        self.driver: RaftDriver | None = None
        self.clock: SimClock | None = None
        self.pending_sync: tuple[Callable[[], None] | None, Callable[[], None]] | None = None
        self.applied = 0
        self.up = False
        self.starts = 0
        self.paused_until = 0  # SIGSTOP: no ticks, no processing, messages wait
        self.written: list[Ready] = []  # Readys written since the scenario last looked
        self.lost_unsynced = False  # the last crash lost unsynced writes

    @property
    def raft(self) -> RaftNode | None:
        return self.driver.node if self.driver is not None else None

    @property
    def live(self) -> Any:
        return self.log.live

    @property
    def durable(self) -> Any:
        return self.log.durable

    def start(self, rng_seed: int, transport: Transport, now: Callable[[], int],
              observer: ReadyObserver | None = None) -> None:
        self.log.open()
        raft = RaftNode(self.config, self.log, self.log.hard_state, rng_seed)
        self.clock = SimClock(now)
        self.pending_sync = None
        self.applied = 0
        self.driver = RaftDriver(raft, self.log, transport, self.clock, self._defer_sync, 1.0,
                                 apply=self._apply, observer=observer)
        self.driver.start()
        self.up = True
        self.starts += 1

    @property
    def has_unsynced(self) -> bool:
        return bool(self.log.unsynced)

    def propose(self, data: bytes, answer: Callable[[int, bool], None]) -> tuple[int, bytes]:
        """A client's write: (index, the entry's bytes), or ProposalDropped."""
        assert self.driver is not None
        return self.driver.propose([data], answer), data

    def _apply(self, entries: list[Entry]) -> None:
        self.applied = entries[-1].index

    def crash(self, lose_unsynced: bool) -> bool:
        """The process dies (a pending fsync never completes); True when unsynced writes were lost."""
        self.up = False
        self.paused_until = 0
        if self.driver is not None:
            self.driver.stop("crash")
        self.driver = None
        self.clock = None
        self.pending_sync = None
        self.early_unsynced = False
        self.written = []
        self.lost_unsynced = self.log.crash(lose_unsynced)
        return self.lost_unsynced
