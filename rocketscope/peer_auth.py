"""The shared secret of the replication ports (HA, DLedger Raft, controller Raft): ``internalPeerSecret``.

Those ports carry commit-log bytes and Raft messages: a process that reaches one could read
the whole log as a "slave" or append entries and votes as a "member".  Two checks keep an
outsider out, and they combine:

* **mutual TLS** (``tls.internal.need.client.auth=require``, rocketscope/tls.py): the
  handshake fails unless the peer presents a certificate of the cluster's CA;
* **a shared secret** (``internalPeerSecret``): all three ports speak framed TCP and check it
  in the client's hello frame, compared in constant time, answering a missing or wrong secret
  with a text that names it (broker/peer_frames/port.py; the controllers' Raft moved there in
  session 18, the last gRPC port that checked it in call metadata).  It needs no PKI; without
  TLS the secret crosses the network in clear, so on an untrusted network use it together
  with TLS (tls.server.mode=enforcing).

What is left here: the broker's and controller's outbound gRPC channels still add the secret as
``x-rocketscope-peer-secret`` metadata to every call (``client_interceptors``); no port checks it
there any more.  The admin and client ports are not covered: they have ACL (aclEnable) and the
client certificate rules of their own.
"""

from __future__ import annotations

from typing import Any

import grpc

PEER_SECRET_HEADER = "x-rocketscope-peer-secret"


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
