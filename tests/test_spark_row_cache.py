"""The cached tables' serializer (spark/jvm RowCacheSerializer): what a cache gives back is what the plan computes.

The ground truth is the same DataFrame computed without a cache: every column type the jobs cache
(strings, longs, ints, booleans, timestamps, arrays of structs, nulls everywhere) and more, batches
that end mid-partition, the columns read back in another order or only some of them, filters over the
cache, and both storage levels the model may use.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pytest
from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rocketscope.spark.session import ROW_CACHE_SERIALIZER, decoder_jar

pytestmark = [
    pytest.mark.e2e,  # uses the session's SparkSession (tests/process_guard.py)
    pytest.mark.skipif(decoder_jar() is None, reason="needs the spark/jvm jar that `make` builds"),
]

SCHEMA = StructType([
    StructField("msg_key", LongType()),
    StructField("msg_id", StringType()),
    StructField("n", IntegerType()),
    StructField("ok", BooleanType()),
    StructField("ts", TimestampType()),
    StructField("x", DoubleType()),
    StructField("amount", DecimalType(38, 6)),  # a decimal too wide for a long: variable-length in a row
    StructField("raw", BinaryType()),
    StructField("acks", ArrayType(StructType([StructField("replica", StringType()), StructField("ts", LongType())]))),
    StructField("props", MapType(StringType(), StringType())),
])


def _rows(count: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    base = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)

    def maybe(value: object) -> object:
        return None if rng.random() < 0.1 else value

    rows = []
    for i in range(count):
        text = "".join(rng.choice("0123456789ABCDEFé€") for _ in range(rng.randrange(0, 120)))
        acks = [(f"n{k}", rng.randrange(-5, 1 << 40)) for k in range(rng.randrange(0, 4))]
        rows.append((
            maybe(rng.randrange(-(1 << 63), 1 << 63)),
            maybe(f"{i:08X}{text}"),
            maybe(rng.randrange(-(1 << 31), 1 << 31)),
            maybe(rng.random() < 0.5),
            maybe(base + dt.timedelta(microseconds=rng.randrange(0, 10**12))),
            maybe(rng.uniform(-1e9, 1e9)),
            maybe(Decimal(rng.randrange(-10**30, 10**30)).scaleb(-6)),
            maybe(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))),
            maybe(acks),
            maybe({f"k{k}": maybe(text[:k]) for k in range(rng.randrange(0, 3))}),
        ))
    return rows


def _serializer_of(spark, df) -> str:  # type: ignore[no-untyped-def]
    """The class of the serializer that holds ``df``'s cache, asked of Spark's cache manager."""
    cached = spark._jsparkSession.sharedState().cacheManager().lookupCachedData(df._jdf)
    assert cached.isDefined(), "the DataFrame is not cached"
    return cached.get().cachedRepresentation().cacheBuilder().serializer().getClass().getName()


@pytest.mark.parametrize("level", ["DISK_ONLY", "MEMORY_ONLY"])
def test_a_cached_table_reads_back_as_computed(spark, level: str) -> None:  # type: ignore[no-untyped-def]
    # ~4,000 rows of up to ~500 bytes in 3 partitions (one batch each; several batches: the test below)
    data = spark.createDataFrame(_rows(4000, 7), SCHEMA).repartition(3, "msg_key")
    expected = sorted(data.collect(), key=repr)
    cached = data.persist(getattr(StorageLevel, level))
    try:
        assert cached.count() == 4000
        assert _serializer_of(spark, cached) == ROW_CACHE_SERIALIZER
        assert sorted(cached.collect(), key=repr) == expected
        # some columns, in another order: the read path projects the cached rows
        some = cached.select("acks", "msg_id", "ts")
        assert "InMemoryTableScan" in some._jdf.queryExecution().executedPlan().toString()  # read from the cache
        assert sorted(some.collect(), key=repr) == sorted(data.select("acks", "msg_id", "ts").collect(), key=repr)
        # a filter over the cache (no batch is pruned: every row is tested by the plan)
        cond = F.col("ok") & (F.col("n") > 0)
        assert sorted(cached.where(cond).collect(), key=repr) == sorted(data.where(cond).collect(), key=repr)
        # an aggregate over it, as the jobs do
        agg = [F.count("*"), F.sum("n"), F.max("msg_id"), F.min("ts"), F.sum(F.size("acks"))]
        assert cached.groupBy("ok").agg(*agg).orderBy("ok").collect() == data.groupBy("ok").agg(*agg).orderBy(
            "ok").collect()
    finally:
        cached.unpersist()


def test_batches_end_at_their_byte_bound(spark) -> None:  # type: ignore[no-untyped-def]
    """A partition larger than a batch (4 MiB of rows) is several batches, and nothing is lost between them."""
    rows = spark.range(0, 30000, numPartitions=1).select(
        F.col("id"), F.repeat(F.lit("x"), 300).alias("pad"), (F.col("id") * 7).alias("seven"))
    cached = rows.persist(StorageLevel.DISK_ONLY)
    try:
        assert cached.count() == 30000
        batches = spark._jsparkSession.sharedState().cacheManager().lookupCachedData(cached._jdf).get() \
            .cachedRepresentation().cacheBuilder().cachedColumnBuffers().count()
        assert batches >= 3  # 30,000 rows of ~330 bytes: ~10 MB in one partition
        got = cached.agg(F.count("*"), F.sum("id"), F.sum("seven"), F.sum(F.length("pad"))).collect()[0]
        assert tuple(got) == (30000, sum(range(30000)), 7 * sum(range(30000)), 300 * 30000)
    finally:
        cached.unpersist()
