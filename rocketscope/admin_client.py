"""Calls the admin CLI makes: the name server for cluster views, each broker for the rest."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc
from rocketscope.broker.security.signature import client_metadata
from rocketscope.broker.security.tls import TlsClientConfig


class AdminError(Exception):
    """An admin call that failed; the message says where and why."""


@dataclass
class BrokerNode:
    cluster: str
    name: str
    broker_id: int
    addr: str
    grpc_addr: str
    role: str
    last_update_ms: int
    registration: namesrv_pb2.BrokerRegistration


@dataclass(frozen=True)
class Connection:
    """How the admin tools reach the cluster: TLS settings and the account requests are signed with."""

    tls: TlsClientConfig = field(default_factory=TlsClientConfig)
    access_key: str = ""
    secret_key: str = ""

    def channel(self, addr: str) -> grpc.aio.Channel:
        return self.tls.channel(addr)

    def metadata(self) -> list[tuple[str, str]] | None:
        """A fresh signature per call (the broker bounds the clock skew of x-mq-date-time)."""
        return client_metadata(self.access_key, self.secret_key) if self.access_key else None


class AdminClient:
    def __init__(self, namesrv: str, timeout_s: float = 5.0, connection: Connection | None = None) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
        self.timeout = timeout_s
        self.connection = connection or Connection()
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _channel(self, addr: str) -> grpc.aio.Channel:
        if addr not in self._channels:
            self._channels[addr] = self.connection.channel(addr)
        return self._channels[addr]

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()

    async def _namesrv_call(self, method: str, request: object) -> object:
        errors = []
        for addr in self.namesrv_addrs:
            stub = namesrv_pb2_grpc.NameServerStub(self._channel(addr))
            try:
                return await getattr(stub, method)(request, timeout=self.timeout, metadata=self.connection.metadata())
            except grpc.aio.AioRpcError as exc:
                errors.append(f"{addr}: {exc.code().name}")
        if not self.namesrv_addrs:
            raise AdminError("no name server given: use -n host:port (or set NAMESRV_ADDR)")
        raise AdminError("no name server answered (" + "; ".join(errors) + ")")

    def broker_stub(self, addr: str) -> admin_pb2_grpc.BrokerAdminStub:
        return admin_pb2_grpc.BrokerAdminStub(self._channel(addr))

    async def broker_call(self, addr: str, method: str, request: object) -> object:
        try:
            return await getattr(self.broker_stub(addr), method)(request, timeout=self.timeout,
                                                                 metadata=self.connection.metadata())
        except grpc.aio.AioRpcError as exc:
            raise AdminError(f"broker {addr} did not answer {method}: {exc.code().name} {exc.details()}") from None

    async def cluster(self) -> list[BrokerNode]:
        resp = await self._namesrv_call("GetClusterInfo", common_pb2.Empty())
        out = []
        for b in resp.brokers:  # type: ignore[attr-defined]
            r = b.registration
            out.append(BrokerNode(r.cluster_name, r.broker_name, r.broker_id, r.broker_addr, r.grpc_addr, r.role,
                                  b.last_update_ms, r))
        return out

    async def topics(self) -> list[str]:
        resp = await self._namesrv_call("GetAllTopicList", common_pb2.Empty())
        return list(resp.topics)  # type: ignore[attr-defined]

    async def route(self, topic: str) -> namesrv_pb2.GetRouteResponse:
        return await self._namesrv_call("GetRouteInfoByTopic", namesrv_pb2.GetRouteRequest(topic=topic))  # type: ignore[return-value]

    async def delete_topic_in_namesrv(self, topic: str) -> None:
        """Drop the topic's route from every name server (the brokers re-register without it anyway)."""
        for addr in self.namesrv_addrs:
            stub = namesrv_pb2_grpc.NameServerStub(self._channel(addr))
            try:
                await stub.DeleteTopicInNamesrv(namesrv_pb2.DeleteTopicRequest(topic=topic), timeout=self.timeout,
                                                metadata=self.connection.metadata())
            except grpc.aio.AioRpcError:
                continue

    async def masters(self, cluster: str | None = None) -> list[BrokerNode]:
        return [b for b in await self.cluster() if b.broker_id == 0 and (cluster is None or b.cluster == cluster)]

    async def target_brokers(self, broker: str | None, cluster: str | None) -> list[str]:
        """Internal addresses of the brokers a write command applies to (-b, or the masters of -c)."""
        if broker:
            return [broker]
        masters = await self.masters(cluster)
        if not masters:
            raise AdminError(f"no master broker found{' in cluster ' + cluster if cluster else ''}")
        return [m.addr for m in masters]

    async def query_message(self, key: str, topic: str | None, max_num: int = 32) -> list[admin_pb2.StoredMessageView]:
        out = []
        for b in await self.cluster():
            req = admin_pb2.QueryMessageRequest(topic=topic or "", key=key, max_num=max_num)
            resp = await self.broker_call(b.addr, "QueryMessage", req)
            out.extend(resp.messages)  # type: ignore[attr-defined]
        seen, unique = set(), []
        for m in out:
            ident = (m.broker_name, m.commitlog_offset)
            if ident not in seen:
                seen.add(ident)
                unique.append(m)
        return unique
