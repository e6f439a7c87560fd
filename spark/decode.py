"""Decoding of input rows: trace bodies into flat records, HA event bodies into columns.

Trace bodies are RocketMQ's text format.  The jobs decode them in compiled JVM code
(``--decoder jvm``, the default: spark/jvm/src/io/rocketscope/spark/TraceDecoder.java, a
``mapPartitions`` over the bodies' bytes, built by ``make`` into the jar that
rocketscope.spark.session puts on the class path).  Without the jar they fall back to Spark
SQL expressions (``--decoder sql``, :mod:`rocketscope.spark.sqldecode`), saying so in one
INFO line.  The Python codec through ``mapInArrow`` (``decode_trace_python``: one Arrow batch
in, one out, plain lists in between) is kept as the reference the tests compare both with,
and as ``--decoder python``.  HA events are JSON,
which Spark's own ``from_json`` parses in the JVM with no Python round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from rocketscope.ha_events import EVENT_TYPES
from rocketscope.names import HA_EVENTS_TOPIC
from rocketscope.spark.schema import EVENT_JSON_SCHEMA, RECORD_SCHEMA

log = logging.getLogger(__name__)

JVM_DECODER_CLASS = "io.rocketscope.spark.TraceDecoder"
DECODERS = ("jvm", "sql", "python")
DEFAULT_DECODER = "jvm"

_RECORD_ARROW = pa.schema(
    [
        pa.field("rec_type", pa.string(), False),
        pa.field("ts", pa.int64()),
        pa.field("grp", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("msg_id", pa.string()),
        pa.field("keys", pa.string()),
        pa.field("store_host", pa.string()),
        pa.field("cost_time", pa.int32()),
        pa.field("success", pa.bool_()),
        pa.field("phys_offset", pa.int64()),
        pa.field("request_id", pa.string()),
        pa.field("retry_times", pa.int32()),
        pa.field("origin_topic", pa.string()),
    ]
)


def decode_bodies(bodies: list[bytes | None], origins: list[str | None]) -> dict[str, list]:
    """Columns of the records in ``bodies``; bodies that are not trace data are skipped.

    Shared by the Spark decoder and the plain-Python reference, so that both read the
    bytes the same way; everything after decoding is computed independently.
    """
    from rocketscope.trace.codec import PubRecord, SubAfterRecord, SubBeforeRecord, TraceDecodeError, decode
    from rocketscope.trace.ids import parse_offset_msg_id

    cols: dict[str, list] = {name: [] for name in _RECORD_ARROW.names}
    rec_type, ts, grp, topic, msg_id = cols["rec_type"], cols["ts"], cols["grp"], cols["topic"], cols["msg_id"]
    keys, store_host, cost, success = cols["keys"], cols["store_host"], cols["cost_time"], cols["success"]
    phys, request_id, retry, origin = cols["phys_offset"], cols["request_id"], cols["retry_times"], cols["origin_topic"]
    offsets: dict[str, int | None] = {}
    for body, origin_topic in zip(bodies, origins, strict=True):
        if body is None:
            continue
        try:
            records = decode(body, skip_unknown=True)
        except TraceDecodeError:
            continue  # not trace data: nothing to analyse (the data source counts these)
        for r in records:
            # type(r) is, not isinstance: the records are final dataclasses and this loop is the hot one
            if type(r) is PubRecord:
                omid = r.offset_msg_id
                if omid in offsets:
                    p = offsets[omid]
                elif omid:
                    try:
                        p = parse_offset_msg_id(omid)[2]
                    except ValueError:
                        p = None
                    offsets[omid] = p
                else:
                    p = None
                rec_type.append("Pub")
                ts.append(r.timestamp)
                grp.append(r.group)
                topic.append(r.topic)
                store_host.append(r.store_host)
                cost.append(r.cost_time)
                success.append(r.success)
                phys.append(p)
                request_id.append(None)
                retry.append(None)
            elif type(r) is SubBeforeRecord:
                rec_type.append("SubBefore")
                ts.append(r.timestamp)
                grp.append(r.group)
                topic.append(None)
                store_host.append(None)
                cost.append(None)
                success.append(None)
                phys.append(None)
                request_id.append(r.request_id)
                retry.append(r.retry_times)
            elif type(r) is SubAfterRecord:
                rec_type.append("SubAfter")
                ts.append(r.timestamp or None)
                grp.append(r.group or None)
                topic.append(None)
                store_host.append(None)
                cost.append(r.cost_time)
                success.append(r.success)
                phys.append(None)
                request_id.append(r.request_id)
                retry.append(None)
            else:
                continue  # EndTransaction and Recall are not used by the jobs yet
            msg_id.append(r.msg_id)
            keys.append(r.keys)
            origin.append(origin_topic)
    return cols


def _decode_arrow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        cols = decode_bodies(batch.column("body").to_pylist(), batch.column("tags").to_pylist())
        yield pa.RecordBatch.from_pydict(cols, schema=_RECORD_ARROW)


def trace_rows(rows: DataFrame) -> DataFrame:
    """The rows that hold trace records (every topic but the HA events topic)."""
    return rows.where(F.col("topic") != HA_EVENTS_TOPIC)


def ha_rows(rows: DataFrame) -> DataFrame:
    return rows.where(F.col("topic") == HA_EVENTS_TOPIC)


def drop_exact_duplicates(df: DataFrame) -> DataFrame:
    """``df.dropDuplicates()`` (every distinct row once) without a hash aggregate over whole rows.

    ``dropDuplicates()`` over all columns plans a hash aggregate whose keys are the whole
    rows: at 10M messages its hash maps held millions of decoded records with all their
    strings, and in a 4 GB driver it failed with ``AGGREGATE_OUT_OF_MEMORY`` (the map
    spills to a sorter, then cannot get a page back while the other task and the cache
    hold the memory).  Here the rows are shuffled by a 64-bit hash of the whole row and
    sorted within each partition by (hash, every column) -- an external sort, which
    spills in pages and needs no memory per distinct row -- and a row is kept when no
    equal row precedes it.  The hash only orders and places rows: equal rows are still
    recognised on every column (nulls equal, as in ``dropDuplicates``), so a hash
    collision cannot merge two different rows.  ``lag`` instead of ``row_number() == 1``
    keeps Spark from adding a group limit with a second sort before the shuffle.
    """
    cols = df.columns
    key, prev = "__row_hash", "__prev_row"
    same_row = Window.partitionBy(key, *cols).orderBy(key)
    return (
        df.withColumn(key, F.xxhash64(*cols))
        .repartition(key)  # hash-partitioned on the hash: satisfies the window's distribution, no second shuffle
        .withColumn(prev, F.lag(F.lit(1)).over(same_row))
        .where(F.col(prev).isNull())
        .drop(key, prev)
    )


def decode_trace_python(rows: DataFrame) -> DataFrame:
    """Flat trace records (``RECORD_SCHEMA``) of the trace rows in ``rows``, by the Python codec in ``mapInArrow``.

    The reference for :func:`rocketscope.spark.sqldecode.decode_trace_sql`, which the jobs
    use (no Python worker); selectable with ``decoder="python"``.
    """
    return trace_rows(rows).select("body", "tags").mapInArrow(_decode_arrow, RECORD_SCHEMA)


def jvm_decoder_loaded(spark: SparkSession) -> bool:
    """Whether the session's JVM can load the decoder class (its jar was on the class path at start-up)."""
    from py4j.java_gateway import JavaClass

    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    target = jvm
    for part in JVM_DECODER_CLASS.split("."):
        target = getattr(target, part)
    return isinstance(target, JavaClass)


