"""Forward client requests to the Raft leader (DLedger mode) or the master (controller mode), as RocketMQ's proxy does.

Every member of a DLedger group is listed in the route's endpoints, so the official
client's channel reaches *some* member and switches member by itself when one dies.  A
follower answers what it can answer itself (routes, assignments) and forwards the rest
— sends, receives, acks, offsets, transactions, the Telemetry stream — to the leader
with the client's metadata, so a client never waits for its 30-second route refresh to
find the new leader.  A request already forwarded once is never forwarded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from rocketscope.broker.protocol import common_pb2

from .request_metadata import request_metadata
from .slave_read import SLAVE_READ_HEADER

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)
FORWARDED_HEADER = "x-rocketscope-forwarded"
LOCAL_METHODS = frozenset({"QueryRoute", "QueryAssignment"})
SERVICE = "/apache.rocketmq.v2.MessagingService/"


class NoLeader(Exception):
    pass


class LeaderForwarder:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._ns_checked = 0.0
        self._ns_leader: str | None = None

    async def target(self, method: str, context: grpc.aio.ServicerContext) -> str | None:
        """The leader's address when this request must go there, else None (serve locally)."""
        if method == "PullMessage" and SLAVE_READ_HEADER in request_metadata(context):
            return None  # a master handed this far-behind pull to us (slaveReadEnable)
        rm = getattr(self.broker, "replicas", None)
        if rm is not None:  # controller mode: the master the controller named
            if method in LOCAL_METHODS:
                return None
            if self.broker.is_master:
                if not rm.lease_expired:
                    return None
                # cut off from the controllers: a master of a newer epoch, if the name server knows one,
                # takes the request (RocketMQ's proxy follows the route the same way); else try locally
                return await self._leader_from_namesrv(newer_than_epoch=rm.master_epoch)
            if FORWARDED_HEADER in request_metadata(context):
                raise NoLeader(f"{self.broker.node_id} is not the master either (stale forward)")
            if not rm.master_grpc_addr or rm.master_grpc_addr == self.broker.grpc_addr:
                raise NoLeader(f"group {self.broker.broker_name} has no master yet; retry")
            return rm.master_grpc_addr
        d = self.broker.dledger
        if d is None or d.is_leader or method in LOCAL_METHODS:
            return None
        if FORWARDED_HEADER in request_metadata(context):
            raise NoLeader(f"{d.self_id} is not the leader either (stale forward)")
        addr = d.leader_grpc_addr() or await self._leader_from_namesrv()
        if not addr:
            raise NoLeader(f"group {d.group} has no leader yet; retry")
        return addr

    async def _leader_from_namesrv(self, newer_than_epoch: int | None = None) -> str | None:
        """A member cut off from its peers does not know the new leader; the name server does.

        ``newer_than_epoch`` (controller mode): only a master registered with a higher master epoch.
        """
        now = time.monotonic()
        if now - self._ns_checked < 0.5:
            return self._ns_leader
        self._ns_checked = now
        self._ns_leader = None
        b = self.broker
        for stub in b.namesrv.stubs.values():
            try:
                info = await stub.GetClusterInfo(common_pb2.Empty(), timeout=1)
            except grpc.aio.AioRpcError:
                continue
            for live in info.brokers:
                r = live.registration
                if (r.broker_name == b.broker_name and r.broker_id == 0 and r.grpc_addr != b.grpc_addr
                        and (newer_than_epoch is None or r.epoch > newer_than_epoch)):
                    self._ns_leader = r.grpc_addr
                    return self._ns_leader
        return None

    def _channel(self, addr: str) -> grpc.aio.Channel:
        ch = self._channels.get(addr)
        if ch is None:
            options = [("grpc.max_receive_message_length", 64 * 1024 * 1024),
                       ("grpc.max_send_message_length", 64 * 1024 * 1024)]
            ch = self.broker.security.client_tls.channel(addr, options=options)
            self._channels[addr] = ch
        return ch

    def metadata(self, context: grpc.aio.ServicerContext) -> list[tuple[str, str]]:
        md = [(k, v) for k, v in (context.invocation_metadata() or ())
              if not k.startswith((":", "grpc-")) and isinstance(v, str)]
        md.append((FORWARDED_HEADER, self.broker.dledger.self_id if self.broker.dledger else self.broker.node_id))
        return md

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()


def _response_type(method_name: str) -> type:
    return getattr(svc, method_name + "Response") if method_name != "Telemetry" else svc.TelemetryCommand


def wrap(method_name: str, kind: tuple[bool, bool], handler: Callable[..., Any], broker: Broker,
         request_type: type) -> Callable[..., Any]:
    """A handler that forwards to the leader when needed, else runs ``handler``."""
    resp_type = _response_type(method_name)
    path = SERVICE + method_name

    def error(exc: Exception) -> Any:
        return resp_type(status=pb.Status(code=pb.HA_NOT_AVAILABLE, message=str(exc)))

    if kind == (False, False):
        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            fwd = broker.forwarder
            try:
                addr = await fwd.target(method_name, context)
            except NoLeader as exc:
                return error(exc)
            if addr is None:
                return await handler(request, context)
            call = fwd._channel(addr).unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                                                  response_deserializer=resp_type.FromString)
            try:
                return await call(request, metadata=fwd.metadata(context), timeout=context.time_remaining())
            except grpc.aio.AioRpcError as exc:
                return error(NoLeader(f"forwarding {method_name} to the leader at {addr} failed: {exc.code().name}"))
        return unary

    if kind == (False, True):
        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            fwd = broker.forwarder
            try:
                addr = await fwd.target(method_name, context)
            except NoLeader as exc:
                yield error(exc)
                return
            if addr is None:
                async for item in handler(request, context):
                    yield item
                return
            call = fwd._channel(addr).unary_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                                   response_deserializer=resp_type.FromString)
            try:
                async for item in call(request, metadata=fwd.metadata(context), timeout=context.time_remaining()):
                    yield item
            except grpc.aio.AioRpcError as exc:
                yield error(NoLeader(f"forwarding {method_name} to {addr} failed: {exc.code().name}"))
        return unary_stream

    async def stream_stream(request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
                            ) -> AsyncIterator[Any]:
        fwd = broker.forwarder
        try:
            addr = await fwd.target(method_name, context)
        except NoLeader as exc:
            yield error(exc)
            return
        if addr is None:
            async for item in handler(request_iterator, context):
                yield item
            return
        call = fwd._channel(addr).stream_stream(path, request_serializer=lambda m: m.SerializeToString(),
                                                response_deserializer=resp_type.FromString)

        async def upstream() -> AsyncIterator[Any]:
            async for item in request_iterator:
                if isinstance(item, request_type):
                    yield item

        stream = call(upstream(), metadata=fwd.metadata(context))
        try:
            async for item in stream:
                yield item
        except grpc.aio.AioRpcError as exc:
            log.info("forwarded %s stream to %s ended: %s", method_name, addr, exc.code().name)
        finally:
            with contextlib.suppress(Exception):
                stream.cancel()
            await asyncio.sleep(0)
    return stream_stream
