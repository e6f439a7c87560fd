"""How many shuffle partitions a run uses: enough that each holds a bounded share of the input.

The decoded records are shuffled once by message and every shared table keeps that partitioning
(:class:`rocketscope.spark.model.Model`), so a partition's size is what one task sorts, aggregates
and caches as one block.  A fixed count (twice the local cores: four on this machine) is right
for a day of a small cluster and wrong for ten million messages, where each of four tasks would
sort ~9M decoded records.  The benchmark used its own rule (one partition per ~150k messages) and
so measured a setting ``rocketscope analyze`` did not use; both now take this one.
"""

from __future__ import annotations

import logging
import math
import os
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

AUTO_PARTITIONS_KEY = "spark.rocketscope.shufflePartitions.auto"
"""Set to ``true`` by :func:`rocketscope.spark.session.get_session` when it chose the shuffle partition
count itself (a local master, no count given): only then may a run raise it for a large input.  A count the
user set (``shuffle_partitions``, ``--conf spark.sql.shuffle.partitions``, spark-submit) is kept."""

BASE_PARTITIONS_KEY = "spark.rocketscope.shufflePartitions.base"
"""The automatic count before any run raised it, kept so that a later, smaller run (``analyze --watch``, one
session for many runs) goes back to it instead of keeping the largest input's count."""

INPUT_BYTES_PER_PARTITION = 20 * 1024 * 1024
"""Parquet input bytes per shuffle partition: ~150k messages of trace and HA rows as the generator writes them
(1M messages are 151 MB: 8 partitions; 10M are 1.52 GB: 73), the share the benchmarks ran with since
session 17 (bench/spark_bench.py), where a task's sort and cached block stay the same size at every scale."""


def local_input_bytes(rows: DataFrame) -> int | None:
    """Total size of the local files ``rows`` reads, or None when they are not all local files (or unknown)."""
    try:
        files = rows.inputFiles()
    except Exception:  # a DataFrame that is not a file scan (a stream's batch, a data source): no size
        return None
    total = 0
    for uri in files:
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            return None
        try:
            total += os.stat(unquote(parsed.path)).st_size
        except OSError:
            return None
    return total if files else None


def scale_shuffle_partitions(spark: SparkSession, rows: DataFrame,
                             bytes_per_partition: int = INPUT_BYTES_PER_PARTITION) -> int:
    """Set the session's shuffle partitions to one per ``bytes_per_partition`` of input, never below the
    session's own automatic count, when that count is automatic; returns the count in effect."""
    current = int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    if (spark.conf.get(AUTO_PARTITIONS_KEY, "false") or "false").lower() != "true":
        return current
    size = local_input_bytes(rows)
    if size is None:
        return current
    base = int(spark.conf.get(BASE_PARTITIONS_KEY, None) or current)
    spark.conf.set(BASE_PARTITIONS_KEY, str(base))
    wanted = max(base, math.ceil(size / bytes_per_partition))
    if wanted != current:
        spark.conf.set("spark.sql.shuffle.partitions", str(wanted))
        log.info("%d shuffle partitions for %.0f MB of input (one per %.0f MB, at least %d; it was %d)", wanted,
                 size / 1e6, bytes_per_partition / 1e6, base, current)
    return wanted
