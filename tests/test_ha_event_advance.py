"""``HaEventLog.advance`` (the DLedger member's throttled acks and commit advances) records exactly what
``HaEventLog.emit`` records for the same calls (broker/ha/event_log.py).

Ground truth: a second log fed the same advances through ``emit(type, term=, replica=, offset=)``, the call
``DLedgerNode._emit`` made before (broker/dledger/node.py).  Random runs at a test-controlled clock: acks of
two replicas and commit advances, offsets that go back (a truncation) or repeat, data ends that lag (an
advance covering only event records), ticks of the delivery loop (``_emit_due_deferred``) and small step
bounds.  After every call both logs hold the same events (their JSON, as the topic gets them), the same
waiting events, throttle state and counts; what ``on_throttled`` was told adds up to ``throttled`` once
reported (batched since session 26: per recorded event, not per folded one).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from rocketscope.broker.ha import event_log
from rocketscope.broker.ha.event_log import HaEventLog
from rocketscope.ha_events import COMMIT_ADVANCED, REPLICA_ACK, HaEvent


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def time(self) -> float:
        return self.ms / 1000


def make(told: dict[str, int], interval_ms: int) -> HaEventLog:
    async def append(events: list[HaEvent]) -> bool:
        return True

    def on_throttled(type_: str, n: int) -> None:
        told[type_] = told.get(type_, 0) + n

    return HaEventLog("c", "g", "n0", "127.0.0.1:1", append, writable=lambda: True, ack_interval_ms=interval_ms,
                      commit_interval_ms=interval_ms, context=lambda: {"term": 9}, on_throttled=on_throttled)


def state(log: HaEventLog) -> tuple[Any, ...]:
    deferred = {k: {f: (list(v) if f == "_steps" else v) for f, v in d.items()} for k, d in log._deferred.items()}
    return ([e.to_json() for e in log.pending], deferred, log._last_emit, log._last_offset, dict(log.throttled),
            log.data_end)


@pytest.mark.parametrize("seed", range(6))
def test_advance_records_what_emit_records(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    monkeypatch.setattr(event_log.time, "time", clock.time)
    monkeypatch.setattr(event_log, "MAX_STEPS", rng.choice([3, 50, 4096]))
    told_emit: dict[str, int] = {}
    told_advance: dict[str, int] = {}
    interval = rng.choice([0, 20, 100])
    by_emit, by_advance = make(told_emit, interval), make(told_advance, interval)
    offsets = {"n1": 0, "n2": 0, "": 0}
    term = 3
    for _ in range(3_000):
        clock.ms += rng.choice([0, 0, 1, 3, 7, 40])
        r = rng.random()
        if r < 0.03:  # the delivery loop wakes up
            assert by_emit._emit_due_deferred() == by_advance._emit_due_deferred()
        elif r < 0.05:
            term += 1
        else:
            who = rng.choice(["n1", "n2", ""])
            step = rng.choice([-900, 0, 1, 150, 150, 400, 1000])  # back (a truncation), again, forward
            offsets[who] = max(0, offsets[who] + step)
            if rng.random() < 0.9:  # the data end: usually past the advance, now and then behind it
                end = offsets[who] + rng.choice([0, 100])
                by_emit.note_data(end)
                by_advance.note_data(end)
            if who:
                a = by_emit.emit(REPLICA_ACK, term=term, replica=who, offset=offsets[who])
                b = by_advance.advance(REPLICA_ACK, offsets[who], term, who)
            else:
                a = by_emit.emit(COMMIT_ADVANCED, term=term, offset=offsets[who])
                b = by_advance.advance(COMMIT_ADVANCED, offsets[who], term)
            assert (a is None) == (b is None) and (a is None or a.to_json() == b.to_json())  # type: ignore[union-attr]
        assert state(by_emit) == state(by_advance)
    clock.ms += 1_000
    by_emit._emit_due_deferred()
    by_advance._emit_due_deferred()
    assert state(by_emit) == state(by_advance)
    by_emit._report_throttled()
    by_advance._report_throttled()
    assert told_emit == told_advance == {k: v for k, v in by_emit.throttled.items() if v}
    written = [e for e in by_advance.pending if e.type in (REPLICA_ACK, COMMIT_ADVANCED)]
    assert written
    if interval:  # the throttle folded advances into steps (with no interval every advance is its own event)
        assert any(e.steps for e in written) and sum(by_advance.throttled.values()) > 100
