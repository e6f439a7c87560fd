"""The broker's link to the name servers: one registration session per name server.

Registration is re-sent every ``registerNameServerPeriod`` and at once when topics
change; the session stream itself is the liveness signal (a name server drops the
broker as soon as the stream breaks).  A name server that is down is retried with
back-off and logged once per outage, not once per attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import grpc

from rocketscope.broker.protocol import namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)
TOPIC_NOT_EXIST = 17


class NamesrvUnavailable(Exception):
    pass


class NamesrvClient:
    def __init__(self, addresses: list[str], registration: Callable[[], namesrv_pb2.BrokerRegistration],
                 period_s: float, channel: Callable[[str], grpc.aio.Channel] | None = None) -> None:
        """``channel`` builds the channel to one name server (TLS when the broker's tls.enable is on)."""
        self.addresses = addresses
        self.registration = registration
        self.period_s = period_s
        make = channel or grpc.aio.insecure_channel
        self.channels = {a: make(a) for a in addresses}
        self.stubs = {a: namesrv_pb2_grpc.NameServerStub(c) for a, c in self.channels.items()}
        self._tasks: list[asyncio.Task[None]] = []
        self._kick: dict[str, asyncio.Event] = {a: asyncio.Event() for a in addresses}
        self._registered: dict[str, asyncio.Event] = {a: asyncio.Event() for a in addresses}
        self._closing = False
        self.last_result: namesrv_pb2.RegisterResult | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for addr in self.addresses:
            self._tasks.append(loop.create_task(self._session_loop(addr), name=f"namesrv-session-{addr}"))

    def register_now(self) -> None:
        for ev in self._kick.values():
            ev.set()

    async def wait_registered(self, timeout_s: float) -> bool:
        if not self.addresses:
            return True
        try:
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._registered.values())), timeout_s)
            return True
        except TimeoutError:
            return False

    async def _requests(self, addr: str, unregister: asyncio.Event) -> AsyncIterator[namesrv_pb2.SessionRequest]:
        kick = self._kick[addr]
        while True:
            if unregister.is_set():
                reg = self.registration()
                yield namesrv_pb2.SessionRequest(unregister=namesrv_pb2.UnregisterBroker(
                    cluster_name=reg.cluster_name, broker_name=reg.broker_name, broker_id=reg.broker_id,
                    broker_addr=reg.broker_addr))
                return
            # cleared before the snapshot is taken: a change made while this registration is in flight
            # (a topic created then) kicks the next one at once instead of waiting out period_s
            kick.clear()
            yield namesrv_pb2.SessionRequest(register=self.registration())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kick.wait(), self.period_s)

    async def _session_loop(self, addr: str) -> None:
        failures = 0
        self._unregister = getattr(self, "_unregister", {})
        while not self._closing:
            unregister = asyncio.Event()
            self._unregister[addr] = unregister
            try:
                call = self.stubs[addr].BrokerSession(self._requests(addr, unregister))
                async for resp in call:
                    if failures:
                        log.info("registered with name server %s again", addr)
                    elif not self._registered[addr].is_set():
                        log.info("registered with name server %s", addr)
                    failures = 0
                    self.last_result = resp.result
                    self._registered[addr].set()
                if self._closing:
                    return
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                if failures == 0:
                    log.warning("name server %s unreachable (%s); retrying", addr, exc.code().name)
                failures += 1
            self._registered[addr].clear()
            await asyncio.sleep(min(0.2 * (2 ** min(failures, 4)), 3.0))

    async def stop(self) -> None:
        self._closing = True
        for addr, ev in getattr(self, "_unregister", {}).items():
            ev.set()
            self._kick[addr].set()
        if self._tasks:
            _done, pending = await asyncio.wait(self._tasks, timeout=2)
            for t in pending:
                t.cancel()
        for ch in self.channels.values():
            await ch.close()

    async def get_route(self, topic: str) -> namesrv_pb2.TopicRouteData | None:
        """The topic's route from the first name server that answers; None when it has no route."""
        errors = []
        for addr, stub in self.stubs.items():
            try:
                resp = await stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteRequest(topic=topic), timeout=3)
            except grpc.aio.AioRpcError as exc:
                errors.append(f"{addr}: {exc.code().name}")
                continue
            if resp.status.code == TOPIC_NOT_EXIST:
                return None
            return resp.route
        raise NamesrvUnavailable("no name server answered: " + "; ".join(errors))
