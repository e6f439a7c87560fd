"""``rocketscope exporter``: OTLP in (gRPC and HTTP) from any number of nodes, one /metrics out.

Why a separate process: a fleet can push to one place (Push mode without a collector), and
Prometheus scrapes one target; the series of every node stay apart (see store.py).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric

from ..otlp import points
from ..render import families
from . import legacy
from .receiver import grpc_server, http_server
from .store import NodeKey, SeriesStore

if TYPE_CHECKING:
    from rocketscope.tls import TlsServerConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExporterConfig:
    """Ports 0 pick free ones (tests); ``expire_after`` None means 3 push intervals (at least
    ``min_expiry`` seconds), or ``default_expiry`` seconds until a node's interval is known."""

    host: str = "0.0.0.0"
    grpc_port: int = 5559
    http_port: int = 5560
    metrics_port: int = 5558
    expire_after: float | None = None
    expire_intervals: float = 3.0
    default_expiry: float = 300.0
    min_expiry: float = 60.0  # store.py MIN_EXPIRY_S says why
    max_receive_bytes: int = 64 * 1024 * 1024
    legacy_names: bool = True
    # TLS on all three listeners (enforcing only: the exporter has no plaintext-and-TLS port);
    # built by the CLI from --tls-cert/--tls-key/--tls-trust/--tls-client-auth
    tls: TlsServerConfig | None = None


class _Collector:
    def __init__(self, store: SeriesStore, legacy_names: bool) -> None:
        self._store = store
        self._legacy = legacy_names

    def collect(self) -> list[Metric]:
        snapshot = self._store.snapshot()
        out = families(series.point for _, series in snapshot)
        if self._legacy:
            out += legacy.families(snapshot)
        return out


class ExporterServer:
    def __init__(self, config: ExporterConfig) -> None:
        self.config = config
        self.store = SeriesStore(config.expire_after, config.expire_intervals, config.default_expiry,
                                 config.min_expiry)
        self._stop = threading.Event()
        self._started = False
        self.grpc_port = self.http_port = self.metrics_port = 0

    def ingest(self, request: ExportMetricsServiceRequest, peer: str) -> None:
        self.store.ingest(points(request), peer)

    def start(self) -> ExporterServer:
        from rocketscope.tls import start_metrics_server

        c = self.config
        creds = c.tls.server_credentials() if c.tls else None
        self._grpc, self.grpc_port = grpc_server(self.ingest, c.host, c.grpc_port, c.max_receive_bytes, creds)
        self._http = None
        try:
            self._http = http_server(self.ingest, c.host, c.http_port, c.max_receive_bytes,
                                     c.tls.ssl_server_context() if c.tls else None)
            self.http_port = int(self._http.server_address[1])
            self._http_thread = threading.Thread(target=self._http.serve_forever, name="otlp-http", daemon=True)
            self._http_thread.start()
            self.registry = CollectorRegistry(auto_describe=False)
            self.registry.register(_Collector(self.store, c.legacy_names))  # type: ignore[arg-type]
            if c.tls is None:
                self._metrics, self._metrics_thread = start_http_server(c.metrics_port, addr=c.host,
                                                                        registry=self.registry)
            else:
                self._metrics, self._metrics_thread = start_metrics_server(c.metrics_port, c.host, self.registry,
                                                                           c.tls)
            self.metrics_port = int(self._metrics.server_address[1])
        except OSError:
            self._grpc.stop(grace=None)
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
            raise
        self._sweeper = threading.Thread(target=self._sweep, name="exporter-expiry", daemon=True)
        self._sweeper.start()
        self._started = True
        scheme = "https" if c.tls else "http"
        log.info("exporter: listening: OTLP/gRPC%s %s:%d, OTLP/HTTP %s://%s:%d/v1/metrics, Prometheus %s://%s:%d/metrics",
                 " (TLS)" if c.tls else "", c.host, self.grpc_port, scheme, c.host, self.http_port, scheme, c.host,
                 self.metrics_port)
        return self

    def _sweep(self) -> None:
        """Expire promptly (one log line per node) even when nobody scrapes."""
        while not self._stop.wait(0.5):
            self.store.expire()

    def nodes(self) -> list[NodeKey]:
        return self.store.nodes()

    def wait(self) -> None:
        self._stop.wait()

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        self._stop.set()
        self._grpc.stop(grace=1).wait(2)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self._metrics.shutdown()
        self._metrics.server_close()
        self._sweeper.join(timeout=2)
        log.info("exporter: stopped")
