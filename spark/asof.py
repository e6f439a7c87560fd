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
  broker group does not become one task.  The join is a shuffled *hash* join built on
  the interval side: a sort-merge join sorts every message row by the keys, and the
  keys start with a string (the broker group) whose 8-byte sort prefix is the same for
  nearly every row, so Spark's prefix sort falls back to full row comparisons: at 10M
  messages that sort was half the join's time (45 s sort-merge, 20 s hash).
* ``window``: messages and acks are unioned and a running ``min`` over the partition
  (keys) ordered by offset descending gives each message its answer.  No join at all,
  but each key (broker group, generation, replica) is one sorted window partition.
  For the same prefix reason the window is partitioned by a dense ``long`` id of the
  keys (a tiny broadcast table of the acks' distinct keys), not by the strings
  (38 s -> 28 s at 10M).

Neither uses a cross join, and nothing but one number (the bucket width, when chosen
automatically) and the small table of distinct keys reaches the driver; :func:`asof_members`
collects one row per key (its ack count, offset span and members: :class:`AckShape`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, StructField, StructType

MIN_BUCKET = 256
BROADCAST_ACKS = 1_000_000
"""Up to this many distinct acks, :func:`asof_interval` broadcasts the intervals (``broadcast_limit``).

A broadcast hash join leaves the message rows where they are: the replication rows stay in the
copies' partitioning by message, so the per-copy aggregate of :attr:`Model.copies` needs no shuffle
either (a shuffled join moved every (copy, replica) row twice: to the keys and buckets, and back by
message).  1M messages have ~200k acks (a few MB of intervals); the limit keeps the broadcast table
near 100 MB in the driver, and above it the join shuffles as before."""


def choose_bucket(acks: DataFrame, keys: list[str]) -> int:
    """A power of two at or above the mean ack interval, so an interval spans about one bucket.

    Too wide a bucket makes each (key, bucket) pair a little cartesian product of
    messages and intervals; too narrow explodes long intervals into many rows.  The mean
    interval of a key is its offset span over its ack count: one aggregate, no sort (a
    median over a window cost 3-4 s at 10M messages); the median over keys is taken.
    ``acks`` holds one row per (keys, offset).
    """
    per_key = acks.groupBy(*keys).agg(
        (F.max("offset") - F.min("offset")).alias("span"), (F.count(F.lit(1)) - 1).alias("gaps"))
    widths = per_key.where(F.col("gaps") > 0).select((F.col("span") / F.col("gaps")).alias("w"))
    row = widths.where(F.col("w") > 0).agg(F.percentile_approx("w", 0.5, 1000).alias("m")).first()
    return bucket_above(int(row["m"]) if row and row["m"] else MIN_BUCKET)


def bucket_above(median: float) -> int:
    """The smallest power of two at or above ``median`` (and at least :data:`MIN_BUCKET`)."""
    bucket = MIN_BUCKET
    while bucket < median:
        bucket *= 2
    return bucket


@dataclass(frozen=True)
class AckShape:
    """What :func:`asof_members` needs to know of its acks before it plans the join, from one small job.

    ``names`` maps each key (a tuple of the key columns' values) to its members, sorted: member ``i``
    of a key is its slot ``i + 1``.  Until session 24 each of these (the bucket, the ack count, the
    widest key, the slots) was its own query over the acks, each re-aggregating them from the cached
    events: 13 small Spark jobs at 1M messages, ~2.2 s of a warm run's wall time with a core mostly
    idle (docs/ANALYTICS.md, "Session 24").  The result is a few hundred rows (groups x generations x
    members), so it comes to the driver and goes back as two tiny broadcast tables.
    """

    acks: int
    width: int
    bucket: int
    names: dict[tuple[Any, ...], list[Any]]


def ack_shape(acks: DataFrame, keys: list[str], member: str, bucket: int | None = None) -> AckShape:
    """The shape of ``acks`` (one row per (keys, member, offset)) for :func:`asof_members`: one Spark job.

    The bucket is :func:`choose_bucket`'s rule (a power of two at or above the median over keys of
    their mean ack interval), with the exact lower median of the few per-key means instead of an
    approximate one; the bucket only places rows, so any width gives the same answers.
    """
    rows = acks.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("__n"),
        F.count_distinct("offset").alias("__offsets"),
        (F.max("offset") - F.min("offset")).alias("__span"),
        F.array_sort(F.collect_set(member)).alias("__names"),
    ).collect()
    names = {tuple(r[k] for k in keys): list(r["__names"]) for r in rows}
    if bucket is None:
        means = sorted(r["__span"] / (r["__offsets"] - 1) for r in rows if r["__offsets"] > 1 and r["__span"] > 0)
        bucket = bucket_above(means[(len(means) - 1) // 2] if means else MIN_BUCKET)
    return AckShape(acks=sum(r["__n"] for r in rows), width=max((len(n) for n in names.values()), default=0),
                    bucket=bucket, names=names)


def asof_interval(
    left: DataFrame, acks: DataFrame, keys: list[str], offset_col: str, out_col: str, bucket: int | None = None,
    broadcast_limit: int | None = None,
) -> DataFrame:
    """``left`` with ``out_col``: min ack ``ts`` over acks with equal keys and ``offset > left.offset_col``.

    ``acks`` has ``keys``, ``offset`` and ``ts``.  With ``broadcast_limit``, the intervals are
    broadcast when there are at most that many distinct acks (one small count), so ``left``'s rows
    are not shuffled and keep their partitioning (:data:`BROADCAST_ACKS`); else, and without it, the
    join is a shuffled hash join built on the intervals.
    """
    acks = acks.groupBy(*keys, "offset").agg(F.min("ts").alias("ts"))
    if bucket is None:
        bucket = choose_bucket(acks, keys)
    broadcast = broadcast_limit is not None and acks.count() <= broadcast_limit
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
    # null-safe on the keys, as the join below is
    floors = floors.select(*[F.col(k).alias(f"__f_{k}") for k in keys], "floor")
    intervals = (
        intervals.join(floors, on=[F.col(k).eqNullSafe(F.col(f"__f_{k}")) for k in keys], how="left")
        .withColumn("lo", F.coalesce("lo", F.least("floor", "hi")))
        .where(F.col("lo") < F.col("hi"))
        .withColumn(
            "bucket",
            F.explode(F.sequence(F.floor(F.col("lo") / bucket), F.floor((F.col("hi") - 1) / bucket))),
        )
        .select(*[F.col(k).alias(f"__i_{k}") for k in keys], "lo", "hi", "bucket", "asof_ts")
        # a hash join built on the intervals: no sort of the message rows (module docstring)
        .hint("broadcast" if broadcast else "shuffle_hash")
    )
    msgs = left.withColumn("__bucket", F.floor(F.col(offset_col) / bucket))
    cond = [F.col(k).eqNullSafe(F.col(f"__i_{k}")) for k in keys] + [
        F.col("__bucket") == F.col("bucket"),
        F.col("lo") <= F.col(offset_col),
        F.col(offset_col) < F.col("hi"),
    ]
    return msgs.join(intervals, on=cond, how="left").select(*left.columns, F.col("asof_ts").alias(out_col))


def _null_safe(left_cols: list[str], right_prefix: str) -> list[Column]:
    return [F.col(k).eqNullSafe(F.col(f"{right_prefix}{k}")) for k in left_cols]


def asof_members(
    left: DataFrame, acks: DataFrame, keys: list[str], member: str, offset_col: str, out_col: str,
    bucket: int | None = None, broadcast_limit: int | None = None,
) -> DataFrame:
    """``left`` with ``out_col``: for every ``member`` that acked in the row's ``keys``, the min ack ``ts``
    of that member over its acks with ``offset > left.offset_col``, as one array per row.

    The array holds ``struct(member, ts)`` sorted by member, ``ts`` null for a member with no ack past
    the offset; it is null when the row's keys have no acks at all or its offset is null (a copy that
    was not stored).  The same answers as :func:`asof_interval` with ``member`` among the keys, one row
    per left row instead of one per (row, member): the model's join of every stored copy with every
    replica of its (broker group, generation) made 2.66M rows of 1M messages, each then aggregated back
    per copy (docs/ANALYTICS.md, "Session 21").

    How: the members' ack offsets together cut each key's offset line into intervals
    ``[previous offset, offset)``; in each, member ``i``'s answer is its suffix minimum at the upper
    bound (no offset of any member lies inside), taken by one running minimum per member slot over the
    acks of the key in descending offset (a key has a handful of members: replicas and the quorum).
    Equal offsets are peers of a range frame, so every row of one offset sees the same minima.  The
    intervals are then joined like :func:`asof_interval`'s: exploded into offset buckets, broadcast
    up to ``broadcast_limit`` distinct acks (the left rows keep their partitioning and order), else a
    shuffled hash join.  Rows above every offset of their key find no interval and get their key's
    members with null times (a second, tiny broadcast table: the member names per key).
    """
    acks = acks.groupBy(*keys, member, "offset").agg(F.min("ts").alias("ts"))
    shape = ack_shape(acks, keys, member, bucket)  # the one small job before the join (AckShape)
    bucket, width = shape.bucket, shape.width
    broadcast = broadcast_limit is not None and shape.acks <= broadcast_limit
    spark = acks.sparkSession
    key_fields = [acks.schema[k] for k in keys]
    member_type = acks.schema[member].dataType
    slots = spark.createDataFrame(
        [(*key, name, i + 1) for key, members in shape.names.items() for i, name in enumerate(members)],
        StructType([*[StructField(f"__s_{f.name}", f.dataType) for f in key_fields],
                    StructField("__s_m", member_type), StructField("__slot", IntegerType())]))
    names = spark.createDataFrame(
        [(*key, members) for key, members in shape.names.items()],
        StructType([*[StructField(f"__n_{f.name}", f.dataType) for f in key_fields],
                    StructField("__names", ArrayType(member_type))]))
    slotted = acks.join(
        F.broadcast(slots), on=[*_null_safe(keys, "__s_"), F.col(member) == F.col("__s_m")], how="inner",
    )
    desc = Window.partitionBy(*keys).orderBy(F.col("offset").desc())
    upto = desc.rangeBetween(Window.unboundedPreceding, Window.currentRow)
    minima = [F.min(F.when(F.col("__slot") == i, F.col("ts"))).over(upto).alias(f"__t{i}") for i in
              range(1, width + 1)]
    per_offset = slotted.select(*keys, "offset", *minima).dropDuplicates([*keys, "offset"])
    intervals = per_offset.select(
        *keys, F.col("offset").alias("hi"), F.lead("offset").over(desc).alias("lo"),
        F.array(*[F.col(f"__t{i}") for i in range(1, width + 1)]).alias("__times"),
    )
    floors = left.groupBy(*keys).agg(F.min(offset_col).alias("floor")).select(
        *[F.col(k).alias(f"__f_{k}") for k in keys], "floor")
    intervals = (
        intervals.join(floors, on=_null_safe(keys, "__f_"), how="left")
        .withColumn("lo", F.coalesce("lo", F.least("floor", "hi")))
        .where(F.col("lo") < F.col("hi"))
        .join(F.broadcast(names), on=_null_safe(keys, "__n_"), how="inner")
        .withColumn("bucket",
                    F.explode(F.sequence(F.floor(F.col("lo") / bucket), F.floor((F.col("hi") - 1) / bucket))))
        .select(*[F.col(k).alias(f"__i_{k}") for k in keys], "lo", "hi", "bucket",
                # slot i of a key is its i-th member by name, as in __names
                F.transform("__names", lambda n, i: F.struct(n.alias(member), F.get(F.col("__times"), i).alias("ts")))
                .alias("__asof"))
        .hint("broadcast" if broadcast else "shuffle_hash")
    )
    msgs = left.withColumn("__bucket", F.floor(F.col(offset_col) / bucket)).join(
        F.broadcast(names), on=_null_safe(keys, "__n_"), how="left")
    cond = [*_null_safe(keys, "__i_"), F.col("__bucket") == F.col("bucket"),
            F.col("lo") <= F.col(offset_col), F.col(offset_col) < F.col("hi")]
    unacked = F.transform("__names", lambda n: F.struct(n.alias(member), F.lit(None).cast("long").alias("ts")))
    answer = F.when(F.col(offset_col).isNotNull(), F.coalesce(F.col("__asof"), unacked))
    return msgs.join(intervals, on=cond, how="left").select(*left.columns, answer.alias(out_col))


def key_ids(acks: DataFrame, keys: list[str]) -> DataFrame:
    """The acks' distinct keys numbered 1..n as ``__kid`` (a small table: groups x generations x replicas)."""
    return acks.select(*keys).distinct().withColumn(
        "__kid", F.row_number().over(Window.orderBy(*keys)).cast("long"))


def with_key_id(df: DataFrame, ids: DataFrame, keys: list[str]) -> DataFrame:
    """``df`` with the ``__kid`` of its keys (null: a key without acks), by a broadcast hash join."""
    ids = F.broadcast(ids)
    cond = [df[k].eqNullSafe(ids[k]) for k in keys]
    return df.join(ids, on=cond, how="left").select(df["*"], ids["__kid"])


def asof_window(left: DataFrame, acks: DataFrame, keys: list[str], offset_col: str, out_col: str) -> DataFrame:
    """Same result as :func:`asof_interval`, by union and a running minimum (see the module docstring)."""
    ids = key_ids(acks, keys)
    # Flat columns, not one struct: the rows are shuffled and sorted, and a struct costs
    # a nested copy each time.
    lhs = with_key_id(left, ids, keys).select(
        "__kid", F.col(offset_col).alias("__off"), F.lit(1).alias("__kind"),
        F.lit(None).cast("long").alias("__ts"), *[F.col(c).alias(f"__l_{c}") for c in left.columns])
    r = with_key_id(acks, ids, keys).select(
        "__kid", F.col("offset").alias("__off"), F.lit(0).alias("__kind"), F.col("ts").alias("__ts"),
        *[F.lit(None).cast(left.schema[c].dataType).alias(f"__l_{c}") for c in left.columns])
    # Descending offset; at equal offsets the message comes first, so an ack of exactly
    # its offset (which does not hold it) is not in its frame.  Messages of a key without
    # acks share the null __kid partition, where no ack is: their answer is null.
    w = (
        Window.partitionBy("__kid")
        .orderBy(F.col("__off").desc(), F.col("__kind").desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    both = lhs.unionByName(r).withColumn("__asof", F.min("__ts").over(w))
    return both.where(F.col("__kind") == 1).select(
        *[F.col(f"__l_{c}").alias(c) for c in left.columns], F.col("__asof").alias(out_col))


def asof_join(left: DataFrame, acks: DataFrame, keys: list[str], offset_col: str, out_col: str,
              method: str = "interval", bucket: int | None = None, broadcast_limit: int | None = None) -> DataFrame:
    if method == "interval":
        return asof_interval(left, acks, keys, offset_col, out_col, bucket, broadcast_limit)
    if method == "window":
        return asof_window(left, acks, keys, offset_col, out_col)
    raise ValueError(f"as-of join method must be 'interval' or 'window', got {method!r}")
