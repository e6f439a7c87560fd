"""The as-of join: each message to the first acknowledgement past its commit-log offset.

Semantics: for a left row (keys, offset ``p``) the result is the earliest ``ts`` among
right rows with the same keys and ``offset > p`` (end-exclusive ack offsets on record
boundaries: an ack of ``o`` holds every record that starts below ``o``).  Taking the
earliest time over *all* larger offsets, not the time of the next larger offset,
keeps the answer right when events arrive out of order or a replica's acks are not
monotonic in time.

Two implementations, chosen by name (docs/ANALYTICS.md compares them):

* ``interval`` (default): the acks (few) are turned into disjoint offset intervals
  ``[previous ack offset, ack offset)`` carrying the suffix-minimum time; intervals are
  exploded into fixed-size offset buckets and the messages (many) are equi-joined on
  (keys, bucket) with a range filter.  Work is spread over all buckets, so one busy
  broker group does not become one task.
* ``window``: messages and acks are unioned and a running ``min`` over the partition
  (keys) ordered by offset descending gives each message its answer.  No join at all,
  but each key (broker group, generation, replica) is one sorted window partition.

Neither uses a cross join, and nothing but one number (the bucket width, when chosen
automatically) reaches the driver.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

MIN_BUCKET = 256


def choose_bucket(acks: DataFrame, keys: list[str]) -> int:
    """A bucket width near the median ack interval, so an interval spans about one bucket.

    Too wide a bucket makes each (key, bucket) pair a little cartesian product of
    messages and intervals; too narrow explodes long intervals into many rows.
    """
    w = Window.partitionBy(*keys).orderBy("offset")
    widths = acks.select(*keys, "offset").distinct().withColumn("w", F.col("offset") - F.lag("offset").over(w))
    row = widths.where(F.col("w") > 0).agg(F.percentile_approx("w", 0.5, 1000).alias("m")).first()
    median = int(row["m"]) if row and row["m"] else MIN_BUCKET
    bucket = MIN_BUCKET
    while bucket < median:
        bucket *= 2
    return bucket


def asof_interval(
    left: DataFrame, acks: DataFrame, keys: list[str], offset_col: str, out_col: str, bucket: int | None = None
) -> DataFrame:
    """``left`` with ``out_col``: min ack ``ts`` over acks with equal keys and ``offset > left.offset_col``.

    ``acks`` has ``keys``, ``offset`` and ``ts``.
    """
    acks = acks.groupBy(*keys, "offset").agg(F.min("ts").alias("ts"))
    if bucket is None:
        bucket = choose_bucket(acks, keys)
    desc = Window.partitionBy(*keys).orderBy(F.col("offset").desc())
    running = desc.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    intervals = acks.select(
        *keys,
        F.col("offset").alias("hi"),
        F.lead("offset").over(desc).alias("lo"),
        F.min("ts").over(running).alias("asof_ts"),
    )
    # The lowest interval starts at the lowest message offset of its key (not 0), so a
    # generation that starts deep in the commit log does not explode into empty buckets.
    floors = left.groupBy(*keys).agg(F.min(offset_col).alias("floor"))
    intervals = (
        intervals.join(floors, on=keys, how="left")
        .withColumn("lo", F.coalesce("lo", F.least("floor", "hi")))
        .where(F.col("lo") < F.col("hi"))
        .withColumn(
            "bucket",
            F.explode(F.sequence(F.floor(F.col("lo") / bucket), F.floor((F.col("hi") - 1) / bucket))),
        )
        .select(*[F.col(k).alias(f"__i_{k}") for k in keys], "lo", "hi", "bucket", "asof_ts")
    )
    msgs = left.withColumn("__bucket", F.floor(F.col(offset_col) / bucket))
    cond = [F.col(k).eqNullSafe(F.col(f"__i_{k}")) for k in keys] + [
        F.col("__bucket") == F.col("bucket"),
        F.col("lo") <= F.col(offset_col),
        F.col(offset_col) < F.col("hi"),
    ]
    return msgs.join(intervals, on=cond, how="left").select(*left.columns, F.col("asof_ts").alias(out_col))


def asof_window(left: DataFrame, acks: DataFrame, keys: list[str], offset_col: str, out_col: str) -> DataFrame:
    """Same result as :func:`asof_interval`, by union and a running minimum (see the module docstring)."""
    payload = F.struct(*[F.col(c) for c in left.columns]).alias("__row")
    lhs = left.select(*[F.col(k) for k in keys], F.col(offset_col).alias("__off"), F.lit(1).alias("__kind"),
                    F.lit(None).cast("long").alias("__ts"), payload)
    r = acks.select(*[F.col(k) for k in keys], F.col("offset").alias("__off"), F.lit(0).alias("__kind"),
                    F.col("ts").alias("__ts"), F.lit(None).cast(lhs.schema["__row"].dataType).alias("__row"))
    # Descending offset; at equal offsets the message comes first, so an ack of exactly
    # its offset (which does not hold it) is not in its frame.
    w = (
        Window.partitionBy(*keys)
        .orderBy(F.col("__off").desc(), F.col("__kind").desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    both = lhs.unionByName(r).withColumn("__asof", F.min("__ts").over(w))
    return both.where(F.col("__kind") == 1).select("__row.*", F.col("__asof").alias(out_col))


def asof_join(left: DataFrame, acks: DataFrame, keys: list[str], offset_col: str, out_col: str,
              method: str = "interval", bucket: int | None = None) -> DataFrame:
    if method == "interval":
        return asof_interval(left, acks, keys, offset_col, out_col, bucket)
    if method == "window":
        return asof_window(left, acks, keys, offset_col, out_col)
    raise ValueError(f"as-of join method must be 'interval' or 'window', got {method!r}")
