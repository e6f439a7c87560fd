"""The row schema shared by every input: one row per message read from a broker topic.

The trace topic and ``RMQ_SYS_HA_EVENTS`` are ordinary topics, so one schema serves
both; the jobs tell them apart by ``topic``.  The columns are defined once here and
checked by the generator, the jobs and the tests; the live ``rocketscope`` data source
(PullMessage over each queue) produces the richer :data:`SOURCE_SCHEMA`, of which the
row schema is a projection.

Contract for trace messages: ``tags`` holds the *original* topic whose records the
trace message batches (Sub records do not carry their topic, and a delivery from
``%DLQ%<group>`` is how a dead-letter move shows up).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

MAX_RECONSUME_TIMES = 16
"""RocketMQ's default maxReconsumeTimes: a failed delivery with this retry count goes to the DLQ."""
QUORUM = "__quorum__"
"""Pseudo replica name under which commit (quorum) times appear next to real replicas."""

ROW_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("commitlog_offset", LongType(), False),
        StructField("store_timestamp", TimestampType(), True),
        StructField("born_timestamp", TimestampType(), True),
        StructField("keys", StringType(), True),
        StructField("tags", StringType(), True),
        StructField("properties", MapType(StringType(), StringType(), True), True),
        StructField("body", BinaryType(), True),
    ]
)

SOURCE_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("broker", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("commitlog_offset", LongType(), False),
        StructField("store_timestamp", TimestampType(), True),
        StructField("born_timestamp", TimestampType(), True),
        StructField("keys", ArrayType(StringType(), False), True),
        StructField("tags", StringType(), True),
        StructField("properties", MapType(StringType(), StringType(), True), True),
        StructField("body", BinaryType(), True),
        StructField("msg_id", StringType(), True),
    ]
)
"""The columns of the ``rocketscope`` data source: one row per message of a queue.

A general-purpose RocketMQ reader, so it keeps what a topic's consumer would want
(``broker`` names the broker group of the queue, ``keys`` stays a list, ``msg_id`` is
the client's UNIQ_KEY and ``properties`` are the user properties only).  The jobs read
:data:`ROW_SCHEMA`, a projection of it (``rocketscope.spark.datasource.as_rows``), so
live topics and Parquet files feed them identically.
"""

ROW_ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), False),
        pa.field("queue_id", pa.int32(), False),
        pa.field("queue_offset", pa.int64(), False),
        pa.field("commitlog_offset", pa.int64(), False),
        pa.field("store_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("born_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("keys", pa.string()),
        pa.field("tags", pa.string()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("body", pa.binary()),
    ]
)

RECORD_SCHEMA = StructType(
    [
        StructField("rec_type", StringType(), False),
        StructField("ts", LongType(), True),
        StructField("grp", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("msg_id", StringType(), True),
        StructField("keys", StringType(), True),
        StructField("store_host", StringType(), True),
        StructField("cost_time", IntegerType(), True),
        StructField("success", BooleanType(), True),
        StructField("phys_offset", LongType(), True),
        StructField("request_id", StringType(), True),
        StructField("retry_times", IntegerType(), True),
        StructField("origin_topic", StringType(), True),
    ]
)
"""One decoded trace record, flattened over the record types the jobs use.

``ts`` is the record timestamp in epoch ms (SubAfter: its end timestamp, 0 when the
writer left it out); ``phys_offset`` comes from the Pub's offsetMsgId; ``origin_topic``
is the trace message's ``tags`` (the topic the records are about).
"""

EVENT_JSON_SCHEMA = StructType(
    [
        StructField("type", StringType(), True),
        StructField("cluster", StringType(), True),
        StructField("group", StringType(), True),
        StructField("node", StringType(), True),
        StructField("ts", LongType(), True),
        StructField("address", StringType(), True),
        StructField("term", LongType(), True),
        StructField("epoch", LongType(), True),
        StructField("replica", StringType(), True),
        StructField("offset", LongType(), True),
        StructField("from_offset", LongType(), True),
        StructField("to_offset", LongType(), True),
        StructField("role", StringType(), True),
        StructField("leader", StringType(), True),
        StructField("steps", ArrayType(ArrayType(LongType(), True), True), True),
    ]
)
"""The JSON fields of ``rocketscope.ha_events.HaEvent`` the jobs read (``members`` is not needed;
``steps``: the [offset, ts] advances a throttled event folds in, see ``HaEvent.expand``)."""

DATE_TYPE = DateType()
