"""Where a Spark pipeline run spends its CPU: per shared table, per JVM thread, and in code generation.

Wall time on this shared 2-core machine says little (other agents' load), so every step is
measured in CPU seconds of the driver JVM (``/proc/<pid>/stat``), and at the end the JVM's
threads are summed by name: ``C2 CompilerThread``/``C1 CompilerThread`` (HotSpot's JIT),
``Executor task launch worker`` (the tasks), ``Thread-N`` (the py4j driver thread: planning
and Janino compilation of generated code).  Spark's own codegen metrics (compilations, their
time, generated class and method sizes) are printed too.  This is how session 10 found that
JIT compilation, not the data, was the largest cost at 20k-200k messages (docs/ANALYTICS.md,
"Results").

    .venv/bin/python bench/spark_profile.py DATA                 # DATA holds trace/ and ha/ Parquet
    .venv/bin/python bench/spark_profile.py DATA --code /tmp/old # an older spark/ tree, e.g.
        # mkdir /tmp/old && git archive b98299c spark | tar -x -C /tmp/old
    JAVA_TOOL_OPTIONS="-XX:TieredStopAtLevel=1" .venv/bin/python bench/spark_profile.py DATA  # JVM flags

Tables: ``--tables pubs,replication,copies,messages,consumers`` (the default), each counted
after records, events and leaderships; then the message_timeline table is computed (not
written).  ``--explain`` prints each table's formatted plan.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
import types
from pathlib import Path
from typing import Any


def use_code(tree: Path) -> None:
    """Import ``rocketscope.spark`` from ``tree/spark`` (an older version) instead of the installed one."""
    import rocketscope

    pkg = types.ModuleType("rocketscope.spark")
    pkg.__path__ = [str(tree / "spark")]
    sys.modules["rocketscope.spark"] = pkg
    rocketscope.spark = pkg  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path)
    parser.add_argument("--code", type=Path, default=None, help="a directory holding an older spark/ tree")
    parser.add_argument("--tables", default="pubs,replication,copies,messages,consumers")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    if args.code:
        use_code(args.code)
    from pyspark.sql import functions as F

    from rocketscope.spark.jobs import message_timeline
    from rocketscope.spark.model import Model
    from rocketscope.spark.schema import ROW_SCHEMA
    from rocketscope.spark.session import get_session

    spark = get_session("local[2]", app_name="rocketscope-profile", driver_memory=args.driver_memory,
                        shuffle_partitions=args.partitions)
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    total = 0.0

    def step(name: str, fn: Any) -> None:
        nonlocal total
        wall, before = time.monotonic(), cpu()
        value = fn()
        used = cpu() - before
        total += used
        print(f"{name}: {time.monotonic() - wall:.1f} s wall, {used:.1f} s CPU -> {value}", flush=True)

    print(f"load average at start: {os.getloadavg()}", flush=True)
    rows = spark.read.schema(ROW_SCHEMA).parquet(str(args.data / "trace"), str(args.data / "ha"))
    model = Model(spark, rows)
    step("records", lambda: model.records.count())
    step("events", lambda: model.events.count())
    step("leaderships", lambda: model.leaderships.count())
    for name in [t for t in args.tables.split(",") if t]:
        if args.explain:
            getattr(model, name).explain("formatted")
        step(name, lambda n=name: getattr(model, n).count())
    timeline = message_timeline.build(model)
    if args.explain:
        timeline.explain("formatted")
    step("message_timeline", lambda: timeline.agg(F.sum(F.hash(*timeline.columns))).first()[0])
    print(f"steps: {total:.1f} s CPU of the driver JVM; load average at end: {os.getloadavg()}")
    metrics = jvm.org.apache.spark.metrics.source.CodegenMetrics
    for label, metric in (("compilation ms", "METRIC_COMPILATION_TIME"), ("source chars", "METRIC_SOURCE_CODE_SIZE"),
                          ("class bytecode", "METRIC_GENERATED_CLASS_BYTECODE_SIZE"),
                          ("method bytecode", "METRIC_GENERATED_METHOD_BYTECODE_SIZE")):
        hist = getattr(metrics, metric)()
        snap = hist.getSnapshot()
        print(f"codegen {label}: count {hist.getCount()}, mean {snap.getMean():.0f}, max {snap.getMax()}")
    by_thread: collections.Counter[str] = collections.Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        by_thread[re.sub(r"[0-9]+", "N", comm)] += (int(fields[11]) + int(fields[12])) / tick
    for name, seconds in by_thread.most_common(8):
        print(f"thread {name}: {seconds:.1f} s CPU (whole JVM life)")
    spark.stop()


if __name__ == "__main__":
    main()
