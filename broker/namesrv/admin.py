"""The name server's admin service over gRPC: wipeWritePerm and addWritePerm of `rocketscope admin`.

The same RouteInfo operations answer Apache mqadmin's remoting requests
(broker/remoting/namesrv_handlers.py), so both tools see one per-broker permission.
"""

from __future__ import annotations

import grpc

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2

from .route_info import RouteInfo

BAD_ARGUMENT = 13


class NamesrvAdminService(admin_pb2_grpc.NamesrvAdminServicer):
    def __init__(self, routes: RouteInfo) -> None:
        self.routes = routes

    async def WipeWritePerm(self, request: admin_pb2.BrokerPermRequest, context: grpc.aio.ServicerContext
                            ) -> admin_pb2.BrokerPermResponse:
        if not request.broker_name:
            return admin_pb2.BrokerPermResponse(status=common_pb2.Status(
                code=BAD_ARGUMENT, remark="broker_name: empty broker name"))
        return admin_pb2.BrokerPermResponse(status=common_pb2.Status(),
                                            topic_count=self.routes.wipe_write_perm(request.broker_name))

    async def AddWritePerm(self, request: admin_pb2.BrokerPermRequest, context: grpc.aio.ServicerContext
                           ) -> admin_pb2.BrokerPermResponse:
        if not request.broker_name:
            return admin_pb2.BrokerPermResponse(status=common_pb2.Status(
                code=BAD_ARGUMENT, remark="broker_name: empty broker name"))
        return admin_pb2.BrokerPermResponse(status=common_pb2.Status(),
                                            topic_count=self.routes.add_write_perm(request.broker_name))
