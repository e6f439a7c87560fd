#!/usr/bin/env python3
"""Run the Raft simulator over a range of seeds, or replay one seed with its trace.

    .venv/bin/python tests/sim/run.py --seeds 0-100000          # long run, all cores, progress
    .venv/bin/python tests/sim/run.py --replay 1234 -v          # one seed, event trace
    .venv/bin/python tests/sim/run.py --replay 1234 -vv         # ... and every message
    .venv/bin/python tests/sim/run.py --seeds 0-500 --bug commit_old_term   # prove it finds a bug
    .venv/bin/python tests/sim/run.py --seeds 0-500 --profile dledger     # DLedger's log files, simulated disk
    .venv/bin/python tests/sim/run.py --seeds 0-1500 --profile pipeline  # leaders crash between send and fsync
    .venv/bin/python tests/sim/run.py --seeds 0-1500 --profile lazy_commit  # commit index sent lazily (DLedger's)
    .venv/bin/python tests/sim/run.py --seeds 0-500 --profile dledger_lazy  # DLedger's log files with the lazy commit

A range ``A-B`` runs seeds A <= seed < B.  Exit status 1 when any seed fails; each
failure prints its replay command.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rocketscope.broker.raft.config import TESTING_FAULTS
from sim.scenario import PROFILES, SimulationFailure, run_seed, try_seed


def parse_range(text: str) -> range:
    if "-" in text:
        lo, hi = text.split("-", 1)
        return range(int(lo), int(hi))
    return range(int(text), int(text) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0-1000", help="seed range A-B (A <= seed < B), or one seed")
    parser.add_argument("--replay", type=int, help="run this one seed in-process, printing its trace with -v")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="-v events and faults, -vv messages too")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--bug", action="append", default=[], choices=sorted(TESTING_FAULTS),
                        help="enable a deliberate core bug (test-only switch) to check the simulator finds it")
    parser.add_argument("--profile", default="mixed", choices=PROFILES,
                        help="fault profile: mixed (default), chaos (every seed crashes and partitions hard), "
                             "dledger (mixed, on DLedger's real log files on a simulated disk), pipeline "
                             "(mixed, plus leaders crashing after their appends left and before their fsync) or "
                             "lazy_commit (mixed, with DLedger's lazy commit broadcast); dledger_lazy: dledger with "
                             "it; dledger_async: dledger_lazy with appends not synced, process crashes only")
    parser.add_argument("--stop-on-failure", action="store_true", help="stop at the first failing seed")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    bugs = frozenset(args.bug)

    if args.replay is not None:
        try:
            stats = run_seed(args.replay, bugs, verbose=args.verbose, profile=args.profile)
        except SimulationFailure as exc:
            print(f"FAILED {exc}")
            return 1
        print(f"seed {args.replay} passed: {stats}")
        return 0

    seeds = parse_range(args.seeds)
    started = time.monotonic()
    failures: list[str] = []
    done = 0
    last_report = started
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        chunk = max(1, min(50, len(seeds) // (args.jobs * 8) or 1))
        for seed, failure, _stats in pool.map(try_seed, ((s, bugs, args.profile) for s in seeds), chunksize=chunk):
            done += 1
            if failure is not None:
                failures.append(failure)
                print(f"FAILED {failure}", flush=True)
                if args.stop_on_failure:
                    pool.shutdown(cancel_futures=True)
                    break
            now = time.monotonic()
            if now - last_report >= 5 or done == len(seeds):
                last_report = now
                rate = done / max(now - started, 1e-9)
                eta = (len(seeds) - done) / rate if rate else 0
                print(f"{done}/{len(seeds)} seeds (last {seed}), {rate:.0f} seeds/s, "
                      f"{len(failures)} failed, eta {eta:.0f}s", flush=True)
    elapsed = time.monotonic() - started
    print(f"{done} seeds in {elapsed:.1f}s ({done / max(elapsed, 1e-9):.0f} seeds/s): {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
