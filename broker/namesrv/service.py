"""The name server's gRPC service and its background liveness scan."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator

import grpc

from rocketscope.broker.protocol import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from rocketscope.telemetry import Telemetry

from .route_info import RouteInfo

log = logging.getLogger(__name__)

TOPIC_NOT_EXIST = 17


class NameServerService(namesrv_pb2_grpc.NameServerServicer):
    def __init__(self, routes: RouteInfo, telemetry: Telemetry | None = None) -> None:
        self.routes = routes
        self._sessions = itertools.count(1)
        self.route_queries = (telemetry or Telemetry.disabled()).counter("rocketmq_namesrv_route_queries_total")

    async def BrokerSession(self, request_iterator: AsyncIterator[namesrv_pb2.SessionRequest],
                            context: grpc.aio.ServicerContext) -> AsyncIterator[namesrv_pb2.SessionResponse]:
        session = next(self._sessions)
        peer = context.peer()
        try:
            async for req in request_iterator:
                kind = req.WhichOneof("kind")
                if kind == "register":
                    result = self.routes.register(req.register, session)
                    yield namesrv_pb2.SessionResponse(result=result)
                elif kind == "unregister":
                    u = req.unregister
                    self.routes.unregister(u.cluster_name, u.broker_name, u.broker_id, reason="broker shut down")
                    yield namesrv_pb2.SessionResponse(result=namesrv_pb2.RegisterResult(status=common_pb2.Status()))
                else:
                    yield namesrv_pb2.SessionResponse(result=namesrv_pb2.RegisterResult(
                        status=common_pb2.Status(code=1, remark="session request has no register or unregister")))
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        finally:
            removed = self.routes.session_closed(session)
            if removed:
                log.info("session %d from %s closed; %d broker(s) removed", session, peer, removed)

    async def GetRouteInfoByTopic(self, request: namesrv_pb2.GetRouteRequest,
                                  context: grpc.aio.ServicerContext) -> namesrv_pb2.GetRouteResponse:
        route = self.routes.route(request.topic)
        self.route_queries.add(1, {"result": "found" if route is not None else "not_found"})
        if route is None:
            return namesrv_pb2.GetRouteResponse(status=common_pb2.Status(
                code=TOPIC_NOT_EXIST, remark=f"No topic route info in name server for the topic: {request.topic}"))
        return namesrv_pb2.GetRouteResponse(status=common_pb2.Status(), route=route)

    async def GetClusterInfo(self, request: common_pb2.Empty,
                             context: grpc.aio.ServicerContext) -> namesrv_pb2.ClusterInfoResponse:
        resp = namesrv_pb2.ClusterInfoResponse()
        for reg, last in self.routes.cluster_info():
            resp.brokers.add(registration=reg, last_update_ms=last)
        return resp

    async def GetAllTopicList(self, request: common_pb2.Empty,
                              context: grpc.aio.ServicerContext) -> namesrv_pb2.TopicListResponse:
        return namesrv_pb2.TopicListResponse(topics=self.routes.topics())

    async def DeleteTopicInNamesrv(self, request: namesrv_pb2.DeleteTopicRequest,
                                   context: grpc.aio.ServicerContext) -> common_pb2.Status:
        if self.routes.delete_topic(request.topic):
            log.info("topic %s deleted from the name server", request.topic)
            return common_pb2.Status()
        return common_pb2.Status(code=TOPIC_NOT_EXIST, remark=f"topic {request.topic} is not registered")


async def scan_loop(routes: RouteInfo, interval_s: float) -> None:
    """Remove brokers that have not registered within their expiry time (RocketMQ: every 5 s)."""
    while True:
        await asyncio.sleep(interval_s)
        routes.scan_not_active()
