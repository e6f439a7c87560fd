"""``rocketscope analyze``: the Spark jobs from the command line.

One subcommand per job plus ``all`` (shared tables are computed once), ``stream`` (the
streaming variant) and ``generate`` (synthetic input).  Inputs are Parquet directories
of the row schema (trace rows and HA-event rows, together or apart), or a live cluster:
``--namesrv`` reads the trace topic and RMQ_SYS_HA_EVENTS through the ``rocketscope``
data source (spark/datasource.py).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rocketscope.names import HA_EVENTS_TOPIC, TRACE_TOPIC
from rocketscope.spark.decode import DECODERS, DEFAULT_DECODER
from rocketscope.spark.incremental import DEFAULT_LATENESS_MS
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
        click.option("--input", "inputs", multiple=True, type=click.Path(exists=True),
                     help="Parquet directory of trace or HA-event rows (repeat for several)."),
        click.option("--namesrv", default=None,
                     help="Read a live cluster instead of --input: name server address(es), host:port;host:port."),
        click.option("--topics", default=f"{TRACE_TOPIC},{HA_EVENTS_TOPIC}", show_default=True,
                     help="Topics read with --namesrv (comma-separated)."),
        click.option("--output", required=True, type=click.Path(), help="Directory of the output tables."),
        click.option("--master", default="local[*]", show_default=True,
                     help="Spark master URL (ignored under spark-submit unless given)."),
        click.option("--asof", "asof_method", type=click.Choice(ASOF_METHODS), default="interval",
                     show_default=True, help="As-of join implementation (docs/ANALYTICS.md)."),
        click.option("--driver-memory", default=None, help="spark.driver.memory, e.g. 2g."),
        click.option("--quick-start", is_flag=True,
                     help="For small inputs: serial GC, C1-only JIT, interpreted expressions, no adaptive "
                          "execution, one shuffle partition; much slower on large inputs."),
        click.option("--decoder", type=click.Choice(DECODERS), default=DEFAULT_DECODER, show_default=True,
                     help="Trace decoding: compiled Java (jvm; SQL when its jar is not built), Spark SQL "
                          "expressions, or the Python codec (mapInArrow)."),
        click.option("--incremental", is_flag=True,
                     help="Process only the --input files added since the last run and merge into --output "
                          "(state in <output>/_incremental; docs/ANALYTICS.md)."),
        click.option("--lateness-seconds", type=float, default=DEFAULT_LATENESS_MS / 1000, show_default=True,
                     help="--incremental: how far before the earliest new row messages are recomputed."),
        click.option("--watch", "watch_seconds", type=float, default=None, metavar="SECONDS",
                     help="With --incremental: keep one Spark session and look for new --input files every "
                          "SECONDS (the JVM's compilation is paid once; Ctrl-C or SIGTERM stops; "
                          "docs/ANALYTICS.md)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _check_source(inputs: tuple[str, ...], namesrv: str | None) -> None:
    if bool(inputs) == bool(namesrv):
        raise click.UsageError("give either --input (Parquet rows) or --namesrv (a live cluster), not both or neither")


def _run(ctx: click.Context, jobs: list[str], inputs: tuple[str, ...], namesrv: str | None, topics: str,
         output: str, master: str, asof_method: str, driver_memory: str | None, quick_start: bool,
         decoder: str = DEFAULT_DECODER, incremental: bool = False,
         lateness_seconds: float = DEFAULT_LATENESS_MS / 1000,
         watch_seconds: float | None = None) -> None:
    from rocketscope.spark.run import read_rows, run_jobs
    from rocketscope.spark.session import get_session

    _check_source(inputs, namesrv)
    if incremental and namesrv:
        raise click.UsageError("--incremental reads --input files; for a live cluster use `analyze stream`")
    if watch_seconds is not None and (not incremental or watch_seconds <= 0):
        raise click.UsageError("--watch SECONDS needs --incremental and SECONDS > 0")
    spark = get_session(_master(ctx, master), driver_memory=driver_memory, quick_start=quick_start)
    used_decoder = _announce_decoder(spark, decoder)
    try:
        if watch_seconds is not None:
            _watch(spark, inputs, output, jobs, watch_seconds, asof_method, int(lateness_seconds * 1000))
            return
        if incremental:
            from rocketscope.spark.incremental import run_incremental

            done = run_incremental(spark, inputs, output, jobs, asof_method=asof_method,
                                   lateness_ms=int(lateness_seconds * 1000))
            click.echo(json.dumps({"output": str(Path(output)), **done}))
            return
        if namesrv:
            from rocketscope.spark.datasource import as_rows, read_topics

            rows = as_rows(read_topics(spark, namesrv, [t.strip() for t in topics.split(",") if t.strip()]))
        else:
            rows = read_rows(spark, inputs)
        timings = run_jobs(spark, rows, output, jobs, asof_method=asof_method, decoder=decoder)
    finally:
        spark.stop()
    click.echo(json.dumps({"output": str(Path(output)), "seconds": timings, "decoder": used_decoder}))


def _announce_decoder(spark: Any, decoder: str) -> str:
    """The trace decoder this run really uses; one stderr line, beside the jobs' progress lines, when the
    JVM decoder was asked for but its jar is not on the driver's class path (the rows are the same, only slower)."""
    from rocketscope.spark.decode import JAR_HINT, effective_decoder

    used = effective_decoder(spark, decoder)
    if used != decoder:
        click.echo(f"analyze: the JVM trace decoder is not loaded ({JAR_HINT}): decoding with Spark SQL", err=True)
    return used


def _watch(spark: Any, inputs: tuple[str, ...], output: str, jobs: list[str], seconds: float, asof_method: str,
           lateness_ms: int) -> None:
    """``--watch``: incremental runs in this session until Ctrl-C or SIGTERM; one JSON line per run with new files."""
    import signal
    import threading

    from rocketscope.spark.watch import watch

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def report(result: dict[str, Any]) -> None:
        if result["new_files"]:
            click.echo(json.dumps({"output": str(Path(output)), **result}))

    try:
        watch(spark, inputs, output, jobs, interval_s=seconds, asof_method=asof_method, lateness_ms=lateness_ms,
              stop=stop, on_run=report)
    except KeyboardInterrupt:
        pass


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
def stream(ctx: click.Context, inputs: tuple[str, ...], namesrv: str | None, topics: str, output: str, master: str,
           asof_method: str, driver_memory: str | None, quick_start: bool, checkpoint: str | None,
           jobs: tuple[str, ...], trigger_seconds: float | None, available_now: bool, decoder: str = DEFAULT_DECODER,
           incremental: bool = False, lateness_seconds: float = 0.0, watch_seconds: float | None = None) -> None:
    """Keep the tables current as new row files or new messages arrive (Ctrl-C stops)."""
    if incremental or watch_seconds is not None:
        raise click.UsageError("--incremental and --watch are for batch runs; a stream is incremental already")
    from rocketscope.spark.session import get_session
    from rocketscope.spark.streaming import start_stream

    _check_source(inputs, namesrv)
    spark = get_session(_master(ctx, master), driver_memory=driver_memory, quick_start=quick_start)
    query = start_stream(spark, inputs, output, checkpoint, jobs, trigger_seconds=trigger_seconds,
                         asof_method=asof_method, namesrv=namesrv,
                         topics=[t.strip() for t in topics.split(",") if t.strip()])
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
