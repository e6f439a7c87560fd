"""A forwarded request never fails because a channel was closed under it (issue 15, chaos seed 7).

The chaos run of docs/CHAOS.md (controller mode, seed 7) saw a forwarded AckMessage answered
with grpc's ``UsageError: Channel is closed``: the broker was shutting down (broker/broker.py
``stop`` closes the forwarder's and the name-server client's channels *before* its gRPC servers
stop, so requests still being served in the servers' grace period dialled through closed
channels), and the client got an internal error instead of an answer.

These tests run real gRPC servers and channels in this process: a "writer" that counts the
acks it answers, a "member" that forwards every AckMessage to it through broker/forwarding.py,
and a real name-server service that knows a newer master.  Only the broker's view of who
writes is a stand-in (a member that is not the writer, or a master whose lease expired), so
the race can be driven deterministically: channels are closed while calls are in flight.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from rocketscope.broker import forwarding
from rocketscope.broker.namesrv.route_info import RouteInfo
from rocketscope.broker.namesrv.service import NameServerService
from rocketscope.broker.namesrv_client import NamesrvClient
from rocketscope.broker.protocol import namesrv_pb2, namesrv_pb2_grpc

SERVICE = "apache.rocketmq.v2.MessagingService"
CALLS = 300
CONCURRENCY = 12
CLOSES = 10  # a channel closed every 30 ms, ten times, while the calls run


class Writer:
    """The writer's AckMessage: answers OK after a short delay (so calls are in flight) and counts them."""

    def __init__(self) -> None:
        self.answered = 0

    async def ack(self, request: svc.AckMessageRequest, context: grpc.aio.ServicerContext) -> svc.AckMessageResponse:
        await asyncio.sleep(0.005)
        self.answered += 1
        return svc.AckMessageResponse(status=pb.Status(code=pb.OK, message="OK"))


def _server(handler: Any) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {
        "AckMessage": grpc.unary_unary_rpc_method_handler(
            handler, request_deserializer=svc.AckMessageRequest.FromString,
            response_serializer=svc.AckMessageResponse.SerializeToString)})])
    port = server.add_insecure_port("127.0.0.1:0")
    return server, f"127.0.0.1:{port}"


def _member(writer_addr: str, namesrv: NamesrvClient | None = None) -> SimpleNamespace:
    """A DLedger follower's view (not the leader; the leader is ``writer_addr``), with real TLS-less channels."""
    dledger = SimpleNamespace(is_leader=False, self_id="n1", group="g", leader_grpc_addr=lambda: writer_addr)
    broker = SimpleNamespace(dledger=dledger, is_master=False, replicas=None, node_id="n1", grpc_addr="127.0.0.1:1",
                             broker_name="b", namesrv=namesrv,
                             security=SimpleNamespace(client_tls=SimpleNamespace(
                                 channel=lambda addr, options=None: grpc.aio.insecure_channel(addr, options=options))))
    broker.forwarder = forwarding.LeaderForwarder(broker)  # type: ignore[arg-type]
    return broker


async def _forward_while_closing(close_all: bool) -> tuple[list[str], int, int]:
    writer = Writer()
    wserver, waddr = _server(writer.ack)
    await wserver.start()
    broker = _member(waddr)
    fwd: forwarding.LeaderForwarder = broker.forwarder

    async def local(request: Any, context: Any) -> Any:
        raise AssertionError("a follower must not serve AckMessage itself")

    mserver, maddr = _server(forwarding.wrap("AckMessage", (False, False), local, broker,  # type: ignore[arg-type]
                                             svc.AckMessageRequest))
    await mserver.start()
    failures: list[str] = []
    closes = 0
    done = asyncio.Event()

    async def closer() -> None:
        nonlocal closes
        while not done.is_set() and closes < CLOSES:
            await asyncio.sleep(0.03)
            if close_all:
                await fwd.close()  # what broker/broker.py stop() does while requests are still served
            else:
                for ch in list(fwd._channels.values()):
                    await ch.close()  # the cached channel closed under concurrent forwarded calls
            closes += 1

    async with grpc.aio.insecure_channel(maddr) as client:
        ack = client.unary_unary(f"/{SERVICE}/AckMessage", request_serializer=svc.AckMessageRequest.SerializeToString,
                                 response_deserializer=svc.AckMessageResponse.FromString)
        sem = asyncio.Semaphore(CONCURRENCY)

        async def one(i: int) -> None:
            async with sem:
                try:
                    resp = await ack(svc.AckMessageRequest(), timeout=10)
                except grpc.aio.AioRpcError as exc:
                    failures.append(f"{i}: {exc.code().name} {exc.details()}")
                    return
                if resp.status.code != pb.OK:
                    failures.append(f"{i}: status {resp.status.code} {resp.status.message}")

        task = asyncio.ensure_future(closer())
        await asyncio.gather(*(one(i) for i in range(CALLS)))
        done.set()
        await task
    await fwd.close()
    await mserver.stop(None)
    await wserver.stop(None)
    return failures, writer.answered, closes


def test_forwarded_calls_survive_the_cached_channel_being_closed() -> None:
    failures, answered, closes = asyncio.run(_forward_while_closing(close_all=False))
    assert closes >= 5, f"the channel was closed only {closes} times: the race was not exercised"
    assert failures == [], f"{len(failures)} of {CALLS} forwarded acks failed, e.g. {failures[:3]}"
    assert answered >= CALLS  # every ack reached the writer (a call cut by the close is sent again)


def test_forwarded_calls_survive_the_forwarder_closing_during_shutdown() -> None:
    failures, answered, closes = asyncio.run(_forward_while_closing(close_all=True))
    assert closes >= 5, f"the forwarder was closed only {closes} times: the race was not exercised"
    assert failures == [], f"{len(failures)} of {CALLS} forwarded acks failed, e.g. {failures[:3]}"
    assert answered >= CALLS


async def _newer_master_after_namesrv_client_stopped() -> str | None:
    routes = RouteInfo()
    routes.register(namesrv_pb2.BrokerRegistration(cluster_name="c", broker_name="b", broker_id=0,
                                                   broker_addr="127.0.0.1:20911", grpc_addr="127.0.0.1:20981",
                                                   epoch=7), session=1)
    server = grpc.aio.server()
    namesrv_pb2_grpc.add_NameServerServicer_to_server(NameServerService(routes), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = NamesrvClient([f"127.0.0.1:{port}"], namesrv_pb2.BrokerRegistration, 30.0)
    await client.stop()  # broker/broker.py stop() closes these channels while requests are still served
    broker = _member("unused", namesrv=client)
    broker.replicas = SimpleNamespace(lease_expired=True, master_epoch=6)  # a master cut off from the controllers
    broker.is_master = True
    try:
        return await broker.forwarder._leader_from_namesrv(newer_than_epoch=6)
    finally:
        await broker.forwarder.close()
        await server.stop(None)


def test_leader_lookup_at_the_name_server_survives_its_client_being_stopped() -> None:
    """Seed 7's traceback: ``_leader_from_namesrv`` raised UsageError on the name-server client's closed channel."""
    assert asyncio.run(_newer_master_after_namesrv_client_stopped()) == "127.0.0.1:20981"
