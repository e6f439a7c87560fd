"""replication_latency: per topic, broker group, replica and minute, how long replication took.

Latency of a stored copy to a replica = the replica's first recorded ack past the copy's
offset minus the copy's born time, the Pub record's timestamp.  For broker-side records both
are the leader's own clock readings in ms (receive of the send, arrival of the replica's ack):
the interval tests/test_truth_trace_latency.py checks against an injected follower delay.
For an instrumented client's record born is the client's send start.  Never the message's
born timestamp (whole seconds from the official Python client: a 0-999 ms artifact).
The replica ``__quorum__`` is the commit
(quorum) time.  Every stored copy counts in ``messages``, only acked ones in ``samples``
and the percentiles, so never-replicated (truncated) copies show as the difference.
Minute and date are of the born time.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rocketscope.spark.jobs.common import grouped_for_percentiles, latency_stats, minute, utc_date
from rocketscope.spark.model import Model


def build(model: Model) -> DataFrame:
    keys = ["date", "minute", "topic", "broker_group", "replica"]
    rep = model.replication.select(
        utc_date("born_ts").alias("date"),
        minute("born_ts").alias("minute"),
        "topic",
        "broker_group",
        "replica",
        (F.col("ack_ts") - F.col("born_ts")).alias("latency_ms"),
    )
    return grouped_for_percentiles(rep, keys, model.partitions).groupBy(*keys).agg(
        F.count(F.lit(1)).alias("messages"), *latency_stats("latency_ms"))
