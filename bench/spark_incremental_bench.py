"""An incremental run over new traffic on top of a large history (issue 22: 1M new messages on 10M in under 20 s).

bench/spark_bench.py measures the incremental run at each size after everything else in the
same JVM; this script measures only that, at any size, so the 10M case fits in a session:
a first incremental run over the data set's earlier files (the history), then the
measured run over the new ones (the generator's last ``--new-fraction`` of chunks: the
newest messages, whose records overlap the earlier chunks' in time, as late records at a
checkpoint do).  Both run in one SparkSession, so the measured run is warm, as every run
after the first of ``rocketscope analyze all --incremental --watch`` is.

    .venv/bin/python bench/spark_incremental_bench.py /tmp/rocketscope-spark-bench/msgs-10000000-seed-7 \\
        --driver-memory 4g --json bench/results/spark_incremental_10m.json

The measured run's cost should follow the new rows plus the recomputed window (one slot and
the lateness before the earliest new row: spark/incremental.py), not the history; the JSON
records the window's messages (message_timeline rows at or after ``recompute_from_ms``) beside
the new ones, and the driver JVM's CPU seconds beside the wall.

``--history-snapshot DIR`` keeps a copy of the state after the history run in DIR and, when DIR
already holds one made from the same files, starts from it instead of running the history again:
the measured run can then be repeated (an A/B of the incremental path) in a few minutes instead of
the history's six.  A run from the snapshot first makes the new run once on a scratch copy ("warm-up"
in the JSON), so that the measured run is warm, as it is after a history run in the same JVM.
``--conf KEY=VALUE`` sets a Spark setting (the event log, an A/B's switch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_bench import CpuClock, split_files


def _snapshot_matches(snapshot: Path, history_files: list[str]) -> bool:
    """Whether ``snapshot`` is the state of a history run over exactly ``history_files``."""
    ckpt = snapshot / "_incremental" / "checkpoint.json"
    if not ckpt.exists():
        return False
    from rocketscope.spark.incremental import input_files

    return json.loads(ckpt.read_text())["files"] == sorted(input_files(history_files))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="a generated data set (trace/ and ha/ Parquet, _SUCCESS.json)")
    parser.add_argument("--new-fraction", type=float, default=0.1, help="the share of the newest files taken as new")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--work", type=Path, default=None, help="output directory (default: a sibling of DATA)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--history-snapshot", type=Path, default=None,
                        help="keep the state after the history run here, and start from it when it is there")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session (repeatable)")
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from rocketscope.spark.incremental import run_incremental
    from rocketscope.spark.session import get_session

    messages = int(json.loads((args.data / "_SUCCESS.json").read_text())["messages"])
    old, new = split_files(args.data, args.new_fraction)
    work = args.work or args.data.parent / f"incremental-{args.data.name}"
    shutil.rmtree(work, ignore_errors=True)
    snapshot = args.history_snapshot
    from_snapshot = snapshot is not None and _snapshot_matches(snapshot, old)
    if from_snapshot:
        print(f"incremental bench: history state copied from {snapshot}", flush=True)
        shutil.copytree(snapshot, work)
    conf = dict(c.split("=", 1) for c in args.conf)
    spark = get_session("local[2]", app_name="rocketscope-incremental-bench", driver_memory=args.driver_memory,
                        conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    cpu = CpuClock(spark)
    report: dict[str, Any] = {"data": str(args.data), "messages": messages, "files_old": len(old),
                              "files_new": len(new), "load_start": os.getloadavg(), "conf": conf,
                              "history_from_snapshot": from_snapshot}
    runs: list[dict[str, Any]] = []
    for label, inputs in (("history", old), ("warm-up", old + new), ("new", old + new)):
        if (label == "history" and from_snapshot) or (label == "warm-up" and not from_snapshot):
            continue
        target = work
        if label == "warm-up" and snapshot is not None:
            target = work.with_name(work.name + "-warmup")
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(snapshot, target)
        print(f"incremental bench: {label} run over {len(inputs)} files (load {os.getloadavg()[0]:.1f})", flush=True)
        cpu.start()
        wall = time.monotonic()
        result = run_incremental(spark, inputs, target, ["all"])
        result.update(label=label, wall_s=round(time.monotonic() - wall, 1), jvm_cpu_s=cpu.seconds(),
                      load_end=os.getloadavg())
        runs.append(result)
        if label == "warm-up":
            shutil.rmtree(target, ignore_errors=True)
        if label == "history" and snapshot is not None:
            shutil.rmtree(snapshot, ignore_errors=True)
            shutil.copytree(work, snapshot)
            print(f"incremental bench: history state kept in {snapshot}", flush=True)
        print(f"incremental bench: {label} run {result['wall_s']} s wall, {result['jvm_cpu_s']} CPU s; "
              f"steps {result['seconds']}", flush=True)
    from_ms = runs[-1].get("recompute_from_ms")
    timeline = spark.read.parquet(str(work / "message_timeline"))
    report["messages_new"] = round(messages * len(new) / (len(old) + len(new)))
    report["timeline_rows"] = timeline.count()
    slot_start_ms = F.unix_date(F.col("date").cast("date")).cast("long") * 86_400_000 + F.col("slot") * 60_000
    report["timeline_rows_recomputed"] = (timeline.where(slot_start_ms >= from_ms).count()
                                          if from_ms is not None else None)
    report["runs"] = runs
    print(f"incremental bench: {report['messages_new']:,} new messages; {report['timeline_rows_recomputed']} "
          f"of {report['timeline_rows']:,} message_timeline rows in the recomputed window", flush=True)
    spark.stop()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
