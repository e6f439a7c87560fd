"""Register MessagingService with deserializers that never fail.

gRPC turns a request that does not parse into status UNKNOWN before any handler runs.
RocketMQ clients expect a v2 status code instead, so each method gets a deserializer
that returns an ``Unparseable`` marker on bad bytes; the handlers answer it with
BAD_REQUEST and a message naming the request type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from google.protobuf.message import DecodeError, Message
from rocketmq.grpc_protocol import service_pb2 as svc

if TYPE_CHECKING:
    from .forwarding import ForwardHost

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"


@dataclass(frozen=True)
class Unparseable:
    type_name: str
    error: str

    def describe(self) -> str:
        return f"request is not a valid {self.type_name}: {self.error}"


def _deserializer(message_type: type[Message]):
    def parse(data: bytes) -> Message | Unparseable:
        try:
            return message_type.FromString(data)
        except (DecodeError, ValueError, RuntimeError) as exc:
            return Unparseable(message_type.DESCRIPTOR.name, str(exc))

    return parse


def add_messaging_service(servicer: object, server: grpc.aio.Server, broker: ForwardHost | None = None) -> None:
    descriptor = svc.DESCRIPTOR.services_by_name["MessagingService"]
    handlers = {}
    for method in descriptor.methods:
        request_type = getattr(svc, method.input_type.name)
        kind = (method.client_streaming, method.server_streaming)
        factory = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[kind]
        handler = getattr(servicer, method.name)
        # DLedger and controller mode: any member answers, the rest goes to the leader/master
        if broker is not None and (broker.dledger is not None or broker.replicas is not None):
            from .forwarding import wrap

            handler = wrap(method.name, kind, handler, broker, request_type)
        handlers[method.name] = factory(handler,
                                        request_deserializer=_deserializer(request_type),
                                        response_serializer=lambda m: m.SerializeToString())
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
