"""BrokerContainer: several brokers in one process (RocketMQ 5's mqbrokercontainer).

Each broker keeps its own store, ports, name-server sessions and HA role; they share the
process and its event loop, which is the point: a container can host one group's master
next to another group's slave ("crossed" deployment) without a process per broker.
Brokers are added and removed at runtime through the container's admin service.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from pathlib import Path

import grpc

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2
from rocketscope.config import ConfigError, Key, Settings, load_settings, port, read_properties

from .broker import Broker
from .broker_config import load_broker_config
from .grpc_options import server_options
from .security.config import TLS_KEYS, SecurityConfig
from .security.listener import Listener, bind_listener

log = logging.getLogger(__name__)

CONTAINER_KEYS: list[Key] = [
    Key("brokerConfigPaths", str, "", "broker config files to start, `:`-separated (empty: start with none)"),
    Key("namesrvAddr", str, "", "name servers, used by brokers whose config has none"),
    Key("brokerContainerIP", str, "127.0.0.1", "address the container's admin service binds and advertises "
        "(`0.0.0.0`: every interface)"),
    Key("listenPort", int, 10811, "port of the container's admin service", check=port),
]


def load_container_config(raw: Mapping[str, str]) -> Settings:
    return load_settings([*CONTAINER_KEYS, *TLS_KEYS], raw, what="container")


class BrokerContainer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.brokers: dict[tuple[str, str, int], tuple[Broker, str]] = {}
        self.server: grpc.aio.Server | None = None
        self._listener: Listener | None = None
        self.port = 0

    def _key(self, b: Broker) -> tuple[str, str, int]:
        return (b.cluster, b.broker_name, b.own_broker_id)

    async def add_broker(self, config_path: str) -> Broker:
        raw = read_properties(config_path)
        if not raw.get("namesrvAddr") and self.settings.namesrvAddr:
            raw["namesrvAddr"] = self.settings.namesrvAddr
        settings = load_broker_config(raw)
        broker = Broker(settings)
        key = self._key(broker)
        if key in self.brokers:
            raise ConfigError(f"broker {key[0]}:{key[1]}:{key[2]} already runs in this container")
        for other, _ in self.brokers.values():
            if Path(other.settings.storePathRootDir).expanduser() == Path(settings.storePathRootDir).expanduser():
                raise ConfigError(f"config key storePathRootDir has bad value {settings.storePathRootDir!r}: "
                                  f"broker {other.node_id} in this container already uses it")
        try:
            await broker.start()
        except BaseException as exc:
            # a half-started broker holds ports, files and tasks nobody could remove later: undo it all
            log.error("container: broker %s from %s failed to start (%s); cleaning up", broker.node_id, config_path,
                      exc)
            await self._clean_up(broker)
            raise
        self.brokers[key] = (broker, config_path)
        log.info("container: added broker %s (%s) from %s", broker.node_id, broker.role, config_path)
        return broker

    @staticmethod
    async def _clean_up(broker: Broker) -> None:
        try:
            await asyncio.wait_for(broker.stop(), 30)
        except Exception:
            log.exception("container: cleaning up broker %s failed", broker.node_id)

    async def remove_broker(self, cluster: str, name: str, broker_id: int) -> bool:
        entry = self.brokers.pop((cluster, name, broker_id), None)
        if entry is None:
            return False
        await entry[0].stop()
        log.info("container: removed broker %s:%s:%d", cluster, name, broker_id)
        return True

    async def start(self) -> None:
        self.server = grpc.aio.server(options=server_options())
        admin_pb2_grpc.add_ContainerAdminServicer_to_server(ContainerAdminService(self), self.server)
        # the container's admin port (addBroker/removeBroker) has TLS but no ACL: require client
        # certificates (tls.internal.need.client.auth=require) where untrusted hosts can reach it
        tls = SecurityConfig.from_properties(self.settings.raw).server_tls.for_internal()
        self._listener = bind_listener(self.server, "listenPort", self.settings.brokerContainerIP,
                                       self.settings.listenPort, tls)
        await self.server.start()
        await self._listener.start()
        self.port = self._listener.port
        for path in filter(None, (p.strip() for p in self.settings.brokerConfigPaths.split(":"))):
            await self.add_broker(path)
        log.info("container listening on %s:%d with %d broker(s)", self.settings.brokerContainerIP, self.port,
                 len(self.brokers))

    async def stop(self) -> None:
        for broker, _ in list(self.brokers.values()):
            await broker.stop()
        self.brokers.clear()
        if self._listener is not None:
            await self._listener.stop()
        if self.server:
            await self.server.stop(grace=1)
        log.info("container stopped")


class ContainerAdminService(admin_pb2_grpc.ContainerAdminServicer):
    def __init__(self, container: BrokerContainer) -> None:
        self.container = container

    async def AddBroker(self, request: admin_pb2.AddBrokerRequest, context: grpc.aio.ServicerContext
                        ) -> common_pb2.Status:
        """Start a broker; on any failure nothing of it stays and the gRPC status says why.

        INVALID_ARGUMENT: the config is wrong; FAILED_PRECONDITION: the host refuses (a port in
        use, a store that cannot be opened); INTERNAL: anything else.  The details name the cause.
        """
        where = f"addBroker {request.config_path}"
        try:
            await self.container.add_broker(request.config_path)
        except (ConfigError, ValueError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: {exc}")
        except OSError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{where}: {exc}")
        except Exception as exc:
            log.exception("%s failed", where)
            await context.abort(grpc.StatusCode.INTERNAL, f"{where}: {type(exc).__name__}: {exc}")
        return common_pb2.Status()

    async def RemoveBroker(self, request: admin_pb2.RemoveBrokerRequest, context: grpc.aio.ServicerContext
                           ) -> common_pb2.Status:
        if await self.container.remove_broker(request.cluster_name, request.broker_name, request.broker_id):
            return common_pb2.Status()
        return common_pb2.Status(code=13, remark=f"no broker {request.cluster_name}:{request.broker_name}:"
                                                 f"{request.broker_id} in this container")

    async def ContainerStatus(self, request: common_pb2.Empty, context: grpc.aio.ServicerContext
                              ) -> admin_pb2.ContainerStatusResponse:
        resp = admin_pb2.ContainerStatusResponse(status=common_pb2.Status())
        for (cluster, name, bid), (b, path) in sorted(self.container.brokers.items()):
            resp.brokers.add(cluster_name=cluster, broker_name=name, broker_id=bid, role=b.role, grpc_addr=b.grpc_addr,
                             admin_addr=b.internal_addr, config_path=path)
        return resp


async def run_container(settings: Settings) -> None:
    container = BrokerContainer(settings)
    await container.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await container.stop()
