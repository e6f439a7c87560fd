"""The store's CPU per record on a batch, in-process, with no fsync at all (issue 20, session 18).

    .venv/bin/python bench/store_dispatch_micro.py [--records 200000] [--batch 16] [--rounds 3] [--profile]

Why: storage_bench's SYNC_FLUSH batch case mixes the store's CPU with the disk.  This takes the disk
out: ``MessageStore.append_batch`` + ``dispatch_confirmed`` (what ``_append_group`` runs per group commit)
on ASYNC_FLUSH with no flush service running, ``--batch`` records per call, the records built before the
timed part (as storage_bench does).  The rate is records per CPU second of this process (``process_time``),
the best of ``--rounds``; ``--profile`` prints a cProfile of one more round (self time, top 15).
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
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
