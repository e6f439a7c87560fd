"""An incremental run's window (spark/incremental.py ``window_rows``): its slots' rows, and only their files.

Kept out of tests/test_spark_incremental.py, whose whole-run tests are long: this one is quick and runs in
``make test``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
from pyspark.sql import functions as F

from rocketscope.spark.incremental import window_rows

pytestmark = pytest.mark.e2e  # uses the session's SparkSession (tests/process_guard.py)


def test_a_window_reads_the_files_of_its_slots_only(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The rows of the slots from N on, and only those slots' files as the DataFrame's input (what the
    shuffle partition count is sized by, spark/partitions.py), where a filter on the whole table lists all."""
    rows_dir = tmp_path / "rows"
    spark.range(0, 400).select(F.col("id"), (F.col("id") % 8).alias("slot")).write.partitionBy("slot").parquet(
        str(rows_dir))
    files_of = {slot: {p.resolve() for p in (rows_dir / f"slot={slot}").glob("*.parquet")} for slot in range(8)}

    window = window_rows(spark, rows_dir, 6)
    assert sorted(r["id"] for r in window.collect()) == [i for i in range(400) if i % 8 >= 6]
    assert {r["slot"] for r in window.select("slot").distinct().collect()} == {6, 7}
    inputs = {Path(urlparse(f).path).resolve() for f in window.inputFiles()}
    assert inputs == files_of[6] | files_of[7]
    whole = spark.read.parquet(str(rows_dir)).where(F.col("slot") >= 6)
    assert len(whole.inputFiles()) == sum(len(f) for f in files_of.values())  # why the window lists its own
    assert window_rows(spark, rows_dir, None).count() == 400
    assert window_rows(spark, rows_dir, 100).count() == 0  # past every slot: nothing, not an error


def test_messages_born_before_the_window_keep_their_earlier_row(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A msgId known in the window only from Sub records (consumed, no Pub) whose row is in an earlier slot (of
    the same day or an earlier one) is left out of the window's rows; one that is not, or has a Pub, stays."""
    from types import SimpleNamespace

    from rocketscope.spark.incremental import _without_earlier_messages
    from rocketscope.spark.model import MSG_KEY

    from_ms = 1_740_874_200_000  # 2025-03-02 00:10:00 UTC: the window starts at slot 10 of that day
    table = tmp_path / "message_timeline"
    earlier = [("A", "2025-03-02", 5), ("E", "2025-03-01", 1435), ("B", "2025-03-02", 10), ("C", "2025-03-01", 0)]
    spark.createDataFrame(earlier, "msg_id string, d string, slot int").select(
        "msg_id", F.col("d").cast("date").alias("date"), "slot").write.partitionBy("date", "slot").parquet(str(table))
    keyed = f"msg_id string, {MSG_KEY} long"
    model = SimpleNamespace(
        consumers=spark.createDataFrame([(m, i) for i, m in enumerate("ABCE")], keyed),  # consumed: A B C E
        messages=spark.createDataFrame([("C", 2), ("D", 3)], keyed))  # with a Pub: C D
    window = spark.createDataFrame([(m,) for m in "ABCDE"], "msg_id string")
    said: list[str] = []

    kept = _without_earlier_messages(spark, window, model, table, from_ms, 5 * 60_000, said.append)  # type: ignore[arg-type]
    # A and E: producer-less here and in an earlier slot. B: its row is in the window's own slot. C: has a Pub.
    assert sorted(r["msg_id"] for r in kept.collect()) == ["B", "C", "D"]
    assert len(said) == 1 and said[0].startswith("incremental: 2 message(s) born before the window")

    said.clear()
    alone = _without_earlier_messages(spark, window.where("msg_id != 'A' AND msg_id != 'E'"), SimpleNamespace(
        consumers=model.consumers.where("msg_id = 'B'"), messages=model.messages), table, from_ms, 5 * 60_000,
        said.append)  # type: ignore[arg-type]
    assert sorted(r["msg_id"] for r in alone.collect()) == ["B", "C", "D"] and said == []
    assert _without_earlier_messages(spark, window, model, tmp_path / "none", from_ms, 5 * 60_000,
                                     said.append) is window  # type: ignore[arg-type]  # no earlier table yet
