"""The Spark jobs against the plain-Python reference, on generated data with the awkward cases.

One small data set (crossing midnight UTC, two failovers with truncation and resends,
retries, DLQ moves, dropped and duplicated records, out-of-order and duplicated events)
is generated once per module and every job is written once; each test then compares a
table with :mod:`rocketscope.spark.reference`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketscope.spark.generate import GenConfig, generate
from rocketscope.spark.jobs import JOBS
from rocketscope.spark.model import Model
from rocketscope.spark.output import write_table
from rocketscope.spark.plans import describe, nodes, shuffles
from rocketscope.spark.reference import Reference, nearest_rank, read_rows
from rocketscope.spark.schema import QUORUM

pytestmark = pytest.mark.e2e

# 3,000 messages at 20/s starting 23:58:30 UTC: 150 s of traffic across midnight.
CONFIG = GenConfig(messages=3_000, seed=11, start_ms=1740873510000, rate=20.0, chunk=1_000)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("spark-gen")
    generate(out, CONFIG, progress=False)
    return out


@pytest.fixture(scope="module")
def written(spark, data: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from rocketscope.spark.run import read_rows as spark_rows

    out = tmp_path_factory.mktemp("spark-out")
    model = Model(spark, spark_rows(spark, [data / "trace", data / "ha"]), bucket=None)
    for name, build in JOBS.items():
        write_table(build(model), out, name)
    yield out, model
    model.unpersist()


@pytest.fixture(scope="module")
def ref(data: Path) -> Reference:
    return Reference.from_rows(read_rows([data / "trace", data / "ha"]))


def _rows(spark, path: Path, select: list[str]) -> list[dict]:  # type: ignore[no-untyped-def]
    df = spark.read.parquet(str(path)).selectExpr(*select)
    return [r.asDict(recursive=True) for r in df.collect()]


def _check_stats(actual: dict, expected: dict) -> None:
    """Counts and max exactly; percentiles within one rank of the exact nearest-rank value."""
    assert actual["messages"] == expected["messages"]
    assert actual["samples"] == expected["samples"]
    assert actual["max_ms"] == expected["max_ms"]
    values = expected["values"]
    for p, col in ((0.5, "p50_ms"), (0.95, "p95_ms"), (0.99, "p99_ms")):
        if not values:
            assert actual[col] is None
            continue
        exact = nearest_rank(values, p)
        k = values.index(exact)
        window = values[max(0, k - 1): k + 2]
        assert actual[col] in window, (col, actual[col], exact)


def test_generated_data_has_the_awkward_cases(ref: Reference) -> None:
    timeline = ref.message_timeline()
    assert sum(1 for m in timeline.values() if m["truncated_copies"] and m["resent"]) >= 1
    assert sum(1 for m in timeline.values() if m["lost"]) >= 1
    assert sum(1 for m in timeline.values() if m["failed_sends"]) >= 5
    consumers = [c for m in timeline.values() for c in m["consumers"]]
    assert any(c[6] and c[4] == 16 for c in consumers)  # DLQ by retry count
    assert any(c[6] and (c[4] or 0) < 16 for c in consumers)  # DLQ seen only through %DLQ% delivery
    assert any((c[4] or 0) >= 1 and c[2] is not None for c in consumers)  # retried, then acked
    assert any(m["born_ts"] is None for m in timeline.values())  # Pub record dropped
    assert len({m["date"] for m in timeline.values()}) == 2  # crosses midnight
    assert len(ref.failover_impact()) == 2


def check_message_timeline(spark, out: Path, ref: Reference) -> None:  # type: ignore[no-untyped-def]
    """The message_timeline table under ``out`` equals the reference's, msgId by msgId."""
    cols = [
        "msg_id", "datediff(date, date'1970-01-01') AS date", "topic", "producer_group", "keys",
        "unix_millis(born_ts) AS born_ts", "unix_millis(stored_ts) AS stored_ts", "store_host", "broker_group",
        "ha_mode", "gen", "phys_offset", "unix_millis(committed_ts) AS committed_ts", "send_attempts",
        "failed_sends", "truncated_copies", "resent", "lost",
        "transform(replicas, r -> struct(r.replica, unix_millis(r.ack_ts), r.latency_ms)) AS replicas",
        "transform(consumers, c -> struct(c.group, unix_millis(c.first_delivery_ts), unix_millis(c.first_ack_ts),"
        " c.deliveries, c.max_retry_times, c.failures, c.dlq, unix_millis(c.dlq_ts))) AS consumers",
    ]
    actual = {r["msg_id"]: r for r in _rows(spark, out / "message_timeline", cols)}
    expected = ref.message_timeline()
    assert set(actual) == set(expected)
    for msg_id, exp in expected.items():
        act = actual[msg_id]
        for key in ("date", "born_ts", "send_attempts", "failed_sends", "truncated_copies", "resent", "lost"):
            assert act[key] == exp[key], (msg_id, key)
        if exp["born_ts"] is not None:
            for key in ("topic", "producer_group", "keys", "stored_ts", "store_host", "broker_group", "ha_mode",
                        "gen", "phys_offset", "committed_ts"):
                assert act[key] == exp[key], (msg_id, key)
        assert [tuple(r.values()) for r in act["replicas"]] == exp["replicas"], msg_id
        assert [tuple(c.values()) for c in act["consumers"]] == exp["consumers"], msg_id


