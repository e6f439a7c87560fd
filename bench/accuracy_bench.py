"""Accuracy of the replication latency RocketScope reports, against a delay injected on one follower's link.

    .venv/bin/python bench/accuracy_bench.py [--delays 5,50,200] [--messages 30] [--gap-ms 300]

One three-node DLedger group (tests/truth_harness.py), every peer link through tests/netproxy.py.  For each
injected delay D the leader's link to one follower holds every byte D ms; the other follower's link,
through an identical proxy, holds nothing (the control).  The official client sends paced messages to a
topic of that run; then each place that reports replication latency is read:

* trace: each message's timeline by msgId (the lookup the CLI, the JSON API and the Trace page use),
  median of the per-replica ack latency (from the store);
* /metrics: the leader's dledger_replicate_entry_latency histogram, mean from _sum/_count over the run;
* Spark: replication_latency of the live cluster (`rocketscope analyze`'s job), p50 of the run's topic;
* dashboard: the same table as the Replication page reads it (dashboards/sources.py analytics_tables).

Each is reported as delayed, control and delayed minus control (the measured delay) against D; target:
within 5 ms or 10 %, whichever is larger.  JSON into bench/results/accuracy.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import common  # noqa: E402  (puts tests/ on the path: the harness is shared with the tests)
from netproxy import link_loop  # noqa: E402
from truth_harness import (  # noqa: E402
    Run,
    collect_timelines,
    create_topic,
    replicate_sums,
    send_paced,
    spark_tables,
    start_group,
    table_p50,
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--delays", default="5,50,200", help="injected delays, ms (comma-separated)")
    ap.add_argument("--messages", type=int, default=30, help="messages per delay")
    ap.add_argument("--gap-ms", type=float, default=300.0, help="pause between sends (more than the largest delay "
                                                                 "keeps one message in flight)")
    ap.add_argument("--out", default=str(common.RESULTS / "accuracy.json"))
    ap.add_argument("--no-spark", action="store_true", help="trace and /metrics only (Spark needs minutes)")
    args = ap.parse_args()
    delays = [float(d) for d in args.delays.split(",") if d.strip()]
    root = Path(tempfile.mkdtemp(prefix="rs-accuracy-"))
    runs: list[tuple[str, Run]] = []
    with link_loop() as pl:
        c = None
        try:
            log("starting a name server and a three-node DLedger group behind delay proxies")
            c, g, leader = start_group(root, pl)
            common._CLUSTERS.append(c)
            followers = [i for i in range(3) if i != leader]
            delayed, control = followers
            log(f"leader n{leader}; delayed follower n{delayed}, control n{control}")
            for d in delays:
                topic = f"TopicAccuracy{int(d)}"
                create_topic(c, g, leader, topic)
                g.delay(leader, delayed, 0)
                send_paced(g.endpoint, topic, 3, 50)  # routes and channels warm, nothing measured
                g.delay(leader, delayed, d)
                time.sleep(max(0.5, 3 * d / 1000))  # bytes queued before the switch are through
                before = replicate_sums(g.metrics_text(leader))
                log(f"delay {d:g} ms: sending {args.messages} messages, {args.gap_ms:g} ms apart")
                ids, costs = send_paced(g.endpoint, topic, args.messages, args.gap_ms)
                time.sleep(max(0.5, 3 * d / 1000))  # the delayed follower's last acks arrive
                after = replicate_sums(g.metrics_text(leader))
                run = Run(d, f"n{delayed}", f"n{control}", ids, costs)
                run.metrics_from(before, after)
                log(f"delay {d:g} ms: reading {len(ids)} timelines")
                collect_timelines(run, c.namesrv_addr)
                runs.append((topic, run))
            g.delay(leader, delayed, 0)
            report(runs, args, spark=False)  # written now: a Spark failure must not lose the rest
            if args.no_spark:
                return 0
            log("Spark: replication_latency and failover_impact of the live cluster")
            from rocketscope.spark.session import get_session

            spark = get_session("local[2]", quick_start=True, shuffle_partitions=2)
            try:
                out = spark_tables(spark, c.namesrv_addr, root / "analytics")
                import pandas as pd

                spark_latency = pd.read_parquet(out / "replication_latency")
            finally:
                spark.stop()
            sys.path.insert(0, str(ROOT / "dashboards"))
            import sources

            dash_latency, _ = sources.analytics_tables(str(out))
            for topic, run in runs:
                run.spark_p50 = table_p50(spark_latency, topic)
                run.dashboard_p50 = table_p50(dash_latency, topic)
        finally:
            if c is not None:
                c.stop()
    report(runs, args, spark=True)
    return 0


def report(runs: list[tuple[str, Run]], args: argparse.Namespace, spark: bool) -> None:
    """Print the table and write the JSON (``spark`` False: Spark and dashboard not measured yet)."""
    results = [run.summary() for _, run in runs]
    sources_read = ("trace", "metrics", "spark", "dashboard") if spark else ("trace", "metrics")
    for r in results:
        for src in ("spark", "dashboard"):
            if not spark:
                r.pop(src, None)
    rows = []
    for r in results:
        for src in sources_read:
            e = r[src]
            ok = abs(e["error_ms"]) <= r["tolerance_ms"] if e["error_ms"] == e["error_ms"] else False
            rows.append((r["injected_ms"], src, e["delayed_ms"], e["control_ms"], e["measured_delay_ms"],
                         e["error_ms"], r["tolerance_ms"], "yes" if ok else "NO"))
    print(common.table(("injected ms", "source", "delayed ms", "control ms", "measured ms", "error ms",
                        "tolerance ms", "within"), rows))
    common.write_json({"messages_per_delay": args.messages, "gap_ms": args.gap_ms, "spark_measured": spark,
                       "settings": {"haEventAckIntervalMillis": 1, "haEventCommitIntervalMillis": 1},
                       "results": results}, Path(args.out))
    log(f"written {args.out}")


if __name__ == "__main__":
    sys.exit(main())
