"""Telemetry settings, read from the same Java-properties keys RocketMQ uses.

Why RocketMQ's keys and defaults: operators copy broker.conf files between RocketMQ and
RocketScope. Two deliberate differences, both louder rather than different: a bad value
(``metricsInDelta=yes please``, ``metricsExporterType=PROMETHEUS``) is a ValueError that names
key and value instead of a silent fallback, and OTLP without a target is an error instead
of metrics silently not starting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from rocketscope.config import ConfigError, parse_bool

log = logging.getLogger(__name__)


class TelemetryConfigError(ConfigError):
    """A telemetry setting that cannot be used; the message names key and value."""


class ExporterType(Enum):
    """``metricsExporterType``: RocketMQ's four (names or ints 0-3) plus our OTLP/HTTP (4)."""

    DISABLE = 0
    OTLP_GRPC = 1
    PROM = 2
    LOG = 3
    OTLP_HTTP = 4

    @classmethod
    def parse(cls, text: str) -> ExporterType:
        raw = text.strip()
        if raw.isdigit():
            number = int(raw)
            for member in cls:
                if member.value == number:
                    return member
            raise ValueError(f"expected 0-{max(m.value for m in cls)}")
        try:
            return cls[raw.upper()]
        except KeyError:
            raise ValueError(f"expected one of {', '.join(m.name for m in cls)}") from None

    @property
    def is_otlp(self) -> bool:
        return self in (ExporterType.OTLP_GRPC, ExporterType.OTLP_HTTP)


_bool = parse_bool


