"""Where a fault's longest no-send window went: the history's sends beside the servers' own log lines.

    .venv/bin/python -m tests.chaos.timeline /tmp/chaos-dir            # every fault
    .venv/bin/python -m tests.chaos.timeline /tmp/chaos-dir --fault 3  # one fault, every line

A kept run (``tests.chaos.run --keep DIR``) leaves the history (``history.jsonl``), the verdict
and each process's log (``d0.log``, ``c0.log``, ...) in DIR.  The history's ``clock`` event
gives the wall clock at its t = 0, so each log line (stamped by Python's logging in local
time) is placed on the history's time axis.  For each fault this prints the longest gap
between successful sends and, in time order, what the nemesis, the clients and the servers
did from the fault's start to the end of that gap: election steps, role changes, forwarding
and send failures.  Why: the checker's figures say how long clients saw no send succeed; this
says which step (detection, election, the client finding the new writer) took the time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
from pathlib import Path

LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\w+) (.*)$")
# server log lines worth showing: the HA layers' events and anything that failed or waited
INTERESTING = re.compile(r"ha event|leader of term|forward|not the leader|master|elect|WARNING|ERROR|step",
                         re.IGNORECASE)


def log_events(root: Path, wall0: float) -> list[tuple[float, str, str]]:
    """(history time, process, text) of the interesting lines of every process log in ``root``."""
    out = []
    for path in sorted(root.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            m = LOG_LINE.match(line)
            if not m or not INTERESTING.search(m.group(4)):
                continue
            wall = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
            out.append((wall - wall0, path.stem, f"{m.group(3)} {m.group(4)[:160]}"))
    return out


def longest_gap(oks: list[float], start: float, end: float) -> tuple[float, float]:
    points = [start, *(t for t in oks if start < t < end), end]
    return max(itertools.pairwise(points), key=lambda ab: ab[1] - ab[0])


def show(root: Path, only: int | None) -> None:
    events = [json.loads(line) for line in (root / "history.jsonl").read_text().splitlines() if line.strip()]
    clock = next((e for e in events if e["f"] == "clock"), None)
    if clock is None:
        sys.exit("this history has no clock event (a run before timeline.py existed): server lines cannot be placed")
    verdict = json.loads((root / "verdict.json").read_text())
    oks = sorted(e["t"] for e in events if e["f"] == "send" and e["type"] == "ok")
    logs = log_events(root, clock["wall"])
    for f in verdict["faults"]:
        if only is not None and f["n"] != only:
            continue
        a, b = longest_gap(oks, f["start"], f["end"])
        at = " (the clients' access point)" if f.get("access_point") == f["node"] else ""
        print(f"fault {f['n']} {f['fault']['kind']}({f['fault']['target']}) node {f['node']}{at} writer "
              f"{f['writer_before']}, load {f.get('load')}:\n  start {f['start']:.3f} "
              f"healed {f['healed']:.3f} settled {f['settled']:.3f}; longest gap "
              f"{b - a:.3f} s from {a:.3f} to {b:.3f} ({a - f['start']:+.3f} s after the fault's start)")
        upto = f["end"] if only is not None else b + 0.2
        rows: list[tuple[float, str, str]] = [(t, p, text) for t, p, text in logs if f["start"] - 0.05 <= t <= upto]
        rows += [(e["t"], e["proc"], f"{e['f']} {e['type']} {e.get('error', '')}"[:160]) for e in events
                 if f["start"] <= e["t"] <= upto and (e["f"] in ("nemesis", "nemesis-settled", "nemesis-wait")
                                                      or (e["f"] == "send" and e["type"] != "invoke"
                                                          and (e["type"] != "ok" or abs(e["t"] - b) < 0.05
                                                               or abs(e["t"] - a) < 0.05)))]
        for t, proc, text in sorted(rows):
            mark = " <gap>" if a <= t <= b else ""
            print(f"  {t:9.3f} {proc:<12} {text}{mark}")
        print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a directory kept by tests.chaos.run --keep")
    ap.add_argument("--fault", type=int, default=None, help="only this fault, up to the next fault's start")
    args = ap.parse_args(argv)
    show(Path(args.dir), args.fault)
    return 0


if __name__ == "__main__":
    sys.exit(main())
