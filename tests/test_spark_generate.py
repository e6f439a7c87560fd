"""The synthetic generator: deterministic, in the row schema, with the awkward cases in it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow.parquet as pq

from rocketscope.ha_events import HaEvent
from rocketscope.names import HA_EVENTS_TOPIC, TRACE_TOPIC
from rocketscope.spark.generate import GenConfig, generate
from rocketscope.spark.schema import ROW_ARROW_SCHEMA
from rocketscope.trace.codec import decode


def _tables(root: Path) -> list:
    return [pq.read_table(f) for f in sorted(root.rglob("*.parquet"))]


def test_same_seed_same_rows_and_chunking_bounds_files(tmp_path: Path) -> None:
    cfg = GenConfig(messages=1_200, seed=3, chunk=400)
    a, b = generate(tmp_path / "a", cfg, progress=False), generate(tmp_path / "b", cfg, progress=False)
    assert a["trace_rows"] == b["trace_rows"] and a["ha_rows"] == b["ha_rows"]
    ta, tb = _tables(tmp_path / "a"), _tables(tmp_path / "b")
    assert len(ta) == 6  # three chunks, trace and HA each
    assert all(x.equals(y) for x, y in zip(ta, tb, strict=True))
    generate(tmp_path / "c", GenConfig(messages=1_200, seed=4, chunk=400), progress=False)
    assert not all(x.equals(y) for x, y in zip(ta, _tables(tmp_path / "c"), strict=True))


def test_rows_are_in_the_row_schema_and_decode(tmp_path: Path) -> None:
    generate(tmp_path, GenConfig(messages=600, seed=9, chunk=600), progress=False)
    trace = pq.read_table(tmp_path / "trace" / "part-00000.parquet")
    ha = pq.read_table(tmp_path / "ha" / "part-00000.parquet")
    assert trace.schema.equals(ROW_ARROW_SCHEMA) and ha.schema.equals(ROW_ARROW_SCHEMA)
    assert set(trace.column("topic").to_pylist()) == {TRACE_TOPIC}
    assert set(ha.column("topic").to_pylist()) == {HA_EVENTS_TOPIC}
    records = [r for body in trace.column("body").to_pylist() for r in decode(body)]
    assert len(records) > 600 * 2
    events = [HaEvent.from_json(body) for body in ha.column("body").to_pylist()]
    types = {e.type for e in events}
    assert {"replica_ack", "commit_advanced", "truncation", "leader_elected", "master_elected"} <= types
    # Out of order: event times do not follow the row order everywhere.
    ts = [e.ts for e in events]
    assert any(x > y for x, y in itertools.pairwise(ts))
    assert json.loads(ha.column("body")[0].as_py())["cluster"] == "DefaultCluster"
