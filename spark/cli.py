"""``rocketscope analyze``: the Spark jobs from the command line.

One subcommand per job plus ``all`` (shared tables are computed once), ``stream`` (the
streaming variant) and ``generate`` (synthetic input).  Inputs are Parquet directories
of the row schema (trace rows and HA-event rows, together or apart); the live-broker
source (``--namesrv``) comes later.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rocketscope.spark.jobs import JOBS

ASOF_METHODS = ("interval", "window")


def _master(ctx: click.Context, master: str) -> str | None:
    """The master to set: none under spark-submit unless given explicitly (spark-submit's --master rules)."""
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if under_submit and ctx.get_parameter_source("master") == click.core.ParameterSource.DEFAULT:
        return None
    return master


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--input", "inputs", multiple=True, required=True, type=click.Path(exists=True),
                     help="Parquet directory of trace or HA-event rows (repeat for several)."),
        click.option("--output", required=True, type=click.Path(), help="Directory of the output tables."),
        click.option("--master", default="local[*]", show_default=True,
                     help="Spark master URL (ignored under spark-submit unless given)."),
        click.option("--asof", "asof_method", type=click.Choice(ASOF_METHODS), default="interval",
                     show_default=True, help="As-of join implementation (docs/ANALYTICS.md)."),
        click.option("--driver-memory", default=None, help="spark.driver.memory, e.g. 2g."),
        click.option("--quick-start", is_flag=True,
                     help="Serial GC and C1-only JIT: faster start-up, slower on large inputs."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _run(ctx: click.Context, jobs: list[str], inputs: tuple[str, ...], output: str, master: str,
         asof_method: str, driver_memory: str | None, quick_start: bool) -> None:
    from rocketscope.spark.run import read_rows, run_jobs
    from rocketscope.spark.session import get_session

    spark = get_session(_master(ctx, master), driver_memory=driver_memory, quick_start=quick_start)
    try:
        timings = run_jobs(spark, read_rows(spark, inputs), output, jobs, asof_method=asof_method)
    finally:
        spark.stop()
    click.echo(json.dumps({"output": str(Path(output)), "seconds": timings}))


@click.group("analyze")
def analyze() -> None:
    """Spark analytics over message traces and replication events (docs/ANALYTICS.md)."""


def _job_command(name: str) -> None:
    doc = sys.modules[JOBS[name].__module__].__doc__ or name

    @analyze.command(name.replace("_", "-"), help=doc.split("\n")[0])
    @_common
    @click.pass_context
    def command(ctx: click.Context, **kwargs: Any) -> None:
        _run(ctx, [name], **kwargs)


for _name in JOBS:
    _job_command(_name)


@analyze.command("all")
@_common
@click.pass_context
def all_jobs(ctx: click.Context, **kwargs: Any) -> None:
    """Every job, sharing the decoded inputs and the joins."""
    _run(ctx, ["all"], **kwargs)


@analyze.command("stream")
@_common
@click.option("--checkpoint", type=click.Path(), default=None,
              help="Checkpoint directory (default <output>/_checkpoint).")
@click.option("--job", "jobs", multiple=True, default=("all",), show_default=True, help="Job to keep current (repeat).")
@click.option("--trigger-seconds", type=float, default=None, help="Micro-batch interval (default: back to back).")
@click.option("--available-now", is_flag=True, help="Process what is there, then stop.")
@click.pass_context
def stream(ctx: click.Context, inputs: tuple[str, ...], output: str, master: str, asof_method: str,
           driver_memory: str | None, quick_start: bool, checkpoint: str | None, jobs: tuple[str, ...],
           trigger_seconds: float | None, available_now: bool) -> None:
    """Keep the tables current as new row files arrive (Ctrl-C stops)."""
    from rocketscope.spark.session import get_session
    from rocketscope.spark.streaming import start_stream

    spark = get_session(_master(ctx, master), driver_memory=driver_memory, quick_start=quick_start)
    query = start_stream(spark, inputs, output, checkpoint, jobs, trigger_seconds=trigger_seconds,
                         asof_method=asof_method)
    try:
        if available_now:
            query.processAllAvailable()
            query.stop()
        else:
            query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    finally:
        spark.stop()


@analyze.command("generate")
@click.option("--out", required=True, type=click.Path(), help="Directory; trace/ and ha/ are written in it.")
@click.option("--messages", type=int, default=10_000, show_default=True)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--rate", type=float, default=20.0, show_default=True, help="Messages per second of born time.")
@click.option("--chunk", type=int, default=50_000, show_default=True, help="Messages per written chunk.")
def generate_cmd(out: str, messages: int, seed: int, rate: float, chunk: int) -> None:
    """Synthetic trace and HA rows with failovers, retries, DLQ moves, drops and duplicates."""
    from rocketscope.spark.generate import GenConfig, generate

    summary = generate(out, GenConfig(messages=messages, seed=seed, rate=rate, chunk=chunk))
    click.echo(json.dumps(summary))


def main() -> None:
    analyze(prog_name="rocketscope analyze")


if __name__ == "__main__":
    main()
