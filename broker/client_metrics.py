"""Client metrics: tell the official clients where to push their OTLP metrics (Settings.metric).

``metricCollectorMode`` follows RocketMQ's proxy:
- ``off``: clients keep their metrics to themselves;
- ``on``: clients push to ``metricCollectorAddress`` (a collector or `rocketscope exporter`);
- ``proxy``: clients push to this broker's own client port, where the OTLP MetricsService
  is served next to MessagingService; the broker keeps the series (per client, expiring
  when a client stops pushing) and re-exports them on its /metrics in PROM mode, or
  forwards the pushes to its own OTLP target in OTLP_GRPC mode.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketscope.telemetry.config import ExporterType
from rocketscope.telemetry.exporter.store import SeriesStore
from rocketscope.telemetry.otlp import points

from .route_view import endpoints_of

if TYPE_CHECKING:
    from rocketscope.config import Settings
    from rocketscope.telemetry import Telemetry, TelemetryConfig

log = logging.getLogger(__name__)
MODES = ("OFF", "ON", "PROXY")


class _StoreCollector:
    """Renders the clients' series with the re-exporting broker's identity (cluster, node_type, node_id, and
    its metricsLabel pairs): the official clients push an empty Resource, and without these labels a Grafana
    cluster or node filter would empty every client panel."""

    def __init__(self, store: SeriesStore, identity: dict[str, str]) -> None:
        self.store = store
        self.identity = identity

    def collect(self) -> list[Any]:
        from rocketscope.telemetry.render import families  # prometheus_client: only a PROM proxy scrape needs it

        self.store.expire()
        ident = self.identity
        return families(replace(series.point, attributes={**series.point.attributes, **ident})
                        for _, series in self.store.snapshot())


def with_identity(request: metrics_service_pb2.ExportMetricsServiceRequest,
                  identity: dict[str, str]) -> metrics_service_pb2.ExportMetricsServiceRequest:
    """A copy of ``request`` whose data points carry the broker's identity (forwarded pushes, OTLP_GRPC mode).
    On the points, not the Resource: a collector's Prometheus exporter drops Resource attributes by default."""
    out = metrics_service_pb2.ExportMetricsServiceRequest()
    out.CopyFrom(request)
    for rm in out.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                which = metric.WhichOneof("data")
                for dp in getattr(metric, which).data_points if which else ():
                    present = {kv.key for kv in dp.attributes}
                    for key, value in identity.items():
                        if key not in present:
                            dp.attributes.add(key=key, value=AnyValue(string_value=str(value)))
    return out


class _MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, proxy: ClientMetricsProxy) -> None:
        self.proxy = proxy

    async def Export(self, request: metrics_service_pb2.ExportMetricsServiceRequest,
                     context: grpc.aio.ServicerContext) -> metrics_service_pb2.ExportMetricsServiceResponse:
        await self.proxy.ingest(request, context.peer() or "")
        return metrics_service_pb2.ExportMetricsServiceResponse()


class MetricsHost(Protocol):
    """What the client-metrics proxy uses of its broker (issue 17: this, not the whole Broker)."""

    settings: Settings
    grpc_addr: str
    telemetry_config: TelemetryConfig
    telemetry: Telemetry  # replaced when telemetry starts: read at each use


class ClientMetricsProxy:
    def __init__(self, broker: MetricsHost) -> None:
        self.broker = broker
        raw = broker.settings.raw
        self.mode = raw.get("metricCollectorMode", "off").strip().upper() or "OFF"
        if self.mode not in MODES:
            from rocketscope.config import ConfigError

            raise ConfigError(f"config key metricCollectorMode has bad value {raw['metricCollectorMode']!r}: "
                              "expected off, on or proxy")
        self.address = raw.get("metricCollectorAddress", "").strip()
        if self.mode == "ON" and not self.address:
            from rocketscope.config import ConfigError

            raise ConfigError("config key metricCollectorAddress has bad value '': required when "
                              "metricCollectorMode=on (host:port of an OTLP gRPC collector)")
        self.store = SeriesStore(default_expiry=300.0)
        self.received = 0
        self._forward: Any = None

    def register(self, server: grpc.aio.Server) -> None:
        """Serve the OTLP MetricsService on the client port (proxy mode)."""
        if self.mode == "PROXY":
            metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsService(self), server)

    def start(self) -> None:
        if self.mode != "PROXY":
            return
        tel = self.broker.telemetry
        if tel.register_collector(_StoreCollector(self.store, dict(tel.labels))):
            log.info("client metrics: clients push to %s; their series are re-exported on /metrics",
                     self.broker.grpc_addr)
        elif self.broker.telemetry_config.exporter_type is ExporterType.OTLP_GRPC:
            target = self.broker.telemetry_config.grpc_target
            channel = grpc.aio.insecure_channel(target.split("://", 1)[-1]) if target.startswith("http://") \
                else grpc.aio.secure_channel(target.split("://", 1)[-1], grpc.ssl_channel_credentials())
            self._forward = metrics_service_pb2_grpc.MetricsServiceStub(channel)
            log.info("client metrics: clients push to %s; forwarded to %s", self.broker.grpc_addr, target)
        else:
            log.warning("client metrics: metricCollectorMode=proxy needs metricsExporterType PROM or OTLP_GRPC to "
                        "re-export; client pushes will only be counted")

    async def ingest(self, request: metrics_service_pb2.ExportMetricsServiceRequest, peer: str) -> None:
        self.received += 1
        self.store.ingest(points(request), peer)
        if self._forward is not None:
            try:
                await self._forward.Export(with_identity(request, self.broker.telemetry.labels), timeout=5)
            except grpc.aio.AioRpcError as exc:
                log.warning("client metrics: forwarding failed: %s", exc.code().name)

    def apply(self, settings: pb.Settings) -> None:
        """Fill Settings.metric for a client according to the mode."""
        if self.mode == "OFF":
            settings.metric.on = False
            settings.metric.ClearField("endpoints")
            return
        settings.metric.on = True
        address = self.address if self.mode == "ON" else self.broker.grpc_addr
        settings.metric.endpoints.CopyFrom(endpoints_of(address))

    async def stop(self) -> None:
        await asyncio.sleep(0)
