"""Model.consumers on the delivery cases the generated data set lacks, against the Python reference.

spark/generate.py writes no broker-side Pub on ``%DLQ%<group>`` (trace/broker_side.py
on_dead_lettered), yet Model.consumers takes the DLQ move from such a Pub, and since session 19
those Pubs are rows of the same aggregate as the Sub records (Model._deliveries).  Hand-made trace
rows cover: a DLQ Pub after a failed delivery, the same Pub twice and a later one, a DLQ Pub of
a group with no delivery at all, a failed (not stored) DLQ Pub, a delivery read from ``%DLQ%G``,
a SubBefore without SubAfter and the other way round, and a SubBefore written twice.
"""

from __future__ import annotations

from typing import Any

import pytest

from rocketscope.names import DLQ_PREFIX, TRACE_TOPIC
from rocketscope.spark.model import Model
from rocketscope.spark.reference import Reference
from rocketscope.spark.schema import ROW_SCHEMA
from rocketscope.trace.codec import PubRecord, SubAfterRecord, SubBeforeRecord, TraceRecord, encode

pytestmark = pytest.mark.e2e

HOST = "127.0.0.1:10911"
T0 = 1_740_873_510_000


def _pub(ts: int, topic: str, msg_id: str, success: bool = True) -> PubRecord:
    return PubRecord(ts, "DefaultRegion", "P", topic, msg_id, "TagA", "k", HOST, 100, 2, 0, "", success)


def _before(ts: int, group: str, rid: str, msg_id: str, retry: int = 0) -> SubBeforeRecord:
    return SubBeforeRecord(ts, "DefaultRegion", group, rid, msg_id, retry, "k")


def _after(ts: int, group: str, rid: str, msg_id: str, success: bool) -> SubAfterRecord:
    return SubAfterRecord(rid, msg_id, 3, success, "k", 0, ts, group)


def _row(i: int, origin: str, records: list[TraceRecord]) -> dict[str, Any]:
    return {"topic": TRACE_TOPIC, "queue_id": 0, "queue_offset": i, "commitlog_offset": 1000 * i,
            "store_timestamp": None, "born_timestamp": None, "keys": None, "tags": origin, "properties": None,
            "body": encode(records).encode("utf-8")}


ROWS = [
    _row(0, "T", [_pub(T0, "T", "M1"), _pub(T0 + 1, "T", "M2"), _pub(T0 + 2, "T", "M3"), _pub(T0 + 3, "T", "M5")]),
    # M1: G fails once; the broker moves it to %DLQ%G (written twice), and once more later
    _row(1, "T", [_before(T0 + 100, "G", "r1", "M1"), _after(T0 + 110, "G", "r1", "M1", False)]),
    _row(2, DLQ_PREFIX + "G", [_pub(T0 + 1500, DLQ_PREFIX + "G", "M1")]),
    _row(3, DLQ_PREFIX + "G", [_pub(T0 + 1500, DLQ_PREFIX + "G", "M1"), _pub(T0 + 1600, DLQ_PREFIX + "G", "M1")]),
    # M2: a DLQ Pub of a group H that never had it delivered; M3: a DLQ Pub that failed (not moved)
    _row(4, DLQ_PREFIX + "H", [_pub(T0 + 900, DLQ_PREFIX + "H", "M2"), _pub(T0 + 950, DLQ_PREFIX + "G", "M3",
                                                                           success=False)]),
    # M1 read from %DLQ%G by G-audit: a delivery of G-audit and the DLQ move of G (earlier than the Pub)
    _row(5, DLQ_PREFIX + "G", [_before(T0 + 1400, "G-audit", "r9", "M1"), _after(T0 + 1405, "G-audit", "r9", "M1",
                                                                               True)]),
    # M5: a SubBefore without SubAfter (r5a, written twice) and a SubAfter without SubBefore (r5b)
    _row(6, "T", [_before(T0 + 200, "G", "r5a", "M5", 1), _after(T0 + 300, "G", "r5b", "M5", True)]),
    _row(7, "T", [_before(T0 + 200, "G", "r5a", "M5", 1)]),
]


def test_consumers_match_the_reference_on_dlq_pubs_and_unpaired_subs(spark) -> None:  # type: ignore[no-untyped-def]
    model = Model(spark, spark.createDataFrame(ROWS, ROW_SCHEMA), bucket=None)
    try:
        got = {(r["msg_id"], r["grp"]): r.asDict() for r in model.consumers.collect()}
    finally:
        model.unpersist()
    expected = Reference.from_rows(ROWS).consumers()
    assert set(got) == set(expected) == {("M1", "G"), ("M1", "G-audit"), ("M2", "H"), ("M5", "G")}
    for key, exp in expected.items():
        row = got[key]
        actual = {"first_delivery_ts": row["first_delivery_ts"], "first_ack_ts": row["first_ack_ts"],
                  "deliveries": row["deliveries"], "max_retry_times": row["max_retry_times"],
                  "failures": row["failures"], "dlq": row["dlq"], "dlq_ts": row["dlq_ts"]}
        assert actual == {k: v for k, v in exp.items() if k != "group"}, key
    # the counted ground truth, independent of both implementations
    assert (got["M1", "G"]["dlq_ts"], got["M1", "G"]["failures"]) == (T0 + 1400, 1)
    assert (got["M2", "H"]["deliveries"], got["M2", "H"]["dlq_ts"]) == (0, T0 + 900)
    assert (got["M5", "G"]["deliveries"], got["M5", "G"]["first_ack_ts"]) == (2, T0 + 300)
