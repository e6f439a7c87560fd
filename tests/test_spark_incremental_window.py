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
