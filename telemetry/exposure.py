"""The exposure modes: one metric reader (and for PROM an HTTP server) per metricsExporterType.

Why these choices:
- PROM: an ``InMemoryMetricReader`` read on each scrape, rendered by our renderer into a
  private prometheus_client registry served by prometheus_client's own HTTP server. Each
  Telemetry has its own registry and port, so two in one process (tests, BrokerContainer
  experiments) never mix, and ``stop()`` really frees the port.
- OTLP_GRPC/OTLP_HTTP: the SDK's OTLP exporters behind a periodic reader; the exporters'
  ``max_export_batch_size`` splits one large export into requests of at most
  metricsExportBatchMaxDataPoints points (RocketMQ issue #10240: one export over the gRPC
  message limit used to lose *all* metrics).
- LOG: one INFO line of OTLP-JSON per interval through ``logging``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric

from .config import ExporterType, TelemetryConfig
from .otlp import sdk_points
from .render import families

log = logging.getLogger(__name__)

_KINDS = (Counter, UpDownCounter, Histogram, ObservableCounter, ObservableUpDownCounter, ObservableGauge)


def temporality(config: TelemetryConfig) -> dict[type, AggregationTemporality]:
    """RocketMQ's rule: with metricsInDelta, OTLP sends counters, observable counters and
    histograms as delta (the rest cumulative); LOG is delta throughout; PROM is cumulative."""
    cumulative = dict.fromkeys(_KINDS, AggregationTemporality.CUMULATIVE)
    if not config.delta:
        return cumulative
    if config.exporter_type is ExporterType.LOG:
        return dict.fromkeys(_KINDS, AggregationTemporality.DELTA)
    return {**cumulative, Counter: AggregationTemporality.DELTA, ObservableCounter: AggregationTemporality.DELTA,
            Histogram: AggregationTemporality.DELTA}


class LoggingMetricExporter(MetricExporter):
    """LOG mode: each collection as one OTLP-JSON log line (RocketMQ's LoggingMetricExporter)."""

    def __init__(self, preferred_temporality: dict[type, AggregationTemporality]) -> None:
        super().__init__(preferred_temporality=preferred_temporality)
        self._log = logging.getLogger("rocketscope.metrics")

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        self._log.info("%s", metrics_data.to_json(indent=None))
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


class _ScrapeCollector:
    """prometheus_client custom collector: collect the SDK now, render through our renderer."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self._reader = reader

    def collect(self) -> list[Metric]:
        data = self._reader.get_metrics_data()
        if data is None:
            return []
        return families(sdk_points(data))


MetricsServe = Callable[[int, str, CollectorRegistry], tuple[Any, Any]]


class PrometheusEndpoint:
    """PROM mode's /metrics on its own registry and HTTP server."""

    def __init__(self, reader: InMemoryMetricReader, host: str, port: int, serve: MetricsServe | None = None) -> None:
        """``serve`` replaces prometheus_client's plain HTTP server (the broker passes an HTTPS
        one when tls.metrics.enable is on); it returns (server, thread) like start_http_server."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_ScrapeCollector(reader))  # type: ignore[arg-type]
        self.host = host or "0.0.0.0"
        if serve is None:
            self._server, self._thread = start_http_server(port, addr=self.host, registry=self.registry)
        else:
            self._server, self._thread = serve(port, self.host, self.registry)
        self.port = int(self._server.server_address[1])
        scheme = "http" if serve is None else "https"
        log.info("metrics: Prometheus endpoint listening on %s://%s:%d/metrics", scheme, self.host, self.port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def otlp_exporter(config: TelemetryConfig) -> MetricExporter:
    preferred = temporality(config)
    batch = config.batch_max_points if config.batch_split else None
    timeout_s = config.export_timeout_ms / 1000.0
    headers = dict(config.headers)
    if config.exporter_type is ExporterType.OTLP_GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

        return GrpcExporter(endpoint=config.grpc_target, insecure=config.grpc_target.startswith("http://"),
                            headers=headers or None, timeout=timeout_s, preferred_temporality=preferred,
                            max_export_batch_size=batch)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

    return HttpExporter(endpoint=config.http_url, headers=headers or None, timeout=timeout_s,
                        preferred_temporality=preferred, max_export_batch_size=batch)


def build_reader(config: TelemetryConfig) -> MetricReader | None:
    """The reader for the configured mode (None for DISABLE). For PROM it is an in-memory
    reader; the caller serves it with :class:`PrometheusEndpoint` once the provider exists."""
    kind = config.exporter_type
    if kind is ExporterType.DISABLE:
        return None
    if kind is ExporterType.PROM:
        return InMemoryMetricReader(preferred_temporality=temporality(config))
    if kind is ExporterType.LOG:
        exporter: MetricExporter = LoggingMetricExporter(temporality(config))
        return PeriodicExportingMetricReader(exporter, export_interval_millis=config.log_interval_ms)
    exporter = otlp_exporter(config)
    target = config.grpc_target if kind is ExporterType.OTLP_GRPC else config.http_url
    log.info("metrics: pushing OTLP (%s) to %s every %d ms", kind.name, target, config.export_interval_ms)
    return PeriodicExportingMetricReader(exporter, export_interval_millis=config.export_interval_ms,
                                         export_timeout_millis=config.export_timeout_ms)
