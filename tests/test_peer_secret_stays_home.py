"""internalPeerSecret travels only in the replication ports' hellos, never in an outbound gRPC call's metadata.

Until session 18 every outbound gRPC channel (admin calls, forwarding) added it as metadata for a gRPC Raft port
that no longer exists; an admin port or proxy reached that way would have received the cluster's secret.
"""

from __future__ import annotations

import asyncio

import grpc

from rocketscope.peer_auth import refusal
from rocketscope.tls import TlsClientConfig

SECRET = "s3cret-of-the-cluster"


def test_an_outbound_channel_sends_no_peer_secret() -> None:
    async def scenario() -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []

        async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            seen.extend((k, v if isinstance(v, str) else v.decode()) for k, v in context.invocation_metadata() or ())
            return request

        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "probe.Probe", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with TlsClientConfig(peer_secret=SECRET).channel(f"127.0.0.1:{port}") as channel:
                answer = await channel.unary_unary("/probe.Probe/Echo")(b"ping", timeout=10)
                assert answer == b"ping"
        finally:
            await server.stop(None)
        return seen

    seen = asyncio.run(scenario())
    assert seen, "the server saw the call's metadata"
    assert all(SECRET not in value for _, value in seen), seen


def test_refusal_names_a_missing_or_wrong_secret_and_passes_the_right_one() -> None:
    assert refusal(SECRET, SECRET.encode()) is None
    assert refusal("", SECRET.encode()) == "no peer secret"
    assert refusal("guess", SECRET.encode()) == "a wrong peer secret"
    assert refusal("anything", b"") is None  # no secret configured: the check is off
