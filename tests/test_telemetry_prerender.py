"""PROM /metrics: label text rendered ahead of the scrape, lines reused between snapshots (issue 6)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from telemetry_support import find, scrape, wait_until

from rocketscope.telemetry import Telemetry, TelemetryConfig

LAG = "rocketmq_consumer_lag_messages"


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    props = {"metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1", "metricsPromExporterPort": "0",
             "metricsOtelCardinalityLimit": "50"}
    t = Telemetry.start(TelemetryConfig.from_properties(props), "broker", "DefaultCluster", "broker-a-0")
    yield t
    t.stop()


def lag_labels(n: int) -> list[dict[str, Any]]:
    return [{"consumer_group": f"g{i}", "topic": "t", "is_retry": False, "is_system": False} for i in range(n)]


def render(t: Telemetry) -> str:
    assert t._core is not None and t._core.endpoint is not None
    return scrape(f"http://127.0.0.1:{t.prometheus_port}/metrics")


def test_prepared_cached_and_plain_renders_agree(telemetry: Telemetry) -> None:
    labels = lag_labels(20)
    snap: dict[str, tuple[tuple[float, dict[str, Any]], ...]] = {"v": tuple((i, d) for i, d in enumerate(labels))}
    reg = telemetry.gauge(LAG, lambda: snap["v"])
    counter = telemetry.counter("rocketmq_messages_in_total").bind({"topic": "t", "message_type": "normal",
                                                                     "is_system": False})
    plain = render(telemetry)  # nothing prepared: the per-sample path
    core = telemetry._core
    assert core is not None and core.prerender is not None
    snap["v"] = tuple((i + 100, d) for i, d in enumerate(labels))  # a new snapshot, same label dicts
    telemetry.gauges_changed()
    wait_until(lambda: reg.prepared is not None and reg.prepared[0] is snap["v"], what="label text prepared")
    counter.add(5)
    prepared = render(telemetry)  # the fast path
    counter.add(2)
    cached = render(telemetry)  # the same tuple: its lines reused, the counter formatted again
    assert reg.body is not None and reg.body[0] is snap["v"]
    assert sorted(v for _, v in find(plain, LAG)) == list(range(20))
    assert sorted(v for _, v in find(prepared, LAG)) == list(range(100, 120))
    assert find(prepared, LAG) == find(cached, LAG)
    assert find(prepared, LAG)[0][0] == {**find(plain, LAG)[0][0]}
    assert find(prepared, "rocketmq_messages_in_total")[0][1] == 5
    assert find(cached, "rocketmq_messages_in_total")[0][1] == 7
    assert [line for line in cached.splitlines() if line.startswith(LAG)] == \
        [line for line in prepared.splitlines() if line.startswith(LAG)]


def test_the_cap_still_folds_and_counts_when_lines_are_reused(telemetry: Telemetry) -> None:
    points = tuple((1, d) for d in lag_labels(60))  # limit 50: 10 fold into the overflow series
    telemetry.gauge(LAG, lambda: points)
    telemetry.gauges_changed()
    first, second = render(telemetry), render(telemetry)
    for text in (first, second):
        rows = find(text, LAG)
        assert len(rows) == 51
        assert [v for labels, v in rows if labels.get("otel_metric_overflow") == "true"] == [10]
    folded = find(second, "rocketscope_metrics_overflow_total", metric=LAG)
    assert folded and folded[0][1] == 10  # counted once per collection: the first scrape's, shown by the second


def test_duplicate_label_sets_are_written_once(telemetry: Telemetry) -> None:
    a, b = lag_labels(1)[0], dict(lag_labels(1)[0])  # two dicts, one series
    points = ((1, a), (2, b))
    reg = telemetry.gauge(LAG, lambda: points)
    telemetry.gauges_changed()
    wait_until(lambda: reg.prepared is not None, what="label text prepared")
    assert [v for _, v in find(render(telemetry), LAG)] == [1]
    assert [v for _, v in find(render(telemetry), LAG)] == [1]


def test_lists_are_never_reused(telemetry: Telemetry) -> None:
    """Only a tuple promises the same observations: a list may be changed in place."""
    points = [(1, d) for d in lag_labels(3)]
    telemetry.gauge(LAG, lambda: points)
    telemetry.gauges_changed()
    assert sorted(v for _, v in find(render(telemetry), LAG)) == [1, 1, 1]
    points[0] = (9, points[0][1])
    assert sorted(v for _, v in find(render(telemetry), LAG)) == [1, 1, 9]