def test_message_timeline_matches_reference(spark, written, ref: Reference) -> None:  # type: ignore[no-untyped-def]
    check_message_timeline(spark, written[0], ref)


def check_replication_latency(spark, out: Path, ref: Reference) -> None:  # type: ignore[no-untyped-def]
    rows = _rows(spark, out / "replication_latency", [
        "datediff(date, date'1970-01-01') AS date", "unix_millis(minute) AS minute", "topic", "broker_group",
        "replica", "messages", "samples", "p50_ms", "p95_ms", "p99_ms", "max_ms"])
    actual = {(r["date"], r["minute"], r["topic"], r["broker_group"], r["replica"]): r for r in rows}
    expected = ref.replication_latency()
    assert set(actual) == set(expected)
    for key, exp in expected.items():
        _check_stats(actual[key], exp)
    assert any(k[4] == QUORUM for k in actual)
    assert any(v["samples"] < v["messages"] for v in actual.values())  # never-replicated copies show


def test_replication_latency_matches_reference(spark, written, ref: Reference) -> None:  # type: ignore[no-untyped-def]
    check_replication_latency(spark, written[0], ref)


def check_e2e_latency(spark, out: Path, ref: Reference) -> None:  # type: ignore[no-untyped-def]
    rows = _rows(spark, out / "e2e_latency", [
        "datediff(date, date'1970-01-01') AS date", "unix_millis(minute) AS minute", "topic", "group", "messages",
        "dlq", "samples", "p50_ms", "p95_ms", "p99_ms", "max_ms"])
    actual = {(r["date"], r["minute"], r["topic"], r["group"]): r for r in rows}
    expected = ref.e2e_latency()
    assert set(actual) == set(expected)
    for key, exp in expected.items():
        _check_stats(actual[key], exp)
        assert actual[key]["dlq"] == exp["dlq"]


def test_e2e_latency_matches_reference(spark, written, ref: Reference) -> None:  # type: ignore[no-untyped-def]
    check_e2e_latency(spark, written[0], ref)


def check_failover_impact(spark, out: Path, ref: Reference) -> None:  # type: ignore[no-untyped-def]
    rows = _rows(spark, out / "failover_impact", [
        "datediff(date, date'1970-01-01') AS date", "broker_group", "mode", "old_gen", "new_gen", "old_leader",
        "new_leader", "unix_millis(last_seen_ts) AS last_seen_ts",
        "unix_millis(election_started_ts) AS election_started_ts", "unix_millis(elected_ts) AS elected_ts",
        "detection_gap_ms", "election_ms", "unavailability_ms", "sent_before", "at_risk", "truncated", "resent",
        "lost", "truncated_bytes", "failed_sends"])
    actual = {(r["broker_group"], r["new_gen"]): r for r in rows}
    expected = ref.failover_impact()
    assert set(actual) == set(expected)
    for key, exp in expected.items():
        for col, value in exp.items():
            assert actual[key][col] == value, (key, col)
    controller = actual[("bg-b", 2)]
    assert controller["truncated"] >= 1 and controller["resent"] + controller["lost"] == controller["truncated"]
    assert controller["detection_gap_ms"] > 0 and controller["unavailability_ms"] > 0
    assert actual[("bg-a", 2)]["failed_sends"] >= 1


