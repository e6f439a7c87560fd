"""Produce throughput and latency: RocketScope (official client) against NATS JetStream R1 (issue 3).

    .venv/bin/python bench/produce_bench.py [--seconds 8] [--rounds 2] [--producers 1] [--quick] [--no-profile]
                                            [--no-apache]

What is measured, side by side in one run:

* RocketScope, one standalone broker (name server + broker, tests/cluster.py), once with
  ``flushDiskType=ASYNC_FLUSH`` and once with ``SYNC_FLUSH`` (group commit: a send is
  acknowledged after the fdatasync that covers it).  Client: the official
  rocketmq-python-client, 1 KiB bodies, depth 1 = synchronous ``send`` one at a time,
  depth 64/256 = that many ``send_async`` futures in flight.
* Apache RocketMQ 5.3.3 (issue 18; ``--no-apache`` leaves it out): one broker, its default
  ASYNC_FLUSH, behind its proxy (``make peers``, peers/reference_cluster.py), reached by the
  same official client as RocketScope; its CPU per message is the broker's plus the proxy's.
  The cluster starts once for every round (its JVMs take a minute or more to start here).
* NATS JetStream (Debian nats-server 2.9), one server, an R1 stream with file storage.
  Client: nats-py, same body, depth 1 = one ``publish`` awaited at a time, depth 64/256 =
  that many publishes awaiting their ack.  2.9 has no ``sync_interval`` (it refuses the
  key): the file store writes into the page cache and fsyncs in the background (strace of
  a depth-64 run: tens of thousands of pwrite64, no fsync at all), so an ack there means
  "in the OS page cache" - the promise of ASYNC_FLUSH, which even fsyncs every 500 ms.
  ASYNC_FLUSH / JetStream is therefore the like-for-like ratio and the one the target
  (>= 1.0x at every depth) is judged on; SYNC_FLUSH / JetStream is shown too, with the
  stronger guarantee on our side.

Load generators run in separate processes (``--producers``, default 1: one client, the
whole depth in flight on one connection, as both clients are designed to be used), so the
coordinator never competes with them for the GIL; depth 1 always uses one producer.  Each
phase runs ``--seconds`` or ``--max-messages``, whichever comes first; rounds alternate the
order of the three systems and the medians count.  Besides msg/s and p50/p99, the CPU
seconds per message of the server process and of the client processes are recorded: on a
shared 2-core machine throughput swings with other load, CPU per message barely does.

With profiling on (the default outside ``--quick``), the broker is sampled with py-spy
(native frames, idle samples dropped) in a separate phase under depth-64 load, ASYNC_FLUSH
and SYNC_FLUSH; a breakdown of the send path and the hottest functions are printed and
stored; the collapsed stacks go to bench/results/profiles/ (feed them to flamegraph.pl).
Results: bench/results/produce.json.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import queue
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

BODY = common.BODY_1K
TOPIC = "Bench"
SUBJECT = "bench"
DEPTHS = (1, 64, 256)
SYSTEMS = ("rocketscope_async_flush", "rocketscope_sync_flush", "jetstream_r1", "apache_async_flush")
WARMUP = 50
progress = common.Progress("produce")


# ------------------------------------------------------------------ load generators (child processes)
def _rmq_load(endpoint: str, n: int, depth: int, max_s: float, go: Any, out: Any) -> None:
    """One official-client producer: warm up, report ready, wait for ``go``, send for ``max_s`` or ``n`` messages."""
    from rmq import message, producer

    lat: list[float] = []
    errors = [0]
    with producer(endpoint, TOPIC) as p:
        for _ in range(WARMUP):
            p.send(message(TOPIC, BODY))
        out.put("ready")
        go.wait(300)
        cpu0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + max_s
        sent = 0
        if depth == 1:
            while sent < n and time.perf_counter() < deadline:
                s = time.perf_counter()
                try:
                    p.send(message(TOPIC, BODY))
                    lat.append(time.perf_counter() - s)
                except Exception:
                    errors[0] += 1
                sent += 1
        else:
            slots = threading.Semaphore(depth)
            lock = threading.Lock()

            def done(fut: Any, s: float) -> None:
                took = time.perf_counter() - s
                with lock:
                    if fut.exception() is None:
                        lat.append(took)
                    else:
                        errors[0] += 1
                slots.release()

            while sent < n and time.perf_counter() < deadline:
                slots.acquire()
                s = time.perf_counter()
                p.send_async(message(TOPIC, BODY)).add_done_callback(lambda f, s=s: done(f, s))
                sent += 1
            for _ in range(depth):  # every outstanding send has completed once all slots are back
                slots.acquire(timeout=60)
        elapsed = time.perf_counter() - t0
        out.put({"lat": lat, "elapsed": elapsed, "errors": errors[0], "cpu_s": time.process_time() - cpu0})


def _nats_load(url: str, n: int, depth: int, max_s: float, go: Any, out: Any) -> None:
    """One nats-py connection: ``depth`` publishers each awaiting its JetStream ack."""
    import nats

    async def run() -> dict[str, Any]:
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=30)
        for _ in range(WARMUP):
            await js.publish(SUBJECT, BODY)
        out.put("ready")
        await asyncio.to_thread(go.wait, 300)
        lat: list[float] = []
        errors = 0
        budget = [n]
        cpu0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + max_s

        async def publisher() -> None:
            nonlocal errors
            while budget[0] > 0 and time.perf_counter() < deadline:
                budget[0] -= 1
                s = time.perf_counter()
                try:
                    await js.publish(SUBJECT, BODY)
                    lat.append(time.perf_counter() - s)
                except Exception:
                    errors += 1

        await asyncio.gather(*(publisher() for _ in range(depth)))
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        await nc.close()
        return {"lat": lat, "elapsed": elapsed, "errors": errors, "cpu_s": cpu}

    out.put(asyncio.run(run()))


def _collect(out: Any, procs: list[Any], count: int, timeout: float, what: str) -> list[Any]:
    """``count`` items from the children's queue; fail fast (not after the timeout) when one of them died."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        try:
            got.append(out.get(timeout=0.5))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"load generator failed while waiting for {what} (exit codes {dead})") from None
    return got


