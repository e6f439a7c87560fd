"""SparkSession set-up with the settings that matter on small machines (docs/ANALYTICS.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from rocketscope.spark.partitions import AUTO_PARTITIONS_KEY

QUICK_START_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
LOCAL_JIT_JAVA_OPTIONS = (
    "-XX:Tier4InvocationThreshold=20000 -XX:Tier4MinInvocationThreshold=2400 "
    "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=160000"
)
"""HotSpot's C2 thresholds raised 4x for a local driver JVM.  Spark generates a few hundred
classes per run (whole-stage code for every stage of every query), most of them run over a
few thousand rows only, and C2 compiled them all: at 200k messages the JIT compiler threads
took 93 of 184 CPU seconds of the pipeline, more than the tasks (69 s).  With these
thresholds, one run each on a loaded machine: 200k 184 -> 140 CPU seconds (compiler 60 s,
tasks 56 s), but 20k (99 -> 100) and 1M (438 -> 435) unchanged within the noise
(docs/ANALYTICS.md, "Results", session 10).  Code that runs over millions of rows still
reaches C2."""

LOCAL_GC_JAVA_OPTIONS = "-XX:+UseParallelGC"
"""The throughput collector for a local driver JVM instead of the JVM's default G1.  A pipeline run is a
batch job: no one waits on a pause, and G1's write barriers and concurrent marking cost CPU in every
task thread.  At 1M messages, two alternated pairs of two passes each in one JVM (bench/spark_profile.py
``--passes 2 --conf spark.driver.extraJavaOptions=...``, 23:24-23:40 UTC on 2026-11-28): warm pass
76.7 / 84.3 -> 70.7 / 71.2 JVM CPU s (the tasks 52.7 / 55.6 -> 48.6 / 49.2, the JIT 13.0 / 14.1 ->
10.5 / 10.9), cold 137.0 / 146.4 -> 129.5 / 121.4 (docs/ANALYTICS.md, "Session 23").  The heap limit
and Spark's memory accounting are the same with either collector."""

LOCAL_JAVA_OPTIONS = f"{LOCAL_JIT_JAVA_OPTIONS} {LOCAL_GC_JAVA_OPTIONS}"
"""What a local driver JVM started by :func:`get_session` gets (its JIT thresholds and its collector)."""

TABLE_CONF = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
"""How the jobs' Parquet tables are written, in every session that writes them (``get_session``, the
tests' session).  Timestamps as Parquet's TIMESTAMP(MICROS, UTC-adjusted) instead of Spark's default
INT96, a deprecated type Spark keeps for old Hive readers: writing message_timeline took half the CPU
(12.1 -> 6.3-6.7 JVM CPU s at 1M messages, 75 -> 66 MB; docs/ANALYTICS.md, session 21), and every reader
now sees an instant in UTC: Spark a TimestampType, DuckDB a TIMESTAMP WITH TIME ZONE, pandas
``datetime64[us, UTC]`` (INT96 gave naive values that only by convention were UTC).  The same
microseconds as before (Spark's timestamps are microseconds).  A table an older version wrote in INT96 and
this one extends (an incremental run's new slots) reads back whole in Spark, DuckDB and pandas, with the
same instants (tests/test_spark_output_timestamps.py)."""

