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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="a generated data set (trace/ and ha/ Parquet, _SUCCESS.json)")
    parser.add_argument("--new-fraction", type=float, default=0.1, help="the share of the newest files taken as new")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--work", type=Path, default=None, help="output directory (default: a sibling of DATA)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from rocketscope.spark.incremental import run_incremental
    from rocketscope.spark.session import get_session

    messages = int(json.loads((args.data / "_SUCCESS.json").read_text())["messages"])
    old, new = split_files(args.data, args.new_fraction)
    work = args.work or args.data.parent / f"incremental-{args.data.name}"
    shutil.rmtree(work, ignore_errors=True)
    spark = get_session("local[2]", app_name="rocketscope-incremental-bench", driver_memory=args.driver_memory)
    spark.sparkContext.setLogLevel("ERROR")
    cpu = CpuClock(spark)
    report: dict[str, Any] = {"data": str(args.data), "messages": messages, "files_old": len(old),
                              "files_new": len(new), "load_start": os.getloadavg()}
    runs: list[dict[str, Any]] = []
    for label, inputs in (("history", old), ("new", old + new)):
        print(f"incremental bench: {label} run over {len(inputs)} files (load {os.getloadavg()[0]:.1f})", flush=True)
        cpu.start()
        wall = time.monotonic()
        result = run_incremental(spark, inputs, work, ["all"])
        result.update(label=label, wall_s=round(time.monotonic() - wall, 1), jvm_cpu_s=cpu.seconds(),
                      load_end=os.getloadavg())
        runs.append(result)
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
