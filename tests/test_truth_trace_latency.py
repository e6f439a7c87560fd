"""Ground truth: the replication times that the trace, /metrics, Spark and the dashboard's data source
report agree with a delay injected on one follower's link (issue 16).

A three-node DLedger group runs with every peer link through a DelayProxy; the leader's link to one
follower (the "delayed" one) holds every byte DELAY_MS, the other follower's identical proxy holds
nothing (the "control").  The official client sends paced messages (tests/truth_harness.py says why
paced).  Truth, and the tolerance of issue 16 (5 ms or 10 %, whichever is larger):

(The send's start is the broker's receive time: the store follows within a few ms, where the client's
whole-second born time put it up to 999 ms later.)

* trace timeline (lookup by msgId; times the leader observed): the delayed follower acks every
  message no earlier than DELAY_MS after the store, and its median ack comes DELAY_MS after the
  control's; the commit (majority = leader + control) comes with the control, long before DELAY_MS;
  the send's start (the broker's receive time) precedes the store by a few ms, not by up to a
  second as when the client's whole-second born time was used;
* the leader's /metrics (dledger_replicate_entry_latency, per remote_id, mean from _sum/_count):
  delayed minus control = DELAY_MS;
* Spark's replication_latency and the Replication page's data source (the same Parquet table read
  by dashboards/sources.py): p50 delayed minus p50 control = DELAY_MS, the quorum p50 below it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faultproxy import proxy_loop
from truth_harness import (
    Run,
    create_topic,
    replicate_sums,
    send_paced,
    spark_tables,
    start_group,
    table_p50,
    tolerance_ms,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]

DELAY_MS = 50.0
MESSAGES = 16
GAP_MS = 250.0
TOPIC = "TopicTruth"
OVERLOADED_CONTROL_MS = 25.0
"""An undelayed follower's ack takes about 10 ms on loopback (bench/accuracy_bench.py at load 15: 12-26 ms);
beyond this the machine is too busy to resolve the 5 ms tolerance and the tolerance checks are skipped
(the physical lower bound and the store-after-send checks still run)."""


@pytest.fixture()
def measured(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[tuple[Run, dict[str, Any]]]:
    with proxy_loop() as pl:
        c = None
        try:
            c, g, leader = start_group(tmp_path_factory.mktemp("truth"), pl)
            create_topic(c, g, leader, TOPIC)
            followers = [i for i in range(3) if i != leader]
            delayed, control = followers
            # warm the path (routes, channels, first election's catch-up) before anything is measured
            send_paced(g.endpoint, TOPIC, 3, 50)
            g.delay(leader, delayed, DELAY_MS)
            before = replicate_sums(g.metrics_text(leader))
            ids, costs = send_paced(g.endpoint, TOPIC, MESSAGES, GAP_MS)
            after = replicate_sums(g.metrics_text(leader))
            run = Run(DELAY_MS, f"n{delayed}", f"n{control}", ids, costs)
            for remote, (s, n) in after.items():
                s0, n0 = before.get(remote, (0.0, 0.0))
                if n > n0:
                    run.metrics_mean[remote] = (s - s0) / (n - n0)
            from truth_harness import collect_timelines

            collect_timelines(run, c.namesrv_addr)
            out = spark_tables(spark, c.namesrv_addr, Path(tmp_path_factory.mktemp("analytics")))
            import sys

            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dashboards"))
            import sources

            latency, _failovers = sources.analytics_tables(str(out))
            run.dashboard_p50 = table_p50(latency, TOPIC)
            from pyspark.sql import functions as F

            spark_rows = spark.read.parquet(str(out / "replication_latency")).where(F.col("topic") == TOPIC)
            run.spark_p50 = table_p50(spark_rows.toPandas(), TOPIC)
            yield run, run.summary()
        except BaseException:
            if c is not None:
                print(c.logs())
            raise
        finally:
            if c is not None:
                c.stop()


def test_replication_latency_everywhere_matches_the_injected_delay(measured: tuple[Run, dict[str, Any]]) -> None:
    run, summary = measured
    print(summary)
    tol = tolerance_ms(DELAY_MS)
    # trace timeline: physics first (no copy before the bytes arrived), then the measured delay
    acks = run.timeline_acks[run.delayed]
    assert len(acks) == MESSAGES
    assert min(acks) >= DELAY_MS - 1, f"a delayed ack {min(acks)} ms after the store is earlier than the delay"
    assert 0 <= summary["trace"]["store_after_send_median_ms"] <= 20, summary
    assert min(run.store_after_send) >= 0 and max(run.store_after_send) < 200, run.store_after_send
    if summary["trace"]["control_ms"] > OVERLOADED_CONTROL_MS:
        # seen at load average 25-35 on 2 cores (seven sessions at once): control 55 ms, sends 146 ms, and
        # the delayed-minus-control difference off by 49 ms; a 5 ms tolerance cannot be resolved there
        pytest.skip(f"machine overloaded: the undelayed follower's median ack took "
                    f"{summary['trace']['control_ms']} ms (> {OVERLOADED_CONTROL_MS}); figures: {summary}")
    assert abs(summary["trace"]["measured_delay_ms"] - DELAY_MS) <= tol, summary
    # the commit needs the leader and one follower: the control, not the delayed one
    assert abs(summary["trace"]["commit_median_ms"] - summary["trace"]["control_ms"]) <= tol, summary
    assert summary["trace"]["commit_median_ms"] < DELAY_MS - tol, summary
    # the leader's own histogram
    assert abs(summary["metrics"]["measured_delay_ms"] - DELAY_MS) <= tol, summary
    # Spark's table and the dashboard's reading of it
    for source in ("spark", "dashboard"):
        assert abs(summary[source]["measured_delay_ms"] - DELAY_MS) <= tol, (source, summary)
        assert summary[source]["delayed_ms"] >= DELAY_MS - 1, (source, summary)
    assert run.spark_p50["__quorum__"] < DELAY_MS - tol, run.spark_p50
