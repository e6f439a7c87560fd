"""The shuffle partition count a run takes from its input's size (spark/partitions.py).

The shared test session sets its count itself (tests/conftest.py), so it is not marked automatic: a run keeps
it whatever the input.  A session that chose its count (``get_session``'s local default, checked in a fresh JVM
by tests/test_spark_splits_eventlog.py) gets one partition per ``bytes_per_partition`` of input, never fewer
than its own automatic count (and back to it for a smaller input).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rocketscope.spark.partitions import (
    AUTO_PARTITIONS_KEY,
    BASE_PARTITIONS_KEY,
    local_input_bytes,
    scale_shuffle_partitions,
)

pytestmark = pytest.mark.e2e


@pytest.fixture()
def files(tmp_path: Path) -> Path:
    for i in range(3):
        pq.write_table(pa.table({"n": list(range(i * 1000, (i + 1) * 1000))}), tmp_path / f"part-{i}.parquet")
    return tmp_path


@pytest.fixture()
def auto_session(spark) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """The shared session marked automatic for one test, its count restored after."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set(AUTO_PARTITIONS_KEY, "true")
    try:
        yield spark
    finally:
        spark.conf.unset(AUTO_PARTITIONS_KEY)
        spark.conf.unset(BASE_PARTITIONS_KEY)
        spark.conf.set("spark.sql.shuffle.partitions", before)


def test_the_input_size_is_the_files_on_disk(spark, files: Path) -> None:  # type: ignore[no-untyped-def]
    on_disk = sum(p.stat().st_size for p in files.glob("*.parquet"))
    assert local_input_bytes(spark.read.parquet(str(files))) == on_disk
    assert local_input_bytes(spark.range(10)) is None  # not a file scan: no size, nothing scaled


def test_an_automatic_count_follows_the_input_and_never_drops_below_its_own(auto_session, files: Path) -> None:  # type: ignore[no-untyped-def]
    spark = auto_session
    rows = spark.read.parquet(str(files))
    on_disk = sum(p.stat().st_size for p in files.glob("*.parquet"))
    start = int(spark.conf.get("spark.sql.shuffle.partitions"))
    per = max(1, on_disk // (start + 5))  # small enough to ask for more partitions than the session has
    assert scale_shuffle_partitions(spark, rows, bytes_per_partition=per) == math.ceil(on_disk / per)
    assert int(spark.conf.get("spark.sql.shuffle.partitions")) == math.ceil(on_disk / per) > start
    # a later, smaller run (a long-lived session) goes back to the session's own count, not below it
    assert scale_shuffle_partitions(spark, rows, bytes_per_partition=on_disk * 10) == start
    assert int(spark.conf.get("spark.sql.shuffle.partitions")) == start


def test_a_count_the_user_set_is_kept(spark, files: Path) -> None:  # type: ignore[no-untyped-def]
    before = spark.conf.get("spark.sql.shuffle.partitions")
    assert scale_shuffle_partitions(spark, spark.read.parquet(str(files)), bytes_per_partition=1) == int(before)
    assert spark.conf.get("spark.sql.shuffle.partitions") == before
