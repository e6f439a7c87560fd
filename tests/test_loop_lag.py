"""The event-loop lag monitor (broker/loop_lag.py) against a block injected into a real asyncio loop.

Ground truth: the test blocks the loop itself (``time.sleep`` inside a coroutine, as a synchronous
step of a broker would) for a known time, and reads what the monitor recorded and logged.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from rocketscope.broker.loop_lag import LoopLagMonitor

BLOCK_S = 0.4
INTERVAL_S = 0.02


async def run_with_a_block(monitor: LoopLagMonitor) -> None:
    monitor.start()
    await asyncio.sleep(INTERVAL_S * 3)  # a few probes before the block
    time.sleep(BLOCK_S)  # the injected block: nothing on the loop runs meanwhile
    await asyncio.sleep(INTERVAL_S * 3)  # the late probe wakes, then a few on time
    await monitor.stop()


def test_a_blocked_loop_is_measured_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    lags: list[float] = []
    monitor = LoopLagMonitor(lags.append, interval_s=INTERVAL_S, warn_s=0.25, what="test loop")
    with caplog.at_level(logging.WARNING, logger="rocketscope.broker.loop_lag"):
        asyncio.run(run_with_a_block(monitor))
    # the probe asleep when the block began woke at most one interval before the block ended: it saw at
    # least BLOCK_S - INTERVAL_S of lag (more on a loaded machine, never less)
    assert max(lags) >= BLOCK_S - INTERVAL_S, lags
    assert monitor.max_lag_s == max(lags)
    assert monitor.late_total >= 1
    warnings = [r.getMessage() for r in caplog.records if "ran late" in r.getMessage()]
    assert len(warnings) == 1, warnings  # one report per period, not one per late probe
    assert "test loop ran late: up to" in warnings[0]
    reported_ms = int(warnings[0].split("up to ")[1].split(" ms")[0])
    assert reported_ms == round(max(lags) * 1000)


def test_late_probes_within_a_period_are_reported_together_with_the_worst() -> None:
    monitor = LoopLagMonitor(None, warn_s=0.25, report_every_s=3600)
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("rocketscope.broker.loop_lag")
    logger.addHandler(handler)
    try:
        for lag in (0.3, 0.01, 0.9, 0.5):
            monitor.observe(lag)
    finally:
        logger.removeHandler(handler)
    assert len(records) == 1 and "up to 300 ms" in records[0]  # the first late probe is reported at once
    assert monitor.late_total == 3 and monitor.max_lag_s == 0.9
    assert monitor._pending == [0.9, 0.5]  # kept for the next report, a period later
