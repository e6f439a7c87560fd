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
after records, events and leaderships; then the four jobs' tables are written (to a temporary
directory), each a step.  ``--explain`` prints each table's formatted plan.  Every step
reports the driver JVM's CPU, this Python process's CPU (py4j, planning calls) and the
classes Janino compiled in it.  ``--passes 2`` repeats everything with a fresh model in the
same JVM: the second pass is what a long-lived session (``analyze --watch``) pays per run.
``--conf KEY=VALUE`` sets a Spark setting (codegen settings measured this way).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import shutil
import sys
import tempfile
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


def codegen_counts(jvm: Any) -> dict[str, float]:
    """Spark's codegen metrics so far in this JVM: classes compiled by Janino and their compile time."""
    metrics = jvm.org.apache.spark.metrics.source.CodegenMetrics
    comp = metrics.METRIC_COMPILATION_TIME()
    return {"compilations": int(comp.getCount()),
            "compile_ms": float(comp.getSnapshot().getMean() * comp.getCount())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path)
    parser.add_argument("--code", type=Path, default=None, help="a directory holding an older spark/ tree")
    parser.add_argument("--tables", default="pubs,replication,copies,messages,consumers")
    parser.add_argument("--partitions", type=int, default=None,
                        help="shuffle partitions (default: the product's choice, rocketscope.spark.partitions)")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--passes", type=int, default=1,
                        help="run every step this many times in the same JVM (a fresh model each pass): "
                             "pass 1 is cold, later passes show what a long-lived session pays")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session (repeat), e.g. spark.sql.codegen.cache.maxEntries=0")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--decoder", default=None,
                        help="trace decoder (jvm, sql, python; default: the model's); a comma-separated list "
                             "alternates them pass by pass in the same JVM (A/B: --decoder sql,jvm --passes 5)")
    parser.add_argument("--storage-level", default=None,
                        help="where the model keeps its shared tables (a pyspark StorageLevel name, e.g. "
                             "MEMORY_ONLY); default: the model's own choice")
    args = parser.parse_args()
    if args.code:
        use_code(args.code)
    from pyspark import StorageLevel

    from rocketscope.spark.jobs import JOBS
    from rocketscope.spark.model import Model
    from rocketscope.spark.output import write_table
    from rocketscope.spark.schema import ROW_SCHEMA
    from rocketscope.spark.session import get_session

    conf = dict(c.split("=", 1) for c in args.conf)
    decoders = [d for d in (args.decoder or "").split(",") if d]
    spark = get_session("local[2]", app_name="rocketscope-profile", driver_memory=args.driver_memory,
                        shuffle_partitions=args.partitions, conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    def py_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def thread_cpu() -> collections.Counter[str]:
        """CPU clock ticks so far of the driver JVM's threads, summed by name (digits folded: ``GC Thread#N``)."""
        by_name: collections.Counter[str] = collections.Counter()
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                comm = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            by_name[re.sub(r"[0-9]+", "N", comm)] += int(fields[11]) + int(fields[12])
        return by_name

    load_start = os.getloadavg()
    print(f"load average at start: {load_start}; conf {conf}", flush=True)
    report: dict[str, Any] = {"data": str(args.data), "conf": conf, "partitions": args.partitions,
                              "load_start": load_start, "passes": []}
    out_dir = Path(tempfile.mkdtemp(prefix="rs-profile-"))
    def run_pass(n: int) -> dict[str, Any]:
        """Every step once with a fresh model; CPU of the JVM and of Python, Janino classes, per step."""
        steps: dict[str, dict[str, float]] = {}

        def step(name: str, fn: Any) -> None:
            # the job description names the step in an event log (bench/spark_eventlog.py)
            spark.sparkContext.setJobDescription(f"pass {n} {name}")
            wall, before, py_before, cg = time.monotonic(), cpu(), py_cpu(), codegen_counts(jvm)
            value = fn()
            steps[name] = {"wall_s": round(time.monotonic() - wall, 1), "jvm_cpu_s": round(cpu() - before, 1),
                           "python_cpu_s": round(py_cpu() - py_before, 1),
                           "janino_classes": codegen_counts(jvm)["compilations"] - cg["compilations"]}
            print(f"pass {n} {name}: {steps[name]} -> {value}", flush=True)

        pass_wall, pass_cpu, pass_threads = time.monotonic(), cpu(), thread_cpu()
        rows = spark.read.schema(ROW_SCHEMA).parquet(str(args.data / "trace"), str(args.data / "ha"))
        options: dict[str, Any] = {}
        if args.storage_level:
            options["storage_level"] = getattr(StorageLevel, args.storage_level)
        if decoders:
            options["decoder"] = decoders[(n - 1) % len(decoders)]
            print(f"pass {n}: decoder {options['decoder']}", flush=True)
        model = Model(spark, rows, **options)
        step("records", lambda: model.records.count())
        step("events", lambda: model.events.count())
        step("leaderships", lambda: model.leaderships.count())
        for name in [t for t in args.tables.split(",") if t]:
            if args.explain and n == 1:
                getattr(model, name).explain("formatted")
            step(name, lambda m=name: getattr(model, m).count())
        for name, build in JOBS.items():
            step(f"job {name}", lambda b=build, j=name: write_table(b(model), out_dir / f"pass-{n}", j))
        model.unpersist()
        total = cpu() - pass_cpu
        threads = thread_cpu()
        threads.subtract(pass_threads)
        # threads that ended during the pass drop out of the sum: their CPU shows only in the pass total
        busiest = {name: round(ticks / tick, 1) for name, ticks in threads.most_common(6) if ticks / tick >= 0.1}
        print(f"pass {n}: {total:.1f} s CPU of the driver JVM, {time.monotonic() - pass_wall:.1f} s wall; "
              f"load average {os.getloadavg()}; by thread {busiest}", flush=True)
        return {"pass": n, "decoder": options.get("decoder", "model default"), "steps": steps,
                "jvm_cpu_s": round(total, 1), "threads_cpu_s": busiest,
                "wall_s": round(time.monotonic() - pass_wall, 1), "load_end": os.getloadavg()}

    for n in range(1, args.passes + 1):
        report["passes"].append(run_pass(n))
    metrics = jvm.org.apache.spark.metrics.source.CodegenMetrics
    for label, metric in (("compilation ms", "METRIC_COMPILATION_TIME"), ("source chars", "METRIC_SOURCE_CODE_SIZE"),
                          ("class bytecode", "METRIC_GENERATED_CLASS_BYTECODE_SIZE"),
                          ("method bytecode", "METRIC_GENERATED_METHOD_BYTECODE_SIZE")):
        hist = getattr(metrics, metric)()
        snap = hist.getSnapshot()
        print(f"codegen {label}: count {hist.getCount()}, mean {snap.getMean():.0f}, max {snap.getMax()}")
    by_thread = thread_cpu()
    for name, ticks in by_thread.most_common(8):
        seconds = ticks / tick
        print(f"thread {name}: {seconds:.1f} s CPU (whole JVM life)")
    report["threads_cpu_s"] = {k: round(v / tick, 1) for k, v in by_thread.most_common(8)}
    report["load_end"] = os.getloadavg()
    spark.stop()
    shutil.rmtree(out_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
