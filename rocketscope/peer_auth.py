"""A shared-secret peer check for the replication ports (controller Raft; HA and DLedger Raft by their hello).

Those ports carry commit-log bytes and Raft messages: a process that reaches one could read
the whole log as a "slave" or append entries and votes as a "member".  Two checks keep an
outsider out, and they combine:

* **mutual TLS** (``tls.internal.need.client.auth=require``, rocketscope/tls.py): the
  handshake fails unless the peer presents a certificate of the cluster's CA;
* **a shared secret** (``internalPeerSecret``): every process of the cluster sends it in the
  ``x-rocketscope-peer-secret`` metadata of each call on those ports (the broker's and the
  controller's outbound channels add it), and the server interceptor answers any call without
  the right value with UNAUTHENTICATED, naming the missing or wrong secret, before the
  handler runs.  The HA port and DLedger's Raft port are not gRPC: they check the same secret
  in their hello frame with the same constant-time comparison and wording
  (broker/peer_frames/port.py).
  It needs no PKI; without TLS the secret crosses the network in clear, so on
  an untrusted network use it together with TLS (tls.server.mode=enforcing).

The admin and client ports are not covered: they have ACL (aclEnable) and the client
certificate rules of their own.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

log = logging.getLogger(__name__)
PEER_SECRET_HEADER = "x-rocketscope-peer-secret"


def _abort_handler(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)


class PeerSecretInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call whose ``x-rocketscope-peer-secret`` is not the cluster's secret."""

    def __init__(self, secret: str, port_name: str) -> None:
        self._secret = secret.encode()
        self.port_name = port_name
        self.refused = 0

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails],
                                                             Awaitable[grpc.RpcMethodHandler]],
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        given = ""
        for key, value in details.invocation_metadata or ():
            if key == PEER_SECRET_HEADER:
                given = value if isinstance(value, str) else value.decode(errors="replace")
        handler = await continuation(details)
        if handler is not None and hmac.compare_digest(given.encode(), self._secret):
            return handler
        self.refused += 1
        why = "no peer secret" if not given else "a wrong peer secret"
        log.warning("%s port: refused %s with %s", self.port_name, details.method, why)
        if handler is None:
            return handler
        return _abort_handler(handler, f"{self.port_name} port: the call carries {why} (internalPeerSecret): "
                                       "only members of this cluster may connect")


def server_interceptors(secret: str, port_name: str) -> list[grpc.aio.ServerInterceptor]:
    """The interceptors of a replication port's server: none when no secret is configured."""
    return [PeerSecretInterceptor(secret, port_name)] if secret else []


class _AddSecret:
    def __init__(self, secret: str) -> None:
        self._pair = (PEER_SECRET_HEADER, secret)

    def _details(self, d: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(tuple(d.metadata) if d.metadata else ()))
        metadata.add(*self._pair)
        return grpc.aio.ClientCallDetails(d.method, d.timeout, metadata, d.credentials, d.wait_for_ready)


# grpc.aio files each interceptor under the first call kind it implements: one class per kind
class _UnaryUnary(_AddSecret, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _UnaryStream(_AddSecret, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _StreamUnary(_AddSecret, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        return await continuation(self._details(details), request_iterator)


class _StreamStream(_AddSecret, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        return await continuation(self._details(details), request_iterator)


def client_interceptors(secret: str) -> list[grpc.aio.ClientInterceptor]:
    """Interceptors that add the peer secret to every call of an outbound channel (none without a secret)."""
    if not secret:
        return []
    return [_UnaryUnary(secret), _UnaryStream(secret), _StreamUnary(secret), _StreamStream(secret)]
