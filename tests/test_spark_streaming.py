"""The streaming variant picks up new files and upserts the day partitions it touches."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rocketscope.spark.generate import GenConfig, generate
from rocketscope.spark.reference import Reference, read_rows
from rocketscope.spark.streaming import start_stream

pytestmark = pytest.mark.e2e

# 800 messages at 10/s from 23:59:00 UTC: two chunk files, the second one after midnight.
CONFIG = GenConfig(messages=800, seed=5, start_ms=1740873540000, rate=10.0, chunk=400)
JOBS = ["replication_latency"]


def _drop_in(src: Path, dst_dir: Path) -> None:
    """Copy a part file in atomically (a file source must never see half a file)."""
    tmp = dst_dir.parent / f".{dst_dir.name}-{src.name}.tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst_dir / src.name)


def _expected(rows_dirs: list[Path]) -> dict[tuple, tuple[int, int]]:
    ref = Reference.from_rows(read_rows(rows_dirs))
    return {(k[1], k[2], k[3], k[4]): (v["messages"], v["samples"]) for k, v in ref.replication_latency().items()}


def _actual(spark, out: Path) -> dict[tuple, tuple[int, int]]:  # type: ignore[no-untyped-def]
    df = spark.read.parquet(str(out / "replication_latency")).selectExpr(
        "unix_millis(minute) AS m", "topic", "broker_group", "replica", "messages", "samples")
    return {(r["m"], r["topic"], r["broker_group"], r["replica"]): (r["messages"], r["samples"]) for r in df.collect()}


@pytest.mark.long  # ~90-120 s of micro-batches; Spark streaming stays in make test through the rocketscope source
# (tests/test_spark_datasource.py::test_stream_picks_up_new_messages_and_resumes_from_its_checkpoint)
def test_stream_picks_up_a_new_file(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    gen = tmp_path / "gen"
    generate(gen, CONFIG, progress=False)
    live = tmp_path / "live"
    (live / "trace").mkdir(parents=True)
    (live / "ha").mkdir(parents=True)
    out = tmp_path / "out"
    for sub in ("trace", "ha"):
        _drop_in(gen / sub / "part-00000.parquet", live / sub)

    query = start_stream(spark, [live / "trace", live / "ha"], out, jobs=JOBS, progress=False)
    try:
        query.processAllAvailable()
        first = _actual(spark, out)
        assert first == _expected([live / "trace", live / "ha"])

        for sub in ("trace", "ha"):
            _drop_in(gen / sub / "part-00001.parquet", live / sub)
        query.processAllAvailable()
        second = _actual(spark, out)
        assert second == _expected([gen / "trace", gen / "ha"])
        assert sum(m for m, _ in second.values()) > sum(m for m, _ in first.values())
        assert query.exception() is None
    finally:
        query.stop()
    # Both days exist as partitions, and the staging copy holds every input row once.
    days = sorted(p.name for p in (out / "replication_latency").glob("date=*"))
    assert days == ["date=2025-03-01", "date=2025-03-02"]
    staged = sum(pq.read_metadata(f).num_rows for f in (out / "_staging" / "rows").rglob("*.parquet"))
    assert staged == sum(pq.read_metadata(f).num_rows for f in gen.rglob("*.parquet"))
