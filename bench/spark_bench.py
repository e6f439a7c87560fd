"""Spark analytics benchmark: one command, results in bench/results/spark.json and a table.

For each size (default 1M and 10M messages) it generates the data set once (cached,
keyed by size and seed), then in a fresh ``local[2]`` session times: decoding (trace
records and events, materialised), each job on the shared cached tables, and the
replication as-of join three ways on the *same* Parquet inputs (the message-replica
candidates and the acks, written once): Spark's interval-bucket join, Spark's window
join and DuckDB's ``ASOF JOIN``.  A checksum of the join results shows they agree.
Driver memory is the peak resident size of the driver JVM and of the Python driver.

Cold and warm: the pipeline's first run (``decode_s``, ``jobs_s``, ``all_jobs_s``, ``all_jobs_cpu_s``)
is in a fresh JVM and pays its compilation (about 100 CPU seconds whatever the size, docs/ANALYTICS.md);
``warm`` lists the same pipeline run again in the same JVM (``--warm-runs``, default 1), what a
long-lived session (``rocketscope analyze --incremental --watch``) pays per run.  The incremental run
(``incremental_s``, ``incremental_cpu_s``) comes after them in the same JVM, so it is warm too.

In the same run, after Spark's four jobs, DuckDB computes the same four tables from the same
Parquet files (``rocketscope.spark.duckdb_pipeline``: decode, shared tables, jobs, Parquet
written per date) with as many threads as Spark has cores: issue 22's target is Spark's whole
pipeline within 2x of DuckDB's (``spark_over_duckdb_pipeline`` in the summary).  Both are
timed once, wall and CPU seconds (Spark: the driver JVM; DuckDB: this Python process, where
it runs), and the row counts of the eight tables are compared.

The ``summary`` block of the results adds rates (messages/s through all jobs, records/s
decoded, candidate rows/s joined per engine) and checks the targets: Spark's as-of join
(best of two runs per engine, see ``best_of``) within 3x of DuckDB's at the largest
size, cost linear from 1M to 10M (time ratio at most 12.5 for 10x the messages), driver
JVM peak RSS at most 4 GB.  Each size runs in its own process, so 10M can be run alone
later and the summary covers both:

    .venv/bin/python bench/spark_bench.py --sizes 10000000

    .venv/bin/python bench/spark_bench.py                  # 1M and 10M
    .venv/bin/python bench/spark_bench.py --sizes 1000000  # 1M only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "spark.json"
DEFAULT_CACHE = Path(os.environ.get("ROCKETSCOPE_BENCH_CACHE", "/tmp/rocketscope-spark-bench"))


def log(text: str) -> None:
    print(f"[spark-bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def dataset(cache: Path, messages: int, seed: int, rate: float) -> tuple[Path, dict[str, Any]]:
    """The cached data set for this size and seed, generated if missing (a marker file says it is complete)."""
    from rocketscope.spark.generate import GenConfig, generate

    path = cache / f"msgs-{messages}-seed-{seed}"
    marker = path / "_SUCCESS.json"
    if marker.exists():
        log(f"using cached data set {path}")
        return path, json.loads(marker.read_text())
    shutil.rmtree(path, ignore_errors=True)
    log(f"generating {messages:,} messages into {path}")
    summary = generate(path, GenConfig(messages=messages, seed=seed, rate=rate, chunk=100_000))
    marker.write_text(json.dumps(summary))
    return path, summary


def timed(label: str, fn: Any) -> tuple[float, Any]:
    started = time.monotonic()
    value = fn()
    seconds = round(time.monotonic() - started, 2)
    log(f"{label}: {seconds:.1f} s")
    return seconds, value


JOIN_RUNS = 2


def best_of(label: str, fn: Any, runs: int = JOIN_RUNS) -> tuple[float, Any]:
    """The fastest of ``runs`` runs of one join, for every engine alike.

    The first run of a Spark plan pays JIT and code generation for operators the session
    has not run yet (the interval join took 16 s cold and 6 s warm at 1M), which made the
    join run first look several times slower than the one after it; DuckDB's first run
    reads the files cold.  The results of every run are the same (checked by checksum).
    """
    times, value = [], None
    for i in range(runs):
        secs, value = timed(f"{label} (run {i + 1})", fn)
        times.append(secs)
    return min(times), value


def jvm_peak_rss_mb(spark: Any) -> float | None:
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def split_files(data: Path, new_fraction: float = 0.1) -> tuple[list[Path], list[Path]]:
    """The data set's files as (earlier, new): the last ``new_fraction`` of the generator's chunks is "new traffic".

    The generator writes one trace and one HA file per chunk of messages in born order, so
    the last chunks are the newest messages; their records overlap the earlier chunks' in
    time, as late records at a checkpoint would.
    """
    old: list[Path] = []
    new: list[Path] = []
    for sub in ("trace", "ha"):
        files = sorted((data / sub).glob("*.parquet"))
        keep = len(files) - max(1, round(len(files) * new_fraction))
        old += files[:keep]
        new += files[keep:]
    return old, new


class CpuClock:
    """CPU seconds (user + system, from /proc) of this run's JVMs: the driver and, on a cluster, its executors.

    Robust to a shared machine's load, unlike wall time: the work done, not the wait for a
    core.  In local mode everything runs in the driver JVM; on a standalone cluster the
    executors are JVMs started by the workers, recognised by this application's id on their
    command line (other people's JVMs on the machine are not counted).
    """

    def __init__(self, spark: Any) -> None:
        self.jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        self.app_id = spark.sparkContext.applicationId.encode()
        self.tick = os.sysconf("SC_CLK_TCK")
        self.base: dict[int, float] = {}

    def _cpu(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            pid = int(proc.name)
            try:
                if pid != self.jvm_pid and self.app_id not in (proc / "cmdline").read_bytes():
                    continue
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[pid] = (int(fields[11]) + int(fields[12])) / self.tick
        return out

    def start(self) -> None:
        self.base = self._cpu()

    def seconds(self) -> float:
        now = self._cpu()
        return round(sum(v - self.base.get(pid, 0.0) for pid, v in now.items()), 1)


def process_cpu_s() -> float:
    """CPU seconds (user + system) of this Python process so far: DuckDB's threads run in it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def table_rows(out: Path, names: Any) -> dict[str, int]:
    """Row count of each written table (Parquet under ``out/<name>``), read by DuckDB outside any timing."""
    import duckdb

    con = duckdb.connect()
    try:
        counts = {}
        for name in names:
            row = con.execute(f"SELECT count(*) FROM read_parquet('{out / name}/**/*.parquet')").fetchone()
            counts[name] = int(row[0]) if row else 0
        return counts
    finally:
        con.close()


APPROXIMATE = ("p50_ms", "p95_ms", "p99_ms")
"""Columns the engines compute differently: Spark's percentile_approx, DuckDB's exact nearest rank."""


def compare_tables(spark_out: Path, duck_out: Path, names: Any) -> dict[str, int]:
    """Rows that differ between Spark's and DuckDB's tables (EXCEPT ALL both ways), per table.

    Every column but the percentiles (:data:`APPROXIMATE`) must be equal, nested arrays
    included.  Both write timestamps as UTC-adjusted instants (spark/session.py ``TABLE_CONF``); Spark's
    columns are still cast to DuckDB's types, in UTC, so tables an older Spark wrote (INT96, read as
    plain TIMESTAMP) compare too.
    """
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    differ: dict[str, int] = {}
    try:
        for name in names:
            duck = f"read_parquet('{duck_out / name}/**/*.parquet', hive_partitioning = true)"
            spark = f"read_parquet('{spark_out / name}/**/*.parquet', hive_partitioning = true)"
            cols = [(c[0], c[1]) for c in con.execute(f"DESCRIBE SELECT * FROM {duck}").fetchall()
                    if c[0] not in APPROXIMATE]
            d_cols = ", ".join(f'"{c}"' for c, _ in cols)
            s_cols = ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in cols)
            d_sel, s_sel = f"SELECT {d_cols} FROM {duck}", f"SELECT {s_cols} FROM {spark}"
            row = con.execute(f"SELECT (SELECT count(*) FROM ({s_sel} EXCEPT ALL {d_sel})) + "
                              f"(SELECT count(*) FROM ({d_sel} EXCEPT ALL {s_sel}))").fetchone()
            differ[name] = int(row[0]) if row else -1
    finally:
        con.close()
    return differ


