"""Throttled replication events keep every advance (broker/ha/event_log.py, rocketscope/ha_events.py).

The ground truth is the sequence of (offset, time) advances the test feeds in at times it
controls: after throttling, the written events are at most one per interval, yet expanding them
gives back every advance with its own time, so a message joined to "the first commit past its
offset" is timed exactly, not up to an interval late.
"""

from __future__ import annotations

import random

import pytest

from rocketscope.broker.ha import event_log
from rocketscope.broker.ha.event_log import HaEventLog
from rocketscope.ha_events import COMMIT_ADVANCED, HaEvent, HaEventError

INTERVAL_MS = 100


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def time(self) -> float:
        return self.ms / 1000


def fresh_log(monkeypatch: pytest.MonkeyPatch) -> tuple[HaEventLog, Clock]:
    clock = Clock()
    monkeypatch.setattr(event_log.time, "time", clock.time)

    async def append(events: list[HaEvent]) -> bool:
        return True

    log = HaEventLog("c", "g", "n0", "127.0.0.1:1", append, writable=lambda: True, commit_interval_ms=INTERVAL_MS)
    return log, clock


def test_every_advance_survives_throttling_with_its_own_time(monkeypatch: pytest.MonkeyPatch) -> None:
    log, clock = fresh_log(monkeypatch)
    rng = random.Random(7)
    fed: list[tuple[int, int]] = []
    offset = 0
    for _ in range(2_000):  # advances 0-9 ms apart: ~40 per interval
        clock.ms += rng.randint(0, 9)
        offset += rng.randint(1, 500)
        log.note_data(offset)
        log.emit(COMMIT_ADVANCED, offset=offset)
        fed.append((offset, clock.ms))
        if rng.random() < 0.05:  # the delivery loop wakes up now and then
            log._emit_due_deferred()
    clock.ms += INTERVAL_MS
    log._emit_due_deferred()

    written = [e for e in log.pending if e.type == COMMIT_ADVANCED]
    span_ms = fed[-1][1] - fed[0][1]
    assert len(written) <= span_ms / INTERVAL_MS + 2  # the throttle: one event per interval at most
    # JSON round trip, as readers get them from RMQ_SYS_HA_EVENTS
    expanded = [x for e in written for x in HaEvent.from_json(e.to_json()).expand()]
    assert [(e.offset, e.ts) for e in expanded] == fed  # every advance, in order, with the time it happened
    assert sum(log.throttled.values()) == len(fed) - len(written)


def test_an_offset_reported_again_keeps_the_time_it_was_first_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    log, clock = fresh_log(monkeypatch)
    log.note_data(10_000)
    for offset, at in ((100, 1), (200, 2), (200, 3), (150, 4), (300, 5)):  # 200 again, then a lower one
        clock.ms = 1_700_000_000_000 + at
        log.emit(COMMIT_ADVANCED, offset=offset)
    clock.ms += INTERVAL_MS
    log._emit_due_deferred()
    expanded = [(x.offset, x.ts - 1_700_000_000_000) for e in log.pending for x in e.expand()]
    assert expanded == [(100, 1), (200, 2), (300, 5)]


def test_steps_are_validated_by_name() -> None:
    base = '{"type":"commit_advanced","cluster":"c","group":"g","node":"n","ts":1,"offset":5,'
    with pytest.raises(HaEventError, match="'steps'"):
        HaEvent.from_json(base + '"steps":[[1]]}')
    with pytest.raises(HaEventError, match="'steps'"):
        HaEvent.from_json(base + '"steps":[["1",2]]}')
    assert HaEvent.from_json(base + '"steps":[[1,0]]}').expand()[0].offset == 1
    # an event without steps keeps the body it always had (no "steps" key)
    assert "steps" not in HaEvent.from_json(base[:-1] + "}").to_json()
