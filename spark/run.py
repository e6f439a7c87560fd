"""Run jobs over input rows: the shared entry of the CLI, spark-submit and the streaming variant."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from rocketscope.spark.decode import DEFAULT_DECODER
from rocketscope.spark.jobs import JOBS
from rocketscope.spark.model import Model
from rocketscope.spark.output import write_table
from rocketscope.spark.schema import ROW_SCHEMA


def read_rows(spark: SparkSession, inputs: Iterable[str | Path]) -> DataFrame:
    """Rows of the row schema from Parquet directories (trace and HA rows may share or not)."""
    paths = [str(p) for p in inputs]
    if not paths:
        raise ValueError("no input: give at least one Parquet directory of trace or HA rows")
    return spark.read.schema(ROW_SCHEMA).parquet(*paths)


def resolve_jobs(names: Iterable[str]) -> list[str]:
    chosen: list[str] = []
    for name in names:
        if name == "all":
            chosen.extend(JOBS)
        elif name in JOBS:
            chosen.append(name)
        else:
            raise ValueError(f"unknown job {name!r}: choose from {', '.join(JOBS)} or all")
    return list(dict.fromkeys(chosen))


def run_jobs(spark: SparkSession, rows: DataFrame, output: str | Path, jobs: Iterable[str],
             *, asof_method: str = "interval", decoder: str = DEFAULT_DECODER,
             progress: bool = True) -> dict[str, float]:
    """Build and write each job; returns seconds per job.  Shared tables are computed once."""
    model = Model(spark, rows, asof_method=asof_method, decoder=decoder)
    timings: dict[str, float] = {}
    try:
        for name in resolve_jobs(jobs):
            started = time.monotonic()
            write_table(JOBS[name](model), output, name)
            timings[name] = round(time.monotonic() - started, 2)
            if progress:
                print(f"analyze: {name} written to {Path(output) / name} in {timings[name]:.1f} s",
                      file=sys.stderr, flush=True)
    finally:
        model.unpersist()
    return timings
