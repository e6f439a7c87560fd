"""The JVM trace decoder (spark/jvm/src/io/rocketscope/spark/TraceDecoder.java) against the Python codec.

The same corpus as tests/test_spark_sqldecode.py (hand-written layouts, garbage, the encoder's
random bodies, the generator's data set) plus byte-level edge cases that only a decoder working
on bytes can get wrong: integer bounds written with signs and leading zeros, UTF-8 that Python
rejects (overlong forms, surrogates, code points above U+10FFFF, a sequence cut short) and a
non-ASCII letter that Java's ``equalsIgnoreCase`` would fold into ``false``.  Expected rows come
from ``decode_bodies`` (the Python codec); the JVM rows must be the same multiset.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
from test_spark_sqldecode import HAND, PUB12, SA5, SB7, R, S, _actual, _encoded_bodies, _expected, _rows, _synthetic

from rocketscope.spark import decode as decode_module
from rocketscope.spark.decode import decode_trace, jvm_decoder_loaded
from rocketscope.spark.schema import ROW_SCHEMA
from rocketscope.spark.session import decoder_jar

pytestmark = pytest.mark.e2e  # uses the session's SparkSession (tests/process_guard.py)


def _sb(ts: str) -> str:
    return SB7.replace("1740873510001", ts)


BYTE_EDGES: list[bytes | None] = [
    (_sb("-9223372036854775808") + R).encode(),  # int64's minimum: kept
    (_sb("-9223372036854775809") + R).encode(),  # one below: skipped
    (_sb("+0000000000000000000000009223372036854775807") + R).encode(),  # the maximum behind zeros: kept
    (_sb("+") + R).encode(),  # a sign alone: skipped
    (_sb("-") + R).encode(),
    (_sb("１２") + R).encode(),  # full-width digits are not [0-9]: skipped
    (SB7.rsplit(S, 1)[0] + S + "-2147483648" + R).encode(),  # retry_times at int32's minimum
    (SB7.rsplit(S, 1)[0] + S + "-2147483649" + R).encode(),
    (PUB12[:-1] + "-0" + R).encode(),  # message type -0 is 0
    (PUB12[:-1] + "-1" + R).encode(),
    (SA5.replace("true", "FaLsE") + R).encode(),
    (SA5.replace("true", "falſe") + R).encode(),  # long s: Java's equalsIgnoreCase says false, Python garbage
    (SA5.replace("true", "NULL") + R).encode(),
    (SA5.replace("true", "") + S + "k" + R).encode(),  # an empty boolean is false
    SB7.encode() + b"\xc0\x80" + R.encode(),  # overlong NUL
    SB7.encode() + b"\xed\xa0\x80" + R.encode(),  # a UTF-16 surrogate
    SB7.encode() + b"\xf4\x90\x80\x80" + R.encode(),  # above U+10FFFF
    SB7.encode() + b"\xe2\x82",  # cut short at the end
    (SB7 + R).encode() + b"\x80",  # a lone continuation byte
    ("キー" + S + SB7 + R + SB7.replace("cg", "组\U0001f680") + R).encode(),  # valid multi-byte text kept
    (PUB12 + S + "0A00000100002A9F00000000000003E7" + S + "true" + R).encode(),
    (PUB12 + S + "0a00000100002a9f00000000000003e7" + S + "true" + S + "h" + R).encode(),  # lower-case hex
    (PUB12 + S + "0A000001FFFFFFFF00000000000003E7" + S + "true" + R).encode(),  # port -1
    (PUB12 + S + "0A00000100002A9FFFFFFFFFFFFFFFFF" + S + "true" + R).encode(),  # offset -1
]


def test_the_jar_is_built_and_loaded(spark) -> None:  # type: ignore[no-untyped-def]
    """`make` builds the jar (Makefile spark-jvm) and the test session loads it: otherwise the
    tests below would be comparing the SQL decoder with itself."""
    assert decoder_jar() is not None, "build/spark-jvm/rocketscope-spark.jar is missing: run `make spark-jvm`"
    assert jvm_decoder_loaded(spark)


def test_hand_written_and_byte_level_edge_cases_decode_as_the_python_codec(spark) -> None:  # type: ignore[no-untyped-def]
    rows = _rows(HAND + BYTE_EDGES, random.Random(1))
    expected = _expected(rows)
    # counted by hand: int64 min and max, int32 min, "-0"; the two bodies with valid multi-byte text
    assert sum(1 for r in expected if r[0] == "SubBefore" and r[1] in (-2**63, 2**63 - 1)) == 2
    assert {r[9] for r in expected if r[0] == "Pub"} - {None} == {999}
    assert _actual(spark, rows, "jvm") == expected


def test_generated_corpus_decodes_as_the_python_codec(spark) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(19)
    rows = _rows(_encoded_bodies(rng, 600) + HAND + BYTE_EDGES, rng)
    expected = _expected(rows)
    assert len(expected) > 1000
    assert _actual(spark, rows, "jvm") == expected


def test_synthetic_data_set_decodes_the_same_as_sql_and_the_codec(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    expected, decoded = _synthetic(spark, tmp_path, 6, ("jvm", "sql"))
    assert len(expected) > 400 and decoded["jvm"] == expected == decoded["sql"]


def test_the_jvm_decoder_plan_has_no_python_node_and_reads_parquet(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One plan from the Parquet scan to the decoded rows (not an RDD handed over), no Python worker."""
    spark.createDataFrame(_rows(HAND[:2], random.Random(3)), ROW_SCHEMA).write.parquet(str(tmp_path / "t"))
    df = spark.read.schema(ROW_SCHEMA).parquet(str(tmp_path / "t"))
    plan = decode_trace(df, "jvm")._jdf.queryExecution().executedPlan().toString()
    assert "Python" not in plan and "ArrowEval" not in plan, plan
    assert "MapPartitions" in plan and "FileScan parquet" in plan, plan


def test_without_the_class_it_falls_back_to_sql_with_one_info_line(spark, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(decode_module, "JVM_DECODER_CLASS", "io.rocketscope.spark.NoSuchDecoder")
    monkeypatch.setattr(decode_module, "_fallback_logged", set())
    df = spark.createDataFrame(_rows(HAND[:2], random.Random(3)), ROW_SCHEMA)
    with caplog.at_level(logging.INFO, logger="rocketscope.spark.decode"):
        plans = [decode_trace(df, "jvm")._jdf.queryExecution().executedPlan().toString() for _ in range(2)]
    assert all("MapPartitions" not in p for p in plans)
    lines = [r for r in caplog.records if "decoding with Spark SQL" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO


def test_the_cli_says_which_decoder_ran_and_what_to_do_when_the_jar_is_missing(spark, monkeypatch,  # type: ignore[no-untyped-def]
                                                                                 capsys) -> None:
    """``rocketscope analyze`` reports the decoder it really used: ``jvm`` in a session that loaded the
    jar; ``sql`` plus one stderr line naming the two remedies (make, spark-submit --jars) when the class
    cannot be loaded, which is what a spark-submit without --jars sees (tests/test_spark_cluster.py runs
    spark-submit with it)."""
    from rocketscope.spark.cli import _announce_decoder

    assert _announce_decoder(spark, "jvm") == "jvm" and capsys.readouterr().err == ""
    assert _announce_decoder(spark, "python") == "python"
    monkeypatch.setattr(decode_module, "JVM_DECODER_CLASS", "io.rocketscope.spark.NoSuchDecoder")
    assert _announce_decoder(spark, "jvm") == "sql"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--jars" in err and "make" in err and "Spark SQL" in err
