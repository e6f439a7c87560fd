"""The store's CPU per record on a batch, in-process, with no fsync at all (issue 20, session 18).

    .venv/bin/python bench/store_dispatch_micro.py [--records 200000] [--batch 16] [--rounds 3] [--profile]
    .venv/bin/python bench/store_dispatch_micro.py --put-floor [--writers 64]
    .venv/bin/python bench/store_dispatch_micro.py --flush-rounds [--records 3000] [--round-kb 40]

Why: storage_bench's SYNC_FLUSH batch case mixes the store's CPU with the disk.  This takes the disk
out: ``MessageStore.append_batch`` + ``dispatch_confirmed`` (what ``_append_group`` runs per group commit)
on ASYNC_FLUSH with no flush service running, ``--batch`` records per call, the records built before the
timed part (as storage_bench does).  The rate is records per CPU second of this process (``process_time``),
the best of ``--rounds``; ``--profile`` prints a cProfile of one more round (self time, top 15).

``--flush-rounds`` (session 20) measures what a SYNC_FLUSH fsync round costs the event loop's thread when the
store does nothing else: a writer appends ``--round-kb`` to a commit log, waits for the round covering it
(``FlushService.when_synced``), and again, ``--records`` rounds in all; CPU of the loop's thread per round
(``thread_time``, the append's pwrite included) and of the process, for each thread that can run the fdatasync
(broker/fastpath.c's "compiled" one and the "executor" reference), alternated.

``--follower`` (session 24) measures a DLedger follower's hand-over and dispatch of committed records, alternated
in each round: "decoded" (what a follower did before session 24: ``raft_codec.decode_records`` of each appended
entry of ``--batch`` records, ``add_pending``, ``set_confirm_offset`` to its end) and "bytes" (``check_records``,
``add_pending_records``, the same confirm).  The follower's listeners as a broker registers them (three topic
listeners on system topics, two queue listeners), all no-ops.  CPU µs per record of this process.

``--put-floor`` (session 19) measures what is left of a SYNC_FLUSH single put when the store does nothing:
``--writers`` asyncio writers as storage_bench's (its timing and latency bookkeeping included), each put a
future queued for a group that one ``call_soon`` callback resolves, as ``MessageStore.put`` and
``_append_group`` do; no append, no dispatch, no fsync.  Its CPU per put is the floor of storage_bench's
``loop_cpu_us_per_record`` for single puts in this design (docs/BENCHMARKS.md, "SYNC_FLUSH store per record").
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from storage_bench import message

from rocketscope.broker import speedups
from rocketscope.broker.store.message_store import MessageStore, StoreConfig


def one_round(n: int, batch: int, profile: cProfile.Profile | None = None) -> float:
    root = Path(tempfile.mkdtemp(prefix="rs-dispatch-", dir=str(Path.cwd())))
    try:
        store = MessageStore(StoreConfig(root=root, commitlog_segment_size=1 << 30))
        store.recover()
        msgs = [message(i) for i in range(n)]
        t0 = time.process_time()
        if profile:
            profile.enable()
        for i in range(0, n, batch):
            store.append_batch(msgs[i:i + batch])
            store.dispatch_confirmed()
        if profile:
            profile.disable()
        took = time.process_time() - t0
        for cq in store.cqs.values():
            cq.close()
        store.index.close()
        store.commit_log.close()
        return n / took
    finally:
        shutil.rmtree(root, ignore_errors=True)


def follower_round(n: int, batch: int, way: str) -> float:
    """CPU µs per record of a follower's hand-over and dispatch of ``n`` records in entries of ``batch`` (see
    --follower)."""
    from rocketscope.broker.dledger import raft_codec
    from rocketscope.broker.store import record

    root = Path(tempfile.mkdtemp(prefix="rs-follower-", dir=str(Path.cwd())))
    try:
        store = MessageStore(StoreConfig(root=root, commitlog_segment_size=1 << 30))
        store.set_confirm_offset(0)
        for topic in ("rmq_sys_POP_STATE", "rmq_sys_OFFSETS", "RMQ_SYS_TRACE_TOPIC"):
            store.add_topic_listener(topic, lambda m: None)
        for _ in range(2):
            store.add_queue_listener(lambda qs: None)
        entries: list[tuple[int, bytes]] = []
        pos = 0
        for i in range(0, n, batch):
            parts = []
            start = pos
            for j in range(i, min(i + batch, n)):
                m = message(j)
                m.physical_offset, m.queue_offset, m.store_timestamp = pos, j // 8, 1_700_000_000_000 + j
                data = record.encode(m)
                parts.append(data)
                pos += len(data)
            entries.append((start, b"".join(parts)))
        t0 = time.process_time()
        if way == "bytes":
            check, add = raft_codec.check_records, store.add_pending_records
            for start, data in entries:
                check(data)
                add(start, data)
                store.set_confirm_offset(start + len(data))
        else:
            decode, add_msgs = raft_codec.decode_records, store.add_pending
            for start, data in entries:
                add_msgs(decode(data))
                store.set_confirm_offset(start + len(data))
        took = time.process_time() - t0
        assert store.dispatched == pos and sum(cq.max_offset for cq in store.cqs.values()) == n
        for cq in store.cqs.values():
            cq.close()
        store.index.close()
        store.commit_log.close()
        return took / n * 1e6
    finally:
        shutil.rmtree(root, ignore_errors=True)


def put_floor(n: int, writers: int) -> float:
    """CPU µs per put of ``n`` puts by ``writers`` writers through the put path's asyncio steps alone."""

    async def run() -> float:
        loop = asyncio.get_running_loop()
        queue: list[asyncio.Future[bool]] = []
        scheduled = [False]

        def group() -> None:  # _append_group's hand-offs: take the queue, resolve each put's future
            scheduled[0] = False
            taken = queue[:]
            queue.clear()
            for fut in taken:
                fut.set_result(True)

        async def put() -> bool:  # MessageStore.put's SYNC_FLUSH shape: a future, queued, one callback a group
            fut: asyncio.Future[bool] = loop.create_future()
            queue.append(fut)
            if not scheduled[0]:
                scheduled[0] = True
                loop.call_soon(group)
            return await fut

        done = [0]
        lat: list[float] = []

        async def writer() -> None:  # storage_bench's writer, its bookkeeping included
            while done[0] < n:
                done[0] += 1
                s = time.perf_counter()
                await put()
                lat.append(time.perf_counter() - s)

        t0 = time.thread_time()
        await asyncio.gather(*(writer() for _ in range(writers)))
        return (time.thread_time() - t0) / len(lat) * 1e6

    return asyncio.run(run())


