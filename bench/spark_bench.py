"""Spark analytics benchmark: one command, results in bench/results/spark.json and a table.

For each size (default 1M and 10M messages) it generates the data set once (cached,
keyed by size and seed), then in a fresh ``local[2]`` session times: decoding (trace
records and events, materialised), each job on the shared cached tables, and the
replication as-of join three ways on the *same* Parquet inputs (the message-replica
candidates and the acks, written once): Spark's interval-bucket join, Spark's window
join and DuckDB's ``ASOF JOIN``.  A checksum of the join results shows they agree.
Driver memory is the peak resident size of the driver JVM and of the Python driver.

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


def bench_size(data: Path, work: Path, driver_memory: str, messages: int) -> dict[str, Any]:
    import duckdb
    from pyspark.sql import functions as F

    from rocketscope.spark.asof import asof_join
    from rocketscope.spark.jobs import JOBS
    from rocketscope.spark.model import Model
    from rocketscope.spark.output import write_table
    from rocketscope.spark.run import read_rows
    from rocketscope.spark.session import get_session

    # one shuffle partition per ~150k messages (8 at 1M, 66 at 10M), so a task's sort and its persisted block
    # (~570k decoded records at 10M) stay the same size at every scale.  The 10M failures that this rule was
    # first meant to cure (AGGREGATE_OUT_OF_MEMORY) came from the dropDuplicates() hash aggregate over whole
    # decoded records, now a sort (rocketscope.spark.decode.drop_exact_duplicates)
    partitions = max(8, messages // 150_000)
    spark = get_session("local[2]", app_name="rocketscope-bench", driver_memory=driver_memory,
                        shuffle_partitions=partitions)
    # smaller Arrow batches into the Python decoder: the decode stage ran out of Java heap at 10M with 3 GB
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
    spark.sparkContext.setLogLevel("ERROR")
    result: dict[str, Any] = {"jobs_s": {}}
    try:
        rows = read_rows(spark, [data / "trace", data / "ha"])
        model = Model(spark, rows)
        out = work / "tables"
        shutil.rmtree(out, ignore_errors=True)
        result["decode_s"], counts = timed("decode trace records and events", lambda: (
            model.records.count(), model.events.count()))
        result["records"], result["events"] = counts
        for name, build in JOBS.items():
            result["jobs_s"][name], _ = timed(f"job {name}", lambda b=build, n=name: write_table(b(model), out, n))
        result["all_jobs_s"] = round(result["decode_s"] + sum(result["jobs_s"].values()), 2)

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
        "decode_records_per_s": per_s(entry.get("records"), entry.get("decode_s")),
        "join_rows_per_s": {engine: per_s(cand, entry.get(f"join_{engine}_s"))
                            for engine in ("spark_interval", "spark_window", "duckdb")},
    }


TARGET_RATIO = 3.0
"""Spark's as-of join within this factor of DuckDB's at the largest size."""
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
    rows += [("all jobs (s)", "all_jobs_s"), ("join: spark interval (s)", "join_spark_interval_s"),
             ("join: spark window (s)", "join_spark_window_s"), ("join: duckdb ASOF (s)", "join_duckdb_s"),
             ("join results agree", "join_results_agree"), ("driver JVM peak RSS (MB)", "driver_jvm_peak_rss_mb"),
             ("all jobs: messages/s", "rates.all_jobs_messages_per_s"),
             ("decode: records/s", "rates.decode_records_per_s"),
             ("join rows/s: spark interval", "rates.join_rows_per_s.spark_interval"),
             ("join rows/s: spark window", "rates.join_rows_per_s.spark_window"),
             ("join rows/s: duckdb", "rates.join_rows_per_s.duckdb")]

    def get(d: dict, path: str) -> Any:
        for part in path.split("."):
            d = d.get(part, {}) if isinstance(d, dict) else {}
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
    for key in ("spark_over_duckdb", "spark_within_3x_of_duckdb", "time_ratio_10m_over_1m", "linear_1m_to_10m",
                "driver_within_4gb"):
        if key in summary:
            print(f"{key}: {json.dumps(summary[key])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000", help="comma-separated message counts")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rate", type=float, default=2000.0, help="messages per second of born time")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where data sets are kept")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--summary-only", action="store_true",
                        help="recompute the summary (rates, targets) of the stored results; run nothing")
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
        entry.update(bench_size(data, args.cache / f"work-{args.one}", args.driver_memory, args.one))
        entry["wall_s"] = round(time.monotonic() - started, 1)
        entry["load_avg_1m"] = {"start": load_before, "end": round(os.getloadavg()[0], 1)}
        print(json.dumps(entry))
        return

    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "platform": platform.platform()},
                               "master": "local[2]", "sizes": {}}
    if RESULTS.exists():
        previous = json.loads(RESULTS.read_text())
        results["sizes"].update(previous.get("sizes", {}))
    if args.summary_only:
        results["summary"] = summarize(results)
        RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        print_table(results)
        return
    for size in [int(s) for s in args.sizes.split(",") if s]:
        cmd = [sys.executable, __file__, "--one", str(size), "--seed", str(args.seed), "--rate", str(args.rate),
               "--cache", str(args.cache), "--driver-memory", args.driver_memory]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
        entry = json.loads(done.stdout.strip().splitlines()[-1])
        entry["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        results["sizes"][str(size)] = entry
        results["summary"] = summarize(results)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        log(f"{size:,} messages done; results in {RESULTS}")
    print_table(results)


if __name__ == "__main__":
    main()