JAR_HINT = ("run make to build build/spark-jvm/rocketscope-spark.jar; under spark-submit pass it with --jars, "
            "since a driver JVM that is already running does not load spark.jars set by the session")
"""What a user does about a missing decoder: ``spark.jars`` set by :func:`rocketscope.spark.session.get_session`
reaches the driver's class path only when that session starts the JVM (local mode, a standalone master from
Python); spark-submit starts it first, so there the jar goes on its command line."""


def effective_decoder(spark: SparkSession, decoder: str = DEFAULT_DECODER) -> str:
    """The decoder :func:`decode_trace` really uses for ``decoder`` in this session: ``sql`` for ``jvm``
    when the jar is not on the driver's class path, else ``decoder`` itself."""
    return "sql" if decoder == "jvm" and not jvm_decoder_loaded(spark) else decoder


_fallback_logged: set[int] = set()


def decode_trace_jvm(rows: DataFrame) -> DataFrame:
    """Flat trace records (``RECORD_SCHEMA``) decoded by TraceDecoder.java; SQL when its jar is not loaded.

    Same rows as the other two decoders over the same input, in no particular order.
    """
    spark = rows.sparkSession
    if not jvm_decoder_loaded(spark):
        if id(spark) not in _fallback_logged:
            _fallback_logged.add(id(spark))
            log.info("the JVM trace decoder's jar is not on the class path (%s): decoding with Spark SQL", JAR_HINT)
        from rocketscope.spark.sqldecode import decode_trace_sql

        return decode_trace_sql(rows)
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    decoder = jvm
    for part in JVM_DECODER_CLASS.split("."):
        decoder = getattr(decoder, part)
    jdf = decoder.decode(trace_rows(rows).select("body", "tags")._jdf, RECORD_SCHEMA.json())
    return DataFrame(jdf, spark)


