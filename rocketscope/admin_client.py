"""Calls the admin CLI makes: the name server for cluster views, each broker for the rest.

RocketScope's servers are asked over gRPC.  A cluster that does not serve those APIs, such as
Apache RocketMQ (its name server speaks only remoting), is read over RocketMQ's remoting
protocol instead (rocketscope/remoting_client.py) for the read-side views the observing tools
need: ``cluster``, ``topics``, ``route`` and ``query_message``.  The name-server address
chooses (``remoting://``, ``grpc://``, or bare: gRPC first, then remoting when no name server
answers gRPC); the broker-side admin commands stay gRPC-only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc

from rocketscope import remoting_client as rc
from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc
from rocketscope.signature import client_metadata
from rocketscope.tls import TlsClientConfig


class AdminError(Exception):
    """An admin call that failed; the message says where and why."""


class _UseRemoting(Exception):
    """Internal: the name servers speak remoting, not gRPC; the caller takes its remoting path."""


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
        try:
            self.protocol, self.namesrv_addrs = rc.split_namesrv(namesrv)
        except ValueError as exc:
            raise AdminError(str(exc)) from None
        if self.protocol == rc.AUTO:
            self.protocol = rc.remembered(self.namesrv_addrs) or rc.AUTO
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
        """A gRPC name-server call; raises _UseRemoting when the name servers speak remoting instead."""
        if not self.namesrv_addrs:
            raise AdminError("no name server given: use -n host:port (or set NAMESRV_ADDR)")
        if self.protocol == rc.REMOTING:
            raise _UseRemoting
        errors = []
        for addr in self.namesrv_addrs:
            stub = namesrv_pb2_grpc.NameServerStub(self._channel(addr))
            try:
                resp = await getattr(stub, method)(request, timeout=self.timeout, metadata=self.connection.metadata())
            except grpc.aio.AioRpcError as exc:
                errors.append(f"{addr}: {exc.code().name}")
                continue
            if self.protocol == rc.AUTO:
                self.protocol = rc.GRPC
                rc.remember(self.namesrv_addrs, rc.GRPC)
            return resp
        if self.protocol == rc.AUTO:
            remoting_error = await asyncio.to_thread(self._remoting_probe)
            if remoting_error is None:
                self.protocol = rc.REMOTING
                rc.remember(self.namesrv_addrs, rc.REMOTING)
                raise _UseRemoting
            errors.append(f"over remoting: {remoting_error}")
        raise AdminError("no name server answered (" + "; ".join(errors) + ")")

    # ------------------------------------------------------------------ remoting back end
    def _remoting_probe(self) -> str | None:
        """None when a name server answers a remoting topic-list request, else why not."""
        try:
            with rc.Connections(self.timeout) as conns:
                rc.topic_list(conns, self.namesrv_addrs)
        except (rc.RemotingUnreachable, rc.RemotingCallError) as exc:
            return str(exc)
        return None

    def _remoting_cluster(self) -> list[BrokerNode]:
        with rc.Connections(self.timeout) as conns:
            try:
                info = rc.cluster_info(conns, self.namesrv_addrs)
            except (rc.RemotingUnreachable, rc.RemotingCallError) as exc:
                raise AdminError(str(exc)) from None
        out = []
        for name, bd in sorted((info.get("brokerAddrTable") or {}).items()):
            cluster = str(bd.get("cluster") or "")
            for bid, addr in rc.broker_addrs(bd):
                # remoting's ClusterInfo says neither the role nor the last heartbeat: id 0 is the master
                role = "MASTER" if bid == 0 else "SLAVE"
                reg = namesrv_pb2.BrokerRegistration(cluster_name=cluster, broker_name=name, broker_id=bid,
                                                     broker_addr=addr, role=role)
                out.append(BrokerNode(cluster, name, bid, addr, "", role, 0, reg))
        return out

    def _remoting_route(self, topic: str) -> namesrv_pb2.GetRouteResponse:
        with rc.Connections(self.timeout) as conns:
            try:
                data = rc.route(conns, self.namesrv_addrs, topic)
            except (rc.RemotingUnreachable, rc.RemotingCallError) as exc:
                raise AdminError(str(exc)) from None
        resp = namesrv_pb2.GetRouteResponse()
        if data is None:
            resp.status.code = 17  # TOPIC_NOT_EXIST, as the name server answered
            resp.status.remark = f"No topic route info in name server for the topic: {topic}"
            return resp
        for qd in data.get("queueDatas") or []:
            resp.route.queue_datas.add(broker_name=str(qd.get("brokerName")),
                                       read_queue_nums=int(qd.get("readQueueNums") or 0),
                                       write_queue_nums=int(qd.get("writeQueueNums") or 0),
                                       perm=int(qd.get("perm") or 0), topic_sys_flag=int(qd.get("topicSysFlag") or 0))
        for bd in data.get("brokerDatas") or []:
            entry = resp.route.broker_datas.add(cluster=str(bd.get("cluster") or ""),
                                                broker_name=str(bd.get("brokerName")))
            for bid, addr in rc.broker_addrs(bd):
                entry.broker_addrs[bid] = addr
        return resp

    def _remoting_query(self, key: str, topic: str, max_num: int) -> list[admin_pb2.StoredMessageView]:
        """QUERY_MESSAGE on every broker; keeps the messages whose KEYS or UNIQ_KEY is ``key``."""
        out = []
        with rc.Connections(self.timeout) as conns:
            for node in self._remoting_cluster():
                try:
                    found = rc.query_message(conns, node.addr, topic, key, max_num)
                except (OSError, ValueError, rc.RemotingCallError):
                    continue  # a broker that is down or refuses: the others may have it
                for m in found:
                    if key == m.properties.get("UNIQ_KEY") or key in m.properties.get("KEYS", "").split(" "):
                        out.append(_view(m, node.name))
        return out

    def broker_stub(self, addr: str) -> admin_pb2_grpc.BrokerAdminStub:
        return admin_pb2_grpc.BrokerAdminStub(self._channel(addr))

    async def broker_call(self, addr: str, method: str, request: object) -> object:
        try:
            return await getattr(self.broker_stub(addr), method)(request, timeout=self.timeout,
                                                                 metadata=self.connection.metadata())
        except grpc.aio.AioRpcError as exc:
            raise AdminError(f"broker {addr} did not answer {method}: {exc.code().name} {exc.details()}") from None

    async def cluster(self) -> list[BrokerNode]:
        try:
            resp = await self._namesrv_call("GetClusterInfo", common_pb2.Empty())
        except _UseRemoting:
            return await asyncio.to_thread(self._remoting_cluster)
        out = []
        for b in resp.brokers:  # type: ignore[attr-defined]
            r = b.registration
            out.append(BrokerNode(r.cluster_name, r.broker_name, r.broker_id, r.broker_addr, r.grpc_addr, r.role,
                                  b.last_update_ms, r))
        return out

    async def topics(self) -> list[str]:
        try:
            resp = await self._namesrv_call("GetAllTopicList", common_pb2.Empty())
        except _UseRemoting:
            def remoting_topics() -> list[str]:
                with rc.Connections(self.timeout) as conns:
                    try:
                        return rc.topic_list(conns, self.namesrv_addrs)
                    except (rc.RemotingUnreachable, rc.RemotingCallError) as exc:
                        raise AdminError(str(exc)) from None
            return await asyncio.to_thread(remoting_topics)
        return list(resp.topics)  # type: ignore[attr-defined]

    async def route(self, topic: str) -> namesrv_pb2.GetRouteResponse:
        try:
            return await self._namesrv_call("GetRouteInfoByTopic", namesrv_pb2.GetRouteRequest(topic=topic))  # type: ignore[return-value]
        except _UseRemoting:
            return await asyncio.to_thread(self._remoting_route, topic)

    async def delete_topic_in_namesrv(self, topic: str) -> None:
        """Drop the topic's route from every name server (the brokers re-register without it anyway)."""
        for addr in self.namesrv_addrs:
            stub = namesrv_pb2_grpc.NameServerStub(self._channel(addr))
            try:
                await stub.DeleteTopicInNamesrv(namesrv_pb2.DeleteTopicRequest(topic=topic), timeout=self.timeout,
                                                metadata=self.connection.metadata())
            except grpc.aio.AioRpcError:
                continue

    async def namesrv_admin_call(self, method: str, request: object) -> list[tuple[str, object]]:
        """``method`` of the NamesrvAdmin service on every name server: (address, answer or error text).

        mqadmin's wipeWritePerm and addWritePerm go to each name server in turn, as here; one that is
        down is reported and the others are still changed."""
        if not self.namesrv_addrs:
            raise AdminError("no name server given: use -n host:port (or set NAMESRV_ADDR)")
        out: list[tuple[str, object]] = []
        for addr in self.namesrv_addrs:
            stub = admin_pb2_grpc.NamesrvAdminStub(self._channel(addr))
            try:
                out.append((addr, await getattr(stub, method)(request, timeout=self.timeout,
                                                                 metadata=self.connection.metadata())))
            except grpc.aio.AioRpcError as exc:
                out.append((addr, f"{exc.code().name} {exc.details() or ''}".strip()))
        return out

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
        """Messages indexed under ``key`` (a message id or a business key) on every broker.

        Over remoting the topic is required (RocketMQ indexes ``topic#key``): without one the
        answer is empty, as mqadmin's queryMsgByUniqueKey needs ``-t`` too.
        """
        if self.protocol == rc.AUTO:
            await self.topics()  # settles the protocol (one name-server call)
        if self.protocol == rc.REMOTING:
            if not topic:
                return []
            return await asyncio.to_thread(self._remoting_query, key, topic, max_num)
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


def _view(m: rc.WireMessage, broker_name: str) -> admin_pb2.StoredMessageView:
    """A message read over remoting, in the shape RocketScope's broker admin answers with."""
    view = admin_pb2.StoredMessageView(
        topic=m.topic, queue_id=m.queue_id, queue_offset=m.queue_offset, commitlog_offset=m.physical_offset,
        born_timestamp=m.born_timestamp, store_timestamp=m.store_timestamp, born_host=m.born_host,
        store_host=m.store_host, reconsume_times=m.reconsume_times, body=m.body, msg_id=rc.message_id(m),
        offset_msg_id=rc.offset_msg_id(m.store_host, m.physical_offset), sys_flag=m.sys_flag, broker_name=broker_name)
    view.properties.update(m.properties)
    return view
