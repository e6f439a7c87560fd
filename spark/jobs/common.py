"""Small column helpers shared by the jobs."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
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


def grouped_for_percentiles(df: DataFrame, keys: list[str], partitions: int) -> DataFrame:
    """``df`` hash-partitioned by the keys of a ``percentile_approx`` aggregate, ready for its ``groupBy(*keys)``.

    The rows come in message order, so without this every task builds a digest for every key it sees (every
    minute, topic, group and replica of the run) and the final aggregate merges tasks x keys digests: at 1M
    messages 8 x 296 for replication_latency, at 10M 66 x 2,696 (~178k).  The job took 77.0 s at 10M in
    session 22's quiet run (126.1 s in a loaded one) against 2.9 s at 1M; e2e_latency 24.8 s (839 keys).
    Shuffled by the keys first, each key's rows meet in one task: one digest per key, and the aggregate
    needs no exchange of its own; the price is one shuffle of the few, narrow rows.  With it, at 10M:
    19.6 s and 13.7 s (docs/ANALYTICS.md, "Session 23").
    """
    return df.repartition(partitions, *keys)
