"""Small column helpers shared by the jobs."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

PERCENTILES = [0.5, 0.95, 0.99]
ACCURACY = 10_000


def ts(col: str | Column) -> Column:
    """Epoch milliseconds to a Spark timestamp (UTC instant)."""
    return F.timestamp_millis(F.col(col) if isinstance(col, str) else col)


def minute(col: str) -> Column:
    return F.date_trunc("minute", ts(col))


def utc_date(col: str | Column) -> Column:
    """The UTC calendar date of an epoch-ms column, whatever the session time zone."""
    c = F.col(col) if isinstance(col, str) else col
    return F.date_from_unix_date(F.floor(c / 86_400_000).cast("int"))


def latency_stats(value: str) -> list[Column]:
    """count, p50, p95, p99 (percentile_approx) and max of a latency column in ms."""
    pct = F.percentile_approx(value, PERCENTILES, ACCURACY)
    return [
        F.count(value).alias("samples"),
        pct[0].alias("p50_ms"),
        pct[1].alias("p95_ms"),
        pct[2].alias("p99_ms"),
        F.max(value).alias("max_ms"),
    ]
