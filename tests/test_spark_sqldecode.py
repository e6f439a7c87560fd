"""The Spark SQL trace decoder (spark/sqldecode.py) against the Python codec, row by row.

The corpus is built with the codec's own encoder plus hand-written bodies the encoder
cannot produce (older and newer field counts, the CLOUD layout's trailing separator,
garbage in a number, invalid UTF-8): every record type, empty fields, keys with spaces
and the literal ``null``, batched records, empty records, unknown types, offsetMsgIds of
every shape.  The expected rows come from ``decode_bodies`` (the Python codec, which the
plain-Python reference of the jobs also uses); the Spark rows must be the same multiset.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rocketscope.names import HA_EVENTS_TOPIC, TRACE_TOPIC
from rocketscope.spark.decode import decode_bodies, decode_trace
from rocketscope.spark.generate import GenConfig, generate
from rocketscope.spark.reference import read_rows
from rocketscope.spark.schema import RECORD_SCHEMA, ROW_SCHEMA
from rocketscope.trace.codec import (
    EndTransactionRecord,
    PubRecord,
    RecallRecord,
    SubAfterRecord,
    SubBeforeRecord,
    encode,
)
from rocketscope.trace.ids import make_offset_msg_id

pytestmark = pytest.mark.e2e  # uses the session's SparkSession (tests/process_guard.py)

S, R = "\x01", "\x02"
TEXTS = ["", "a", "k1 k2", "null", "NULL", " spaced ", "键 值", "emoji \U0001f680", "tab\there", "x" * 300,
         "TopicA", "%DLQ%g1", "%RETRY%g1"]
OFFSET_IDS = [
    "",
    make_offset_msg_id("10.0.0.1", 10911, 0),
    make_offset_msg_id("10.0.0.1", 10911, 123_456_789),
    make_offset_msg_id("10.0.0.1", 65535, 2**63 - 1),
    make_offset_msg_id("::1", 10911, 4096),
    make_offset_msg_id("10.0.0.2", 10911, 77).lower(),
    "0A00000100002A9F000000000000004",  # 31 characters
    "0A00000100002A9F00000000000000ZZ",  # not hex
    "0A00000100002A9F8000000000000000",  # negative offset field
    "0A000001FFFF2A9F0000000000000010",  # port field out of range
    "0A00000100012A9F0000000000000010",  # port 0x12A9F > 65535
    "not an offset id",
]


def _pub(rng: random.Random) -> PubRecord:
    return PubRecord(
        timestamp=rng.choice([0, 1740873510000, 2**63 - 1, -5]), region_id=rng.choice(TEXTS),
        group=rng.choice(TEXTS), topic=rng.choice(TEXTS), msg_id=f"M{rng.randrange(50)}", tags=rng.choice(TEXTS),
        keys=rng.choice(TEXTS), store_host=rng.choice(["10.0.0.1:10911", "", "[::1]:10911"]),
        body_length=rng.randrange(0, 5000), cost_time=rng.choice([0, 3, 2**31 - 1, -1]),
        msg_type=rng.randrange(5), offset_msg_id=rng.choice(OFFSET_IDS), success=rng.random() < 0.8,
        client_host=rng.choice(["", "", "10.1.1.1"]))


def _sub_before(rng: random.Random) -> SubBeforeRecord:
    return SubBeforeRecord(
        timestamp=rng.choice([1, 1740873510123]), region_id="DefaultRegion", group=rng.choice(TEXTS),
        request_id=f"req{rng.randrange(30)}", msg_id=f"M{rng.randrange(50)}", retry_times=rng.choice([0, 3, 16]),
        keys=rng.choice(TEXTS))


def _sub_after(rng: random.Random) -> SubAfterRecord:
    return SubAfterRecord(
        request_id=f"req{rng.randrange(30)}", msg_id=f"M{rng.randrange(50)}", cost_time=rng.randrange(100),
        success=rng.random() < 0.7, keys=rng.choice(TEXTS), context_code=rng.randrange(5),
        timestamp=rng.choice([0, 1740873510999]), group=rng.choice(TEXTS))


def _end_tx(rng: random.Random) -> EndTransactionRecord:
    return EndTransactionRecord(
        timestamp=1740873510000, region_id="r", group="pg", topic="T", msg_id=f"M{rng.randrange(50)}", tags="",
        keys=rng.choice(TEXTS), store_host="10.0.0.1:10911", msg_type=1, transaction_id="tx",
        transaction_state="COMMIT_MESSAGE", from_check=rng.random() < 0.5)


def _recall(rng: random.Random) -> RecallRecord:
    return RecallRecord(timestamp=1, region_id="r", group="g", topic="T", msg_id="M1", success=True)


def _encoded_bodies(rng: random.Random, count: int) -> list[bytes]:
    makers = [_pub, _sub_before, _sub_after, _end_tx, _recall]
    bodies = []
    for _ in range(count):
        records = [rng.choices(makers, weights=[4, 3, 3, 1, 1])[0](rng) for _ in range(rng.randrange(1, 6))]
        bodies.append(encode(records).encode())
    return bodies


# Bodies the encoder cannot write: other field counts, Java's split rules, garbage.
PUB12 = S.join(["Pub", "1740873510000", "r", "pg", "T", "M1", "tag", "k1 k2", "10.0.0.1:10911", "10", "5", "0"])
PUB13 = PUB12 + S + "false"
OMID = make_offset_msg_id("10.0.0.1", 10911, 999)
PUB14 = PUB12 + S + OMID + S + "TRUE"
PUB16 = PUB14 + S + "10.1.1.1" + S + "extra"
SB7 = S.join(["SubBefore", "1740873510001", "r", "cg", "req1", "M1", "2"])  # empty keys dropped by Java's split
SB9 = SB7 + S + "null" + S + "10.1.1.1"
SA5 = S.join(["SubAfter", "req1", "M1", "7", "true"])
SA6 = SA5 + S + "k"
SA_CLOUD = SA6 + S + "0" + S  # CLOUD layout: a stray trailing separator
SA8 = SA6 + S + "1" + S + "1740873510050"
SA9 = SA8 + S + "cg"
SA9_EMPTY = SA6 + S + "1" + S + "0" + S + ""
ET14 = S.join(["EndTransaction", "1", "r", "pg", "T", "M1", "", "", "h", "1", "10.1.1.1", "tx", "UNKNOW", "false"])
HAND: list[bytes | None] = [
    (PUB12 + R + PUB13 + R + PUB14 + R + PUB16 + R).encode(),
    (SB7 + R + SB9 + R + SA5 + R + SA6 + R + SA_CLOUD + R + SA8 + R + SA9 + R + SA9_EMPTY).encode(),  # no last \x02
    (R + R + PUB14 + R + R + S + S + R).encode(),  # empty records and an all-separator record
    (ET14 + R + SB7 + R).encode(),
    ("Unknown" + S + "x" + R + SB7 + R + S + "lead" + R).encode(),  # unknown types skipped, the rest kept
    (SB7 + R + PUB12.replace("1740873510000", "17408x") + R).encode(),  # garbage number: whole body skipped
    (SB7 + R + SA5.replace("true", "yes") + R).encode(),  # bad boolean: whole body skipped
    (SB7 + R + PUB12[:-1] + "5" + R).encode(),  # msg_type 5: skipped
    (SB7 + R + PUB12.replace(S + "10" + S, S + "12\n" + S, 1) + R).encode(),  # "12\n" is not an integer
    (SB7 + R + PUB12.replace(S + "5" + S, S + "+5" + S, 1) + R).encode(),  # "+5" is
    (SB7 + R + PUB12.replace(S + "5" + S, S + "2147483648" + S, 1) + R).encode(),  # int32 overflow: skipped
    (SB7 + R + PUB12.replace("1740873510000", "9223372036854775808") + R).encode(),  # int64 overflow
    (SB7 + R + PUB12.replace(S + "5" + S, S + "007" + S, 1) + R).encode(),  # leading zeros
    (SB7 + R + SB7.rsplit(S, 1)[0] + R).encode(),  # SubBefore with 6 fields: skipped
    (ET14.replace("false", "maybe") + R + SB7).encode(),  # EndTransaction's bad boolean skips the body too
    SB7.encode() + b"\xff\xfe" + R.encode(),  # invalid UTF-8
    b"",
    None,
    b"plain text, not a trace",
]


def _rows(bodies: list[bytes | None], rng: random.Random) -> list[tuple]:
    tags = [TRACE_TOPIC, "TopicA", "%DLQ%g1", None, "topic with space"]
    return [(TRACE_TOPIC, 0, i, i * 100, None, None, None, rng.choice(tags), None, body)
            for i, body in enumerate(bodies)]


def _expected(rows: list[tuple]) -> list[tuple]:
    bodies = [r[9] for r in rows if r[0] != HA_EVENTS_TOPIC]
    tags = [r[7] for r in rows if r[0] != HA_EVENTS_TOPIC]
    cols = decode_bodies(bodies, tags)
    names = [f.name for f in RECORD_SCHEMA.fields]
    return sorted(zip(*(cols[n] for n in names), strict=True), key=repr)


def _actual(spark, rows: list[tuple], decoder: str = "sql") -> list[tuple]:  # type: ignore[no-untyped-def]
    df = spark.createDataFrame(rows, ROW_SCHEMA)
    return sorted((tuple(r) for r in decode_trace(df, decoder).collect()), key=repr)


def test_hand_written_edge_cases_decode_as_the_python_codec(spark) -> None:  # type: ignore[no-untyped-def]
    rows = _rows(HAND, random.Random(1))
    rows.append((HA_EVENTS_TOPIC, 0, 99, 1, None, None, None, None, None, PUB12.encode()))  # not a trace row
    expected = _expected(rows)
    actual = _actual(spark, rows)
    # ground truth beyond "the same as Python": what the corpus holds, counted by hand
    assert sum(1 for r in expected if r[0] == "Pub") == 4 + 1 + 1 + 1  # PUB12-16, the empty-records body,
    # the "+5" and "007" bodies; not the garbage ones
    assert len({r[9] for r in expected if r[0] == "Pub"} - {None}) == 1  # only OMID's offset, 999
    assert actual == expected


def test_generated_corpus_of_every_record_type_decodes_as_the_python_codec(spark) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(22)
    rows = _rows(_encoded_bodies(rng, 600) + HAND, rng)
    expected = _expected(rows)
    assert {r[0] for r in expected} == {"Pub", "SubBefore", "SubAfter"}
    assert any(r[9] is not None for r in expected) and any(r[9] is None and r[0] == "Pub" for r in expected)
    assert len(expected) > 1000
    assert _actual(spark, rows) == expected


def test_synthetic_data_set_decodes_the_same_both_ways(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The generator's data (drops, duplicates, CLOUD SubAfters) through both Spark decoders and the codec."""
    expected, decoded = _synthetic(spark, tmp_path, 5, ("sql", "python"))
    assert decoded["sql"] == expected == decoded["python"]


