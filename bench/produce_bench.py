"""Produce throughput against NATS JetStream R1, and commit-log appends against dd (issue 3).

    .venv/bin/python bench/produce_bench.py [--messages 3000] [--sync-messages 500]

1. The official RocketMQ client (1 KiB bodies) against a standalone RocketScope broker,
   one send at a time and with 64 and 256 sends in flight (send_async futures, one
   producer), side by side with nats-py publishing to a JetStream R1 file stream at the
   same depths.  Durability: the broker runs ASYNC_FLUSH and SYNC_FLUSH; nats-server 2.9's
   file store writes to the page cache and fsyncs in the background (like ASYNC_FLUSH), so
   the ratio that compares like with like is ASYNC_FLUSH / JetStream.
2. Raw commit-log appends (MessageStore.put of 1 KiB records, 64 concurrent puts, so group
   commit applies) against `dd` writing the same bytes sequentially: SYNC_FLUSH vs
   `oflag=dsync` with 64 KiB blocks (one sync per ~64 records, as a batch does), and
   ASYNC_FLUSH vs plain dd.
Results to bench/results/produce.json and a table; loopback only, bounded counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from cluster import LocalCluster  # noqa: E402
from conftest import free_port  # noqa: E402

BODY = b"x" * 1024
DEPTHS = (1, 64, 256)


def progress(text: str) -> None:
    print(f"[produce-bench] {text}", flush=True)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] * 1000 if values else 0.0


def rocketscope(flush: str, messages: int, sync_messages: int) -> dict[str, dict[str, float]]:
    from rmq import message, producer

    root = Path(tempfile.mkdtemp(prefix="rs-produce-"))
    c = LocalCluster(root)
    out: dict[str, dict[str, float]] = {}
    try:
        c.start_namesrv()
        node = c.start_broker("bench", flushDiskType=flush, mappedFileSizeCommitLog=128 * 1024 * 1024)
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", "Bench", "-r", "8", "-w", "8")
        with producer(node.endpoint, "Bench") as p:
            for _ in range(50):
                p.send(message("Bench", BODY))
            for depth in DEPTHS:
                n = sync_messages if depth == 1 else messages
                lat: list[float] = []
                t0 = time.perf_counter()
                if depth == 1:
                    for _ in range(n):
                        s = time.perf_counter()
                        p.send(message("Bench", BODY))
                        lat.append(time.perf_counter() - s)
                else:
                    sem, done, count = threading.Semaphore(depth), threading.Event(), [0]

                    def fin(_f, s: float, lat=lat, sem=sem, count=count, n=n, done=done) -> None:  # type: ignore[no-untyped-def]
                        lat.append(time.perf_counter() - s)
                        sem.release()
                        count[0] += 1
                        if count[0] == n:
                            done.set()

                    for _ in range(n):
                        sem.acquire()
                        s = time.perf_counter()
                        p.send_async(message("Bench", BODY)).add_done_callback(lambda f, s=s: fin(f, s))
                    done.wait(600)
                elapsed = time.perf_counter() - t0
                out[str(depth)] = {"msgs_per_s": n / elapsed, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)}
                progress(f"RocketScope {flush} depth {depth}: {out[str(depth)]['msgs_per_s']:.0f} msg/s")
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    return out


async def jetstream(messages: int, sync_messages: int) -> dict[str, dict[str, float]]:
    import nats
    from nats.js.api import StorageType, StreamConfig

    root = Path(tempfile.mkdtemp(prefix="js-produce-"))
    port = free_port()
    proc = subprocess.Popen(["nats-server", "-js", "-sd", str(root), "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict[str, dict[str, float]] = {}
    try:
        for _ in range(100):
            try:
                nc = await nats.connect(f"nats://127.0.0.1:{port}")
                break
            except Exception:
                await asyncio.sleep(0.1)
        js = nc.jetstream(timeout=10)
        await js.add_stream(StreamConfig(name="BENCH", subjects=["bench"], num_replicas=1, storage=StorageType.FILE))
        for _ in range(50):
            await js.publish("bench", BODY)
        for depth in DEPTHS:
            n = sync_messages if depth == 1 else messages
            lat: list[float] = []
            sem = asyncio.Semaphore(depth)

            async def one(sem: asyncio.Semaphore = sem, lat: list[float] = lat) -> None:
                async with sem:
                    s = time.perf_counter()
                    await js.publish("bench", BODY)
                    lat.append(time.perf_counter() - s)

            t0 = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n)))
            elapsed = time.perf_counter() - t0
            out[str(depth)] = {"msgs_per_s": n / elapsed, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)}
            progress(f"JetStream R1 depth {depth}: {out[str(depth)]['msgs_per_s']:.0f} msg/s")
        await nc.close()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)
    return out


async def store_appends(sync: bool, records: int) -> float:
    from rocketscope.broker.store.message_store import MessageStore, StoreConfig
    from rocketscope.broker.store.record import StoredMessage

    root = Path(tempfile.mkdtemp(prefix="rs-store-"))
    store = MessageStore(StoreConfig(root=root, commitlog_segment_size=256 * 1024 * 1024, sync_flush=sync))
    await store.start()
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with sem:
            await store.put([StoredMessage(topic="T", queue_id=i % 8, body=BODY, properties={"UNIQ_KEY": str(i)})])

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(records)))
    elapsed = time.perf_counter() - t0
    written = store.commit_log.max_offset
    await store.shutdown()
    shutil.rmtree(root, ignore_errors=True)
    return written / elapsed / 1e6


def dd(megabytes: int, sync: bool) -> float:
    target = Path(tempfile.mkdtemp(prefix="dd-")) / "f"
    args = ["dd", "if=/dev/zero", f"of={target}", "bs=64k", f"count={megabytes * 16}"]
    if sync:
        args.append("oflag=dsync")
    res = subprocess.run(args, capture_output=True, text=True)
    shutil.rmtree(target.parent, ignore_errors=True)
    m = re.search(r"([\d.]+) s,", res.stderr)
    secs = float(m.group(1)) if m else 1.0
    return megabytes * 1024 * 1024 / secs / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--sync-messages", type=int, default=500)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "produce.json"))
    args = ap.parse_args()
    if not shutil.which("nats-server"):
        sys.exit("nats-server is missing: apt-get install -y nats-server")
    res: dict[str, object] = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "body_bytes": len(BODY)}
    rs_async = rocketscope("ASYNC_FLUSH", args.messages, args.sync_messages)
    rs_sync = rocketscope("SYNC_FLUSH", args.messages, args.sync_messages)
    js = asyncio.run(jetstream(args.messages, args.sync_messages))
    res["produce"] = {"rocketscope_async_flush": rs_async, "rocketscope_sync_flush": rs_sync, "jetstream_r1": js,
                      "ratio_async_vs_jetstream": {d: rs_async[d]["msgs_per_s"] / js[d]["msgs_per_s"] for d in js}}
    mb = args.records * 1.1 / 1024
    store_sync = asyncio.run(store_appends(True, args.records))
    store_async = asyncio.run(store_appends(False, args.records))
    dd_sync, dd_async = dd(max(8, int(mb)), True), dd(max(8, int(mb)), False)
    res["storage_mb_per_s"] = {"store_sync_flush": store_sync, "dd_dsync_64k": dd_sync,
                               "ratio_sync": store_sync / dd_sync, "store_async_flush": store_async,
                               "dd_no_sync": dd_async, "ratio_async": store_async / dd_async}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(f"\n{'depth':>6}{'RS async msg/s':>16}{'RS sync msg/s':>15}{'JetStream R1':>14}{'ratio':>7}"
          f"{'RS p50/p99 ms':>16}{'JS p50/p99 ms':>16}")
    for d in js:
        a, s_, j = rs_async[d], rs_sync[d], js[d]
        print(f"{d:>6}{a['msgs_per_s']:>16.0f}{s_['msgs_per_s']:>15.0f}{j['msgs_per_s']:>14.0f}"
              f"{a['msgs_per_s'] / j['msgs_per_s']:>7.2f}{a['p50_ms']:>9.1f}/{a['p99_ms']:<6.1f}"
              f"{j['p50_ms']:>9.1f}/{j['p99_ms']:<6.1f}")
    st = res["storage_mb_per_s"]
    print(f"\nstorage MB/s: store SYNC_FLUSH {st['store_sync_flush']:.1f} vs dd dsync {st['dd_dsync_64k']:.1f} "  # type: ignore[index]
          f"({st['ratio_sync']:.2f}); store ASYNC {st['store_async_flush']:.1f} vs dd {st['dd_no_sync']:.1f} "  # type: ignore[index]
          f"({st['ratio_async']:.2f})")  # type: ignore[index]
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
