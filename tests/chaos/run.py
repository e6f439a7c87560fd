"""One chaos run, from the command line or from a test: cluster, workload, nemesis, checker.

    .venv/bin/python -m tests.chaos.run --mode dledger --duration 1800 --seed 7
    .venv/bin/python -m tests.chaos.run --mode controller --seed 7 --faults 12
    .venv/bin/python -m tests.chaos.run --mode dledger --schedule '[{"kind": "kill", ...}]'

``--seed`` alone gives a random schedule drawn from that seed (the same seed, the same
schedule); ``--duration`` keeps drawing faults from it until that many seconds have passed;
``--schedule`` replays an exact schedule (JSON, as printed by a failing run).  The history
(one JSON event per line), the verdict and the logs of every process are left in ``--keep``
(default: a new directory under /tmp).  Exit status 1 when an invariant is violated.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from netproxy import link_loop  # noqa: E402

from chaos.checker import check, must_keys, summarize  # noqa: E402
from chaos.harness import MODES, ChaosCluster  # noqa: E402
from chaos.history import History  # noqa: E402
from chaos.nemesis import Fault, Nemesis, schedule_from_seed, schedule_json, schedule_load  # noqa: E402
from chaos.store_probe import probe  # noqa: E402
from chaos.workload import Workload  # noqa: E402

DRAIN_LIMIT_S = 420.0  # the drain's overall limit; it ends earlier when every group has everything or stops


def say(text: str) -> None:
    print(f"[chaos] {text}", flush=True)


def replay_command(mode: str, seed: int, faults: list[Fault]) -> str:
    return (f".venv/bin/python -m tests.chaos.run --mode {mode} --seed {seed} "
            f"--schedule '{schedule_json(faults)}'")


def run(mode: str, faults: list[Fault], seed: int, root: Path, *,
        duration: float | None = None, warmup_acks: int = 60, drain_timeout: float = DRAIN_LIMIT_S) -> dict[str, Any]:
    """Run ``faults`` (then, with ``duration``, more drawn from ``seed`` until it has passed) and check.

    Returns the checker's verdict plus ``schedule``, ``seed``, ``mode`` and ``replay``; the
    history is written to ``root/history.jsonl`` and the verdict to ``root/verdict.json``.
    """
    root.mkdir(parents=True, exist_ok=True)
    h = History()
    done: list[Fault] = []
    result: dict[str, Any] = {"mode": mode, "seed": seed}
    with link_loop() as ll:
        say(f"{mode}: starting the cluster in {root}")
        cc = ChaosCluster.start(mode, root, ll)
        try:
            result.update(_run_on(cc, mode, faults, seed, root, h, done, duration, warmup_acks,
                                  drain_timeout))
        finally:
            cc.stop()
    return result


def _run_on(cc: ChaosCluster, mode: str, faults: list[Fault], seed: int, root: Path, h: History, done: list[Fault],
            duration: float | None, warmup_acks: int, drain_timeout: float) -> dict[str, Any]:
    """The workload and the nemesis on a started cluster, then the checker (``run`` stops the cluster)."""
    h.add("info", "cluster-started", "runner")
    wl = Workload(cc.endpoint, h, seed)
    try:
        wl.start()
        from chaos.harness import wait_for
        wait_for(lambda: len(h.of("send", "ok")) >= warmup_acks, timeout=90, what=f"{warmup_acks} acked sends")
        nem = Nemesis(cc, h)
        windows = []
        began = time.monotonic()
        queue = list(faults)
        extra = iter(schedule_from_seed(seed, mode, 100_000)) if duration else iter(())
        while True:
            if not queue and duration and time.monotonic() - began < duration:
                queue.append(next(extra))
            if not queue:
                break
            fault = queue.pop(0)
            say(f"fault {len(done)}: {fault.describe()}")
            done.append(fault)
            try:
                windows.append(nem.run_one(len(done) - 1, fault))
            except BaseException:
                h.dump(root / "history.jsonl")
                (root / "processes.log").write_text(cc.logs())
                say(f"FAILED during fault {len(done) - 1} ({fault.describe()}); seed {seed}, schedule "
                    f"{schedule_json(done + queue)}\nreplay: {replay_command(mode, seed, done + queue)}"
                    f"\nhistory and process logs in {root}")
                raise
        load_end = h.now()
        wl.stop_producers()  # returns once the producer threads finished their current send
        h.add("info", "load-end", "runner")
        must, _, _ = must_keys(h.events)
        say(f"load stopped: {len(must)} messages must reach each group; draining")
        drained = wl.wait_consumed(must, timeout=drain_timeout)
        h.add("info", "drained", "runner", complete=drained)
    finally:
        wl.stop()
    say("reading the topics' queues and the groups' committed offsets (backlog, stall or loss)")
    store = probe(cc.c.namesrv_addr, cc.c.admin_json)
    try:
        logs = cc.logs_equal()
    except AssertionError as exc:
        logs = (False, f"replicas never reached one log end: {exc}")
    verdict = check(h.events, windows, load_end, logs, store=store)
    result: dict[str, Any] = dict(verdict)
    result["schedule"] = json.loads(schedule_json(done))
    result["replay"] = replay_command(mode, seed, done)
    result["logs_check"] = logs[1]
    h.dump(root / "history.jsonl")
    (root / "verdict.json").write_text(json.dumps({"mode": mode, "seed": seed, **result}, indent=2))
    if not verdict["valid"]:
        (root / "processes.log").write_text(cc.logs())
    return result


def report(result: dict[str, Any]) -> str:
    lines = [f"mode {result['mode']} seed {result['seed']}: {'VALID' if result['valid'] else 'INVALID'}: "
             f"{result.get('reason', '')}"]
    for f in result["faults"]:
        fault = Fault(**f["fault"])
        at = ", clients' access point" if f.get("access_point") == f["node"] else ""
        lines.append(f"  {f['n']:>3} {fault.describe():<48} node {f['node']} (writer {f['writer_before']}{at}, "
                     f"load {f.get('load')}): "
                     f"no-send {f['max_no_send_s']:.2f}s, no-delivery {f.get('max_no_delivery_s', 0):.2f}s, "
                     f"{f['send_failures']} send failures, "
                     f"{f['redeliveries']} redeliveries, {f['duplicates']} duplicates"
                     f" ({f.get('stored_twice', 0)} stored twice)")
    t = result["totals"]
    lines.append(f"  totals: {t['sends_acked']}/{t['sends_invoked']} sends acked, {t['send_failures']} failed, "
                 f"{t['must_deliver']} must reach each group, deliveries {t['deliveries']}, "
                 f"{t['redeliveries']} redeliveries ({t['deliberately_unacked']} acks skipped on purpose), "
                 f"{t['duplicates']} duplicates ({t.get('stored_twice', 0)} stored twice by a retried send), "
                 f"{t['checkbacks']} check-backs, delayed messages first delivered "
                 f"{t.get('delay_late_p50_s')}/{t.get('delay_late_p99_s')}/{t['delay_max_late_s']} s late "
                 f"(p50/p99/max; by group {t.get('delay_late_by_group')}); "
                 f"{t.get('must_found_in_store')} must-keys found in the store")
    for g, f in result.get("liveness", {}).items():
        lines.append(f"  backlog {g}: {f['stored_unconsumed']} stored, not yet consumed {f['by_kind']}; "
                     f"{'still consuming' if f['progressing'] else 'STOPPED'} at {f['rate_per_s']}/s over the "
                     f"drain's last seconds (last new key {f['seconds_since_new_key']} s before its end, "
                     f"drain {f['drain_s']} s, {f['eta_s']} s more at that rate)")
    lines.append(f"  logs: {result['logs_check']}")
    if not result["valid"]:
        lines.append(f"  VIOLATIONS: {summarize(result['violations'])}")
        lines.append(f"  seed {result['seed']}, schedule {json.dumps(result['schedule'])}")
        lines.append(f"  replay: {result['replay']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=MODES, required=True)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument("--faults", type=int, default=6, help="faults drawn from the seed (without --schedule)")
    ap.add_argument("--duration", type=float, default=None, help="keep injecting faults for this many seconds")
    ap.add_argument("--schedule", default=None, help="JSON list of faults to replay exactly")
    ap.add_argument("--keep", default=None, help="directory for the stores, logs, history and verdict")
    ap.add_argument("--drain-limit", type=float, default=DRAIN_LIMIT_S,
                    help="overall limit of the drain after the load (s); it goes on while groups make progress")
    args = ap.parse_args(argv)
    if args.schedule:
        faults = schedule_load(args.schedule)
    elif args.duration:
        faults = []
    else:
        faults = schedule_from_seed(args.seed, args.mode, args.faults)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix=f"chaos-{args.mode}-"))
    drawn = f"drawn for {args.duration}s" if args.duration else "none"
    say(f"seed {args.seed}, schedule {schedule_json(faults) if faults else drawn}")
    result = run(args.mode, faults, args.seed, root, duration=args.duration,
                 drain_timeout=args.drain_limit)
    print(report(result), flush=True)
    say(f"history, verdict and stores in {root}")
    if result["valid"] and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
        say("(removed: the run was valid)")
    return 0 if result["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