def _synthetic(spark, tmp_path: Path, seed: int,  # type: ignore[no-untyped-def]
               decoders: tuple[str, ...]) -> tuple[list[tuple[object, ...]], dict[str, list[tuple[object, ...]]]]:
    """The generator's data (400 messages of ``seed``): the codec's rows and each decoder's, sorted alike."""
    generate(tmp_path, GenConfig(messages=400, seed=seed, chunk=400), progress=False)
    raw = read_rows([tmp_path / "trace"])
    expected = _expected([tuple(r[f.name] for f in ROW_SCHEMA.fields) for r in raw])
    df = spark.read.schema(ROW_SCHEMA).parquet(str(tmp_path / "trace"))
    return expected, {d: sorted((tuple(r) for r in decode_trace(df, d).collect()), key=repr) for d in decoders}


def test_the_sql_decoder_has_no_python_worker_in_its_plan(spark) -> None:  # type: ignore[no-untyped-def]
    df = spark.createDataFrame(_rows(HAND[:2], random.Random(3)), ROW_SCHEMA)
    plan = decode_trace(df, "sql")._jdf.queryExecution().executedPlan().toString()
    assert "Python" not in plan and "ArrowEval" not in plan, plan
    python_plan = decode_trace(df, "python")._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" in python_plan or "PythonMapInArrow" in python_plan