def decode_trace(rows: DataFrame, decoder: str = DEFAULT_DECODER) -> DataFrame:
    """Flat trace records (``RECORD_SCHEMA``) of the trace rows in ``rows``.

    ``jvm`` (default): compiled Java over the bodies' bytes (spark/jvm), SQL when its jar is
    missing; ``sql``: Spark SQL expressions (spark/sqldecode.py); ``python``: the Python codec
    through ``mapInArrow``.  All give the same rows.
    """
    if decoder == "jvm":
        return decode_trace_jvm(rows)
    if decoder == "sql":
        from rocketscope.spark.sqldecode import decode_trace_sql

        return decode_trace_sql(rows)
    if decoder == "python":
        return decode_trace_python(rows)
    raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {decoder!r}")


def generation(term: Column, epoch: Column) -> Column:
    """The leadership generation: the DLedger term, else the controller epoch, else -1 (master/slave)."""
    return F.when(term >= 0, term).when(epoch >= 0, epoch).otherwise(F.lit(-1)).cast("long")


def ha_mode(term: Column, epoch: Column) -> Column:
    return F.when(term >= 0, "dledger").when(epoch >= 0, "controller").otherwise("master_slave")


def decode_events(rows: DataFrame) -> DataFrame:
    """HA events with ``gen`` and ``mode`` added; bodies that are not valid events are dropped, duplicates too."""
    # The fields come out of a generator (``inline`` of a one-element array), not a projection: Spark
    # pushes the filter below a projection by substituting each field with its expression, so
    # ``from_json`` was copied into the filter once per field it tests (five parses per event row in the
    # executed plan; tests/test_spark_jobs.py ``test_each_ha_event_is_parsed_once``); nothing is pushed
    # below a generator's output.
    parsed = ha_rows(rows).select(F.inline(F.array(F.from_json(F.col("body").cast("string"), EVENT_JSON_SCHEMA))))
    term = F.coalesce(F.col("term"), F.lit(-1))
    epoch = F.coalesce(F.col("epoch"), F.lit(-1))
    # HaEvent.expand in one pass: a throttled event becomes one row per advance it folds in
    # (its steps, each with its own offset and time) plus itself, as the Python reference does
    own = F.struct(F.col("offset").alias("offset"), F.col("ts").alias("ts"))
    folded = F.transform(F.coalesce(F.col("steps"), F.array().cast("array<array<bigint>>")),
                         lambda s: F.struct(s[0].alias("offset"), s[1].alias("ts")))
    parsed = parsed.withColumn("advance", F.explode(F.concat(folded, F.array(own)))).withColumn(
        "offset", F.col("advance.offset")).withColumn("ts", F.col("advance.ts"))
    events = (
        parsed.where(
            F.col("type").isin(*EVENT_TYPES)
            & F.col("group").isNotNull()
            & F.col("node").isNotNull()
            & F.col("ts").isNotNull()
        )
        .select(
            "type",
            "group",
            "node",
            "ts",
            F.coalesce(F.col("address"), F.lit("")).alias("address"),
            generation(term, epoch).alias("gen"),
            ha_mode(term, epoch).alias("mode"),
            F.coalesce(F.col("replica"), F.lit("")).alias("replica"),
            F.coalesce(F.col("offset"), F.lit(-1)).alias("offset"),
            F.coalesce(F.col("from_offset"), F.lit(-1)).alias("from_offset"),
            F.coalesce(F.col("to_offset"), F.lit(-1)).alias("to_offset"),
            F.coalesce(F.col("role"), F.lit("")).alias("role"),
            F.coalesce(F.col("leader"), F.lit("")).alias("leader"),
        )
    )
    return drop_exact_duplicates(events)
