"""Run every benchmark: the one command behind ``make bench``.

    .venv/bin/python bench/run.py                  # everything, results in bench/results/<name>.json
    .venv/bin/python bench/run.py --only produce   # one (or several, comma-separated)
    .venv/bin/python bench/run.py --quick          # smoke test of the harness, under a minute
    .venv/bin/python bench/run.py --list

Each benchmark is its own script (bench/<name>_bench.py) run as a child process, so one
that crashes or hangs cannot take the others down: it gets a time limit, its process group
is killed when the limit passes, and the summary says which failed.  Benchmarks owned by
other engineers are run when their script is present and skipped with a note otherwise;
scripts matching ``*_bench.py`` that this file does not know yet are run with no arguments.

``--quick`` runs only the benchmarks with a quick mode that fits in a minute (produce and
storage: short phases, no profile) unless ``--only`` names others (then their short
arguments are used), and writes to bench/results/quick/ so a smoke test never overwrites
real figures.  A summary of the run goes to bench/results/run.json (quick/run.json).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


@dataclass(frozen=True)
class Bench:
    """How to run one benchmark script; ``quick`` None means it has no mode short enough for a smoke test."""

    name: str
    issue: str
    full: list[str] = field(default_factory=list)
    quick: list[str] | None = None
    quick_by_default: bool = False
    timeout_s: int = 1800

    @property
    def script(self) -> Path:
        return BENCH / f"{self.name}_bench.py"


BENCHES = [
    Bench("produce", "3", quick=["--quick"], quick_by_default=True, timeout_s=1200),
    Bench("storage", "3", quick=["--quick"], quick_by_default=True, timeout_s=600),
    Bench("failover", "4", quick=["--runs", "1", "--messages", "300"], timeout_s=1800),
    Bench("controller", "5", quick=["--runs", "1"], timeout_s=1200),
    Bench("masterslave", "5", quick=["--messages", "300", "--rounds", "1"], timeout_s=1200),
    Bench("telemetry", "6", quick=["--messages", "300", "--topics", "20", "--groups", "2"], timeout_s=1200),
    Bench("spark", "8", full=["--sizes", "1000000"], timeout_s=3600),  # 10M takes about an hour here
    Bench("security", "10", quick=["--messages", "300", "--sync-messages", "50", "--rounds", "1"], timeout_s=1200),
    Bench("trace", "7", quick=["--quick"], timeout_s=2400),
]


def known() -> list[Bench]:
    """The registry plus any ``*_bench.py`` not in it (run with no arguments)."""
    names = {b.name for b in BENCHES}
    extra = [Bench(p.name.removesuffix("_bench.py"), "?") for p in sorted(BENCH.glob("*_bench.py"))
             if p.name.removesuffix("_bench.py") not in names]
    return BENCHES + extra


def accepts_out(script: Path) -> bool:
    return '"--out"' in script.read_text(errors="replace")


def run_one(b: Bench, args: list[str], timeout_s: int) -> tuple[str, float]:
    """Run a benchmark script in its own process group; kill the group when it overruns."""
    cmd = [sys.executable, str(b.script), *args]
    print(f"\n===== {b.name} (issue {b.issue}): {' '.join(cmd[1:])}", flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=BENCH.parent, start_new_session=True)
    try:
        rc = proc.wait(timeout_s)
        status = "ok" if rc == 0 else f"failed (exit {rc})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        status = f"killed after {timeout_s}s"
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)  # the child's own handlers stop its servers
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    return status, time.monotonic() - t0


def _on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds into run_one, which stops the running benchmark's process group


def main() -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated names (see --list)")
    ap.add_argument("--quick", action="store_true", help="smoke test: short modes, results in bench/results/quick/")
    ap.add_argument("--list", action="store_true")
    opts = ap.parse_args()
    benches = known()
    if opts.list:
        for b in benches:
            state = "present" if b.script.exists() else "missing"
            print(f"{b.name:<10} issue {b.issue:<3} {state:<8} quick: {'yes' if b.quick is not None else 'no'}")
        return 0
    wanted = [n.strip() for n in opts.only.split(",") if n.strip()]
    unknown = set(wanted) - {b.name for b in benches}
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(b.name for b in benches)}")
    out_dir = RESULTS / "quick" if opts.quick else RESULTS
    summary: list[dict[str, object]] = []
    for b in benches:
        if wanted and b.name not in wanted:
            continue
        entry: dict[str, object] = {"name": b.name, "issue": b.issue}
        if not b.script.exists():
            entry["status"] = "skipped: script not present"
        elif opts.quick and b.quick is None:
            entry["status"] = "skipped: no quick mode"
        elif opts.quick and not wanted and not b.quick_by_default:
            entry["status"] = "skipped in --quick (name it with --only to smoke-test it)"
        else:
            args = list(b.quick if opts.quick and b.quick is not None else b.full)
            result = out_dir / f"{b.name}.json"
            if accepts_out(b.script):
                args += ["--out", str(result)]
            elif opts.quick:
                entry["note"] = "the script has no --out: its own results file was written"
            status, secs = run_one(b, args, 300 if opts.quick else b.timeout_s)
            entry.update(status=status, seconds=round(secs, 1), command=" ".join(["bench/run.py", *sys.argv[1:]]),
                         args=args, result=str(result.relative_to(BENCH.parent)) if accepts_out(b.script) else "")
        summary.append(entry)
        if entry["status"] != "ok":
            print(f"----- {b.name}: {entry['status']}", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "run.json").write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": opts.quick,
                                                  "benchmarks": summary}, indent=2) + "\n")
    print("\n===== summary")
    for e in summary:
        took = f"{e['seconds']:>7.1f}s" if "seconds" in e else " " * 8
        print(f"  {e['name']:<10} {took}  {e['status']}  {e.get('result', '')}")
    return 1 if any(str(e["status"]).startswith(("failed", "killed")) for e in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
