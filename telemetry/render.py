"""Turn points into prometheus_client metric families (no hand-written exposition text).

Why here and not opentelemetry-exporter-prometheus: that exporter only sees the SDK's own
data; the exporter mode must render OTLP received from other processes. One renderer for
both keeps names identical, writes histogram buckets cumulatively (OTLP counts are per
bucket; rocketmq-exporter wrote them as they came, which skews every quantile) and renders
boolean and integer attributes as ``true``/``false`` and digits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from itertools import accumulate

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from . import catalogue
from .naming import prometheus_name, render_bound, render_value, sanitize_label
from .otlp import Point

log = logging.getLogger(__name__)


def family_name(point: Point) -> tuple[str, str]:
    """(Prometheus family name, help text): the catalogue's where known, else the OTel rule."""
    spec = catalogue.BY_NAME.get(point.name)
    if spec is not None:
        return spec.prometheus_name, spec.description
    return prometheus_name(point.name, point.unit, point.kind), point.description or point.name


def label_dict(point: Point) -> dict[str, str]:
    return {sanitize_label(k): render_value(v) for k, v in point.attributes.items()}


def cumulative_buckets(point: Point) -> list[tuple[str, float]] | None:
    """``le`` buckets from OTLP per-bucket counts; None for a malformed point."""
    if len(point.counts) != len(point.bounds) + 1:
        return None
    running = list(accumulate(point.counts))
    les = [render_bound(b) for b in point.bounds] + ["+Inf"]
    return list(zip(les, (float(c) for c in running), strict=True))


def families(points: Iterable[Point]) -> list[Metric]:
    """Group points into families. A name seen with two kinds keeps the first (logged); a
    label set seen twice keeps the first (Prometheus rejects duplicate series)."""
    grouped: dict[str, tuple[str, str, list[tuple[Point, dict[str, str]]]]] = {}
    for point in points:
        name, help_text = family_name(point)
        entry = grouped.get(name)
        if entry is None:
            entry = grouped[name] = (point.kind, help_text, [])
        elif entry[0] != point.kind:
            log.debug("metric %s arrives as %s and %s; the %s points are skipped", name, entry[0], point.kind,
                      point.kind)
            continue
        entry[2].append((point, label_dict(point)))
    out: list[Metric] = []
    for name, (kind, help_text, rows) in grouped.items():
        keys = sorted({k for _, labels in rows for k in labels} - {"le"})
        seen: set[tuple[str, ...]] = set()
        family: Metric
        if kind == "counter":
            family = CounterMetricFamily(name, help_text, labels=keys)
        elif kind == "histogram":
            family = HistogramMetricFamily(name, help_text, labels=keys)
        else:
            family = GaugeMetricFamily(name, help_text, labels=keys)
        for point, labels in rows:
            values = tuple(labels.get(k, "") for k in keys)
            if values in seen:
                continue
            seen.add(values)
            if kind == "histogram":
                buckets = cumulative_buckets(point)
                if buckets is None:
                    continue
                family.add_metric(list(values), buckets=buckets, sum_value=point.total)  # type: ignore[call-arg]
            else:
                family.add_metric(list(values), point.value)  # type: ignore[call-arg, arg-type]
        out.append(family)
    return out
