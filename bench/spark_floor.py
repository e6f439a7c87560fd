"""The floor of any Spark pipeline over this input on this machine: the steps every plan of the four jobs must pay.

Issue 22 asks all four jobs at 1M messages in under 20 s and at 10M in under 120 s on
``local[2]``: with two cores that is at most 40 (1M) and 240 (10M) CPU seconds for the
whole run.  Whatever the joins and aggregates cost, a run must read the input, decode
every trace body, move every record to its message's partition once (the jobs join per
message) and write ``message_timeline`` (one nested row per message: most of the output
bytes).  This script measures those steps alone, in one JVM, in CPU seconds of the driver
JVM (bench/spark_bench.py ``CpuClock``; wall time on this shared machine says little), so the closing
figures can say how much of the budget is left for everything else:

========================  =========================================================================
step                      what runs (each written to Spark's ``noop`` format unless it says Parquet)
========================  =========================================================================
scan                      the input Parquet (trace and HA rows), every column read
decode                    the trace bodies decoded (the model's decoder, the JVM one by default)
decode+shuffle            the same, hash-partitioned by message as ``Model.records`` does
timeline read             the ``message_timeline`` table of an earlier run, every column read
timeline write            the same rows written again as Parquet, partitioned by date (the write
                          alone is this step minus "timeline read")
========================  =========================================================================

    .venv/bin/python bench/spark_floor.py DATA TABLES [--passes 3] [--json bench/results/spark_floor.json]

``DATA`` holds ``trace/`` and ``ha/`` (bench/spark_bench.py's generated input), ``TABLES``
the output of a run over it (``work-N/tables`` after bench/spark_bench.py).  Pass 1 is cold
(class loading, JIT); later passes are what a long-lived session pays.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_bench import CpuClock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="input: a directory holding trace/ and ha/ Parquet")
    parser.add_argument("tables", type=Path, help="an earlier run's output directory (holds message_timeline/)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from rocketscope.spark.decode import DEFAULT_DECODER, decode_trace, effective_decoder
    from rocketscope.spark.model import MSG_KEY
    from rocketscope.spark.schema import ROW_SCHEMA
    from rocketscope.spark.session import get_session

    spark = get_session("local[2]", app_name="rocketscope-floor", driver_memory=args.driver_memory,
                        shuffle_partitions=args.partitions)
    spark.sparkContext.setLogLevel("ERROR")
    cpu = CpuClock(spark)
    rows = spark.read.schema(ROW_SCHEMA).parquet(str(args.data / "trace"), str(args.data / "ha"))
    decoder = DEFAULT_DECODER  # the model's default
    used = effective_decoder(spark, decoder)
    messages = json.loads((args.data / "_SUCCESS.json").read_text()).get("messages") \
        if (args.data / "_SUCCESS.json").exists() else None
    out_dir = Path(tempfile.mkdtemp(prefix="rs-floor-"))
    report: dict[str, Any] = {"data": str(args.data), "tables": str(args.tables), "messages": messages,
                              "decoder": used, "load_start": os.getloadavg(), "passes": []}
    print(f"load average {os.getloadavg()}; decoder {used}; messages {messages}", flush=True)

    def noop(df: Any) -> None:
        df.write.format("noop").mode("overwrite").save()

    def decoded() -> Any:
        return decode_trace(rows, decoder).withColumn(MSG_KEY, F.xxhash64("msg_id"))

    timeline = str(args.tables / "message_timeline")
    steps: dict[str, Callable[[int], None]] = {
        "scan": lambda n: noop(rows),
        "decode": lambda n: noop(decoded()),
        "decode+shuffle": lambda n: noop(decoded().repartition(args.partitions, MSG_KEY, "msg_id")),
        "timeline read": lambda n: noop(spark.read.parquet(timeline)),
        "timeline write": lambda n: spark.read.parquet(timeline).write.mode("overwrite")
        .partitionBy("date").parquet(str(out_dir / f"timeline-{n}")),
    }
    for n in range(1, args.passes + 1):
        figures: dict[str, dict[str, float]] = {}
        for name, run in steps.items():
            wall = time.monotonic()
            cpu.start()
            run(n)
            figures[name] = {"jvm_cpu_s": cpu.seconds(), "wall_s": round(time.monotonic() - wall, 2)}
            print(f"pass {n} {name}: {figures[name]}", flush=True)
        write_only = figures["timeline write"]["jvm_cpu_s"] - figures["timeline read"]["jvm_cpu_s"]
        floor = figures["decode+shuffle"]["jvm_cpu_s"] + figures["timeline write"]["jvm_cpu_s"]
        print(f"pass {n}: timeline write alone {write_only:.1f} CPU s; floor (decode+shuffle + timeline "
              f"read and write) {floor:.1f} CPU s; load {os.getloadavg()}", flush=True)
        report["passes"].append({"pass": n, "steps": figures, "timeline_write_only_cpu_s": round(write_only, 2),
                                 "floor_cpu_s": round(floor, 2), "load_end": os.getloadavg()})
    spark.stop()
    shutil.rmtree(out_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
