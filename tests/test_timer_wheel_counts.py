"""TimerWheel.counts (broker/timer_store.py), the bulk read behind rocketmq_timer_message_snapshot, against
units the test put into known slots: synced and unsynced slots, the wheel's wrap, and a slot of another turn."""

from __future__ import annotations

from pathlib import Path

from rocketscope.broker.timer_store import TimerWheel

BASE = 1_700_000_000_000


def test_counts_match_the_units_put_per_slot(tmp_path: Path) -> None:
    w = TimerWheel(tmp_path / "wheel", 1000, slots_total=100)
    try:
        put = {0: 3, 5: 1, 98: 2, 99: 1}
        for k, n in put.items():
            for _ in range(n):
                w.put(BASE + k * 1000, 7)
        expected = [put.get(k, 0) for k in range(100)]
        assert w.counts(BASE, 100) == expected  # unsynced: from memory
        w.sync()
        assert w.counts(BASE, 100) == expected  # synced: from the file
        assert w.counts(BASE + 98_000, 4) == [2, 1, 0, 0]  # across the wrap: slots 0 and 1 of this turn are empty
        w.put(BASE + 100_000, 7)  # slot index 0 again, one turn later: replaces the old turn's 3
        assert w.counts(BASE + 100_000, 1) == [1] and w.counts(BASE, 1) == [0]
        w.sync()
        assert w.counts(BASE + 99_000, 2) == [1, 1] and w.counts(BASE, 1) == [0]
    finally:
        w.close()
