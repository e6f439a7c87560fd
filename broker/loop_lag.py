"""How late the event loop runs what is due: the one number that says a Python server is starved.

Why: every timer of a broker shares one asyncio loop — Raft ticks and heartbeats, HA heartbeats, the
timer wheel, long polls.  When the loop is busy (a large synchronous step) or the process gets too
little CPU (a loaded machine), all of them run late together.  A DLedger member whose loop runs
300-600 ms late misses its heartbeats and its peers elect another leader (the chaos runs' election
storms at load 10-15, docs/CHAOS.md); a controller-mode master whose slaves answer late removes them
from the SyncStateSet.  Without this figure such a storm looks like a network fault.

The monitor sleeps ``interval_s`` again and again and measures by how much each wake-up comes later
than asked (asyncio's own slow-callback report needs debug mode, which slows everything).  Each lag
goes to ``on_lag`` (the broker's histogram ``rocketscope_event_loop_lag``); lags of ``warn_s`` or more
are logged at WARNING, at most one line per ``report_every_s`` with the worst of the period, so a
starved process does not also flood its log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

INTERVAL_S = 0.1  # how often the loop is probed: a lag shorter than this is still measured, only less often
WARN_S = 0.25  # lags from here on are logged: close to the shortest Raft election timeout (300 ms)
REPORT_EVERY_S = 10.0


class LoopLagMonitor:
    def __init__(self, on_lag: Callable[[float], None] | None = None, *, interval_s: float = INTERVAL_S,
                 warn_s: float = WARN_S, report_every_s: float = REPORT_EVERY_S, what: str = "event loop") -> None:
        self.on_lag = on_lag
        self.interval_s = interval_s
        self.warn_s = warn_s
        self.report_every_s = report_every_s
        self.what = what
        self.max_lag_s = 0.0  # the worst lag since start (admin status, tests)
        self.late_total = 0  # probes that came warn_s or more late
        self._pending: list[float] = []  # late probes not yet reported
        # never reported: the first late probe is reported at once (0.0 was "reported at boot" on the monotonic
        # clock, which held the first report back until report_every_s after the machine started)
        self._reported_at = float("-inf")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(self.interval_s)
            self.observe(time.monotonic() - asked - self.interval_s)

    def observe(self, lag_s: float) -> None:
        """Record one probe's lag (seconds); public so a test can feed known values."""
        lag_s = max(0.0, lag_s)
        self.max_lag_s = max(self.max_lag_s, lag_s)
        if self.on_lag is not None:
            self.on_lag(lag_s)
        if lag_s >= self.warn_s:
            self.late_total += 1
            self._pending.append(lag_s)
        now = time.monotonic()
        if self._pending and now - self._reported_at >= self.report_every_s:
            log.warning("%s ran late: up to %.0f ms (%d probes of every %.0f ms at least %.0f ms late since the "
                        "last report); timers, Raft heartbeats and replies waited that long", self.what,
                        max(self._pending) * 1000, len(self._pending), self.interval_s * 1000, self.warn_s * 1000)
            self._pending.clear()
            self._reported_at = now
