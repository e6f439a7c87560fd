"""``rocketscope analyze ... --watch SECONDS``: one long-lived SparkSession running incremental runs per interval.

Why: a fresh Spark JVM spends about 100 CPU seconds compiling before it does any data work
(HotSpot's JIT over Spark's own code, Janino over the few hundred classes Spark generates
for the plans, planning; docs/ANALYTICS.md, "Results").  An incremental run
(:mod:`rocketscope.spark.incremental`) started from the command line pays that every time,
whatever the amount of new traffic.  The watcher keeps the session: every ``interval`` it
looks for input files not processed yet and, if there are any, runs
:func:`~rocketscope.spark.incremental.run_incremental` in the same JVM, so the compiled
code (and Spark's cache of generated classes, sized by
:data:`~rocketscope.spark.session.CODEGEN_CACHE_ENTRIES`) is reused from the second run on.

The state is the incremental checkpoint under ``<output>/_incremental``, nothing in
memory: stopping the watcher (Ctrl-C, SIGTERM) between or during runs and starting it
again, or running ``analyze all --incremental`` by hand, continues from the same files.
One log line per run on stderr: new files, wall and CPU seconds of the driver JVM.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from rocketscope.spark.incremental import DEFAULT_LATENESS_MS, DEFAULT_SLOT_MS, run_incremental


def jvm_cpu_seconds(spark: SparkSession) -> float | None:
    """CPU seconds (user + system) of the driver JVM so far, from /proc; None when it is not on this machine."""
    try:
        pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None


def compiled_classes(spark: SparkSession) -> int | None:
    """Classes Janino compiled in the driver JVM so far (Spark's codegen metrics); None when unavailable."""
    try:
        metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
        return int(metrics.METRIC_COMPILATION_TIME().getCount())
    except Exception:  # py4j errors, a remote driver: the figure is informative only
        return None


def watch(spark: SparkSession, inputs: Iterable[str | Path], output: str | Path, jobs: Iterable[str], *,
          interval_s: float, asof_method: str = "interval", lateness_ms: int = DEFAULT_LATENESS_MS,
          slot_ms: int = DEFAULT_SLOT_MS, stop: threading.Event | None = None, max_runs: int | None = None,
          on_run: Callable[[dict[str, Any]], None] | None = None, progress: bool = True) -> int:
    """Run incremental runs every ``interval_s`` in ``spark`` until ``stop`` is set (or ``max_runs`` checks).

    A check that finds no new file costs a directory listing, no Spark job.  ``on_run``
    gets each check's result (``run_incremental``'s dict plus ``check``, ``wall_s``,
    ``jvm_cpu_s`` and ``compiled_classes``: the classes Janino compiled during the check).  Returns
    the number of checks made.
    """
    if interval_s <= 0:
        raise ValueError(f"the watch interval must be positive, got {interval_s}")
    stop = stop or threading.Event()
    inputs = [Path(p) for p in inputs]
    jobs = list(jobs)
    checks = 0
    while not stop.is_set() and (max_runs is None or checks < max_runs):
        checks += 1
        started, cpu, classes = time.monotonic(), jvm_cpu_seconds(spark), compiled_classes(spark)
        result = run_incremental(spark, inputs, output, jobs, asof_method=asof_method, lateness_ms=lateness_ms,
                                 slot_ms=slot_ms, progress=progress)
        cpu_after, classes_after = jvm_cpu_seconds(spark), compiled_classes(spark)
        result["check"] = checks
        result["wall_s"] = round(time.monotonic() - started, 2)
        result["jvm_cpu_s"] = round(cpu_after - cpu, 1) if cpu is not None and cpu_after is not None else None
        result["compiled_classes"] = classes_after - classes if classes is not None and classes_after is not None \
            else None
        if progress and result["new_files"]:
            print(f"analyze watch: check {checks}: {result['new_files']} new file(s) merged in {result['wall_s']:.1f} s"
                  f" ({result['jvm_cpu_s']} CPU s of the driver JVM, {result['compiled_classes']} classes compiled)",
                  file=sys.stderr, flush=True)
        if on_run:
            on_run(result)
        if max_runs is not None and checks >= max_runs:
            break
        stop.wait(max(0.0, interval_s - (time.monotonic() - started)))
    return checks