def jvm_size_as_duckdb(size: str) -> str:
    """A JVM memory size (``2g``, ``512m``: binary units) as DuckDB writes it (``2GiB``)."""
    units = {"k": "KiB", "m": "MiB", "g": "GiB", "t": "TiB"}
    text = size.strip().lower()
    return text[:-1] + units[text[-1]] if text and text[-1] in units else size


def duckdb_pipeline(data: Path, work: Path, threads: int, memory: str) -> dict[str, Any]:
    """DuckDB's whole pipeline (decode + shared tables + four tables written) over the data set's files.

    One run, like Spark's pipeline in :func:`bench_size`; ``threads`` = Spark's cores, a
    memory limit like Spark's driver (DuckDB spills beyond it into ``work``).  Not every
    DuckDB operator spills (the list aggregates of the ``replicas`` and ``consumers`` arrays
    keep their state in memory), so a run that fails for memory is recorded
    (``duckdb_pipeline_error``) and run once more with DuckDB's own default limit (80 % of
    RAM): the size's Spark figures are never lost to it, and the figures say which limit held.
    """
    from rocketscope.spark.duckdb_pipeline import connect, run_pipeline

    out = work / "duckdb-tables"
    error = None
    for limit in (memory, None):
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(work / "duckdb-tmp", ignore_errors=True)
        con = connect(threads, memory_limit=limit, temp_directory=str(work / "duckdb-tmp"))
        cpu = process_cpu_s()
        try:
            run = run_pipeline([data / "trace", data / "ha"], out, threads=threads, con=con, progress=True)
            break
        except Exception as exc:  # duckdb.OutOfMemoryException and whatever else: the Spark figures must survive
            error = f"{type(exc).__name__} with memory limit {limit or 'default'}: {str(exc).splitlines()[0]}"
            log(f"duckdb pipeline failed: {error}")
            if limit is None:
                return {"duckdb_pipeline_error": error, "duckdb_memory_limit": memory}
        finally:
            con.close()
    result: dict[str, Any] = {
        "duckdb_pipeline_s": run["all_s"],
        "duckdb_pipeline_cpu_s": round(process_cpu_s() - cpu, 1),
        "duckdb_decode_s": run["decode_s"],
        "duckdb_shared_s": run["shared_s"],
        "duckdb_jobs_s": run["jobs_s"],
        "duckdb_records": run["records"],
        "duckdb_events": run["events"],
        "duckdb_threads": threads,
        "duckdb_memory_limit": limit or "default (80% of RAM)",
        "duckdb_pipeline_rows": run["rows"],
    }
    if error:
        result["duckdb_pipeline_error"] = error
    log(f"duckdb whole pipeline: {result['duckdb_pipeline_s']:.1f} s wall, {result['duckdb_pipeline_cpu_s']} s CPU "
        f"({threads} threads)")
    return result


