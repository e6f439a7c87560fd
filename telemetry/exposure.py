"""The exposure modes: one metric reader (and for PROM an HTTP server) per metricsExporterType.

Why these choices:
- PROM: no SDK reader at all. Each scrape renders our own accumulators and gauge callbacks to
  text (``promtext``; issue #6: the SDK collection plus prometheus_client families took ~4 s
  for 61k samples), followed by the collectors registered on the endpoint's private registry
  (``register_collector``: the client metrics the broker re-exports) rendered by
  prometheus_client. Served by a small WSGI app on its own server, gzip (level 1: a 10 MB
  exposition compresses ~20x in tens of ms; level 9 costs several times more for a few per
  cent) when the scraper accepts it, as Prometheus does. Each Telemetry has its own registry
  and port, so two in one process never mix, and ``stop()`` really frees the port.
- OTLP_GRPC/OTLP_HTTP: the SDK's OTLP exporters behind a periodic reader; the exporters'
  ``max_export_batch_size`` splits one large export into requests of at most
  metricsExportBatchMaxDataPoints points (RocketMQ issue #10240: one export over the gRPC
  message limit used to lose *all* metrics). Histograms are accumulated by us, not by the SDK
  (``instruments``), so ``HistogramExporter`` adds them to each export the SDK hands over, and
  ``HistogramReader`` hands it an empty one when the SDK has no data points of its own.
- LOG: one INFO line of OTLP-JSON per interval through ``logging``.
"""

from __future__ import annotations

import gzip
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

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
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from .config import ExporterType, TelemetryConfig

log = logging.getLogger(__name__)

_KINDS = (Counter, UpDownCounter, Histogram, ObservableCounter, ObservableUpDownCounter, ObservableGauge)


def temporality(config: TelemetryConfig) -> dict[type, AggregationTemporality]:
    """RocketMQ's rule: with metricsInDelta, OTLP sends counters, observable counters and
    histograms as delta (the rest cumulative); LOG is delta throughout; PROM is cumulative."""
    cumulative: dict[type, AggregationTemporality] = dict.fromkeys(_KINDS, AggregationTemporality.CUMULATIVE)
    if not config.delta:
        return cumulative
    if config.exporter_type is ExporterType.LOG:
        return dict[type, AggregationTemporality].fromkeys(_KINDS, AggregationTemporality.DELTA)
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


class HistogramExporter(MetricExporter):
    """Wraps the OTLP/LOG exporter: adds our histogram metrics to each export of the SDK's data.
    The SDK calls ``export`` only when it has data points of its own, so ``HistogramReader``
    hands over an empty collection when it has none: a process that only recorded histograms
    still pushes them. An export with nothing at all in it is not sent (as the SDK does)."""

    def __init__(self, inner: MetricExporter, scope_name: str) -> None:
        super().__init__(preferred_temporality=inner._preferred_temporality,  # same as the inner one's
                         preferred_aggregation=inner._preferred_aggregation)
        self.inner = inner
        self._scope_name = scope_name
        self.histograms: Callable[[], list[Metric]] = list

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        extra = self.histograms()
        if extra:
            metrics_data = with_metrics(metrics_data, extra, self._scope_name)
        elif not any(sm.metrics for rm in metrics_data.resource_metrics for sm in rm.scope_metrics):
            return MetricExportResult.SUCCESS
        return self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class HistogramReader(PeriodicExportingMetricReader):
    """The SDK's periodic reader, except that a collection in which the SDK found no data points
    (its ``collect`` then exports nothing) still reaches ``HistogramExporter`` as an empty
    ``MetricsData`` of the process's resource, so that our histograms are pushed. Only the
    public ``collect`` and the documented ``_receive_metrics`` hook are overridden."""

    def __init__(self, exporter: HistogramExporter, resource: Resource, **kwargs: Any) -> None:
        super().__init__(exporter, **kwargs)
        self._resource = resource
        self._received = threading.local()  # collect may run on the timer thread and in force_flush at once

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> None:
        self._received.flag = True
        super()._receive_metrics(metrics_data, timeout_millis=timeout_millis, **kwargs)

    # the SDK declares collect final; overriding it is how an empty collection still reaches the
    # exporter (a histogram-only process: the histograms are added by the exporter, see above)
    def collect(self, timeout_millis: float = 10_000) -> None:  # type: ignore[misc]
        self._received.flag = False
        super().collect(timeout_millis=timeout_millis)
        if not self._received.flag and self._collect is not None:
            empty = MetricsData(resource_metrics=[ResourceMetrics(resource=self._resource, scope_metrics=[],
                                                                  schema_url="")])
            super()._receive_metrics(empty, timeout_millis=timeout_millis)


