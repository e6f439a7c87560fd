"""Raw commit-log append throughput against the disk's own limit measured with dd (issue 3).

    .venv/bin/python bench/storage_bench.py [--mb 64] [--writers 64] [--put-batch 16] [--quick] [--dir DIR]

No network, no broker: the store in-process, 1 KiB bodies (1,167-byte records with the
UNIQ_KEY property the official client sends), in a scratch directory on the same file
system as dd's target (never tmpfs).  Cases, each bounded by ``--mb`` and ``--seconds``:

* ``commitlog``: ``CommitLog.append`` in a tight loop, nothing else (codec + pwrite): the
  ceiling of the write path in this Python implementation.
* ``commitlog_group_sync``: the same with ``fdatasync`` after every ``--batch`` records, the
  pattern of a group commit without the asyncio machinery around it.
* ``commitlog_batch``: ``CommitLog.append_batch`` of ``--put-batch`` records per call (encoded
  into one buffer, one ``pwrite``), no sync: the codec's own ceiling.
* ``store_async_flush``: ``MessageStore.put`` with ``--writers`` concurrent asyncio writers,
  ASYNC_FLUSH (the flush service syncs every 500 ms): what a broker's send path costs in
  storage, consume queues and index included.
* ``store_sync_flush``: the same with SYNC_FLUSH: every put waits for the fdatasync that
  covers it; concurrent writers share fsyncs (group commit).  The number of fsyncs is
  counted, so the bytes per fsync are known.
* ``store_sync_flush_batch``: SYNC_FLUSH with ``--writers / --put-batch`` writers each
  passing ``--put-batch`` messages to one ``MessageStore.put`` (the same number of
  messages in flight): what a broker gets when a send carries several messages, the
  batch API (``MessageStore.append_batch`` / ``CommitLog.append_batch``) without the
  per-call asyncio cost.

The store cases are the best of ``--tries`` runs, as dd's are (a shared machine's other
work only ever slows a run down).

Against dd with the matching fsync policy, writing the same number of bytes:

* ``dd_nosync``: ``dd bs=1M`` (256 MB, best of 3) into the page cache (compared with ASYNC_FLUSH and commitlog);
* ``dd_fdatasync``: ``dd bs=1M conv=fdatasync`` (the disk's sequential write limit);
* ``dd_dsync_batch``: ``dd oflag=dsync`` with ``bs`` = the bytes per fsync that SYNC_FLUSH
  actually achieved (one synchronous write per group commit: the like-for-like limit);
  ``dd_dsync_put_batch`` the same for ``store_sync_flush_batch``; and
  ``dd_dsync_1k``: one fsync per 1 KiB record, what a disk does without group commit.

The target is >= 50 % of dd with the same fsync policy (SYNC_FLUSH cases against the dd with
their bytes per fsync).  A cProfile of the ASYNC_FLUSH puts
says where the store's time goes.  Results: bench/results/storage.json.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common

from rocketscope.broker.store import record
from rocketscope.broker.store.commitlog import CommitLog
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig
from rocketscope.broker.store.record import StoredMessage

BODY = common.BODY_1K
progress = common.Progress("storage")
MB = 1_000_000


def message(i: int) -> StoredMessage:
    """A record like a client's: 1 KiB body, a 32-char message id, a tag, 8 queues."""
    return StoredMessage(topic="Bench", queue_id=i % 8, body=BODY, born_timestamp=1_700_000_000_000,
                         born_host="127.0.0.1:50000",
                         properties={"UNIQ_KEY": f"{i:032X}", "TAGS": "bench"})


def record_size() -> int:
    m = message(0)
    m.physical_offset = 0
    return len(record.encode(m))


