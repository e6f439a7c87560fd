"""The streaming variant: keep the tables current as new rows arrive.

A Structured Streaming query reads new files of the row schema, or with ``namesrv`` new
messages of the live topics through the ``rocketscope`` data source (projected onto the
same rows, offsets in the checkpoint).  Each micro-batch, in ``foreachBatch``:

1. appends its rows to a staging copy under ``<output>/_staging/rows``, partitioned by
   the UTC date of the row's store time;
2. finds the dates it touched (a handful of values: the only thing collected);
3. recomputes the jobs from the staged rows of those dates with a margin (records of one
   message span at most one midnight: a message born late on day D is acked on D+1) and
   overwrites just the affected ``date`` partitions (dynamic partition overwrite).

A replayed micro-batch (after a crash between the staging write and the checkpoint)
appends its rows twice; the jobs drop duplicate records and events, so the tables come
out the same: the upsert is idempotent.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DateType, StructField, StructType

from rocketscope.names import HA_EVENTS_TOPIC, TRACE_TOPIC
from rocketscope.spark.jobs import JOBS
from rocketscope.spark.jobs.common import utc_date
from rocketscope.spark.model import Model
from rocketscope.spark.output import write_table
from rocketscope.spark.run import resolve_jobs
from rocketscope.spark.schema import ROW_SCHEMA

STAGING = "_staging/rows"


def _ingest_date() -> F.Column:
    return utc_date(F.unix_millis("store_timestamp"))


class DayUpserter:
    """The ``foreachBatch`` function: stage the batch, recompute and overwrite the touched days."""

    def __init__(self, output: str | Path, jobs: Iterable[str], *, asof_method: str = "interval",
                 progress: bool = True) -> None:
        self.output = Path(output)
        self.staging = self.output / STAGING
        self.jobs = resolve_jobs(jobs)
        self.asof_method = asof_method
        self.progress = progress

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        staged = batch.withColumn("ingest_date", _ingest_date())
        staged.write.mode("append").partitionBy("ingest_date").parquet(str(self.staging))
        dates = sorted(r[0] for r in staged.select("ingest_date").distinct().collect() if r[0] is not None)
        if not dates:
            return
        one = dt.timedelta(days=1)
        first, last = dates[0] - one, dates[-1]
        rows = (
            spark.read.schema(StructType([*ROW_SCHEMA.fields, StructField("ingest_date", DateType())]))
            .parquet(str(self.staging))
            .where(F.col("ingest_date").between(F.lit(first - one), F.lit(last + one)))
            .drop("ingest_date")
        )
        model = Model(spark, rows, asof_method=self.asof_method)
        try:
            for name in self.jobs:
                table = JOBS[name](model).where(F.col("date").between(F.lit(first), F.lit(last)))
                write_table(table, self.output, name)
        finally:
            model.unpersist()
        if self.progress:
            print(f"analyze stream: batch {batch_id} updated {', '.join(self.jobs)} for {first}..{last}",
                  file=sys.stderr, flush=True)


def start_stream(spark: SparkSession, inputs: Iterable[str | Path], output: str | Path,
                 checkpoint: str | Path | None = None, jobs: Iterable[str] = ("all",), *,
                 trigger_seconds: float | None = None, asof_method: str = "interval",
                 progress: bool = True, namesrv: str | None = None,
                 topics: Iterable[str] = (TRACE_TOPIC, HA_EVENTS_TOPIC)) -> StreamingQuery:
    """Start the query; new Parquet files in any input directory (or, with ``namesrv``, new
    messages in the live topics) are picked up.

    ``checkpoint`` defaults to ``<output>/_checkpoint``.  ``trigger_seconds=None`` runs
    micro-batches back to back as data arrives.
    """
    if namesrv:
        from rocketscope.spark.datasource import as_rows, stream_topics

        source = as_rows(stream_topics(spark, namesrv, list(topics)))
    else:
        paths = [str(p) for p in inputs]
        if not paths:
            raise ValueError("no input: give at least one directory of row-schema Parquet files")
        streams = [spark.readStream.schema(ROW_SCHEMA).parquet(p) for p in paths]
        source = streams[0]
        for other in streams[1:]:
            source = source.unionByName(other)
    writer = source.writeStream.foreachBatch(
        DayUpserter(output, jobs, asof_method=asof_method, progress=progress)
    ).option("checkpointLocation", str(checkpoint or Path(output) / "_checkpoint"))
    if trigger_seconds:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()
