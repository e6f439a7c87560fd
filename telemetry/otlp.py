"""Decode OTLP metric requests (opentelemetry-proto) into flat points.

Why a flat point: the exporter (OTLP as received from nodes) and the broker's re-export of
its clients' metrics share one renderer (``render``), which names series from the same
catalogue and ``naming`` rules as PROM mode's own text (``promtext``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

log = logging.getLogger(__name__)

DELTA = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
CUMULATIVE = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
IDENTITY_KEYS = ("cluster", "node_type", "node_id")


@dataclass(slots=True)
class Point:
    """One data point. ``kind`` is the Prometheus type: counter (monotonic sum), gauge (gauge or
    non-monotonic sum) or histogram; ``counts`` are per bucket, as OTLP sends them."""

    name: str
    description: str
    unit: str
    kind: str
    temporality: int
    attributes: dict[str, Any]
    start_ns: int
    time_ns: int
    value: float = 0.0
    bounds: tuple[float, ...] = ()
    counts: tuple[int, ...] = ()
    total: float = 0.0
    count: int = 0


def any_value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return ""
    if which == "array_value":
        return tuple(any_value(v) for v in value.array_value.values)
    if which == "kvlist_value":
        return tuple((kv.key, any_value(kv.value)) for kv in value.kvlist_value.values)
    return getattr(value, which)


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


def _identity_from_resource(resource_kvs: list[KeyValue]) -> dict[str, Any]:
    attrs = attributes(resource_kvs)
    return {k: attrs[k] for k in IDENTITY_KEYS if k in attrs}


def points(request: ExportMetricsServiceRequest) -> Iterator[Point]:
    """Every number and explicit-bucket histogram point of the request. Exponential histograms
    and summaries are skipped (no RocketScope or RocketMQ instrument produces them)."""
    for rm in request.resource_metrics:
        fallback = _identity_from_resource(list(rm.resource.attributes))
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                which = metric.WhichOneof("data")
                if which == "sum":
                    kind = "counter" if metric.sum.is_monotonic else "gauge"
                    temporality = metric.sum.aggregation_temporality
                    for dp in metric.sum.data_points:
                        yield _number(metric, kind, temporality, dp, fallback)
                elif which == "gauge":
                    for dp in metric.gauge.data_points:
                        yield _number(metric, "gauge", 0, dp, fallback)
                elif which == "histogram":
                    temporality = metric.histogram.aggregation_temporality
                    for hp in metric.histogram.data_points:
                        attrs = {**fallback, **attributes(hp.attributes)}
                        yield Point(metric.name, metric.description, metric.unit, "histogram", temporality, attrs,
                                    hp.start_time_unix_nano, hp.time_unix_nano, bounds=tuple(hp.explicit_bounds),
                                    counts=tuple(hp.bucket_counts), total=hp.sum, count=hp.count)
                else:
                    log.debug("metric %s of type %s is not supported and is skipped", metric.name, which)


def _number(metric: Any, kind: str, temporality: int, dp: Any, fallback: dict[str, Any]) -> Point:
    value = dp.as_double if dp.WhichOneof("value") == "as_double" else float(dp.as_int)
    attrs = {**fallback, **attributes(dp.attributes)}
    return Point(metric.name, metric.description, metric.unit, kind, temporality, attrs, dp.start_time_unix_nano,
                 dp.time_unix_nano, value=value)