def warm_pipeline(spark: Any, rows: Any, out: Path, cpu: CpuClock, n: int,
                  decoder: str = "jvm") -> dict[str, Any]:
    """Decode and the four jobs once more in the same session (fresh model): wall and JVM CPU seconds.

    The cold figures (``decode_s``, ``jobs_s``, ``all_jobs_s``, ``all_jobs_cpu_s``) are the first run in
    a fresh JVM; these are what every later run in a long-lived session costs.  The tables written
    must have the cold run's row counts (``rows_as_cold``, checked by the caller).
    """
    from rocketscope.spark.jobs import JOBS
    from rocketscope.spark.model import Model
    from rocketscope.spark.output import write_table

    shutil.rmtree(out, ignore_errors=True)
    model = Model(spark, rows, decoder=decoder)
    entry: dict[str, Any] = {"run": n + 1, "jobs_s": {}}
    cpu.start()
    try:
        entry["decode_s"], _ = timed(f"warm run {n + 1}: decode", lambda: (model.records.count(),
                                                                         model.events.count()))
        for name, build in JOBS.items():
            entry["jobs_s"][name], _ = timed(f"warm run {n + 1}: job {name}",
                                             lambda b=build, j=name: write_table(b(model), out, j))
    finally:
        model.unpersist()
    entry["all_jobs_s"] = round(entry["decode_s"] + sum(entry["jobs_s"].values()), 2)
    entry["all_jobs_cpu_s"] = cpu.seconds()
    entry["rows"] = table_rows(out, JOBS)
    log(f"warm run {n + 1}: all jobs {entry['all_jobs_s']:.1f} s wall, {entry['all_jobs_cpu_s']} s CPU")
    return entry


