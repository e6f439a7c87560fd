"""message_timeline: one row per msgId, the whole life of the message.

Born (first send attempt), stored (the effective copy: see :mod:`rocketscope.spark.model`),
its broker group, generation and offset, each replica's ack, the quorum commit, each
consumer group's first delivery, first ack, deliveries, retries and DLQ move, and the
failover flags (truncated copies, sent again, lost).  msgIds known only from Sub records
(their Pub was dropped) still get a row, with the producer side empty, dated by their
first delivery (else first ack).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rocketscope.spark.jobs.common import ts, utc_date
from rocketscope.spark.model import MSG_KEY, Model


def build(model: Model) -> DataFrame:
    """One aggregate of the consumers per msgId and one full outer join with the messages.

    Both inputs are partitioned by (msg_key, msg_id) (:meth:`Model.by_message`), so neither
    the aggregate nor the join shuffles; the replicas of the effective copy were already
    gathered per copy in :attr:`Model.copies`.
    """
    msgs = model.messages
    cons = model.consumers.groupBy(MSG_KEY, "msg_id").agg(
        F.array_sort(
            F.collect_list(
                F.struct(
                    F.col("grp").alias("group"),
                    ts("first_delivery_ts").alias("first_delivery_ts"),
                    ts("first_ack_ts").alias("first_ack_ts"),
                    "deliveries",
                    "max_retry_times",
                    "failures",
                    "dlq",
                    ts("dlq_ts").alias("dlq_ts"),
                )
            )
        ).alias("consumers"),
        F.min("first_delivery_ts").alias("__first_delivery"),
        F.min("first_ack_ts").alias("__first_ack"),
    )
    # a sort-merge join with no sort: both sides are in place and ordered by message
    out = msgs.join(cons, on=[MSG_KEY, "msg_id"], how="full_outer")
    return out.select(
        utc_date(F.coalesce("born_ts", "__first_delivery", "__first_ack")).alias("date"),
        "msg_id",
        "topic",
        "producer_group",
        "keys",
        ts("born_ts").alias("born_ts"),
        ts("stored_ts").alias("stored_ts"),
        "store_host",
        "broker_group",
        "ha_mode",
        "gen",
        "phys_offset",
        ts("committed_ts").alias("committed_ts"),
        F.coalesce("send_attempts", F.lit(0)).alias("send_attempts"),
        F.coalesce("failed_sends", F.lit(0)).alias("failed_sends"),
        F.coalesce("truncated_copies", F.lit(0)).alias("truncated_copies"),
        F.coalesce("resent", F.lit(False)).alias("resent"),
        F.coalesce("lost", F.lit(False)).alias("lost"),
        F.coalesce("replicas", F.array()).alias("replicas"),
        F.coalesce("consumers", F.array()).alias("consumers"),
    )
