"""CPU per call of a DLedger leader's throttled replication events, ``emit`` against ``advance`` (issue 20, session 26).

    nice -n 15 .venv/bin/python bench/ha_event_micro.py [--readies 60000] [--rounds 3]

The leader's pattern (docs/BENCHMARKS.md, "DLedger leader: HA events and the Raft driver per Ready"): per
Ready an ack of each of two followers and a commit advance, ~9 messages (~9.5 KiB) further each, Readies
~0.7 ms apart on a test clock, so ~140 advances fold into each of the three keys' events per 100 ms interval;
the delivery loop's ``_emit_due_deferred`` every 100 Readies, the spool under a temporary directory, the
broker's metric callback replaced by a counter.  Prints CPU µs per Ready (three calls) and per event recorded,
best of ``--rounds``, for the calls ``DLedgerNode._emit`` made before (``emit`` with keywords) and makes now
(``advance``).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rocketscope.broker.ha import event_log
from rocketscope.broker.ha.event_log import HaEventLog
from rocketscope.ha_events import COMMIT_ADVANCED, REPLICA_ACK, HaEvent


class Clock:
    def __init__(self) -> None:
        self.us = 1_700_000_000_000_000

    def time(self) -> float:
        return self.us / 1e6


def run(readies: int, use_advance: bool, spool: Path) -> tuple[float, int]:
    clock = Clock()
    event_log.time.time = clock.time  # type: ignore[assignment]
    told = [0]

    async def append(events: list[HaEvent]) -> bool:
        return True

    def on_throttled(type_: str, n: int) -> None:
        told[0] += n

    log = HaEventLog("c", "g", "n0", "127.0.0.1:1", append, writable=lambda: True, on_throttled=on_throttled,
                     context=lambda: {"term": 3}, spool=spool)
    log.load_spool(spool)
    term, offset = 3, 0
    emit, advance = log.emit, log.advance
    call: Callable[[int, int], None]
    if use_advance:
        def call(acked: int, committed: int) -> None:
            advance(REPLICA_ACK, acked, term, "n1")
            advance(REPLICA_ACK, acked, term, "n2")
            advance(COMMIT_ADVANCED, committed, term)
    else:
        def call(acked: int, committed: int) -> None:
            emit(REPLICA_ACK, term=term, replica="n1", offset=acked)
            emit(REPLICA_ACK, term=term, replica="n2", offset=acked)
            emit(COMMIT_ADVANCED, term=term, offset=committed)
    start = time.thread_time_ns()
    for i in range(readies):
        clock.us += 700
        offset += 9 * 1060
        log.note_data(offset)
        call(offset, offset - 9 * 1060)
        if i % 100 == 99:
            log._emit_due_deferred()
            log.pending.clear()
            log._rewrite_spool()
    spent = time.thread_time_ns() - start
    recorded = log.written + sum(1 for _ in log.recent)
    log._close_spool()
    return spent / 1000, recorded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readies", type=int, default=60_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    real_time = time.time
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        spool = Path(tmp) / "spool"
        for _ in range(args.rounds):
            for name, use in (("emit", False), ("advance", True)):
                asyncio.set_event_loop(asyncio.new_event_loop())
                us, _ = run(args.readies, use, spool)
                best[name] = min(best.get(name, float("inf")), us / args.readies)
    event_log.time.time = real_time  # type: ignore[assignment]
    for name, per_ready in best.items():
        print(f"{name:8s} {per_ready:6.2f} µs per Ready (3 calls), {per_ready / 3:5.2f} µs per call")


if __name__ == "__main__":
    main()