QUICK_START_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""Spark settings of ``quick_start`` (with one shuffle partition): a tiny input is cheaper to run
interpreted than to compile.  A run generates a few hundred classes (Janino in the driver thread,
then HotSpot compiles them) and re-plans every stage adaptively; on ~120 messages that is most of
the run.  ``rocketscope demo``'s Spark step (``analyze all --namesrv ... --quick-start``, ~100
messages, on a live demo cluster), one run each at load average 10-16: 79.6 -> 50.3 CPU seconds of
the driver JVM (the py4j driver thread, planning and Janino, 33.8 -> 27.3 s; the tasks 16.9 -> 7.7 s),
Python workers 6.1 -> 4.7 s (docs/ANALYTICS.md, "Results", session 15).  Interpreted expressions are
many times slower per row: for small inputs only, like the C1-only JIT of the same option."""

CODEGEN_CACHE_ENTRIES = 2000
"""Spark's cache of compiled generated classes (``spark.sql.codegen.cache.maxEntries``, default 100).
One run of the four jobs generates about 370 classes at 1M messages, so with 100 entries a second
run in the same JVM (``analyze --watch``, the benchmark's warm runs) compiled every one of them again
with Janino, and HotSpot then JIT-compiled the new classes again too (docs/ANALYTICS.md, "Results",
session 11).  Identical plans generate identical code: with room for all of them, later runs reuse
the compiled classes.  A class is a few kilobytes of bytecode (mean 2.4 KB measured)."""


INPUT_SPLITS_PER_CORE = 4
"""At least this many input splits per core in local mode (``spark.sql.files.minPartitionNum``).

Spark packs input files into splits of ``min(maxPartitionBytes, total bytes / minPartitionNum)``
with ``minPartitionNum`` defaulting to the cores: the 1M-message data set (ten 14 MB trace
files of one row group each) became 3 splits of ~50 MB, so its decode stage -- the largest
of a run -- ran 3 tasks on 2 cores and one core idled for the last third (Spark's event log,
bench/spark_eventlog.py; docs/ANALYTICS.md, "Session 18").  Four per core gives one file per
task there; large inputs are unchanged (``total / 8`` is above the 128 MB cap at 10M)."""


DECODER_JAR_ENV = "ROCKETSCOPE_SPARK_JAR"
"""Overrides where :func:`decoder_jar` looks (a jar built elsewhere, e.g. for an installed package)."""


def decoder_jar() -> Path | None:
    """The JVM trace decoder's jar (spark/jvm, built by ``make``), or None when it was not built.

    Sessions put it on the driver's and the executors' class path (``spark.jars``), so the
    default ``jvm`` decoder (rocketscope.spark.decode) can run; without it they decode with SQL.
    """
    configured = os.environ.get(DECODER_JAR_ENV)
    path = Path(configured) if configured else Path(__file__).resolve().parents[1] / "build" / "spark-jvm" / \
        "rocketscope-spark.jar"
    return path if path.is_file() else None


def jar_conf() -> dict[str, str]:
    """``spark.jars`` with the decoder's jar when it is built, else nothing (for sessions not made here)."""
    jar = decoder_jar()
    return {"spark.jars": str(jar)} if jar else {}


ROW_CACHE_SERIALIZER = "io.rocketscope.spark.RowCacheSerializer"
"""How the jobs' cached tables are kept when the jar is on the class path (``spark.sql.cache.serializer``):
as the rows' own bytes instead of Spark's default columnar batches with per-column statistics, which cost
a third of the decode step's CPU at 1M messages and prune nothing the jobs read (spark/jvm
RowCacheSerializer.java; docs/ANALYTICS.md, "Session 25")."""


def cache_conf() -> dict[str, str]:
    """``spark.sql.cache.serializer`` for a session whose JVM starts with the jar (:func:`jar_conf`), else nothing.

    A static setting: it must be given before the JVM's first session.  Under spark-submit the driver
    starts before this code runs, so there it goes on the command line beside ``--jars``
    (deploy/spark/README.md); without the jar the class would be missing at the first cache.
    """
    return {"spark.sql.cache.serializer": ROW_CACHE_SERIALIZER} if decoder_jar() else {}


def local_cores(master: str) -> int:
    """Cores of a ``local[N]`` / ``local[*]`` / ``local`` master."""
    inside = master[len("local["):-1] if master.startswith("local[") else "1"
    if inside.split(",")[0] == "*":
        return os.cpu_count() or 1
    try:
        return max(1, int(inside.split(",")[0]))
    except ValueError:
        return os.cpu_count() or 1


def get_session(master: str | None = "local[*]", app_name: str = "rocketscope-analyze",
                driver_memory: str | None = None, shuffle_partitions: int | None = None,
                quick_start: bool = False, conf: dict[str, str] | None = None) -> SparkSession:
    """A session bound to loopback, in UTC.

    ``quick_start`` adds the serial GC and the C1-only JIT, interpreted expressions instead of
    generated code, no adaptive execution and one shuffle partition (:data:`QUICK_START_CONF`):
    seconds less start-up and planning for small inputs (tests, the demo, a day of a small
    cluster), but much slower on millions of records, so it is off by default.  In local mode the shuffle partitions
    default to twice the cores (Spark's 200 cost seconds of task overhead per stage here), and a
    run raises them for a large input (:mod:`rocketscope.spark.partitions`); the input is read in at
    least :data:`INPUT_SPLITS_PER_CORE` splits per core.
    A local driver JVM gets :data:`LOCAL_JAVA_OPTIONS` (fewer C2 compilations of
    generated code that runs briefly; the throughput collector).

    Progress goes to stderr as one line per job (``rocketscope.spark.run``) instead of
    Spark's console progress bar.

    ``conf``: further Spark settings, applied last (static ones such as
    ``spark.sql.codegen.cache.maxEntries`` only take effect in a new JVM).

    ``master=None`` leaves the master to spark-submit.  The session time zone is UTC so
    minute buckets and date partitions do not depend on the machine.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # The cached intermediate tables are read a few times each: compressing them
        # (dictionary statistics per column) cost more CPU than it saved.
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        .config("spark.sql.codegen.cache.maxEntries", str(CODEGEN_CACHE_ENTRIES))
    )
    if quick_start:
        builder = builder.config("spark.driver.extraJavaOptions", QUICK_START_JAVA_OPTIONS)
        for key, value in QUICK_START_CONF.items():
            builder = builder.config(key, value)
        shuffle_partitions = shuffle_partitions or 1
    elif master and master.startswith("local"):
        # the driver JVM is started here and runs the tasks too (under spark-submit it already runs)
        builder = builder.config("spark.driver.extraJavaOptions", LOCAL_JAVA_OPTIONS)
    if driver_memory:
        builder = builder.config("spark.driver.memory", driver_memory)
    for key, value in {**TABLE_CONF, **jar_conf()}.items():
        builder = builder.config(key, value)
    if master:
        # the JVM starts here with the jar on its class path (spark-submit: see cache_conf)
        for key, value in cache_conf().items():
            builder = builder.config(key, value)
    if not shuffle_partitions and master and master.startswith("local"):
        shuffle_partitions = 2 * local_cores(master)
        if "spark.sql.shuffle.partitions" not in (conf or {}):
            # the count is this function's choice: a run may raise it for a large input (spark/partitions.py)
            builder = builder.config(AUTO_PARTITIONS_KEY, "true")
    if shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if master and master.startswith("local"):
        builder = builder.config("spark.sql.files.minPartitionNum", str(INPUT_SPLITS_PER_CORE * local_cores(master)))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
