"""OpenTelemetry-to-Prometheus naming and label-value rendering, in one place.

Why our own (small) copy of these rules: the same series must get the same name whether a
node is scraped directly (PROM mode) or its OTLP push is re-exposed by
``rocketscope exporter``. Both paths render through this module. The rules are those of the
OpenTelemetry Prometheus compatibility spec as implemented by opentelemetry-exporter-prometheus
and the collector: unit suffix unless the name already ends with it, ``_total`` on counters,
``1`` adds no suffix; boolean attributes render ``true``/``false`` and integers as digits
(rocketmq-exporter's bridge rendered them as empty strings).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

_NAME_BAD = re.compile(r"[^a-zA-Z0-9:]+")
_LABEL_BAD = re.compile(r"[^a-zA-Z0-9_]+")
_ANNOTATION = re.compile(r"\{.*?\}")

UNIT_SUFFIX = {
    "d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
    "us": "microseconds", "ns": "nanoseconds", "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes",
    "GiBy": "gibibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes", "1": "", "%": "percent",
}  # fmt: skip


def sanitize_name(name: str) -> str:
    if name and name[0].isdigit():
        name = "_" + name
    return _NAME_BAD.sub("_", name)


@lru_cache(maxsize=4096)
def sanitize_label(key: str) -> str:
    """``otel.metric.overflow`` becomes ``otel_metric_overflow``."""
    if key and key[0].isdigit():
        key = "_" + key
    return _LABEL_BAD.sub("_", key)


def unit_suffix(unit: str) -> str:
    unit = _ANNOTATION.sub("", unit or "")
    if unit in UNIT_SUFFIX:
        return UNIT_SUFFIX[unit]
    if "/" in unit:
        top, bottom = unit.split("/", 1)
        per = {"s": "second", "m": "minute", "h": "hour", "d": "day"}.get(bottom, bottom)
        top = UNIT_SUFFIX.get(top, top)
        return sanitize_name(f"{top}_per_{per}" if top else f"per_{per}").strip("_")
    return sanitize_name(unit).strip("_")


def prometheus_name(name: str, unit: str, prometheus_type: str) -> str:
    """Family name: ``counter`` families include ``_total``; histograms exclude ``_bucket``."""
    base = sanitize_name(name)
    is_counter = prometheus_type == "counter"
    if is_counter and base.endswith("_total"):
        base = base[: -len("_total")]
    suffix = unit_suffix(unit)
    if suffix and not base.endswith("_" + suffix):
        base = f"{base}_{suffix}"
    return base + "_total" if is_counter else base


def render_value(value: Any) -> str:
    """A label value as Prometheus text: true/false, digits, repr of floats, JSON arrays."""
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return repr(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Sequence):
        return json.dumps([v if isinstance(v, str | int | float | bool) else str(v) for v in value])
    return str(value)


def render_bound(bound: float) -> str:
    """Histogram ``le`` value as Prometheus writes it (``1024.0``, ``+Inf``)."""
    if math.isinf(bound):
        return "+Inf" if bound > 0 else "-Inf"
    return repr(float(bound))
