"""The jobs' tables keep every timestamp's instant, for every reader (spark/session.py ``TABLE_CONF``).

Ground truth: instants made here, with microseconds and on both sides of a UTC midnight (a date
partition boundary).  They are written through the jobs' own writers (``write_table``; an
incremental run's dynamic overwrite of one more partition) and read back by Spark, DuckDB and
pandas, the three readers of these tables in this repository (the jobs and tests, the benchmark's
comparison, the dashboards).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

from rocketscope.spark.output import write_table
from rocketscope.spark.session import TABLE_CONF

pytestmark = pytest.mark.e2e  # a local SparkSession (a JVM)

UTC = dt.UTC
INSTANTS = [
    ("2025-03-01", dt.datetime(2025, 3, 1, 23, 59, 59, 999_999, tzinfo=UTC)),
    ("2025-03-02", dt.datetime(2025, 3, 2, 0, 0, 0, 1, tzinfo=UTC)),
    ("2025-03-02", dt.datetime(2025, 3, 2, 0, 0, 0, 123_456, tzinfo=UTC)),
]
TIMESTAMP_CONF = "spark.sql.parquet.outputTimestampType"


def frame(spark: Any, rows: list[tuple[str, dt.datetime]]) -> Any:
    return spark.createDataFrame(rows, "date string, ts timestamp")


def files(table: Path) -> list[Path]:
    return sorted(table.glob("date=*/*.parquet"))


def read_all(table: Path) -> dict[str, list[dt.datetime]]:
    """The instants each reader sees, as aware UTC datetimes, in order."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    duck = [row[0] for row in con.execute(
        f"SELECT ts FROM read_parquet('{table}/**/*.parquet', hive_partitioning = true) ORDER BY ts").fetchall()]
    con.close()
    panda = pd.read_parquet(table)["ts"].sort_values()
    panda = panda.dt.tz_localize("UTC") if panda.dt.tz is None else panda.dt.tz_convert("UTC")
    return {"duckdb": [t if t.tzinfo else t.replace(tzinfo=UTC) for t in duck],
            "pandas": [t.to_pydatetime() for t in panda]}


def test_the_tests_session_writes_like_the_jobs_session(spark: Any) -> None:
    for key, value in TABLE_CONF.items():
        assert spark.conf.get(key) == value


def test_tables_hold_utc_instants_to_the_microsecond(spark: Any, tmp_path: Path) -> None:
    path = Path(write_table(frame(spark, INSTANTS), tmp_path, "t"))
    for f in files(path):
        ts_type = pq.read_schema(f).field("ts").type
        assert (ts_type.unit, ts_type.tz) == ("us", "UTC"), f"{f}: {ts_type}"  # not INT96 (ns, naive)
    expected = [t for _, t in INSTANTS]
    got = [r.ts.replace(tzinfo=UTC) for r in spark.read.parquet(str(path)).orderBy("ts").collect()]
    assert got == expected  # the session's time zone is UTC (conftest), so Spark hands back UTC wall times
    assert {str(r.date) for r in spark.read.parquet(str(path)).collect()} == {"2025-03-01", "2025-03-02"}
    for reader, instants in read_all(path).items():
        assert instants == expected, reader


def test_a_table_an_int96_writer_began_reads_back_whole(spark: Any, tmp_path: Path) -> None:
    """An older version wrote the first day in INT96; this one overwrites the second day only (as an
    incremental run replaces the slots it recomputes): every reader sees both days' instants."""
    before = spark.conf.get(TIMESTAMP_CONF)
    spark.conf.set(TIMESTAMP_CONF, "INT96")
    try:
        path = Path(write_table(frame(spark, INSTANTS), tmp_path, "t"))
    finally:
        spark.conf.set(TIMESTAMP_CONF, before)
    assert all(pq.read_schema(f).field("ts").type.unit == "ns" for f in files(path))  # pyarrow's view of INT96
    write_table(frame(spark, INSTANTS[1:]), tmp_path, "t")  # dynamic partition overwrite of 2025-03-02
    units = {f.parent.name: pq.read_schema(f).field("ts").type.unit for f in files(path)}
    assert units == {"date=2025-03-01": "ns", "date=2025-03-02": "us"}
    expected = [t for _, t in INSTANTS]
    got = [r.ts.replace(tzinfo=UTC) for r in spark.read.parquet(str(path)).orderBy("ts").collect()]
    assert got == expected
    for reader, instants in read_all(path).items():
        assert instants == expected, reader


def test_the_dashboards_reader_gets_aware_utc_times(spark: Any, tmp_path: Path) -> None:
    """dashboards/sources.py ``analytics_tables`` reads two tables with pandas: their times are now aware UTC
    values, as the dashboards' own fixtures are (INT96 gave naive ones)."""
    from rocketscope.dashboards import sources

    for name in ("replication_latency", "failover_impact"):
        write_table(frame(spark, INSTANTS), tmp_path, name)
    for df in sources.analytics_tables(str(tmp_path)):
        assert str(df["ts"].dt.tz) == "UTC"
        assert sorted(t.to_pydatetime() for t in df["ts"]) == [t for _, t in INSTANTS]