def bench_size(data: Path, work: Path, driver_memory: str, messages: int, master: str = "local[2]",
               jobs_only: bool = False, python_decode: bool = False, incremental: bool = True,
               duckdb_memory: str | None = None, warm_runs: int = 1, decoder: str = "jvm") -> dict[str, Any]:
    import duckdb
    from pyspark.sql import functions as F

    from rocketscope.spark.asof import asof_join
    from rocketscope.spark.decode import decode_trace, effective_decoder
    from rocketscope.spark.incremental import run_incremental
    from rocketscope.spark.jobs import JOBS
    from rocketscope.spark.model import Model
    from rocketscope.spark.output import write_table
    from rocketscope.spark.run import read_rows
    from rocketscope.spark.session import get_session

    # The shuffle partitions are the product's own choice (rocketscope.spark.partitions: one per ~20 MB of input,
    # 8 at 1M, 73 at 10M), so the figures are those of `rocketscope analyze`.  Until session 23 the benchmark
    # set its own (one per ~150k messages: 8 at 1M, 66 at 10M) while the CLI kept twice the cores at any size.
    spark = get_session(master, app_name="rocketscope-bench", driver_memory=driver_memory)
    # smaller Arrow batches into the Python decoder (--python-decode): it ran out of Java heap at 10M with 3 GB
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
    spark.sparkContext.setLogLevel("ERROR")
    # the decoder the jobs really use (jvm falls back to sql when the driver cannot load the jar)
    result: dict[str, Any] = {"jobs_s": {}, "master": master, "decoder": effective_decoder(spark, decoder)}
    cpu = CpuClock(spark)
    try:
        rows = read_rows(spark, [data / "trace", data / "ha"])
        if python_decode:
            # the Python codec through mapInArrow, on the same rows in the same session: the side-by-side ratio
            result["decode_python_s"], _ = timed("decode trace records (Python codec, mapInArrow)",
                                                 lambda: decode_trace(rows, "python").count())
            result["decode_sql_only_s"], _ = timed("decode trace records (Spark SQL)",
                                                   lambda: decode_trace(rows, "sql").count())
        model = Model(spark, rows, decoder=decoder)
        out = work / "tables"
        shutil.rmtree(out, ignore_errors=True)
        cpu.start()
        result["decode_s"], counts = timed("decode trace records and events", lambda: (
            model.records.count(), model.events.count()))
        result["records"], result["events"] = counts
        for name, build in JOBS.items():
            result["jobs_s"][name], _ = timed(f"job {name}", lambda b=build, n=name: write_table(b(model), out, n))
        result["all_jobs_s"] = round(result["decode_s"] + sum(result["jobs_s"].values()), 2)
        result["all_jobs_cpu_s"] = cpu.seconds()
        log(f"all jobs: {result['all_jobs_s']:.1f} s wall, {result['all_jobs_cpu_s']} s CPU (driver JVM + workers)")
        if jobs_only:
            model.unpersist()
            return result
        # The same four tables by DuckDB from the same files, in the same run (issue 22's 2x target).
        cores = spark.sparkContext.defaultParallelism
        result.update(duckdb_pipeline(data, work, cores, duckdb_memory or jvm_size_as_duckdb(driver_memory)))
        if "duckdb_pipeline_s" in result:
            result["spark_pipeline_rows"] = table_rows(out, JOBS)
            result["pipeline_rows_agree"] = result["spark_pipeline_rows"] == result["duckdb_pipeline_rows"]
            result["pipeline_records_agree"] = result["records"] == result["duckdb_records"]
            result["pipeline_rows_differ"] = compare_tables(out, work / "duckdb-tables", JOBS)
            result["pipeline_tables_agree"] = not any(result["pipeline_rows_differ"].values())
            if not (result["pipeline_rows_agree"] and result["pipeline_tables_agree"]):
                log(f"tables differ: rows spark {result['spark_pipeline_rows']}, duckdb "
                    f"{result['duckdb_pipeline_rows']}; differing rows (percentiles aside) "
                    f"{result['pipeline_rows_differ']}")
        # Warm: the same pipeline again in the same JVM with a fresh model (nothing cached), as a long-lived
        # session (analyze --watch) runs it; the JIT-compiled code and the generated classes are reused.
        model.unpersist()
        for n in range(1, warm_runs + 1):
            warm = warm_pipeline(spark, rows, work / f"tables-warm-{n}", cpu, n, decoder)
            warm["rows_as_cold"] = warm["rows"] == table_rows(out, JOBS)
            result.setdefault("warm", []).append(warm)
        if incremental:
            model.unpersist()
            old, new = split_files(data)
            inc_out = work / "incremental"
            shutil.rmtree(inc_out, ignore_errors=True)
            first = run_incremental(spark, old, inc_out, ["all"])
            result["incremental_first_run_s"] = first["seconds"]["total"]
            log(f"incremental first run ({len(old)} files): {first['seconds']['total']:.1f} s")
            cpu.start()
            second = run_incremental(spark, old + new, inc_out, ["all"])
            # in the JVM that ran everything above: a warm run, as under analyze --watch
            result["incremental_cpu_s"] = cpu.seconds()
            result["incremental_s"] = second["seconds"]["total"]
            result["incremental_steps_s"] = second["seconds"]
            result["incremental_new_messages"] = round(messages * len(new) / (len(old) + len(new)))
            log(f"incremental run over {len(new)} new files: {second['seconds']['total']:.1f} s")

        # The replication join alone, on the same Parquet inputs for every engine.
        cand_path, acks_path = work / "join" / "candidates", work / "join" / "acks"
        acks = model.acks.groupBy("broker_group", "gen", "replica", "offset").agg(F.min("ts").alias("ts"))
        replicas = acks.select("broker_group", "gen", "replica").distinct()
        cand = model.stored_copies.join(F.broadcast(replicas), on=["broker_group", "gen"]).select(
            "msg_id", "broker_group", "gen", "replica", "phys_offset")
        cand.write.mode("overwrite").parquet(str(cand_path))
        acks.write.mode("overwrite").parquet(str(acks_path))
        model.unpersist()
        cand_df, acks_df = spark.read.parquet(str(cand_path)), spark.read.parquet(str(acks_path))
        result["join_rows"] = {"candidates": cand_df.count(), "acks": acks_df.count()}
        keys = ["broker_group", "gen", "replica"]
        checks: dict[str, Any] = {}
        for method in ("interval", "window"):
            def run(m: str = method) -> Any:
                joined = asof_join(cand_df, acks_df, keys, "phys_offset", "ack_ts", method=m)
                # decimal sum: at 10M the ack times (epoch ms) of 26M candidates overflow a long (ANSI mode)
                return joined.agg(F.count("ack_ts"), F.sum(F.col("ack_ts").cast("decimal(38,0)"))).first()

            secs, row = best_of(f"spark {method} as-of join", run)
            result[f"join_spark_{method}_s"] = secs
            checks[method] = [int(row[0]), int(row[1] or 0)]
        con = duckdb.connect()
        con.execute("PRAGMA threads=2")
        query = f"""
            SELECT count(a.ts), sum(a.ts) FROM read_parquet('{cand_path}/*.parquet') c
            ASOF LEFT JOIN read_parquet('{acks_path}/*.parquet') a
              ON c.broker_group = a.broker_group AND c.gen = a.gen AND c.replica = a.replica
             AND a.offset > c.phys_offset
        """
        secs, row = best_of("duckdb ASOF JOIN", lambda: con.execute(query).fetchone())
        result["join_duckdb_s"] = secs
        checks["duckdb"] = [int(row[0]), int(row[1] or 0)]
        result["join_checksums"] = checks
        result["join_results_agree"] = len({tuple(v) for v in checks.values()}) == 1
        result["driver_jvm_peak_rss_mb"] = jvm_peak_rss_mb(spark)
    finally:
        spark.stop()
    result["driver_python_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def rates(entry: dict[str, Any], messages: int) -> dict[str, Any]:
    """Throughputs of one size: messages/s through all jobs, records/s decoded, candidate rows/s joined."""
    def per_s(n: Any, secs: Any) -> float | None:
        return round(n / secs) if n and secs else None

    cand = entry.get("join_rows", {}).get("candidates")
    return {
        "all_jobs_messages_per_s": per_s(messages, entry.get("all_jobs_s")),
        "duckdb_pipeline_messages_per_s": per_s(messages, entry.get("duckdb_pipeline_s")),
        "decode_records_per_s": per_s(entry.get("records"), entry.get("decode_s")),
        "join_rows_per_s": {engine: per_s(cand, entry.get(f"join_{engine}_s"))
                            for engine in ("spark_interval", "spark_window", "duckdb")},
    }


TARGET_RATIO = 3.0
"""Spark's as-of join within this factor of DuckDB's at the largest size."""
PIPELINE_TARGET_RATIO = 2.0
"""Issue 22: Spark's whole pipeline (decode and the four jobs) within this factor of DuckDB's, same input."""
LINEAR_SLACK = 1.25
"""'Linear' from 1M to 10M: cost per message at 10M at most this factor of that at 1M."""
MAX_DRIVER_MB = 4096


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Rates per size and the targets: Spark vs DuckDB at the largest size, linear cost, driver memory."""
    sizes = sorted(int(s) for s in results["sizes"])
    out: dict[str, Any] = {"rates": {str(n): rates(results["sizes"][str(n)], n) for n in sizes}}
    if not sizes:
        return out
    big = results["sizes"][str(sizes[-1])]
    duck = big.get("join_duckdb_s")
    out["largest_size"] = sizes[-1]
    out["spark_over_duckdb"] = {m: round(big[f"join_spark_{m}_s"] / duck, 2) if duck else None
                                for m in ("interval", "window")}
    out["spark_within_3x_of_duckdb"] = {m: r is not None and r <= TARGET_RATIO
                                        for m, r in out["spark_over_duckdb"].items()}
    # The whole pipeline, wall and CPU seconds; per size, and the target at the largest size measured with DuckDB.
    by_size: dict[str, Any] = {}
    for n in sizes:
        entry = results["sizes"][str(n)]
        if entry.get("duckdb_pipeline_s") and entry.get("all_jobs_s"):
            by_size[str(n)] = {
                "wall": round(entry["all_jobs_s"] / entry["duckdb_pipeline_s"], 2),
                "cpu": round(entry["all_jobs_cpu_s"] / entry["duckdb_pipeline_cpu_s"], 2)
                if entry.get("all_jobs_cpu_s") and entry.get("duckdb_pipeline_cpu_s") else None,
                "rows_agree": entry.get("pipeline_rows_agree"),
                "tables_agree": entry.get("pipeline_tables_agree"),
            }
            warm = (entry.get("warm") or [None])[-1]
            if warm and warm.get("all_jobs_s"):
                # the last warm run in the same JVM: what a long-lived session (analyze --watch) pays per run
                by_size[str(n)]["warm_wall"] = round(warm["all_jobs_s"] / entry["duckdb_pipeline_s"], 2)
                by_size[str(n)]["warm_cpu"] = round(warm["all_jobs_cpu_s"] / entry["duckdb_pipeline_cpu_s"], 2) \
                    if warm.get("all_jobs_cpu_s") and entry.get("duckdb_pipeline_cpu_s") else None
    out["spark_over_duckdb_pipeline_by_size"] = by_size
    if by_size:
        largest = str(max(int(n) for n in by_size))
        out["spark_over_duckdb_pipeline"] = {"size": int(largest), **by_size[largest],
                                             "target": PIPELINE_TARGET_RATIO}
        out["spark_within_2x_of_duckdb_pipeline"] = by_size[largest]["wall"] <= PIPELINE_TARGET_RATIO
    else:
        out["spark_over_duckdb_pipeline"] = None
        out["spark_within_2x_of_duckdb_pipeline"] = None
    if 1_000_000 in sizes and 10_000_000 in sizes:
        small, large = results["sizes"]["1000000"], results["sizes"]["10000000"]
        scaling = {key: round(large[key] / small[key], 2) for key in
                   ("all_jobs_s", "decode_s", "join_spark_interval_s", "join_spark_window_s", "join_duckdb_s")
                   if small.get(key) and large.get(key)}
        out["time_ratio_10m_over_1m"] = scaling
        out["linear_1m_to_10m"] = {k: v <= 10 * LINEAR_SLACK for k, v in scaling.items()}
    peaks = [results["sizes"][str(n)].get("driver_jvm_peak_rss_mb") or 0 for n in sizes]
    out["driver_jvm_peak_rss_mb_max"] = max(peaks)
    out["driver_within_4gb"] = max(peaks) <= MAX_DRIVER_MB
    return out


def print_table(results: dict[str, Any]) -> None:
    sizes = list(results["sizes"])
    rows = [("generate (s)", "generate_s"), ("decode (s)", "decode_s")]
    rows += [(f"{j} (s)", f"jobs_s.{j}") for j in ("message_timeline", "replication_latency", "failover_impact",
                                                    "e2e_latency")]
    rows += [("all jobs (s)", "all_jobs_s"), ("all jobs CPU (s)", "all_jobs_cpu_s"),
             ("warm: all jobs (s)", "warm.-1.all_jobs_s"), ("warm: all jobs CPU (s)", "warm.-1.all_jobs_cpu_s"),
             ("incremental, last 10% (s)", "incremental_s"), ("incremental CPU (s)", "incremental_cpu_s"),
             ("duckdb pipeline (s)", "duckdb_pipeline_s"), ("duckdb pipeline CPU (s)", "duckdb_pipeline_cpu_s"),
             ("pipeline rows agree", "pipeline_rows_agree"), ("pipeline tables agree", "pipeline_tables_agree"),
             ("join: spark interval (s)", "join_spark_interval_s"),
             ("join: spark window (s)", "join_spark_window_s"), ("join: duckdb ASOF (s)", "join_duckdb_s"),
             ("join results agree", "join_results_agree"), ("driver JVM peak RSS (MB)", "driver_jvm_peak_rss_mb"),
             ("all jobs: messages/s", "rates.all_jobs_messages_per_s"),
             ("decode: records/s", "rates.decode_records_per_s"),
             ("join rows/s: spark interval", "rates.join_rows_per_s.spark_interval"),
             ("join rows/s: spark window", "rates.join_rows_per_s.spark_window"),
             ("join rows/s: duckdb", "rates.join_rows_per_s.duckdb")]

    def get(d: dict, path: str) -> Any:
        for part in path.split("."):
            # "-1" of a list: its last entry (the last warm run)
            d = (d[int(part)] if d else {}) if isinstance(d, list) else (d.get(part, {}) if isinstance(d, dict) else {})
        return d if d != {} else "-"

    width = max(len(r[0]) for r in rows) + 2
    print("".ljust(width) + "".join(f"{int(s):>14,}" for s in sizes))
    summary = results.get("summary", {})
    for label, path in rows:
        cells = []
        for s in sizes:
            entry = dict(results["sizes"][s], rates=summary.get("rates", {}).get(s, {}))
            cells.append(f"{get(entry, path)!s:>14}")
        print(label.ljust(width) + "".join(cells))
    for key in ("spark_over_duckdb", "spark_within_3x_of_duckdb", "spark_over_duckdb_pipeline",
                "spark_within_2x_of_duckdb_pipeline", "time_ratio_10m_over_1m", "linear_1m_to_10m",
                "driver_within_4gb"):
        if key in summary:
            print(f"{key}: {json.dumps(summary[key])}")


def run_cluster(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """The four jobs on standalone clusters of 1, 2, ... workers (1 core each), one fresh driver per run."""
    sys.path.insert(0, str(ROOT))
    from rocketscope.spark.standalone import standalone_cluster

    results.setdefault("cluster", {})
    for size in [int(s) for s in args.sizes.split(",") if s]:
        for workers in [int(w) for w in args.cluster_workers.split(",") if w]:
            log(f"standalone cluster: master and {workers} worker(s) of 1 core, {size:,} messages")
            with standalone_cluster(args.cache / f"cluster-{workers}", workers=workers, cores_per_worker=1,
                                    worker_memory=args.executor_memory) as cluster:
                env = dict(os.environ, PYSPARK_SUBMIT_ARGS=(
                    f"--executor-memory {args.executor_memory} --total-executor-cores {cluster.cores} "
                    "--conf spark.executor.cores=1 pyspark-shell"))
                cmd = [sys.executable, __file__, "--one", str(size), "--seed", str(args.seed), "--rate",
                       str(args.rate), "--cache", str(args.cache), "--driver-memory", args.driver_memory,
                       "--master", cluster.url, "--jobs-only", "--decoder", args.decoder]
                done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env)
            entry = json.loads(done.stdout.strip().splitlines()[-1])
            entry["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            entry["workers"], entry["cores"] = workers, workers
            results["cluster"].setdefault(str(size), {})[f"{workers}_workers"] = entry
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
            log(f"{workers} worker(s), {size:,} messages: all jobs {entry['all_jobs_s']} s wall, "
                f"{entry['all_jobs_cpu_s']} s CPU, decoder {entry.get('decoder')}; results in {args.out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000", help="comma-separated message counts")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rate", type=float, default=2000.0, help="messages per second of born time")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where data sets are kept")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--summary-only", action="store_true",
                        help="recompute the summary (rates, targets) of the stored results; run nothing")
    parser.add_argument("--master", default="local[2]", help=argparse.SUPPRESS)
    parser.add_argument("--jobs-only", action="store_true", help="only the four jobs (no incremental, no joins)")
    parser.add_argument("--python-decode", action="store_true",
                        help="also time the Python codec (mapInArrow) against the SQL decoder on the same rows")
    parser.add_argument("--no-incremental", action="store_true", help="skip the incremental run")
    parser.add_argument("--warm-runs", type=int, default=1,
                        help="after the cold run, run decode and the four jobs this many times more in the same JVM "
                             "(the 'warm' entries: what a long-lived session pays per run)")
    parser.add_argument("--duckdb-memory", default=None,
                        help="DuckDB's memory limit for its whole pipeline (it spills beyond it); "
                             "default: the same as --driver-memory")
    parser.add_argument("--cluster-workers", default="",
                        help="e.g. 1,2: the four jobs on a standalone cluster of that many workers (1 core each) "
                             "started with spark-class on this machine, instead of local[2]")
    parser.add_argument("--executor-memory", default="2g", help="per executor, with --cluster-workers")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="results file (default bench/results/spark.json): A/B rounds each get their own "
                             "instead of overwriting the reference figures")
    parser.add_argument("--decoder", default="jvm", choices=("jvm", "sql", "python"),
                        help="trace decoder of the model (rocketscope.spark.decode; jvm falls back to sql "
                             "when its jar is not built)")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.one is not None:
        # One size in its own process, so that peak memory figures are per size.
        started = time.monotonic()
        load_before = round(os.getloadavg()[0], 1)  # the machine is shared: say how busy it was
        data, summary = dataset(args.cache, args.one, args.seed, args.rate)
        entry: dict[str, Any] = {"generate_s": summary.get("seconds"), "trace_rows": summary.get("trace_rows"),
                                 "ha_rows": summary.get("ha_rows")}
        entry.update(bench_size(data, args.cache / f"work-{args.one}", args.driver_memory, args.one,
                                master=args.master, jobs_only=args.jobs_only, python_decode=args.python_decode,
                                incremental=not args.no_incremental, duckdb_memory=args.duckdb_memory,
                                warm_runs=args.warm_runs, decoder=args.decoder))
        entry["wall_s"] = round(time.monotonic() - started, 1)
        entry["load_avg_1m"] = {"start": load_before, "end": round(os.getloadavg()[0], 1)}
        print(json.dumps(entry))
        return

    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "platform": platform.platform()},
                               "master": "local[2]", "sizes": {}}
    if args.out.exists():
        previous = json.loads(args.out.read_text())
        results["sizes"].update(previous.get("sizes", {}))
        if "cluster" in previous:
            results["cluster"] = previous["cluster"]
    if args.summary_only:
        results["summary"] = summarize(results)
        args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        print_table(results)
        return
    if args.cluster_workers:
        run_cluster(args, results)
        return
    for size in [int(s) for s in args.sizes.split(",") if s]:
        cmd = [sys.executable, __file__, "--one", str(size), "--seed", str(args.seed), "--rate", str(args.rate),
               "--cache", str(args.cache), "--driver-memory", args.driver_memory]
        cmd += ["--duckdb-memory", args.duckdb_memory] if args.duckdb_memory else []
        cmd += ["--warm-runs", str(args.warm_runs), "--decoder", args.decoder]
        cmd += [flag for flag, on in (("--jobs-only", args.jobs_only), ("--python-decode", args.python_decode),
                                      ("--no-incremental", args.no_incremental)) if on]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
        entry = json.loads(done.stdout.strip().splitlines()[-1])
        entry["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        results["sizes"][str(size)] = entry
        results["summary"] = summarize(results)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        log(f"{size:,} messages done; results in {args.out}")
    print_table(results)


if __name__ == "__main__":
    main()
