"""The DuckDB pipeline (spark/duckdb_pipeline.py) against the plain-Python reference, every column.

The same generated data set as tests/test_spark_jobs.py (crossing midnight UTC, two failovers
with truncation and resends, failed sends retried elsewhere, consumer retries, DLQ moves,
dropped and duplicated records, CLOUD-layout SubAfters, out-of-order and duplicated events)
goes through DuckDB into Parquet tables, which are read back and compared with
spark/reference.py.  Percentiles must be equal here, not within one rank: the DuckDB side
computes the reference's exact nearest rank.  The decoder is also checked against the Python
codec on the Spark SQL decoder's own corpus (tests/test_spark_sqldecode.py: hand-written edge
cases and 600 random bodies).  No process is started; the whole module runs in seconds.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from test_spark_sqldecode import HAND, _encoded_bodies, _expected, _rows

from rocketscope.ha_events import COMMIT_ADVANCED, REPLICA_ACK, HaEvent
from rocketscope.names import HA_EVENTS_TOPIC
from rocketscope.spark.duckdb_pipeline import JOB_NAMES, connect, decode, run_pipeline
from rocketscope.spark.generate import GenConfig, generate
from rocketscope.spark.reference import Reference, nearest_rank, read_rows
from rocketscope.spark.schema import QUORUM, RECORD_SCHEMA, ROW_ARROW_SCHEMA, ROW_SCHEMA

# 3,000 messages at 20/s starting 23:58:30 UTC: 150 s of traffic across midnight (as tests/test_spark_jobs.py).
CONFIG = GenConfig(messages=3_000, seed=11, start_ms=1740873510000, rate=20.0, chunk=1_000)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("duck-gen")
    generate(out, CONFIG, progress=False)
    return out


@pytest.fixture(scope="module")
def ref(data: Path) -> Reference:
    return Reference.from_rows(read_rows([data / "trace", data / "ha"]))


@pytest.fixture(scope="module")
def written(data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("duck-out")
    result = run_pipeline([data / "trace", data / "ha"], out)
    return out, result


def _read(out: Path, name: str, select: str) -> list[dict]:
    """Rows of a written table, timestamps as epoch ms and dates as days since 1970 (the reference's units)."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    rel = con.execute(f"SELECT {select} FROM read_parquet('{out / name}/**/*.parquet', hive_partitioning = true)")
    names = [d[0] for d in rel.description]
    return [dict(zip(names, row, strict=True)) for row in rel.fetchall()]


DATE = "(date - DATE '1970-01-01') AS date"


def ms(col: str) -> str:
    return f"epoch_ms({col}) AS {col}"


def test_every_table_is_written_with_rows(written: tuple[Path, dict]) -> None:
    out, result = written
    assert set(result["jobs_s"]) == set(JOB_NAMES)  # type: ignore[arg-type]
    for name in JOB_NAMES:
        days = sorted(p.name for p in (out / name).iterdir())
        assert days == ["date=2025-03-01", "date=2025-03-02"], (name, days)  # crosses midnight
        assert result["rows"][name] > 0  # type: ignore[index]


def test_message_timeline_matches_reference(written: tuple[Path, dict], ref: Reference) -> None:
    out, _ = written
    select = ", ".join([
        "msg_id", DATE, "topic", "producer_group", "keys", ms("born_ts"), ms("stored_ts"), "store_host",
        "broker_group", "ha_mode", "gen", "phys_offset", ms("committed_ts"), "send_attempts", "failed_sends",
        "truncated_copies", "resent", "lost",
        "list_transform(replicas, lambda r: {'replica': r.replica, 'ack_ts': epoch_ms(r.ack_ts), "
        "'latency_ms': r.latency_ms}) AS replicas",
        "list_transform(consumers, lambda c: {'group': c.group, 'first_delivery_ts': epoch_ms(c.first_delivery_ts), "
        "'first_ack_ts': epoch_ms(c.first_ack_ts), 'deliveries': c.deliveries, 'max_retry_times': c.max_retry_times,"
        " 'failures': c.failures, 'dlq': c.dlq, 'dlq_ts': epoch_ms(c.dlq_ts)}) AS consumers",
    ])
    rows = _read(out, "message_timeline", select)
    actual = {r["msg_id"]: r for r in rows}
    assert len(actual) == len(rows)  # one row per msgId
    expected = ref.message_timeline()
    assert set(actual) == set(expected)
    producer_side = ("topic", "producer_group", "keys", "stored_ts", "store_host", "broker_group", "ha_mode", "gen",
                     "phys_offset", "committed_ts")
    for msg_id, exp in expected.items():
        act = actual[msg_id]
        for key in ("date", "born_ts", "send_attempts", "failed_sends", "truncated_copies", "resent", "lost"):
            assert act[key] == exp[key], (msg_id, key)
        for key in producer_side:
            # a msgId known only from Sub records (its Pub dropped) has the producer side empty
            assert act[key] == (exp[key] if exp["born_ts"] is not None else None), (msg_id, key)
        assert [tuple(r.values()) for r in act["replicas"]] == exp["replicas"], msg_id
        assert [tuple(c.values()) for c in act["consumers"]] == exp["consumers"], msg_id
    # the awkward cases are in the compared rows, counted from the reference (the ground truth)
    assert sum(1 for m in expected.values() if m["truncated_copies"] and m["resent"]) >= 1
    assert sum(1 for m in expected.values() if m["lost"]) >= 1
    assert sum(1 for m in expected.values() if m["born_ts"] is None) >= 1
    consumers = [c for m in expected.values() for c in m["consumers"]]
    assert any(c[6] and c[4] == 16 for c in consumers)  # DLQ by retry count
    assert any(c[6] and (c[4] or 0) < 16 for c in consumers)  # DLQ seen only through a %DLQ% delivery


def _check_stats(actual: dict, expected: dict) -> None:
    """Counts, max and the exact nearest-rank percentiles of the reference."""
    assert actual["messages"] == expected["messages"]
    assert actual["samples"] == expected["samples"]
    assert actual["max_ms"] == expected["max_ms"]
    values = expected["values"]
    for p, col in ((0.5, "p50_ms"), (0.95, "p95_ms"), (0.99, "p99_ms")):
        assert actual[col] == (nearest_rank(values, p) if values else None), col


def test_replication_latency_matches_reference(written: tuple[Path, dict], ref: Reference) -> None:
    out, _ = written
    rows = _read(out, "replication_latency", f"{DATE}, {ms('minute')}, topic, broker_group, replica, messages, "
                                             "samples, p50_ms, p95_ms, p99_ms, max_ms")
    actual = {(r["date"], r["minute"], r["topic"], r["broker_group"], r["replica"]): r for r in rows}
    assert len(actual) == len(rows)
    expected = ref.replication_latency()
    assert set(actual) == set(expected)
    for key, exp in expected.items():
        _check_stats(actual[key], exp)
    assert any(k[4] == QUORUM for k in actual)
    assert any(v["samples"] < v["messages"] for v in actual.values())  # never-replicated copies show


def test_e2e_latency_matches_reference(written: tuple[Path, dict], ref: Reference) -> None:
    out, _ = written
    rows = _read(out, "e2e_latency", f"{DATE}, {ms('minute')}, topic, \"group\", messages, dlq, samples, p50_ms, "
                                     "p95_ms, p99_ms, max_ms")
    actual = {(r["date"], r["minute"], r["topic"], r["group"]): r for r in rows}
    assert len(actual) == len(rows)
    expected = ref.e2e_latency()
    assert set(actual) == set(expected)
    for key, exp in expected.items():
        _check_stats(actual[key], exp)
        assert actual[key]["dlq"] == exp["dlq"], key
    assert sum(v["dlq"] for v in actual.values()) >= 2


def test_failover_impact_matches_reference(written: tuple[Path, dict], ref: Reference) -> None:
    out, _ = written
    rows = _read(out, "failover_impact", ", ".join([
        DATE, "broker_group", "mode", "old_gen", "new_gen", "old_leader", "new_leader", ms("last_seen_ts"),
        ms("election_started_ts"), ms("elected_ts"), "detection_gap_ms", "election_ms", ms("unavailable_from_ts"),
        ms("unavailable_to_ts"), "unavailability_ms", "sent_before", "at_risk", "truncated", "resent", "lost",
        "truncated_bytes", "failed_sends"]))
    actual = {(r["broker_group"], r["new_gen"]): r for r in rows}
    expected = ref.failover_impact()
    assert set(actual) == set(expected) and len(rows) == 2
    for key, exp in expected.items():
        for col, value in exp.items():
            assert actual[key][col] == value, (key, col)
        # the window's ends are not in the reference's row: from its copies, as failover_impact defines them
        group, new_gen = key
        ok = [c for c in ref.pubs if c["broker_group"] == group and c["success"]]
        start = exp["election_started_ts"]
        assert actual[key]["unavailable_from_ts"] == max(c["stored_ts"] for c in ok if c["stored_ts"] < start)
        assert actual[key]["unavailable_to_ts"] == min(c["stored_ts"] for c in ok if c["gen"] == new_gen)
    controller = actual[("bg-b", 2)]
    assert controller["truncated"] >= 1 and controller["resent"] + controller["lost"] == controller["truncated"]
    assert controller["detection_gap_ms"] > 0 and controller["unavailability_ms"] > 0
    assert actual[("bg-a", 2)]["failed_sends"] >= 1


def test_decoded_events_are_the_references(data: Path, ref: Reference) -> None:
    con = connect(threads=1)
    from rocketscope.spark.duckdb_pipeline import load_rows

    load_rows(con, [data / "ha", data / "trace"])
    decode(con)
    cols = ("type", "group", "node", "ts", "address", "gen", "mode", "replica", "offset", "from_offset",
            "to_offset", "role", "leader")
    got = sorted(con.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM events").fetchall())
    assert got == sorted(tuple(e[c] for c in cols) for e in ref.events)


def _decode_rows(rows: list[tuple]) -> list[tuple]:
    """DuckDB's decoded records of rows in the row schema, as tuples in RECORD_SCHEMA order."""
    table = pa.Table.from_pylist([dict(zip(ROW_SCHEMA.names, r, strict=True)) for r in rows],
                                 schema=ROW_ARROW_SCHEMA)
    con = connect(threads=1)
    con.register("rs_input", table)
    con.execute("CREATE OR REPLACE TEMP VIEW rs_rows AS SELECT topic, tags, body FROM rs_input")
    decode(con)
    names = ", ".join(f.name for f in RECORD_SCHEMA.fields)
    return sorted((tuple(r) for r in con.execute(f"SELECT {names} FROM records").fetchall()), key=repr)


def test_hand_written_edge_cases_decode_as_the_python_codec() -> None:
    rows = _rows(HAND, random.Random(1))
    rows.append((HA_EVENTS_TOPIC, 0, 99, 1, None, None, None, None, None, HAND[0]))  # not a trace row
    expected = _expected(rows)
    # what the corpus holds, counted by hand (tests/test_spark_sqldecode.py): 7 Pub records survive
    assert sum(1 for r in expected if r[0] == "Pub") == 7
    assert _decode_rows(rows) == expected


def test_random_corpus_of_every_record_type_decodes_as_the_python_codec() -> None:
    rng = random.Random(22)
    rows = _rows(_encoded_bodies(rng, 600) + HAND, rng)
    expected = _expected(rows)
    assert {r[0] for r in expected} == {"Pub", "SubBefore", "SubAfter"} and len(expected) > 1000
    assert _decode_rows(rows) == expected


def test_throttled_replication_events_expand_into_every_advance() -> None:
    events = [HaEvent(type=COMMIT_ADVANCED, cluster="c", group="g", node="n0", ts=1_000_195, term=3, offset=900,
                      steps=((100, 1_000_005), (400, 1_000_008))),
              HaEvent(type=REPLICA_ACK, cluster="c", group="g", node="n0", ts=1_000_190, term=3, offset=900,
                      replica="g-n1", steps=((100, 1_000_004),)),
              HaEvent(type=COMMIT_ADVANCED, cluster="c", group="g", node="n0", ts=1_000_300, term=3, offset=950)]
    bodies = [e.to_json().encode() for e in events] + [b"[1]", b"{", b"\xff"]  # and three that are not events
    rows = [{"topic": HA_EVENTS_TOPIC, "queue_id": 0, "queue_offset": i, "commitlog_offset": i, "body": body}
            for i, body in enumerate(bodies)]
    con = connect(threads=1)
    con.register("rs_input", pa.Table.from_pylist(rows, schema=ROW_ARROW_SCHEMA))
    con.execute("CREATE OR REPLACE TEMP VIEW rs_rows AS SELECT topic, tags, body FROM rs_input")
    decode(con)
    got = sorted(con.execute('SELECT type, replica, "offset", ts FROM events').fetchall())
    want = sorted((x.type, x.replica, x.offset, x.ts) for e in events for x in e.expand())
    assert got == want and len(got) == 6


def test_rerun_replaces_its_dates_and_keeps_others(data: Path, tmp_path: Path) -> None:
    run_pipeline([data / "trace", data / "ha"], tmp_path, jobs=["e2e_latency"])
    stray = tmp_path / "e2e_latency" / "date=2000-01-01"
    stray.mkdir()
    (stray / "keep.parquet").write_bytes((next((tmp_path / "e2e_latency" / "date=2025-03-01").iterdir())).read_bytes())
    before = _read(tmp_path, "e2e_latency", "*")
    run_pipeline([data / "trace", data / "ha"], tmp_path, jobs=["e2e_latency"])
    after = _read(tmp_path, "e2e_latency", "*")
    assert (stray / "keep.parquet").exists()
    assert sorted(map(repr, after)) == sorted(map(repr, before))  # replaced, not appended
