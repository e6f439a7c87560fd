"""What a unary gRPC call costs a Python server before the broker does anything: the floor of the gRPC path.

Issue 20 asks for at most 100 µs of server CPU per message over gRPC.  Every gRPC door of RocketScope is
a ``grpc.aio`` server, so the lowest a send over gRPC can cost in this design is what ``grpc.aio`` itself
spends on one unary call on this machine.  This module measures it with the same load generator and the
same request bytes as the broker's row of bench/datapath_bench.py (``go gRPC``: tests/clients/go/grpcraw,
one HTTP/2 connection, ``depth`` calls in flight):

* ``proto``: a ``grpc.aio`` server with the generated MessagingService servicer (the same
  ``server_options()`` as the broker) whose SendMessage parses the request, as the broker's does, and
  answers one OK entry with the message ID and an offset, built as the broker builds it: grpc.aio plus
  protobuf, nothing of RocketScope;
* ``raw``: a generic handler on the same method that answers pre-serialised bytes without parsing:
  grpc.aio alone.

The broker's CPU per call minus the ``proto`` floor's is what RocketScope's own code costs on the gRPC
path (validation, conversion, the store, metrics, trace hooks).

    .venv/bin/python bench/datapath_bench.py --only grpc-floor,grpc-floor-raw,rs-async,apache --paths "go gRPC"

``python bench/grpc_floor.py serve --mode proto|raw --port-file FILE`` runs one floor server (what the
benchmark starts); ``request_bytes(topic)`` builds the one SendMessageRequest every call sends.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from pathlib import Path

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from rocketscope.broker.grpc_options import server_options

SEND_METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"
OK = pb.Code.OK


def request_bytes(topic: str, body_size: int = 1024) -> bytes:
    """One SendMessageRequest of one NORMAL message, as Apache's clients fill it (message ID, tag, born
    time and host, identity encoding)."""
    req = svc.SendMessageRequest()
    msg = req.messages.add(body=b"x" * body_size)
    msg.topic.name = topic
    sp = msg.system_properties
    sp.message_id = "01" + uuid.uuid4().hex.upper()[:32]
    sp.tag = "bench"
    sp.message_type = pb.NORMAL
    sp.body_encoding = pb.IDENTITY
    sp.born_host = "127.0.0.1"
    sp.born_timestamp.CopyFrom(Timestamp(seconds=int(time.time())))
    return req.SerializeToString()


def client_headers(client_id: str) -> list[str]:
    """The request metadata of Apache's clients (``k=v`` for grpcraw's ``-header``)."""
    return [f"x-mq-client-id={client_id}", "x-mq-language=GOLANG", "x-mq-protocol=v2",
            "x-mq-client-version=5.0.0", f"x-mq-request-id={uuid.uuid4()}"]


class FloorServicer(svc_grpc.MessagingServiceServicer):
    """SendMessage with protobuf in and out and nothing else: an offset counter stands in for the store."""

    def __init__(self) -> None:
        self.offset = 0

    async def SendMessage(self, request: svc.SendMessageRequest,
                          context: grpc.aio.ServicerContext) -> svc.SendMessageResponse:
        resp = svc.SendMessageResponse()
        for msg in request.messages:
            self.offset += 1
            entry = resp.entries.add(message_id=msg.system_properties.message_id, offset=self.offset)
            entry.status.code, entry.status.message = OK, "OK"
        resp.status.code, resp.status.message = OK, "OK"
        return resp


def raw_handler() -> grpc.GenericRpcHandler:
    """SendMessage answered with fixed bytes: no protobuf on either side."""
    answer = svc.SendMessageResponse(status=pb.Status(code=OK, message="OK")).SerializeToString()

    async def send(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return answer

    return grpc.method_handlers_generic_handler("apache.rocketmq.v2.MessagingService", {
        "SendMessage": grpc.unary_unary_rpc_method_handler(send)})


async def serve(mode: str, port_file: Path) -> None:
    server = grpc.aio.server(options=server_options())
    if mode == "proto":
        svc_grpc.add_MessagingServiceServicer_to_server(FloorServicer(), server)
    else:
        server.add_generic_rpc_handlers((raw_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    tmp = port_file.with_name(port_file.name + ".tmp")
    tmp.write_text(str(port))
    os.replace(tmp, port_file)  # the benchmark waits for the file: it appears whole
    print(f"grpc floor ({mode}) serving on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run one floor server until killed")
    s.add_argument("--mode", choices=("proto", "raw"), default="proto")
    s.add_argument("--port-file", type=Path, required=True, help="written with the port once serving")
    args = ap.parse_args()
    asyncio.run(serve(args.mode, args.port_file))


if __name__ == "__main__":
    main()