def with_metrics(data: MetricsData, extra: Sequence[Metric], scope_name: str) -> MetricsData:
    """``data`` plus ``extra`` in the scope named ``scope_name`` (the node's meter) of the first resource."""
    if not data.resource_metrics:
        return data
    first, *rest = data.resource_metrics
    scopes = list(first.scope_metrics)
    for i, sm in enumerate(scopes):
        if sm.scope.name == scope_name:
            scopes[i] = ScopeMetrics(scope=sm.scope, metrics=[*sm.metrics, *extra], schema_url=sm.schema_url)
            break
    else:
        scopes.append(ScopeMetrics(scope=InstrumentationScope(scope_name), metrics=list(extra), schema_url=""))
    resource = ResourceMetrics(resource=first.resource, scope_metrics=scopes, schema_url=first.schema_url)
    return MetricsData(resource_metrics=[resource, *rest])


MetricsApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
MetricsServe = Callable[[int, str, Any], tuple[Any, Any]]


def gzip_accepted(header: str) -> bool:
    for part in header.split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() == "gzip":
            return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


def metrics_app(render: Callable[[], str], registry: CollectorRegistry) -> MetricsApp:
    """WSGI app for /metrics: our text, then the registry's collectors; gzip when accepted.
    Methods and paths as prometheus_client's app (OPTIONS, GET on any path, favicon empty)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        if method == "OPTIONS":
            start_response("200 OK", [("Allow", "OPTIONS,GET")])
            return [b""]
        if method != "GET":
            start_response("405 Method Not Allowed", [("Allow", "OPTIONS,GET")])
            return [f"# HTTP 405 Method Not Allowed: {method}; use OPTIONS or GET\n".encode()]
        if environ.get("PATH_INFO") == "/favicon.ico":
            start_response("200 OK", [])
            return [b""]
        body = render().encode() + generate_latest(registry)
        headers = [("Content-Type", CONTENT_TYPE_LATEST)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


def serve_http(port: int, host: str, app: MetricsApp) -> tuple[Any, threading.Thread]:
    """Plain-HTTP server for ``app`` on a daemon thread; returns (server, thread)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(_Server):
        address_family = family

    httpd = make_server(host, port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return httpd, thread


class PrometheusEndpoint:
    """PROM mode's /metrics: our renderer plus a private registry for extra collectors."""

    def __init__(self, render: Callable[[], str], host: str, port: int, serve: MetricsServe | None = None) -> None:
        """``serve(port, host, app)`` replaces the plain HTTP server (the broker passes an HTTPS
        one when tls.metrics.enable is on); it returns (server, thread)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.host = host or "0.0.0.0"
        app = metrics_app(render, self.registry)
        if serve is None:
            self._server, self._thread = serve_http(port, self.host, app)
        else:
            self._server, self._thread = serve(port, self.host, app)
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


def build_reader(config: TelemetryConfig, scope_name: str,
                 resource: Resource | None = None) -> tuple[MetricReader | None, HistogramExporter | None]:
    """The SDK reader for the push modes and its exporter (whose ``histograms`` the caller sets);
    (None, None) for DISABLE and PROM (PROM renders our own state, see the module docstring).
    ``resource`` must be the MeterProvider's: it is the resource of histogram-only exports."""
    kind = config.exporter_type
    if kind in (ExporterType.DISABLE, ExporterType.PROM):
        return None, None
    resource = resource if resource is not None else Resource.create({})
    if kind is ExporterType.LOG:
        exporter = HistogramExporter(LoggingMetricExporter(temporality(config)), scope_name)
        return HistogramReader(exporter, resource, export_interval_millis=config.log_interval_ms), exporter
    exporter = HistogramExporter(otlp_exporter(config), scope_name)
    target = config.grpc_target if kind is ExporterType.OTLP_GRPC else config.http_url
    log.info("metrics: pushing OTLP (%s) to %s every %d ms", kind.name, target, config.export_interval_ms)
    reader = HistogramReader(exporter, resource, export_interval_millis=config.export_interval_ms,
                             export_timeout_millis=config.export_timeout_ms)
    return reader, exporter
