"""A relayed Telemetry stream that the writer ends leaves no gRPC task behind (issue 15).

Seen in the chaos DLedger run of session 14: every leader change put bursts of asyncio ERROR lines
("Task was destroyed but it is pending!", a grpc.aio call's request-iterator task) into the members'
logs, 188 in one member over 70 faults.  A member relaying a client's Telemetry stream to the writer
feeds the call from a queue; when the writer ended the stream first, cancelling the finished call did
not stop the task reading that queue, and it waited until the garbage collector destroyed it.

Here a real grpc.aio server ends the stream after its first message; the relay's pump runs against
it; afterwards no task of that call may still be pending.  The broker handle is a stub giving the
relay a channel and metadata: the gRPC calls are real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2 as svc

from rocketscope.broker.forwarding import StreamRelay

PATH = "/apache.rocketmq.v2.MessagingService/Telemetry"


class Forwarder:
    """What StreamRelay uses of broker.forwarder to start a call: one real channel, no extra metadata."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.ch = channel

    def start(self, addr: str, begin: Any) -> Any:
        return begin(self.ch)

    def metadata(self, context: Any) -> list[tuple[str, str]]:
        return []


class Broker:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.forwarder = Forwarder(channel)


async def ends_after_the_first(request_iterator: AsyncIterator[svc.TelemetryCommand],
                               context: grpc.aio.ServicerContext) -> AsyncIterator[svc.TelemetryCommand]:
    """The writer's side: answers the client's Settings, then ends the stream (as a writer stepping down)."""
    async for _ in request_iterator:
        yield svc.TelemetryCommand()
        return


def request_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if not t.done() and "_consume_request_iterator" in repr(t.get_coro())]


def test_a_stream_the_writer_ends_leaves_no_pending_call_task() -> None:
    async def scenario() -> tuple[int, list[str]]:
        server = grpc.aio.server()
        handler = grpc.stream_stream_rpc_method_handler(
            ends_after_the_first, request_deserializer=svc.TelemetryCommand.FromString,
            response_serializer=lambda m: m.SerializeToString())
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "apache.rocketmq.v2.MessagingService", {"Telemetry": handler})])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                relay = StreamRelay(Broker(ch), "Telemetry", PATH, None,  # type: ignore[arg-type]
                                    svc.TelemetryCommand, svc.TelemetryCommand, context=None)  # type: ignore[arg-type]
                up: asyncio.Queue[Any] = asyncio.Queue()
                await up.put(svc.TelemetryCommand())
                await asyncio.wait_for(relay._pump("writer", up), timeout=10)
                answers = relay.out.qsize()
                deadline = asyncio.get_running_loop().time() + 2
                while request_tasks() and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.02)
                return answers, [repr(t) for t in request_tasks()]
        finally:
            await server.stop(None)

    answers, pending = asyncio.run(scenario())
    assert answers == 1, "the writer's answer reaches the client's side of the relay"
    assert not pending, f"the call's request task still waits on the relay's queue: {pending}"