def _int(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            raise ValueError(f"must be {bound}")
        return value

    return parse


def _str(text: str) -> str:
    return text.strip()


def parse_pairs(text: str, key: str) -> dict[str, str]:
    """CSV of ``k:v``. Like RocketMQ, an item that does not split into exactly two parts on
    ``:`` is logged and skipped (a value therefore cannot contain ``:``)."""
    pairs: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        parts = item.split(":")
        if len(parts) != 2 or not parts[0].strip():
            log.warning("config key %s: item %r is not key:value and is skipped", key, item)
            continue
        pairs[parts[0].strip()] = parts[1].strip()
    return pairs


def grpc_target(text: str) -> str:
    """RocketMQ's rule: a target that does not start with ``http`` gets ``https://`` (TLS)."""
    text = text.strip()
    if text and not text.startswith("http"):
        return "https://" + text
    return text


@dataclass(frozen=True)
class Key:
    name: str
    default: str
    doc: str
    parse: Callable[[str], Any]
    attr: str


KEYS: tuple[Key, ...] = (
    Key("metricsExporterType", "DISABLE", "DISABLE, OTLP_GRPC, PROM, LOG (or 0-3), or OTLP_HTTP (4, ours).",
        ExporterType.parse, "exporter_type"),
    Key("metricsPromExporterHost", "", "PROM: address /metrics listens on; blank means 0.0.0.0.", _str, "prom_host"),
    Key("metricsPromExporterPort", "5557", "PROM: port of /metrics (0 picks a free port).", _int(0, 65535),
        "prom_port"),
    Key("metricsGrpcExporterTarget", "",
        "OTLP_GRPC: collector address; https:// is prefixed unless it starts with http (http:// = plaintext).",
        grpc_target, "grpc_target"),
    Key("metricsHttpExporterTarget", "",
        "OTLP_HTTP (ours): collector URL; /v1/metrics is appended when the URL has no path.", _str, "http_target"),
    Key("metricsGrpcExporterHeader", "", "OTLP: extra headers (gRPC metadata or HTTP headers), CSV key:value.",
        _str, "header_text"),
    Key("metricGrpcExporterTimeOutInMills", "3000", "OTLP: export timeout in ms.", _int(1), "export_timeout_ms"),
    Key("metricGrpcExporterIntervalInMills", "60000", "OTLP: push interval in ms.", _int(1), "export_interval_ms"),
    Key("metricLoggingExporterIntervalInMills", "10000", "LOG: interval in ms between metric log lines.", _int(1),
        "log_interval_ms"),
    Key("metricsLabel", "", "Constant labels on every data point, CSV key:value (bad items logged and skipped).",
        _str, "label_text"),
    Key("metricsInDelta", "false",
        "OTLP/LOG: counters and histograms in delta temporality, plus label aggregation=delta.", _bool, "in_delta"),
    Key("metricsOtelCardinalityLimit", "50000",
        "Label sets per instrument; further ones fold into one overflow series.", _int(1), "cardinality_limit"),
    Key("metricsExportBatchMaxDataPoints", "1000",
        "OTLP: data points per export request; larger exports are split, never dropped whole.", _int(1),
        "batch_max_points"),
    Key("metricsExportBatchSplitEnabled", "true", "OTLP: split large exports (false sends one request).", _bool,
        "batch_split"),
    Key("metricsPerQueueLag", "false", "Ours: also emit per-queue lag series (label queue_id).", _bool,
        "per_queue_lag"),
)  # fmt: skip

KEY_NAMES = frozenset(k.name for k in KEYS)


@dataclass(frozen=True)
class TelemetryConfig:
    """Typed telemetry settings; build with :meth:`from_properties`."""

    exporter_type: ExporterType = ExporterType.DISABLE
    prom_host: str = ""
    prom_port: int = 5557
    grpc_target: str = ""
    http_target: str = ""
    header_text: str = ""
    export_timeout_ms: int = 3000
    export_interval_ms: int = 60000
    log_interval_ms: int = 10000
    label_text: str = ""
    in_delta: bool = False
    cardinality_limit: int = 50000
    batch_max_points: int = 1000
    batch_split: bool = True
    per_queue_lag: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TelemetryConfig:
        """Settings from a broker/name-server/controller properties dict. Keys that are not
        telemetry keys are ignored (the caller warns about unknown keys once, for all parts)."""
        values: dict[str, Any] = {}
        for key in KEYS:
            raw = props.get(key.name)
            if raw is None:
                raw = key.default
            try:
                values[key.attr] = key.parse(raw)
            except ValueError as exc:
                raise TelemetryConfigError(f"config key {key.name} has bad value {raw!r}: {exc}") from exc
        values["headers"] = {k.lower(): v for k, v in parse_pairs(values["header_text"], "metricsGrpcExporterHeader")
                             .items()}
        values["labels"] = parse_pairs(values["label_text"], "metricsLabel")
        config = cls(**values)
        config.check()
        return config

    def check(self) -> None:
        if self.exporter_type is ExporterType.OTLP_GRPC and not self.grpc_target:
            raise TelemetryConfigError(
                "config key metricsGrpcExporterTarget has bad value '': required when metricsExporterType=OTLP_GRPC "
                "(for example http://127.0.0.1:5559)")
        if self.exporter_type is ExporterType.OTLP_HTTP and not self.http_target:
            raise TelemetryConfigError(
                "config key metricsHttpExporterTarget has bad value '': required when metricsExporterType=OTLP_HTTP "
                "(for example http://127.0.0.1:4318/v1/metrics)")

    @property
    def enabled(self) -> bool:
        return self.exporter_type is not ExporterType.DISABLE

    @property
    def delta(self) -> bool:
        """Delta temporality applies to push modes only; PROM is always cumulative."""
        return self.in_delta and self.exporter_type in (ExporterType.OTLP_GRPC, ExporterType.OTLP_HTTP,
                                                        ExporterType.LOG)

    @property
    def http_url(self) -> str:
        url = self.http_target.rstrip("/")
        scheme_end = url.find("://")
        path_start = url.find("/", scheme_end + 3 if scheme_end >= 0 else 0)
        return url + "/v1/metrics" if path_start < 0 else url

    def opt_in(self, key: str) -> bool:
        """Whether an opt-in key of the catalogue (e.g. metricsPerQueueLag) is on."""
        for k in KEYS:
            if k.name == key:
                return bool(getattr(self, k.attr))
        raise KeyError(key)


def keys_table() -> str:
    """Markdown table of the keys, defaults and docs (for the lead's docs/CONFIG.md)."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{k.name}` | `{k.default}` | {k.doc} |" for k in KEYS]
    return "\n".join(lines)
