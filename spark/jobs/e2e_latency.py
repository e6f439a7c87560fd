"""e2e_latency: per topic, consumer group and minute, latency from born to first successful ack.

Born is the msgId's first send attempt; the ack is the group's first successful
SubAfter (retries included: a message acked on its third delivery counts with the time
of that delivery).  ``messages`` counts msgIds delivered to the group, ``samples`` the
acked ones; ``dlq`` those moved to the dead-letter queue.  Minute and date are of born.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rocketscope.spark.jobs.common import grouped_for_percentiles, latency_stats, minute, utc_date
from rocketscope.spark.model import MSG_KEY, Model


def build(model: Model) -> DataFrame:
    keys = ["date", "minute", "topic", "group"]
    msgs = model.messages.select(MSG_KEY, "msg_id", "topic", "born_ts")
    cons = model.consumers.join(msgs, on=[MSG_KEY, "msg_id"], how="inner").select(
        utc_date("born_ts").alias("date"),
        minute("born_ts").alias("minute"),
        "topic",
        F.col("grp").alias("group"),
        "dlq",
        (F.col("first_ack_ts") - F.col("born_ts")).alias("latency_ms"),
    )
    return grouped_for_percentiles(cons, keys, model.partitions).groupBy(*keys).agg(
        F.count(F.lit(1)).alias("messages"),
        F.count(F.when(F.col("dlq"), True)).alias("dlq"),
        *latency_stats("latency_ms"),
    )
