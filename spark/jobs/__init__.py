"""The analytics jobs, one module each; every job maps a :class:`~rocketscope.spark.model.Model` to one table.

Each output table has a ``date`` column (UTC) by which it is partitioned on disk.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame

from rocketscope.spark.jobs import e2e_latency, failover_impact, message_timeline, replication_latency
from rocketscope.spark.model import Model

JOBS: dict[str, Callable[[Model], DataFrame]] = {
    "message_timeline": message_timeline.build,
    "replication_latency": replication_latency.build,
    "failover_impact": failover_impact.build,
    "e2e_latency": e2e_latency.build,
}
