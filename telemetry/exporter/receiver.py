"""OTLP metric receivers: gRPC (opentelemetry-proto's MetricsService) and HTTP (/v1/metrics).

Why threaded gRPC and ``http.server``: the exporter is a small standalone process whose
work per request is a parse and a dict update under a lock; threads keep it simple and let
tests run it in-process next to synchronous OpenTelemetry exporters.
"""

from __future__ import annotations

import gzip
import logging
import ssl
import zlib
from collections.abc import Callable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

log = logging.getLogger(__name__)

Sink = Callable[[ExportMetricsServiceRequest, str], None]


class MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, sink: Sink) -> None:
        self._sink = sink

    def Export(  # the generated servicer's method name
        self, request: ExportMetricsServiceRequest, context: grpc.ServicerContext
    ) -> ExportMetricsServiceResponse:
        self._sink(request, context.peer())
        return ExportMetricsServiceResponse()


def grpc_server(sink: Sink, host: str, port: int, max_receive_bytes: int,
                credentials: grpc.ServerCredentials | None = None) -> tuple[grpc.Server, int]:
    """A started gRPC server and its bound port (``port=0`` picks one); TLS with ``credentials``."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="otlp-grpc"),
                         options=[("grpc.max_receive_message_length", max_receive_bytes), ("grpc.so_reuseport", 0)])
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(MetricsServicer(sink), server)
    if credentials is None:
        bound = server.add_insecure_port(f"{host}:{port}")
    else:
        bound = server.add_secure_port(f"{host}:{port}", credentials)
    if bound == 0:
        raise OSError(f"exporter: cannot listen for OTLP/gRPC on {host}:{port}")
    server.start()
    return server, bound


def _handler(sink: Sink, max_body: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != "/v1/metrics":
                self._reply(404, b"not found", "text/plain")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > max_body:
                self._reply(413, b"request too large", "text/plain")
                return
            body = self.rfile.read(length)
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            kind = (self.headers.get("Content-Type") or "application/x-protobuf").split(";")[0].strip()
            try:
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = ExportMetricsServiceRequest()
                if kind == "application/json":
                    json_format.Parse(body, request)
                else:
                    request.ParseFromString(body)
            except (DecodeError, json_format.ParseError, OSError, zlib.error) as exc:
                self._reply(400, f"bad OTLP request: {exc}".encode(), "text/plain")
                return
            sink(request, f"{self.client_address[0]}:{self.client_address[1]}")
            if kind == "application/json":
                self._reply(200, b"{}", "application/json")
            else:
                self._reply(200, ExportMetricsServiceResponse().SerializeToString(), "application/x-protobuf")

        def _reply(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("otlp-http: " + format, *args)

    return Handler


def http_server(sink: Sink, host: str, port: int, max_body: int,
                ssl_context: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    """The OTLP/HTTP receiver (not started); HTTPS when ``ssl_context`` is given."""
    server = ThreadingHTTPServer((host, port), _handler(sink, max_body))
    server.daemon_threads = True
    if ssl_context is not None:
        server.socket = ssl_context.wrap_socket(server.socket, server_side=True)
    return server