def flush_rounds(n: int, kb: int, runner: str) -> dict[str, float]:
    """Loop-thread and process CPU µs per fsync round of ``n`` rounds of ``kb`` KiB each (see --flush-rounds)."""
    from rocketscope.broker.store.flush import FlushService
    from rocketscope.broker.store.segments import SegmentedLog

    root = Path(tempfile.mkdtemp(prefix="rs-flush-", dir=str(Path.cwd())))
    data = b"x" * (kb * 1024)

    async def run() -> dict[str, float]:
        seglog = SegmentedLog(root, 1 << 30, quiet=True)
        flush = FlushService(seglog.sync_plan, seglog.mark_synced, lambda: seglog.synced_offset, 3600, runner)
        loop = asyncio.get_running_loop()
        try:
            c0, p0, t0 = time.thread_time(), time.process_time(), time.perf_counter()
            for _ in range(n):
                seglog.append(data)
                fut: asyncio.Future[bool] = loop.create_future()
                flush.when_synced(seglog.max_offset, 5.0, fut.set_result)
                assert await fut
            c, p, t = time.thread_time() - c0, time.process_time() - p0, time.perf_counter() - t0
            kind = flush.runner
        finally:
            await flush.stop()
            seglog.close()
        return {"runner": kind, "loop_cpu_us_per_round": round(c / n * 1e6, 1),
                "process_cpu_us_per_round": round(p / n * 1e6, 1), "wall_us_per_round": round(t / n * 1e6, 1)}

    try:
        return asyncio.run(run())
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--put-floor", action="store_true", help="the asyncio floor of a single put (see above)")
    ap.add_argument("--writers", type=int, default=64, help="writers of --put-floor")
    ap.add_argument("--flush-rounds", action="store_true", help="the event loop's CPU per fsync round (see above)")
    ap.add_argument("--round-kb", type=int, default=40, help="KiB appended per round of --flush-rounds")
    ap.add_argument("--follower", action="store_true", help="a DLedger follower's dispatch, decoded vs bytes")
    args = ap.parse_args()
    if args.follower:
        per_way: dict[str, list[float]] = {"decoded": [], "bytes": []}
        for _ in range(args.rounds):
            for way in per_way:
                per_way[way].append(round(follower_round(args.records, args.batch, way), 2))
        print(json.dumps({"implementation": speedups.IMPLEMENTATION, "batch": args.batch, "records": args.records,
                          "cpu_us_per_record": per_way, "best": {k: min(v) for k, v in per_way.items()}}))
        return
    if args.flush_rounds:
        rows = [flush_rounds(args.records, args.round_kb, kind)
                for _ in range(args.rounds) for kind in ("executor", "compiled")]
        print(json.dumps({"rounds": args.records, "round_kb": args.round_kb, "runs": rows}, indent=1))
        return
    if args.put_floor:
        floors = [put_floor(args.records, args.writers) for _ in range(args.rounds)]
        print(json.dumps({"put_floor_loop_cpu_us_per_put": [round(f, 2) for f in floors],
                          "best": round(min(floors), 2), "writers": args.writers, "puts": args.records}))
        return
    rates = [one_round(args.records, args.batch) for _ in range(args.rounds)]
    out = {"implementation": speedups.IMPLEMENTATION, "batch": args.batch, "records": args.records,
           "records_per_cpu_s": [round(r) for r in rates], "best": round(max(rates)),
           "us_per_record": round(1e6 / max(rates), 2)}
    print(json.dumps(out))
    if args.profile:
        prof = cProfile.Profile()
        one_round(args.records, args.batch, prof)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
