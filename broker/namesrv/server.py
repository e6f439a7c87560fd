"""The name server process: `rocketscope namesrv [-c namesrv.conf] [-p PORT]`."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from typing import Any

import grpc

from rocketscope.broker.protocol import admin_pb2_grpc, namesrv_pb2_grpc
from rocketscope.config import Key, Settings, load_settings, port, positive
from rocketscope.telemetry import Telemetry, TelemetryConfig

from ..grpc_options import server_options
from ..remoting.config import REMOTING_KEYS
from ..security.config import TLS_KEYS, SecurityConfig
from ..security.listener import Listener, bind_server
from .admin import NamesrvAdminService
from .route_info import RouteInfo
from .service import NameServerService, scan_loop

log = logging.getLogger(__name__)

NAMESRV_KEYS: list[Key] = [
    Key("listenPort", int, 9876, "port of the name server's gRPC service", check=port),
    Key("listenHost", str, "127.0.0.1", "address to bind (`0.0.0.0`: every interface)"),
    Key("scanNotActiveBrokerInterval", int, 5000, "ms between scans for brokers that stopped registering",
        check=positive),
    Key("brokerChannelExpiredTime", int, 120_000, "ms without registration after which a broker is removed",
        check=positive),
    Key("brokerClusterName", str, "DefaultCluster", "the `cluster` label of this name server's metrics (a name "
        "server may serve several clusters; per-cluster series also carry broker_cluster)"),
]
NAMESRV_KEYS += REMOTING_KEYS


def load_namesrv_config(raw: Mapping[str, str]) -> Settings:
    from rocketscope.broker.controller.config import EMBEDDED_KEYS, check_raft_keys
    from rocketscope.broker.telemetry_keys import TELEMETRY_KEYS

    settings = load_settings([*NAMESRV_KEYS, *TLS_KEYS, *EMBEDDED_KEYS], raw, extra_known=TELEMETRY_KEYS,
                             what="name server")
    if settings.enableControllerInNamesrv:
        check_raft_keys(settings)
    return settings


class NameServer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.routes = RouteInfo(expired_ms=settings.brokerChannelExpiredTime)
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self._scan: asyncio.Task[None] | None = None
        self.telemetry_config = TelemetryConfig.from_properties(settings.raw)
        self.telemetry = Telemetry.disabled()
        # TLS only (no ACL: brokers are the name server's only callers); see docs/SECURITY.md
        self.security = SecurityConfig.from_properties(settings.raw)
        self._listener: Listener | None = None
        self.controller: Any = None  # ControllerRuntime when enableControllerInNamesrv

    async def start(self) -> None:
        self.telemetry = Telemetry.start(self.telemetry_config, "namesrv", self.settings.brokerClusterName,
                                         f"namesrv-{self.settings.listenPort}",
                                         serve=self.security.metrics_serve())
        self._register_gauges()
        self.server = grpc.aio.server(options=server_options())
        namesrv_pb2_grpc.add_NameServerServicer_to_server(NameServerService(self.routes, self.telemetry), self.server)
        admin_pb2_grpc.add_NamesrvAdminServicer_to_server(NamesrvAdminService(self.routes), self.server)
        if self.settings.enableControllerInNamesrv:
            # RocketMQ's embedded controller: its client service on the name server's port, Raft on its own
            from rocketscope.broker.controller.node import ControllerRuntime

            s = self.settings
            client_addr = s.controllerAdvertisedAddr or f"127.0.0.1:{s.listenPort}"
            self.controller = ControllerRuntime(s, client_addr, self.telemetry, client_server=self.server)
            self.controller.add_client_service(self.server)
        address = f"{self.settings.listenHost}:{self.settings.listenPort}"
        try:
            self._listener = self._bind(address)
        except OSError as exc:
            raise OSError(f"name server cannot bind {address}: {exc}") from None
        await self.server.start()
        await self._listener.start()
        self.port = self._listener.port
        self._scan = asyncio.get_running_loop().create_task(
            scan_loop(self.routes, self.settings.scanNotActiveBrokerInterval / 1000))
        log.info("name server listening on %s:%d", self.settings.listenHost, self.port)
        if self.controller is not None:
            await self.controller.start()

    def _bind(self, address: str) -> Listener:
        """gRPC on ``address``, and RocketMQ's remoting protocol beside it (docs/REMOTING.md)."""
        tls = self.security.server_tls.for_internal()
        if not self.settings.enableRemoting:
            return bind_server(self.server, address, tls)
        from ..remoting.namesrv_handlers import namesrv_handlers
        from ..remoting.server import RemotingServer, bind_with_remoting

        queries = self.telemetry.counter("rocketmq_namesrv_route_queries_total")
        handlers = namesrv_handlers(self.routes, lambda found: queries.add(1, {"result": "found" if found
                                                                               else "not_found"}))
        self.remoting = RemotingServer("name server", handlers, max_frame=self.settings.remotingFrameMaxLength,
                                       idle_s=self.settings.serverChannelMaxIdleTimeSeconds)
        return bind_with_remoting(self.server, address, tls, self.remoting,  # type: ignore[no-any-return]
                                  self.settings.remotingListenPort, self.security.server_tls)

    def _register_gauges(self) -> None:
        """Gauges read plain dicts the event loop replaces whole, so the reader thread never sees them change."""
        routes = self.routes

        def brokers() -> list[tuple[float, dict[str, object]]]:
            counts: dict[str, int] = {}
            for (cluster, _, _) in list(routes.brokers):
                counts[cluster] = counts.get(cluster, 0) + 1
            return [(n, {"broker_cluster": c}) for c, n in counts.items()]

        self.telemetry.gauge("rocketmq_namesrv_registered_brokers", brokers)
        self.telemetry.gauge("rocketmq_namesrv_registered_topics", lambda: [(len(routes.topic_queues), {})])
        expired = self.telemetry.counter("rocketmq_namesrv_broker_expired_total")
        routes.on_expired = lambda cluster: expired.add(1, {"broker_cluster": cluster})

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        if self._scan:
            self._scan.cancel()
        if self._listener is not None:
            await self._listener.stop()
        if self.server:
            await self.server.stop(grace=1)
        await asyncio.to_thread(self.telemetry.stop)
        log.info("name server stopped")


async def run_namesrv(settings: Settings) -> None:
    ns = NameServer(settings)
    await ns.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await ns.stop()