def drive(kind: str, target: str, server_pid: int | list[int], depth: int, producers: int, seconds: float,
          max_messages: int) -> dict[str, Any]:
    """Run one phase with ``producers`` load processes sharing ``depth``; aggregate throughput, latency and CPU.

    ``server_pid`` may be several processes (Apache's broker and proxy): their CPU is added up."""
    pids = server_pid if isinstance(server_pid, list) else [server_pid]
    ctx = mp.get_context("spawn")
    k = 1 if depth == 1 else max(1, min(producers, depth))
    go = ctx.Event()  # set once every generator is connected and warmed up: they start together
    out = ctx.Queue()
    fn = _rmq_load if kind == "rocketmq" else _nats_load
    procs = [ctx.Process(target=fn, args=(target, max_messages // k, depth // k + (i < depth % k), seconds, go, out),
                         daemon=True) for i in range(k)]
    for p in procs:
        p.start()
    try:
        _collect(out, procs, k, 180, "start-up")
        cpu0, t0 = sum(common.proc_cpu_s(pid) for pid in pids), time.perf_counter()
        go.set()
        results = _collect(out, procs, k, seconds + 120, "results")
        wall = time.perf_counter() - t0
        server_cpu = sum(common.proc_cpu_s(pid) for pid in pids) - cpu0
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    lat = [x for r in results for x in r["lat"]]
    elapsed = max(r["elapsed"] for r in results)
    ok = len(lat)
    return {"messages": ok, "errors": sum(r["errors"] for r in results), "seconds": round(elapsed, 2),
            "msgs_per_s": ok / elapsed if elapsed else 0.0, **common.percentiles(lat),
            "server_cpu_us_per_msg": server_cpu / ok * 1e6 if ok else 0.0,
            "client_cpu_us_per_msg": sum(r["cpu_s"] for r in results) / ok * 1e6 if ok else 0.0,
            "server_cpu_cores": server_cpu / wall if wall else 0.0, "producers": k}


def _line(name: str, depth: int, r: dict[str, Any]) -> str:
    return (f"{name:<23} depth {depth:>3}: {r['msgs_per_s']:8.0f} msg/s  p50 {r['p50_ms']:6.1f} "
            f"p99 {r['p99_ms']:6.1f} ms"
            f"  server {r['server_cpu_us_per_msg']:5.0f} us/msg ({r['server_cpu_cores']:.2f} cores)  client "
            f"{r['client_cpu_us_per_msg']:5.0f} us/msg" + (f"  errors {r['errors']}" if r["errors"] else ""))


# ------------------------------------------------------------------ systems
def profile_broker(flush: str, node: Any, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    """py-spy under depth-64 load; native frames show the Cython grpc server (else hidden in Handle._run)."""
    summary: dict[str, Any] = {}
    for native in (True, False):
        raw = common.RESULTS / "profiles" / f"broker_{flush.lower()}_depth64.txt"
        raw.unlink(missing_ok=True)
        spy = common.start_profile(pid, args.profile_seconds, raw, native=native)
        if spy is None:
            return {"note": "py-spy not installed: .venv/bin/pip install py-spy"}
        res = drive("rocketmq", node.endpoint, pid, 64, args.producers, args.profile_seconds + 3, 10**9)
        common.stop(spy, timeout=args.profile_seconds + 30)
        summary = common.summarise_profile(raw, drop_idle=native)
        summary.update(raw=str(raw.relative_to(common.ROOT)), native=native, load_msgs_per_s=round(res["msgs_per_s"]))
        if summary["samples"]:
            break
        progress(f"native profile failed (see {raw.with_suffix('.log')}); trying Python frames only")
    return summary


def run_rocketscope(flush: str, args: argparse.Namespace, profile: bool = False) -> dict[str, Any]:
    """All depths against a fresh broker (or, with ``profile``, only the profiled depth-64 phase)."""
    out: dict[str, Any] = {}
    with common.rocketscope_broker(flushDiskType=flush, mappedFileSizeCommitLog=256 * 1024 * 1024) as (c, node):
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "8", "-w", "8")
        pid = node.proc.popen.pid
        if profile:
            return profile_broker(flush, node, pid, args)
        for depth in DEPTHS:
            secs = args.seconds * (0.6 if depth == 1 else 1.0)
            out[str(depth)] = r = drive("rocketmq", node.endpoint, pid, depth, args.producers, secs, args.max_messages)
            progress(_line(f"RocketScope {flush}", depth, r))
    return out


async def _create_stream(url: str) -> None:
    import nats
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(url)
    js = await common.jetstream_ready(nc)
    await js.add_stream(StreamConfig(name="BENCH", subjects=[SUBJECT], num_replicas=1, storage=StorageType.FILE))
    await nc.close()


def run_jetstream(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with common.nats_jetstream(1) as ns:
        asyncio.run(_create_stream(ns.urls[0]))
        for depth in DEPTHS:
            secs = args.seconds * (0.6 if depth == 1 else 1.0)
            out[str(depth)] = r = drive("nats", ns.urls[0], ns.pids[0], depth, args.producers, secs, args.max_messages)
            progress(_line("JetStream R1 file", depth, r))
    return out


class ApacheStandalone:
    """Apache RocketMQ's broker (ASYNC_FLUSH, its default) and proxy, started once for all rounds."""

    def __init__(self) -> None:
        import shutil
        import tempfile

        sys.path.insert(0, str(common.ROOT / "peers"))
        import reference_cluster as rc

        why = rc.missing()
        if why:
            raise RuntimeError(f"{why} (or run with --no-apache)")
        self._rmtree = shutil.rmtree
        self.root = Path(tempfile.mkdtemp(prefix="rs-produce-apache-"))
        self.cluster = rc.ReferenceCluster(self.root, broker_conf={"mappedFileSizeCommitLog": 256 * 1024 * 1024})

    def start(self) -> ApacheStandalone:
        t0 = time.monotonic()
        self.cluster.start(timeout=900)
        self.cluster.create_topic(TOPIC, queues=8)
        progress(f"Apache RocketMQ broker + proxy ready in {time.monotonic() - t0:.0f} s")
        return self

    def stop(self) -> None:
        self.cluster.stop()
        self._rmtree(self.root, ignore_errors=True)

    def run(self, args: argparse.Namespace) -> dict[str, Any]:
        out: dict[str, Any] = {}
        c = self.cluster
        for depth in DEPTHS:
            secs = args.seconds * (0.6 if depth == 1 else 1.0)
            out[str(depth)] = r = drive("rocketmq", c.endpoint, [c.pids["broker"], c.pids["proxy"]], depth,
                                        args.producers, secs, args.max_messages)
            progress(_line("Apache ASYNC_FLUSH", depth, r))
        return out


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per depth, the median of each figure over the rounds (the rounds themselves are kept too)."""
    keys = ("msgs_per_s", "p50_ms", "p99_ms", "server_cpu_us_per_msg", "client_cpu_us_per_msg", "server_cpu_cores")
    return {d: {k: round(statistics.median(r[d][k] for r in runs), 2) for k in keys} for d in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each depth-64/256 phase (depth 1: 60%%)")
    ap.add_argument("--max-messages", type=int, default=200_000, help="cap per phase")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--producers", type=int, default=1, help="load processes sharing the depth (depth 1: one)")
    ap.add_argument("--profile-seconds", type=float, default=12.0)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smoke test: one short round, no profile")
    ap.add_argument("--out", type=Path, default=common.RESULTS / "produce.json")
    ap.add_argument("--no-apache", action="store_true", help="leave out the Apache RocketMQ column")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.no_profile, args.max_messages = 1.5, 1, True, min(args.max_messages, 20_000)

    systems = [s for s in SYSTEMS if not (args.no_apache and s.startswith("apache"))]
    apache = None if args.no_apache else ApacheStandalone().start()
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    try:
        for r in range(args.rounds):
            order = list(systems) if r % 2 == 0 else list(reversed(systems))
            progress(f"round {r + 1}/{args.rounds}: {', '.join(order)}")
            for system in order:
                if system == "jetstream_r1":
                    runs[system].append(run_jetstream(args))
                elif apache is not None and system == "apache_async_flush":
                    runs[system].append(apache.run(args))
                else:
                    runs[system].append(run_rocketscope("ASYNC_FLUSH" if "async" in system else "SYNC_FLUSH", args))
    finally:
        if apache is not None:
            apache.stop()
    med = {s: median_of(v) for s, v in runs.items()}
    js = med["jetstream_r1"]
    ratios = {f"{s}_vs_jetstream": {d: round(med[s][d]["msgs_per_s"] / js[d]["msgs_per_s"], 3) for d in js}
              for s in SYSTEMS[:2]}
    if "apache_async_flush" in med:
        ratios["rocketscope_async_flush_vs_apache"] = {
            d: round(med["rocketscope_async_flush"][d]["msgs_per_s"] / med["apache_async_flush"][d]["msgs_per_s"], 3)
            for d in js}
    doc: dict[str, Any] = {
        "body_bytes": len(BODY), "depths": list(DEPTHS), "rounds": args.rounds, "seconds_per_phase": args.seconds,
        "producers": args.producers, "quick": args.quick,
        "durability": {"rocketscope_async_flush": "ack after write to the page cache; fdatasync every 500 ms",
                       "rocketscope_sync_flush": "ack after the fdatasync covering the message (group commit)",
                       "jetstream_r1": "nats-server 2.9.10 file store: ack after write to the page cache; fsync in "
                                       "the background (2.9 has no sync_interval setting)",
                       "apache_async_flush": "Apache RocketMQ 5.3.3 broker, ASYNC_FLUSH (its default), through its "
                                             "proxy: ack after write to the page cache"},
        "compared": "rocketscope_async_flush vs jetstream_r1 (same promise: page cache at ack time)",
        "median": med, "ratios": ratios, "target": "ratio >= 1.0 at every depth",
        "target_met": all(v >= 1.0 for v in ratios["rocketscope_async_flush_vs_jetstream"].values()),
        "runs": runs}
    doc["load_average_1m_at_end"] = os.getloadavg()[0]
    if not args.no_profile:
        doc["profile"] = {}
        for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            progress(f"profiling the broker ({flush}, depth 64) with py-spy for {args.profile_seconds:.0f} s")
            doc["profile"][flush] = run_rocketscope(flush, args, profile=True)
    common.write_json(doc, args.out)

    rows = []
    for d in js:
        a, s, j = med["rocketscope_async_flush"][d], med["rocketscope_sync_flush"][d], js[d]
        rows.append([d, a["msgs_per_s"], s["msgs_per_s"], j["msgs_per_s"],
                     f"{ratios['rocketscope_async_flush_vs_jetstream'][d]:.2f}x",
                     f"{ratios['rocketscope_sync_flush_vs_jetstream'][d]:.2f}x",
                     f"{a['p50_ms']:.1f}/{a['p99_ms']:.1f}", f"{s['p50_ms']:.1f}/{s['p99_ms']:.1f}",
                     f"{j['p50_ms']:.1f}/{j['p99_ms']:.1f}",
                     f"{a['server_cpu_us_per_msg']:.0f}/{j['server_cpu_us_per_msg']:.0f}",
                     f"{a['client_cpu_us_per_msg']:.0f}/{j['client_cpu_us_per_msg']:.0f}"])
    print("\nProduce, 1 KiB, msg/s (median of rounds); latency p50/p99 ms; CPU us/msg (RS ASYNC / JS)")
    print(common.table(["depth", "RS ASYNC", "RS SYNC", "JS R1", "ASYNC/JS", "SYNC/JS", "RS ASYNC lat",
                        "RS SYNC lat", "JS lat", "server cpu", "client cpu"], rows))
    print(f"target ASYNC_FLUSH >= 1.0x JetStream R1 at every depth: {'met' if doc['target_met'] else 'NOT met'}")
    if "apache_async_flush" in med:
        for d in js:
            a, x = med["rocketscope_async_flush"][d], med["apache_async_flush"][d]
            print(f"depth {d}: Apache ASYNC_FLUSH {x['msgs_per_s']:.0f} msg/s, p50/p99 {x['p50_ms']:.1f}/"
                  f"{x['p99_ms']:.1f} ms, broker+proxy {x['server_cpu_us_per_msg']:.0f} us/msg, client "
                  f"{x['client_cpu_us_per_msg']:.0f} us/msg; RocketScope / Apache "
                  f"{ratios['rocketscope_async_flush_vs_apache'][d]:.2f}x (RocketScope broker "
                  f"{a['server_cpu_us_per_msg']:.0f} us/msg)")
    print(f"load average at the end: {doc['load_average_1m_at_end']:.1f}")
    for flush, summary in doc.get("profile", {}).items():
        common.print_profile(summary, f"broker profile {flush}, depth 64")
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
