"""``analyze --incremental --watch``: one SparkSession, new input files merged per interval, against the reference.

The job tests' generated data (tests/test_spark_jobs.py, shorter), its chunk files handed to the watcher
in two steps while it runs: the first chunk before it starts, the other two after its first
run.  The lateness is longer than the whole data set, so every run recomputes all slots
and the tables after the second merge must equal the plain-Python reference over all rows
(the same checks as the full run's).  Runs in the session's one JVM, like the service.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from cluster import wait_until
from test_spark_jobs import (
    CONFIG,
    check_e2e_latency,
    check_failover_impact,
    check_message_timeline,
    check_replication_latency,
)

from rocketscope.spark.generate import GenConfig, generate
from rocketscope.spark.reference import Reference, read_rows
from rocketscope.spark.watch import watch

DAY_MS = 86_400_000
# The job tests' traffic (same seed and start: across midnight, both failovers), shortened to 900 messages in
# three chunks: an incremental run is a few dozen Spark jobs whatever the size, so fewer rows save little,
# but the reference and the writes scale with them.
SMALL = GenConfig(messages=900, seed=CONFIG.seed, start_ms=CONFIG.start_ms, rate=CONFIG.rate, chunk=300)


def _chunks(src: Path, sub: str) -> list[Path]:
    return sorted((src / sub).glob("*.parquet"))


def test_watch_needs_incremental_and_a_positive_interval(tmp_path: Path) -> None:
    """Refused before any Spark session starts, with the option named."""
    from click.testing import CliRunner

    from rocketscope.spark.cli import analyze

    (tmp_path / "in").mkdir()
    runner = CliRunner()
    for extra in (["--watch", "5"], ["--incremental", "--watch", "0"]):
        result = runner.invoke(analyze, ["all", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                                         *extra])
        assert result.exit_code == 2, result.output
        assert "--watch SECONDS needs --incremental and SECONDS > 0" in result.output
    result = runner.invoke(analyze, ["stream", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                                     "--watch", "5"])
    assert result.exit_code == 2 and "--watch are for batch runs" in result.output


# Two incremental runs (a few dozen Spark jobs each) in the test session's C1-only JVM: 4 min at a load
# average of 7-10, so it is left to `make test-full`; alone:
#     .venv/bin/pytest -m long tests/test_spark_watch.py
@pytest.mark.e2e
@pytest.mark.long
@pytest.mark.timeout(1200)
def test_watch_merges_new_files_in_one_session_and_matches_reference(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    generate(data, SMALL, progress=False)
    trace, ha = _chunks(data, "trace"), _chunks(data, "ha")
    assert len(trace) == len(ha) == 3  # one file per chunk of 300 messages
    inputs = [tmp_path / "in" / "trace", tmp_path / "in" / "ha"]
    for d in inputs:
        d.mkdir(parents=True)
    for f, d in ((trace[0], inputs[0]), (ha[0], inputs[1])):
        shutil.copy(f, d / f.name)

    results: list[dict[str, Any]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            watch(spark, inputs, tmp_path / "out", ["all"], interval_s=0.2, lateness_ms=DAY_MS, slot_ms=60_000,
                  stop=stop, on_run=results.append, progress=False)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        wait_until(lambda: results or errors, timeout=240, what="the watcher's first run")
        assert not errors, errors
        assert results[0]["new_files"] == 2 and results[0]["recompute_from_ms"] is None
        for f, d in [*((t, inputs[0]) for t in trace[1:]), *((h, inputs[1]) for h in ha[1:])]:
            # written beside, then renamed in: the watcher never sees half a file
            shutil.copy(f, d / f".{f.name}")
            (d / f".{f.name}").rename(d / f.name)
        merged = wait_until(lambda: errors or [r for r in results if r["new_files"]][1:], timeout=240,
                            what="the watcher merging the new files")
        assert not errors, errors
        assert merged[0]["new_files"] == 4
        # later checks find nothing new and run no job
        wait_until(lambda: results[-1]["new_files"] == 0 and results[-1]["check"] > merged[0]["check"],
                   timeout=30, what="an idle check")
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not thread.is_alive()

    ref = Reference.from_rows(read_rows([data / "trace", data / "ha"]))
    out = tmp_path / "out"
    check_message_timeline(spark, out, ref)
    check_replication_latency(spark, out, ref)
    check_e2e_latency(spark, out, ref)
    check_failover_impact(spark, out, ref)
