"""What clients notice per fault: the chaos harness, ≥10 faults of each kind per mode, next to NATS JetStream R3.

    .venv/bin/python bench/chaos_bench.py [--faults 10] [--modes dledger,controller,masterslave]
                                          [--kinds kill,pause,...] [--hold 2] [--no-jetstream]

For each mode, one cluster runs the harness's workload (tests/chaos/workload.py: normal,
FIFO, delayed and transactional sends from the official client, two SimpleConsumer groups
and a PushConsumer group) through ``--faults`` faults of every kind, one after the other
(``--hold`` seconds each, the cluster settled and 2 s of normal load between faults).  Per
fault: the longest window with no successful send (from the fault's start to the next
fault's start), client-visible send failures (after the client's own 3 attempts),
redeliveries and duplicates (tests/chaos/checker.py); reported as median and max per kind.
The invariant violations of the whole run are reported too.

JetStream R3 (nats-server, three nodes on loopback, as in bench/failover_bench.py) gets the
faults it has: leader kill -9 (restarted after ``--hold``), leader pause (SIGSTOP) and
isolation of the leader (its route links cut through proxies; ``no_advertise`` so routes
cannot bypass them).  One nats-py publisher sends one message at a time (1 s timeout,
up to 3 attempts with the same Nats-Msg-Id before the send counts as failed, as the RocketMQ
client's default policy); the client pings every second so it notices a paused server.
Results: bench/results/chaos.json and a table on stdout (docs/BENCHMARKS.md has one run).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from chaos.nemesis import KINDS_BY_MODE, Fault  # noqa: E402
from chaos.run import run  # noqa: E402
from failover_bench import NatsCluster, _js_setup  # noqa: E402
from netproxy import LinkLoop, link_loop  # noqa: E402

FIGURES = ("max_no_send_s", "max_no_delivery_s", "send_failures", "redeliveries", "duplicates")


def progress(text: str) -> None:
    print(f"[chaos-bench] {text}", flush=True)


def stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "max": max(values), "n": len(values)} if values else {}


def kind_key(fault: dict[str, Any]) -> str:
    """The fault's kind, marked when it hit the node the clients were connected to.

    The official client holds every request on one access point (tests/chaos/sockets.py); a paused
    access point holds them for the whole pause whatever the cluster does, so those faults are
    reported apart from the same kind on another node instead of mixed into one median."""
    kind = fault["fault"]["kind"]
    return f"{kind}@access" if fault.get("access_point") == fault["node"] else kind


def by_kind(faults: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for key in dict.fromkeys(kind_key(f) for f in faults):
        fs = [f for f in faults if kind_key(f) == key]
        out[key] = {fig: stats([f[fig] for f in fs if f.get(fig) is not None]) for fig in FIGURES}
        out[key]["load"] = stats([f["load"] for f in fs if f.get("load") is not None])
    return out


def rocketscope(mode: str, kinds: list[str], count: int, hold: float, seed: int) -> dict[str, Any]:
    schedule = [Fault(k, "writer", hold, 2.0, delay_ms=200 if k == "slow" else 0) for k in kinds
                for _ in range(count)]
    root = Path(tempfile.mkdtemp(prefix=f"chaos-bench-{mode}-"))
    progress(f"{mode}: {len(schedule)} faults ({', '.join(kinds)}; {count} each)")
    result: dict[str, Any] | None = None
    try:
        result = run(mode, schedule, seed, root, drain_timeout=120.0)
    finally:
        # an invalid run keeps its history, verdict and process logs (the evidence of a violation), as
        # tests/chaos/run.py does; so does CHAOS_BENCH_KEEP=1
        if result is not None and result["valid"] and not os.environ.get("CHAOS_BENCH_KEEP"):
            shutil.rmtree(root, ignore_errors=True)
        else:
            progress(f"{mode}: history, verdict and logs kept in {root}")
    violations = {k: (sum(map(len, v.values())) if isinstance(v, dict) else v)
                  for k, v in result["violations"].items()}
    return {"per_kind": by_kind(result["faults"]), "violations": violations,
            "violated_keys": result["violations"], "totals": result["totals"], "logs": result["logs_check"],
            "kept": "" if result["valid"] else str(root)}


# ------------------------------------------------------------------ JetStream
class ProxiedNats(NatsCluster):
    """bench/failover_bench.py's cluster with every route link through a LinkProxy (to isolate a node)."""

    def __init__(self, root: Path, ll: LinkLoop) -> None:
        super().__init__(root)
        self.ll = ll
        self.links = {(i, j): ll.proxy(self.route_ports[j]) for i in range(3) for j in range(3) if i != j}

    def start(self, i: int) -> None:
        import subprocess

        routes = ",".join(f"nats-route://127.0.0.1:{self.links[(i, j)].port}" for j in range(3) if j != i)
        conf = self.root / f"n{i}.conf"
        conf.write_text(f"server_name: n{i}\nlisten: 127.0.0.1:{self.client_ports[i]}\n"
                        f"jetstream {{ store_dir: '{self.root / f'js{i}'}' }}\n"
                        f"cluster {{ name: bench, listen: 127.0.0.1:{self.route_ports[i]}, no_advertise: true, "
                        f"routes: [{routes}] }}\n")
        self.procs[i] = subprocess.Popen(["nats-server", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)

    def pause(self, i: int, paused: bool) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def isolate(self, i: int, cut: bool) -> None:
        for (a, b), p in self.links.items():
            if i in (a, b):
                self.ll.set(p, refuse=cut) if cut else self.ll.heal(p)


async def jetstream(kinds: list[str], count: int, hold: float) -> dict[str, Any]:
    import nats

    root = Path(tempfile.mkdtemp(prefix="chaos-bench-js-"))
    out: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    with link_loop() as ll:
        cl = ProxiedNats(root, ll)
        for i in range(3):
            cl.start(i)
        try:
            nc0, _ = await _js_setup(cl.servers)
            await nc0.close()
            nc = await nats.connect(servers=cl.servers, max_reconnect_attempts=-1, reconnect_time_wait=0.05,
                                    ping_interval=1, max_outstanding_pings=2)
            js = nc.jetstream(timeout=1)
            oks: list[float] = []
            fails: list[float] = []
            stop = asyncio.Event()

            async def publisher() -> None:
                """Like the RocketMQ client's policy: a message is tried up to 3 times before the send fails."""
                n = 0
                while not stop.is_set():
                    for _attempt in range(3):
                        try:
                            await js.publish("bench", b"x" * 1024, headers={"Nats-Msg-Id": f"m{n}"})
                            oks.append(time.monotonic())
                            break
                        except Exception:
                            await asyncio.sleep(0.01)
                    else:
                        fails.append(time.monotonic())
                    n += 1
                    await asyncio.sleep(0.02)

            task = asyncio.create_task(publisher())
            for kind in kinds:
                for run_n in range(count):
                    deadline = time.monotonic() + 90
                    while True:
                        try:
                            info = await js.stream_info("BENCH")
                            if info.cluster and info.cluster.leader and len(info.cluster.replicas or []) == 2 \
                                    and all(r.current for r in info.cluster.replicas or []):
                                break
                        except Exception:
                            pass
                        if time.monotonic() > deadline:
                            raise TimeoutError("JetStream stream never settled")
                        await asyncio.sleep(0.2)
                    await asyncio.sleep(2.0)
                    leader = int(info.cluster.leader[1:])
                    start = time.monotonic()
                    if kind == "kill":
                        cl.kill(leader)
                        await asyncio.sleep(hold)
                        cl.start(leader)
                    elif kind == "pause":
                        cl.pause(leader, True)
                        await asyncio.sleep(hold)
                        cl.pause(leader, False)
                    else:
                        cl.isolate(leader, True)
                        await asyncio.sleep(hold)
                        cl.isolate(leader, False)
                    await asyncio.sleep(3.0)
                    end = time.monotonic()
                    points = [start, *(t for t in oks if start < t < end), end]
                    gap = max(b - a for a, b in itertools.pairwise(points))
                    out[kind].append({"max_no_send_s": gap, "send_failures": sum(1 for t in fails if start <= t < end)})
                    progress(f"JetStream {kind} {run_n + 1}/{count}: no publish for {gap:.2f}s, "
                             f"{out[kind][-1]['send_failures']} failed publishes")
            stop.set()
            await task
            await nc.close()
        finally:
            cl.stop()
            shutil.rmtree(root, ignore_errors=True)
    return {k: {fig: stats([r[fig] for r in rs]) for fig in ("max_no_send_s", "send_failures")}
            for k, rs in out.items() if rs}


def table(results: dict[str, Any]) -> str:
    lines = ["| mode | fault (n) | no-send window median / max (s) | no-delivery window median / max (s) | "
             "send failures median / max | "
             "redeliveries median / max | duplicates median / max | load avg median / max |",
             "|---|---|---|---|---|---|---|---|"]
    for mode, r in results["rocketscope"].items():
        for kind, figs in r["per_kind"].items():
            cells = [("n/a" if not figs.get(f) else f"{figs[f]['median']:.2f} / {figs[f]['max']:.2f}")
                     if f.startswith("max_no_") else f"{figs[f]['median']:g} / {figs[f]['max']:g}" for f in FIGURES]
            load = figs.get("load") or {}
            cells.append(f"{load['median']:g} / {load['max']:g}" if load else "n/a")
            lines.append(f"| {mode} | {kind} ({figs['max_no_send_s']['n']}) | " + " | ".join(cells) + " |")
    for kind, figs in (results.get("jetstream_r3") or {}).items():
        lines.append(f"| JetStream R3 | {kind} ({figs['max_no_send_s']['n']}) | "
                     f"{figs['max_no_send_s']['median']:.2f} / {figs['max_no_send_s']['max']:.2f} | "
                     f"n/a | {figs['send_failures']['median']:g} / {figs['send_failures']['max']:g} | "
                     "n/a | n/a | n/a |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--faults", type=int, default=10, help="faults of each kind")
    ap.add_argument("--modes", default="dledger,controller,masterslave")
    ap.add_argument("--kinds", default=None, help="comma-separated fault kinds (default: all of the mode)")
    ap.add_argument("--hold", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--no-jetstream", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "chaos.json"))
    ap.add_argument("--table", nargs="+", default=None, metavar="JSON",
                    help="only print the table of earlier results (several files are merged)")
    args = ap.parse_args()
    if args.table:
        merged: dict[str, Any] = {"rocketscope": {}}
        for path in args.table:
            r = json.loads(Path(path).read_text())
            merged["rocketscope"].update(r.get("rocketscope", {}))
            merged["jetstream_r3"] = r.get("jetstream_r3") or merged.get("jetstream_r3")
        print(table(merged))
        return
    results: dict[str, Any] = {"machine": f"{os.cpu_count()} cores, loopback",
                               "when": time.strftime("%Y-%m-%d %H:%M:%S"), "faults_per_kind": args.faults,
                               "hold_s": args.hold, "rocketscope": {}}
    for mode in [m for m in args.modes.split(",") if m]:
        kinds = [k for k in (args.kinds.split(",") if args.kinds else KINDS_BY_MODE[mode]) if k in KINDS_BY_MODE[mode]]
        results["rocketscope"][mode] = rocketscope(mode, kinds, args.faults, args.hold, args.seed)
        Path(args.out).write_text(json.dumps(results, indent=2))
    if not args.no_jetstream:
        if not shutil.which("nats-server"):
            sys.exit("nats-server is missing: apt-get install -y nats-server")
        js_kinds = [k for k in ("kill", "pause", "isolate") if not args.kinds or k in args.kinds.split(",")]
        progress("JetStream R3: " + ", ".join(js_kinds))
        results["jetstream_r3"] = asyncio.run(jetstream(js_kinds, args.faults, args.hold))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print("\n" + table(results))
    for mode, r in results["rocketscope"].items():
        print(f"{mode}: invariant violations {r['violations'] or 'none'}; {r['logs']}")
    print(f"\nresults in {args.out}")


if __name__ == "__main__":
    main()