def bench_commitlog(root: Path, target_bytes: int, max_s: float, batch: int, per_call: int = 1) -> dict[str, Any]:
    """Tight append loop; with ``batch`` > 0 an fdatasync every ``batch`` records; ``per_call`` > 1:
    ``CommitLog.append_batch`` of that many records per call (one write each)."""
    msgs = [message(i) for i in range(max(1, target_bytes // record_size()))]  # built outside the timed loop
    cl = CommitLog(root / "commitlog", 1 << 30)
    written, syncs, i = 0, 0, 0
    t0 = time.perf_counter()
    deadline = t0 + max_s
    try:
        while i < len(msgs) and time.perf_counter() < deadline:
            if per_call > 1:
                chunk = msgs[i:i + per_call]
                heads = [record.prepare(m) for m in chunk]
                cl.append_batch(chunk, heads)
                written += sum(m.size for m in chunk)
                i += len(chunk)
                continue
            written += len(cl.append(msgs[i]))
            i += 1
            if batch and i % batch == 0:
                cl.log.sync()
                syncs += 1
        if batch:
            cl.log.sync()
            syncs += 1
        elapsed = time.perf_counter() - t0
    finally:
        cl.close()
    return {"records": i, "bytes": written, "seconds": round(elapsed, 3), "mb_per_s": written / elapsed / MB,
            "records_per_s": i / elapsed, "fsyncs": syncs}


async def _store_run(root: Path, sync: bool, target_bytes: int, max_s: float, writers: int,
                     profile: cProfile.Profile | None, per_put: int = 1) -> dict[str, Any]:
    store = MessageStore(StoreConfig(root=root, commitlog_segment_size=1 << 30, sync_flush=sync))
    await store.start()
    syncs_before = store.flush.syncs  # fdatasync rounds (helper process or worker thread)
    per_record = record_size()
    total = max(writers, target_bytes // per_record)
    msgs = [message(i) for i in range(total)]  # built outside the timed part: the broker's to_stored is not ours
    next_i = [0]
    lat: list[float] = []
    failed = [0]
    t0 = time.perf_counter()
    loop_cpu0, proc_cpu0 = time.thread_time(), time.process_time()  # the event loop runs in this thread
    deadline = t0 + max_s

    async def writer() -> None:
        while next_i[0] < total and time.perf_counter() < deadline:
            i = next_i[0]
            next_i[0] += per_put
            s = time.perf_counter()
            res = await store.put(msgs[i:i + per_put])
            took = time.perf_counter() - s
            for r in res:  # every message of a put waits as long as the put
                lat.append(took)
                if r.status is not PutStatus.PUT_OK:
                    failed[0] += 1

    try:
        if profile:
            profile.enable()
        await asyncio.gather(*(writer() for _ in range(writers)))
        if profile:
            profile.disable()
        elapsed = time.perf_counter() - t0
        loop_cpu, proc_cpu = time.thread_time() - loop_cpu0, time.process_time() - proc_cpu0
        written = store.commit_log.max_offset
        fsyncs = store.flush.syncs - syncs_before
    finally:
        await store.shutdown()
    return {"records": len(lat), "bytes": written, "seconds": round(elapsed, 3), "mb_per_s": written / elapsed / MB,
            "records_per_s": len(lat) / elapsed,
            # CPU per record, which load on the machine moves far less than records/s: the event loop's thread
            # (the store's work plus this bench's writers) and the whole process (plus the fsync thread)
            "loop_cpu_us_per_record": loop_cpu / max(1, len(lat)) * 1e6,
            "process_cpu_us_per_record": proc_cpu / max(1, len(lat)) * 1e6, "fsyncs": fsyncs, "failed": failed[0],
            "bytes_per_fsync": written // fsyncs if fsyncs else None, **common.percentiles(lat)}


def bench_store(base: Path, sync: bool, target_bytes: int, max_s: float, writers: int,
                profile: cProfile.Profile | None = None, per_put: int = 1) -> dict[str, Any]:
    root = common.scratch_dir("rs-store-", base)
    try:
        return asyncio.run(_store_run(root, sync, target_bytes, max_s, writers, profile, per_put))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def dd(base: Path, total_bytes: int, bs: int, flags: list[str], max_s: float) -> dict[str, Any]:
    """dd from /dev/zero with ``flags``; ``count`` sized to ``total_bytes`` and stopped after ``max_s``."""
    target = common.scratch_dir("dd-", base) / "f"
    count = max(1, total_bytes // bs)
    args = ["dd", "if=/dev/zero", f"of={target}", f"bs={bs}", f"count={count}", *flags]
    try:
        res = subprocess.run(args, capture_output=True, text=True, timeout=max_s + 30)
        text = res.stderr
    except subprocess.TimeoutExpired as exc:
        text = (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    finally:
        shutil.rmtree(target.parent, ignore_errors=True)
    m = re.search(r"^(\d+) bytes .* copied, ([\d.]+) s", text, re.M)
    if not m:
        return {"command": " ".join(args), "error": text.strip()[-300:]}
    nbytes, secs = int(m.group(1)), float(m.group(2))
    return {"command": " ".join([*args[:1], "if=/dev/zero", "of=F", *args[3:]]), "bytes": nbytes, "seconds": secs,
            "mb_per_s": nbytes / secs / MB, "writes_per_s": nbytes / bs / secs}


def dd_bounded(base: Path, total_bytes: int, bs: int, flags: list[str], max_s: float) -> dict[str, Any]:
    """dd, shrunk first with a short probe when the full count would exceed ``max_s`` (slow dsync writes)."""
    if not any("dsync" in f for f in flags):
        return dd(base, total_bytes, bs, flags, max_s)
    probe = dd(base, min(total_bytes, bs * 200), bs, flags, max_s)
    if "error" in probe or probe["seconds"] <= 0:
        return probe
    rate = probe["bytes"] / probe["seconds"]
    return dd(base, int(min(total_bytes, rate * max_s)), bs, flags, max_s)


def top_self(prof: cProfile.Profile, n: int = 12) -> list[list[Any]]:
    """``[file:function, % of self time, calls]`` for the ``n`` functions with the most self time."""
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values()) or 1.0
    top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:n]
    return [[f"{Path(k[0]).name}:{k[2]}", round(100 * v[2] / total, 1), v[1]] for k, v in top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=64, help="bytes per case (MB)")
    ap.add_argument("--seconds", type=float, default=20.0, help="time bound per case")
    ap.add_argument("--writers", type=int, default=64, help="concurrent MessageStore.put writers")
    ap.add_argument("--put-batch", type=int, default=16, help="messages per put in store_sync_flush_batch")
    ap.add_argument("--tries", type=int, default=3, help="runs per store case; the best counts")
    ap.add_argument("--batch", type=int, default=64, help="records per fdatasync in commitlog_group_sync")
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory base (a real disk, not tmpfs)")
    ap.add_argument("--dd-tries", type=int, default=3, help="dd runs per case; the best counts")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=common.RESULTS / "storage.json")
    args = ap.parse_args()
    if args.quick:
        args.mb, args.seconds, args.dd_tries, args.tries = 4, 5.0, 1, 1
    base = args.dir or common.scratch_dir("rs-storage-bench-")
    fs = common.filesystem_of(base)
    progress(f"scratch {base} on {fs}; {args.mb} MB or {args.seconds:.0f} s per case; record {record_size()} bytes")
    if "tmpfs" in fs:
        progress("WARNING: tmpfs: fsync costs nothing here, the figures say nothing about a disk")
    target = args.mb * MB
    res: dict[str, Any] = {"record_bytes": record_size(), "body_bytes": len(BODY), "writers": args.writers,
                           "put_batch": args.put_batch, "tries": args.tries, "filesystem": fs, "quick": args.quick}

    def best_store(sync: bool, writers: int, per_put: int = 1) -> dict[str, Any]:
        runs = [bench_store(base, sync, target, args.seconds, writers, None, per_put) for _ in range(args.tries)]
        return max(runs, key=lambda r: r["mb_per_s"])

    try:
        cases: dict[str, dict[str, Any]] = {}
        root = common.scratch_dir("cl-", base)
        cases["commitlog"] = bench_commitlog(root, target, args.seconds, 0)
        shutil.rmtree(root, ignore_errors=True)
        progress(f"CommitLog.append             {cases['commitlog']['mb_per_s']:7.1f} MB/s "
                 f"({cases['commitlog']['records_per_s']:.0f} records/s)")
        root = common.scratch_dir("cl-", base)
        cases["commitlog_group_sync"] = r = bench_commitlog(root, target, args.seconds, args.batch)
        shutil.rmtree(root, ignore_errors=True)
        progress(f"CommitLog.append+sync/{args.batch:<5} {r['mb_per_s']:7.1f} MB/s ({r['fsyncs']} fsyncs)")
        root = common.scratch_dir("cl-", base)
        cases["commitlog_batch"] = r = bench_commitlog(root, target, args.seconds, 0, max(2, args.put_batch))
        shutil.rmtree(root, ignore_errors=True)
        progress(f"CommitLog.append_batch({max(2, args.put_batch)})  {r['mb_per_s']:7.1f} MB/s "
                 f"({r['records_per_s']:.0f} records/s)")
        cases["store_async_flush"] = r = best_store(False, args.writers)
        progress(f"MessageStore.put ASYNC_FLUSH {r['mb_per_s']:7.1f} MB/s ({r['records_per_s']:.0f} records/s, "
                 f"p99 {r['p99_ms']:.2f} ms)")
        cases["store_sync_flush"] = r = best_store(True, args.writers)
        progress(f"MessageStore.put SYNC_FLUSH  {r['mb_per_s']:7.1f} MB/s ({r['records_per_s']:.0f} records/s, "
                 f"loop CPU {r['loop_cpu_us_per_record']:.1f} us/record, "
                 f"{r['fsyncs']} fsyncs, {r['bytes_per_fsync']} B/fsync, p99 {r['p99_ms']:.2f} ms)")
        k = max(1, args.put_batch)
        cases["store_sync_flush_batch"] = rb = best_store(True, max(1, args.writers // k), k)
        progress(f"MessageStore.put([{k}]) SYNC  {rb['mb_per_s']:7.1f} MB/s ({rb['records_per_s']:.0f} records/s, "
                 f"loop CPU {rb['loop_cpu_us_per_record']:.1f} us/record, "
                 f"{rb['fsyncs']} fsyncs, {rb['bytes_per_fsync']} B/fsync, p99 {rb['p99_ms']:.2f} ms)")
        prof = cProfile.Profile()  # separate, smaller runs: the profiler's overhead must not bias the figures
        bench_store(base, False, min(target, 8 * MB), args.seconds, args.writers, prof)
        prof_sync = cProfile.Profile()
        bench_store(base, True, min(target, 8 * MB), args.seconds, args.writers, prof_sync)
        def dsync_bs(case: dict[str, Any]) -> int:  # bytes per fsync, rounded up to whole pages
            return max(4096, ((case["bytes_per_fsync"] or 4096) + 4095) // 4096 * 4096)
        # dd is the reference: bigger than the store cases (a 64 MB dd into the page cache lasts ~20 ms and
        # measures noise), and the best of ``--dd-tries`` runs, since the limit is what the disk can do
        big = max(target, 256 * MB if not args.quick else 16 * MB)

        def best(bs: int, flags: list[str], total: int, max_s: float) -> dict[str, Any]:
            runs = [dd_bounded(base, total, bs, flags, max_s) for _ in range(args.dd_tries)]
            return max(runs, key=lambda r: r.get("mb_per_s", 0.0))

        cases["dd_nosync"] = best(1 << 20, [], big, args.seconds)
        cases["dd_fdatasync"] = best(1 << 20, ["conv=fdatasync"], big, args.seconds)
        cases["dd_dsync_batch"] = best(dsync_bs(r), ["oflag=dsync"], max(target, 16 * MB), args.seconds)
        cases["dd_dsync_put_batch"] = best(dsync_bs(rb), ["oflag=dsync"], max(target, 16 * MB), args.seconds)
        cases["dd_dsync_1k"] = best(1024, ["oflag=dsync"], max(target, 16 * MB), min(args.seconds, 10))
        for name in ("dd_nosync", "dd_fdatasync", "dd_dsync_batch", "dd_dsync_put_batch", "dd_dsync_1k"):
            c = cases[name]
            progress(f"{name:<28} {c.get('mb_per_s', 0):7.1f} MB/s  ({c.get('command', '')})"
                     + (f" ERROR {c['error']}" if "error" in c else ""))
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)

    def ratio(a: str, b: str) -> float | None:
        x, y = cases[a].get("mb_per_s"), cases[b].get("mb_per_s")
        return round(x / y, 3) if x and y else None

    res["cases"] = cases
    res["ratios"] = {"store_sync_flush_vs_dd_dsync_batch": ratio("store_sync_flush", "dd_dsync_batch"),
                     "store_sync_flush_batch_vs_dd_dsync_put_batch": ratio("store_sync_flush_batch",
                                                                           "dd_dsync_put_batch"),
                     "store_sync_flush_vs_dd_fdatasync": ratio("store_sync_flush", "dd_fdatasync"),
                     "store_async_flush_vs_dd_nosync": ratio("store_async_flush", "dd_nosync"),
                     "store_async_flush_vs_dd_fdatasync": ratio("store_async_flush", "dd_fdatasync"),
                     "commitlog_vs_dd_nosync": ratio("commitlog", "dd_nosync"),
                     "commitlog_batch_vs_dd_nosync": ratio("commitlog_batch", "dd_nosync"),
                     "commitlog_group_sync_vs_dd_fdatasync": ratio("commitlog_group_sync", "dd_fdatasync")}
    res["target"] = ">= 0.5 of dd with the same fsync policy (store_sync_flush_vs_dd_dsync_batch, " \
                    "store_sync_flush_batch_vs_dd_dsync_put_batch, store_async_flush_vs_dd_nosync)"
    res["target_met"] = {k: (v is not None and v >= 0.5) for k, v in res["ratios"].items()
                         if k in ("store_sync_flush_vs_dd_dsync_batch", "store_sync_flush_batch_vs_dd_dsync_put_batch",
                                  "store_async_flush_vs_dd_nosync")}
    for key, p in (("cprofile_async_put_top_self", prof), ("cprofile_sync_put_top_self", prof_sync)):
        res[key] = top_self(p)
    common.write_json(res, args.out)

    rows = [[name, c.get("mb_per_s", 0.0), c.get("records_per_s", c.get("writes_per_s", 0.0)), c.get("fsyncs", "")]
            for name, c in cases.items()]
    print("\nCommit-log appends vs dd (MB/s = 10^6 bytes/s)")
    print(common.table(["case", "MB/s", "records or writes/s", "fsyncs"], rows))
    print()
    for k, v in res["ratios"].items():
        print(f"  {k:<46} {v if v is not None else 'n/a'}")
    print(f"target >= 0.5 with the same fsync policy: {res['target_met']}")
    for key, label in (("cprofile_async_put_top_self", "ASYNC_FLUSH"), ("cprofile_sync_put_top_self", "SYNC_FLUSH")):
        print(f"\ncProfile of MessageStore.put ({label}), self time (event-loop thread only):")
        for name, pct, calls in res[key][:10]:
            print(f"  {pct:5.1f}%  {calls:>8} calls  {name}")
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