def test_throttled_replication_events_expand_into_every_advance(spark) -> None:  # type: ignore[no-untyped-def]
    """A commit_advanced event written at the end of a throttle interval carries the advances it
    replaced (HaEvent.steps): Spark's events are one row per advance with its own offset and time,
    exactly what HaEvent.expand gives the Python reference, so replication_latency is exact."""
    from rocketscope.ha_events import COMMIT_ADVANCED, REPLICA_ACK, HaEvent
    from rocketscope.spark.decode import decode_events

    events = [HaEvent(type=COMMIT_ADVANCED, cluster="c", group="g", node="n0", ts=1_000_195, term=3, offset=900,
                      steps=((100, 1_000_005), (400, 1_000_008))),
              HaEvent(type=REPLICA_ACK, cluster="c", group="g", node="n0", ts=1_000_190, term=3, offset=900,
                      replica="g-n1", steps=((100, 1_000_004),)),
              HaEvent(type=COMMIT_ADVANCED, cluster="c", group="g", node="n0", ts=1_000_300, term=3, offset=950)]
    rows = [(HA_EVENTS_TOPIC, 0, i, i * 100, None, None, "g", "", {}, e.to_json().encode())
            for i, e in enumerate(events)]
    got = sorted((r["type"], r["replica"], r["offset"], r["ts"]) for r in
                 decode_events(spark.createDataFrame(rows, ROW_SCHEMA)).collect())
    want = sorted((x.type, x.replica, x.offset, x.ts) for e in events for x in e.expand())
    assert got == want and len(got) == 6