def test_failover_impact_matches_reference(spark, written, ref: Reference) -> None:  # type: ignore[no-untyped-def]
    check_failover_impact(spark, written[0], ref)


def test_window_asof_join_agrees_with_interval_join(spark, data: Path) -> None:  # type: ignore[no-untyped-def]
    from rocketscope.spark.run import read_rows as spark_rows

    rows = spark_rows(spark, [data / "trace", data / "ha"])
    key = ["msg_id", "born_ts", "store_host", "replica", "ack_ts"]
    interval = Model(spark, rows, asof_method="interval", bucket=512, persist=False).replication.select(*key)
    window = Model(spark, rows, asof_method="window", persist=False).replication.select(*key)
    assert interval.exceptAll(window).count() == 0
    assert window.exceptAll(interval).count() == 0


def test_rerun_is_idempotent_and_keeps_other_partitions(spark, written, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out, model = written
    name = "replication_latency"
    before = sorted(map(tuple, spark.read.parquet(str(out / name)).collect()))
    # A partition the run does not produce must survive; the produced ones are replaced, not appended.
    stray = spark.read.parquet(str(out / name)).limit(1).selectExpr("* EXCEPT (date)", "date'2000-01-01' AS date")
    stray.write.mode("append").partitionBy("date").parquet(str(out / name))
    write_table(JOBS[name](model), out, name)
    write_table(JOBS[name](model), out, name)
    after = spark.read.parquet(str(out / name))
    assert after.where("date = date'2000-01-01'").count() == 1
    assert sorted(map(tuple, after.where("date <> date'2000-01-01'").collect())) == before


# How the jobs are planned: what docs/ANALYTICS.md ("How the shared tables are laid out") claims.
# The plans of the model the tests above ran are walked in the JVM (spark/plans.py), no job runs:
# the Parquet scans read only the columns the decoders use; every record is shuffled once (by
# message), and nothing else is: the replication rows stay in the copies' partitions (broadcast
# intervals) and the consumers' attempts in the records'; the aggregates and joins by message over
# the cached tables stream over sorted rows (no sort, hash table or hash join of their own); no sort
# over message rows leads with a string (its 8-byte sort prefix tells the msgIds of one producer
# apart from nothing).
DECODER_COLUMNS = {"topic", "tags", "body"}


def test_every_scan_reads_only_the_columns_the_decoders_use(written) -> None:  # type: ignore[no-untyped-def]
    model: Model = written[1]
    # every scan is in a job's own plan or in the plan of a cached table it reads: each walked once
    plans = {name: build(model) for name, build in JOBS.items()}
    plans.update({f"cached {name}": df for name, df in model._cache.items()})
    scans = {name: [n.read_columns() for n in nodes(df) if n.kind == "FileSourceScanExec"]
             for name, df in plans.items()}
    assert scans["cached records"] and scans["cached events"], scans
    assert all(set(cols) <= DECODER_COLUMNS for found in scans.values() for cols in found), scans


def test_message_keyed_steps_stay_in_the_message_partitions(written) -> None:  # type: ignore[no-untyped-def]
    model: Model = written[1]
    # records: the one shuffle of every record.  replication and copies: none since session 20 (the as-of
    # join broadcasts its intervals, so the (copy, replica) rows stay in the copies' partitions; they were
    # shuffled to the join's keys and buckets, and copies shuffled them back by message).  consumers: none
    # since session 19 (its attempts are an aggregate inside the records' partitions, which Spark knows to
    # be partitioned by message; the full outer join they were before hid it and cost one shuffle of every
    # attempt).  Before session 15 every cached table hid its partitioning and the run shuffled message
    # rows 11 times.
    expected = {"records": 1, "pubs": 0, "replication": 0, "copies": 0, "messages": 0, "consumers": 0,
                "message_timeline": 0}
    tables = {name: getattr(model, name) for name in expected if name != "message_timeline"}
    tables["message_timeline"] = JOBS["message_timeline"](model)
    actual = {name: len(shuffles(df)) for name, df in tables.items()}
    assert actual == expected, {name: describe(shuffles(df)) for name, df in tables.items()}


def test_message_keyed_aggregates_and_joins_stream_over_sorted_tables(written) -> None:  # type: ignore[no-untyped-def]
    model: Model = written[1]
    # Session 20: pubs and consumers are cached sorted by message (and copy), so copies' join, messages'
    # aggregate and message_timeline's aggregate and full outer join need no sort and build no hash
    # table: sort aggregates and sort-merge joins that stream.  Before, message_timeline's collect_list
    # was an ObjectHashAggregate that fell back to sorting in every task (1M messages) and its full outer
    # join built a 570 MB hash map; messages sorted the copies; copies' collect_list of the replicas fell
    # back to sorting too.  The replication rows come out of the broadcast as-of join in the cached pubs'
    # order (by copy), so copies' per-copy aggregate sorts nothing either.
    tables = {name: getattr(model, name) for name in ("copies", "messages")}
    tables["message_timeline"] = JOBS["message_timeline"](model)
    hashed_or_sorted = {"ObjectHashAggregateExec", "HashAggregateExec", "ShuffledHashJoinExec", "SortExec"}
    for name, df in tables.items():
        found = nodes(df, into_broadcasts=False)
        assert not [n for n in found if n.kind in hashed_or_sorted], (name, describe(found))
        if name == "copies":
            # session 21: one row per copy out of the per-copy as-of join (asof_members): no aggregate at all
            assert not [n for n in found if "Aggregate" in n.kind], (name, describe(found))
            assert any(n.kind == "BroadcastHashJoinExec" for n in found), (name, describe(found))
        else:
            assert any(n.kind == "SortAggregateExec" for n in found), (name, describe(found))


def test_consumers_aggregates_by_message_and_group_without_a_hash_table(written) -> None:  # type: ignore[no-untyped-def]
    """Session 24: the (msgId, group) aggregate of consumers streams over rows sorted by its keys, and its
    output is cached as it comes (no sort after it).  It was a hash aggregate keyed by the msgId string, most
    of the step's task time, whose output was then sorted; a sort below an aggregate of min/max/count alone
    is dropped by the optimizer, which is why one of its functions is a ``first`` (spark/model.py).  The
    tables themselves are the reference's (test_message_timeline_matches_reference)."""
    model: Model = written[1]
    found = nodes(model.consumers, into_broadcasts=False)
    assert not [n for n in found if n.kind in {"HashAggregateExec", "ObjectHashAggregateExec"}], describe(found)
    assert sum(n.kind == "SortAggregateExec" for n in found) == 2, describe(found)  # the pairing, then this one


def test_no_sort_over_message_rows_leads_with_a_string(written) -> None:  # type: ignore[no-untyped-def]
    model: Model = written[1]
    tables = {name: getattr(model, name) for name in ("records", "pubs", "copies", "messages", "consumers")}
    tables["message_timeline"] = JOBS["message_timeline"](model)
    for name, df in tables.items():
        for node in nodes(df, into_broadcasts=False):
            types = node.sort_key_types()
            assert not types or types[0] != "string", f"{name}: a sort led by a string: {node.jvm.toString()}"


def test_each_ha_event_is_parsed_once(written) -> None:  # type: ignore[no-untyped-def]
    # Session 23: the events' filter on type, group, node and ts was pushed below the projection of the parsed
    # JSON, which Spark does by copying the parse into the filter: five from_json per event row (the events step
    # cost twice the parse).  Parsed inside a generator, the filter cannot reach it.  The events the jobs see
    # are checked against the Python reference by the failover and replication tests above.
    model: Model = written[1]
    parses = [n for n in nodes(model.events) if "from_json(" in n.jvm.simpleString(10_000)]
    assert len(parses) == 1, describe(parses)
    assert str(parses[0].jvm.simpleString(10_000)).count("from_json(") == 1, describe(parses)
