"""Forward client requests to the Raft leader (DLedger mode) or the master (controller mode), as RocketMQ's proxy does.

Every member of a DLedger group is listed in the route's endpoints, so the official
client's channel reaches *some* member and switches member by itself when one dies.  A
follower answers what it can answer itself (routes, assignments) and forwards the rest
— sends, receives, acks, offsets, transactions, the Telemetry stream — to the leader
with the client's metadata, so a client never waits for its 30-second route refresh to
find the new leader.  A request already forwarded once is never forwarded again.

A leader change must not be visible to the client (issue 15), so a request *waits for
the new writer within its own deadline* instead of failing:

- the leader comes from this node's Raft state (or the controller's answer), looked up
  again on every attempt; the name server is asked only when that state names no
  leader for longer than ``NAMESRV_AFTER_S`` (a member cut off from its peers);
- forwarded calls use ``wait_for_ready`` and short reconnect back-off, and a channel
  found in reconnect back-off (TRANSIENT_FAILURE) is replaced by a fresh one, which
  dials at once: a restarted leader is reached as soon as it listens, not after the
  back-off gRPC grew while it was down (up to 120 s by default);
- a forwarded unary call is abandoned and retried at the new writer when the local
  view of the writer moves while it is in flight (a paused leader never answers);
- an answer meaning "the writer changed" (HA_NOT_AVAILABLE with one of
  ``WRITER_CHANGED``, or a local writer that lost its role while serving) is retried
  at the new writer, ``RETRY_PAUSE_S`` apart, until the deadline.

A channel closed under a request (broker/broker.py ``stop`` closes the forwarder's channels
while its gRPC servers still serve requests in their grace period; a retired channel is
closed ``RETIRE_AFTER_S`` after replacement) is never used again: the call is started on a
fresh channel instead (grpc's ``UsageError: Channel is closed`` reached a client in chaos
seed 7, docs/CHAOS.md).  The name server is asked through the forwarder's own channels for
the same reason: the name-server client's channels close with it.

Retrying a send can store it twice if the first attempt was committed after all
(at-least-once, as the client's own retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import grpc
from google.protobuf.message import Message
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from rocketscope.broker.protocol import common_pb2, namesrv_pb2_grpc

from .request_metadata import SLAVE_READ_HEADER, request_metadata
from .stream_revival import StreamRevival

if TYPE_CHECKING:
    from .clients import ClientRegistry
    from .controller.replicas import ReplicasManager
    from .dledger.node import DLedgerNode
    from .namesrv_client import NamesrvClient
    from .security import SecurityConfig

ProtoType = type[Message]  # a generated request or response class (its FromString decodes a forwarded frame)
log = logging.getLogger(__name__)
T = TypeVar("T")
FORWARDED_HEADER = "x-rocketscope-forwarded"
LOCAL_METHODS = frozenset({"QueryRoute", "QueryAssignment"})
ROUTE_METHODS = frozenset({"QueryRoute"})  # asked of the writer first, answered here when it does not answer
ROUTE_ASK_S = 1.0  # how long a member waits for the writer's route answer before giving its own
SERVICE = "/apache.rocketmq.v2.MessagingService/"
RETRY_PAUSE_S = 0.025  # between two attempts while the writer changes
NO_DEADLINE_S = 10.0  # wait budget of a request that carries no deadline
REPLY_MARGIN_S = 0.05  # answer this long before the client's deadline, so it reads our error, not its own
WATCH_S = 0.05  # how often an in-flight forwarded call checks whether the writer moved
NAMESRV_AFTER_S = 1.0  # Raft state without a leader this long: ask the name server (isolated member)
RETIRE_AFTER_S = 30.0  # a replaced channel is closed this much later (calls still on it may finish)
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024),
                   ("grpc.max_send_message_length", 64 * 1024 * 1024),
                   ("grpc.initial_reconnect_backoff_ms", 50),
                   ("grpc.min_reconnect_backoff_ms", 50),
                   ("grpc.max_reconnect_backoff_ms", 500)]
# HA_NOT_AVAILABLE answers that mean "not the writer (any more)": broker/dledger/node.py (propose),
# broker/raft/core.py (LeaderTransferring), broker/controller/replicas.py (SERVICE_NOT_AVAILABLE of a
# deposed master) and NoLeader below.
WRITER_CHANGED = ("not the leader", "the leader may have changed", "transferring leadership", "not the master",
                  "no leader yet", "no master yet", "stale forward")


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class NoLeader(Exception):
    pass


class WriterMoved(Exception):
    """The writer this call went to is no longer the writer in this node's view."""


class ChannelClosed(WriterMoved):
    """The channel under a forwarded call was closed (the call ends as cancelled): retry on a fresh one."""


def _closed_under_us(call: Any) -> bool:
    """Whether ``call`` ended cancelled while the task waiting on it was not itself being cancelled.

    A call whose channel is closed ends with asyncio.CancelledError, not an AioRpcError; letting
    that propagate cancels the server handler and the client waits out its whole deadline.
    """
    task = asyncio.current_task()
    return bool(call.cancelled()) and (task is None or task.cancelling() == 0)


def writer_changed(resp: Any) -> bool:
    """Whether an answer says the request reached a node that is not (or no longer) the writer."""
    st = getattr(resp, "status", None)
    if st is None or st.code != pb.HA_NOT_AVAILABLE:
        return False
    return st.message == "SERVICE_NOT_AVAILABLE" or any(m in st.message for m in WRITER_CHANGED)


class ForwardHost(Protocol):
    """What forwarding uses of its broker (issue 17: this, not the whole Broker); read-only views.  The HA
    objects are looked up per request: which one exists, and who is the writer, is known only at run time."""

    @property
    def dledger(self) -> DLedgerNode | None: ...
    @property
    def replicas(self) -> ReplicasManager | None: ...
    @property
    def is_master(self) -> bool: ...
    @property
    def node_id(self) -> str: ...
    @property
    def grpc_addr(self) -> str: ...
    @property
    def broker_name(self) -> str: ...
    @property
    def namesrv(self) -> NamesrvClient: ...
    @property
    def security(self) -> SecurityConfig: ...
    @property
    def forwarder(self) -> LeaderForwarder: ...
    @property
    def clients(self) -> ClientRegistry: ...

class LeaderForwarder:
    def __init__(self, broker: ForwardHost) -> None:
        self.broker = broker
        self.revival = StreamRevival(broker)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._ns_checked = 0.0
        self._ns_leader: str | None = None
        self._leaderless_since: float | None = None
        self._retiring: set[asyncio.Task[None]] = set()

    async def target(self, method: str, context: grpc.aio.ServicerContext) -> str | None:
        """The leader's address when this request must go there, else None (serve locally)."""
        if method == "PullMessage" and SLAVE_READ_HEADER in request_metadata(context):
            return None  # a master handed this far-behind pull to us (slaveReadEnable)
        rm = getattr(self.broker, "replicas", None)
        if rm is not None:  # controller mode: the master the controller named
            if method in LOCAL_METHODS:
                return None
            if self.broker.is_master:
                if not rm.lease_expired:
                    return None
                # cut off from the controllers: a master of a newer epoch, if the name server knows one,
                # takes the request (RocketMQ's proxy follows the route the same way); else try locally
                return await self._leader_from_namesrv(newer_than_epoch=rm.master_epoch)
            if FORWARDED_HEADER in request_metadata(context):
                raise NoLeader(f"{self.broker.node_id} is not the master either (stale forward)")
            if not rm.master_grpc_addr or rm.master_grpc_addr == self.broker.grpc_addr:
                raise NoLeader(f"group {self.broker.broker_name} has no master yet; retry")
            return rm.master_grpc_addr
        d = self.broker.dledger
        if d is None or d.is_leader or method in LOCAL_METHODS:
            self._leaderless_since = None
            return None
        if FORWARDED_HEADER in request_metadata(context):
            raise NoLeader(f"{d.self_id} is not the leader either (stale forward)")
        addr = d.leader_grpc_addr()
        if addr:
            self._leaderless_since = None
            return addr
        now = time.monotonic()
        if self._leaderless_since is None:
            self._leaderless_since = now
        if now - self._leaderless_since >= NAMESRV_AFTER_S:  # longer than an election: maybe cut off
            addr = await self._leader_from_namesrv()
        if not addr:
            raise NoLeader(f"group {d.group} has no leader yet; retry")
        return addr

    def writer_now(self) -> str | None:
        """The writer's client address in this node's current view (no I/O); None: unknown or this node."""
        rm = getattr(self.broker, "replicas", None)
        if rm is not None:
            if self.broker.is_master:
                return None
            return rm.master_grpc_addr or None
        d = self.broker.dledger
        if d is None or d.is_leader:
            return None
        return d.leader_grpc_addr()

    def is_writer(self) -> bool:
        return bool(self.broker.is_master)

    def moved_from(self, addr: str) -> bool:
        """True when this node's view names a writer other than ``addr`` (itself included)."""
        if self.is_writer():
            return True
        now = self.writer_now()
        return now is not None and now != addr

    @staticmethod
    def deadline(context: grpc.aio.ServicerContext) -> float:
        remaining = context.time_remaining()
        if remaining is None:
            remaining = NO_DEADLINE_S
        return time.monotonic() + max(0.0, remaining - REPLY_MARGIN_S)

    @staticmethod
    async def pause(deadline: float) -> bool:
        """Sleep before the next attempt; False when the deadline leaves no room for one."""
        left = deadline - time.monotonic()
        if left <= RETRY_PAUSE_S:
            return False
        await asyncio.sleep(RETRY_PAUSE_S)
        return True

    async def _leader_from_namesrv(self, newer_than_epoch: int | None = None) -> str | None:
        """A member cut off from its peers does not know the new leader; the name server does.

        ``newer_than_epoch`` (controller mode): only a master registered with a higher master epoch.
        """
        now = time.monotonic()
        if now - self._ns_checked < 0.5:
            return self._ns_leader
        self._ns_checked = now
        self._ns_leader = None
        b = self.broker
        for ns in b.namesrv.addresses:
            try:
                info = await self.start(ns, lambda ch: namesrv_pb2_grpc.NameServerStub(ch).GetClusterInfo(
                    common_pb2.Empty(), timeout=1))
            except grpc.aio.AioRpcError:
                continue
            for live in info.brokers:
                r = live.registration
                if (r.broker_name == b.broker_name and r.broker_id == 0 and r.grpc_addr != b.grpc_addr
                        and (newer_than_epoch is None or r.epoch > newer_than_epoch)):
                    self._ns_leader = r.grpc_addr
                    return self._ns_leader
        return None

    def channel(self, addr: str) -> grpc.aio.Channel:
        """The channel to ``addr``; a fresh one if the cached one sits in reconnect back-off."""
        ch = self._channels.get(addr)
        if ch is not None and ch.get_state(try_to_connect=False) == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            self._retire(ch)
            ch = None
        if ch is None:
            ch = self.broker.security.client_tls.channel(addr, options=CHANNEL_OPTIONS)
            self._channels[addr] = ch
        return ch

    def start(self, addr: str, begin: Callable[[grpc.aio.Channel], T]) -> T:
        """``begin(channel)`` on the channel to ``addr``; on a fresh channel when that one was closed under us.

        Starting a call on a closed channel raises grpc's UsageError at once (no I/O happened),
        so starting it again on a new channel is always safe.
        """
        ch = self.channel(addr)
        try:
            return begin(ch)
        except grpc.aio.UsageError:
            if self._channels.get(addr) is ch:
                del self._channels[addr]
            log.info("channel to %s was closed under a forwarded request; dialling a fresh one", addr)
            return begin(self.channel(addr))

    def _retire(self, ch: grpc.aio.Channel) -> None:
        async def later() -> None:
            await asyncio.sleep(RETIRE_AFTER_S)
            await ch.close()
        task = asyncio.get_running_loop().create_task(later(), name="forwarding-retire-channel")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def call_unary(self, addr: str, path: str, request: Any, resp_type: ProtoType,
                         context: grpc.aio.ServicerContext, deadline: float) -> Any:
        """One forwarded unary call that waits for the channel, abandoned if the writer moves meanwhile."""
        md = self.metadata(context)
        call = self.start(addr, lambda ch: ch.unary_unary(
            path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=resp_type.FromString)(
            request, metadata=md, wait_for_ready=True, timeout=max(0.001, deadline - time.monotonic())))
        task = asyncio.ensure_future(call)
        task.add_done_callback(_retrieve)  # an abandoned call's late failure is not an unhandled error
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=WATCH_S)
                if done:
                    if task.cancelled():
                        raise ChannelClosed(addr)
                    return task.result()
                if self.moved_from(addr):
                    raise WriterMoved(addr)
        finally:
            if not task.done():
                task.cancel()

    async def ask_route(self, addr: str, request: Any, context: grpc.aio.ServicerContext) -> Any | None:
        """QueryRoute answered by the writer at ``addr`` (it knows which producers lost their Telemetry stream,
        broker/stream_revival.py), within ``ROUTE_ASK_S``; None when it does not answer OK or this call was
        itself forwarded."""
        if FORWARDED_HEADER in request_metadata(context):
            return None
        deadline = min(self.deadline(context), time.monotonic() + ROUTE_ASK_S)
        try:
            resp = await self.call_unary(addr, SERVICE + "QueryRoute", request, svc.QueryRouteResponse, context,
                                         deadline)
        except (WriterMoved, grpc.aio.AioRpcError):  # ChannelClosed is a WriterMoved
            return None
        return resp if resp.status.code == pb.OK else None

    def master_of_slave(self, route: Any) -> str | None:
        """Master/Slave mode: this slave's master's client address as ``route`` lists it; None on a master,
        in DLedger or controller mode (their members ask the writer through ``wrap``), or with no master listed.

        A client whose access point list names both brokers stays on the slave's channel after a master
        restart, so its route reads reach the slave, which cannot know whether the producer has a Telemetry
        stream at the master: the chaos harness saw a kill -9 of the master leave eight open transactions
        never checked back (tx_unchecked). The slave asks the master first, as DLedger members ask the leader."""
        b = self.broker
        if b.is_master or b.dledger is not None or getattr(b, "replicas", None) is not None:
            return None
        for bd in route.broker_datas:
            if bd.broker_name == b.broker_name:
                addr = bd.grpc_addrs.get(0)
                return addr if addr and addr != b.grpc_addr else None
        return None

    def metadata(self, context: grpc.aio.ServicerContext) -> list[tuple[str, str]]:
        md = [(k, v) for k, v in (context.invocation_metadata() or ())
              if not k.startswith((":", "grpc-")) and isinstance(v, str)]
        md.append((FORWARDED_HEADER, self.broker.dledger.self_id if self.broker.dledger else self.broker.node_id))
        return md

    async def close(self) -> None:
        """Close the channels; a request still being served afterwards (server grace period) dials a new one."""
        for task in list(self._retiring):
            task.cancel()
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            await ch.close()


# failures of a forwarded call after which another attempt may reach a (new) writer
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})


def _response_type(method_name: str) -> ProtoType:
    return getattr(svc, method_name + "Response") if method_name != "Telemetry" else svc.TelemetryCommand


def wrap(method_name: str, kind: tuple[bool, bool], handler: Callable[..., Any], broker: ForwardHost,
         request_type: ProtoType) -> Callable[..., Any]:
    """A handler that forwards to the leader when needed, else runs ``handler``."""
    resp_type = _response_type(method_name)
    path = SERVICE + method_name

    def error(exc: Exception) -> Any:
        return resp_type(status=pb.Status(code=pb.HA_NOT_AVAILABLE, message=str(exc)))

    if kind == (False, False) and method_name in ROUTE_METHODS:
        async def route(request: Any, context: grpc.aio.ServicerContext) -> Any:
            """The writer answers when it can (it knows which clients lost their Telemetry stream), else this member."""
            fwd = broker.forwarder
            addr = fwd.writer_now()
            if addr and (resp := await fwd.ask_route(addr, request, context)) is not None:
                return resp
            return await handler(request, context)
        return route

    if kind == (False, False):
        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            fwd = broker.forwarder
            deadline = fwd.deadline(context)
            while True:
                try:
                    addr = await fwd.target(method_name, context)
                except NoLeader as exc:
                    # a stale forward is answered at once: the forwarding member retries with its newer view
                    if FORWARDED_HEADER not in request_metadata(context) and await fwd.pause(deadline):
                        continue
                    return error(exc)
                if addr is None:
                    resp = await handler(request, context)
                    # a writer deposed (or handing over) while serving: wait for the new writer
                    if (writer_changed(resp) and FORWARDED_HEADER not in request_metadata(context)
                            and await fwd.pause(deadline)):
                        continue
                    return resp
                try:
                    resp = await fwd.call_unary(addr, path, request, resp_type, context, deadline)
                except WriterMoved:
                    continue
                except grpc.aio.AioRpcError as exc:
                    failure = NoLeader(f"forwarding {method_name} to the leader at {addr} failed: {exc.code().name}")
                    if exc.code() in RETRYABLE and await fwd.pause(deadline):
                        continue
                    return error(failure)
                if writer_changed(resp) and await fwd.pause(deadline):
                    continue
                return resp
        return unary

    if kind == (False, True):
        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            fwd = broker.forwarder
            deadline = fwd.deadline(context)
            while True:
                try:
                    addr = await fwd.target(method_name, context)
                except NoLeader as exc:
                    if FORWARDED_HEADER not in request_metadata(context) and await fwd.pause(deadline):
                        continue
                    yield error(exc)
                    return
                if addr is None:
                    async for item in handler(request, context):
                        yield item
                    return
                md = fwd.metadata(context)
                call = fwd.start(addr, lambda ch, md=md: ch.unary_stream(  # type: ignore[misc]
                    path, request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=resp_type.FromString)(
                    request, metadata=md, wait_for_ready=True, timeout=max(0.001, deadline - time.monotonic())))
                sent = False
                retry = False
                try:
                    async for item in call:
                        if not sent and writer_changed(item) and await fwd.pause(deadline):
                            retry = True  # the first answer says "not the writer": try the new one
                            break
                        sent = True
                        yield item
                except grpc.aio.AioRpcError as exc:
                    if not sent and exc.code() in RETRYABLE and await fwd.pause(deadline):
                        continue
                    if not sent:
                        yield error(NoLeader(f"forwarding {method_name} to {addr} failed: {exc.code().name}"))
                    return
                except asyncio.CancelledError:
                    if not _closed_under_us(call):
                        raise
                    if not sent and await fwd.pause(deadline):
                        continue  # the channel was closed under the call: a fresh one takes it
                    if not sent:
                        yield error(NoLeader(f"forwarding {method_name} to {addr} failed: channel closed"))
                    return
                finally:
                    call.cancel()  # no-op when it finished
                if not retry:
                    return
        return unary_stream

    async def stream_stream(request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
                            ) -> AsyncIterator[Any]:
        if FORWARDED_HEADER in request_metadata(context):
            # a member relays a client's stream here: serve it, the relaying member follows the writer
            async for item in handler(request_iterator, context):
                yield item
            return
        relay = StreamRelay(broker, method_name, path, handler, request_type, resp_type, context)
        async for item in relay.run(request_iterator):
            yield item
    return stream_stream


LOCAL = ""  # StreamRelay target: this node serves the stream itself


class _QueueIterator:
    """The items of a queue until None, as an async iterator (a class, not an async generator: a
    generator closed by the event loop's finalizer while a gRPC task still awaits it fails with
    "aclose(): asynchronous generator is already running")."""

    def __init__(self, queue: asyncio.Queue[Any], only: type | None) -> None:
        self.queue = queue
        self.only = only  # relayed to another member: only parsed commands (a local handler answers the rest)
        self.done = False

    def __aiter__(self) -> _QueueIterator:
        return self

    async def __anext__(self) -> Any:
        while not self.done:
            item = await self.queue.get()
            if item is None:
                self.done = True
                break
            if self.only is None or isinstance(item, self.only):
                return item
        raise StopAsyncIteration


class StreamRelay:
    """A client's Telemetry stream that follows the writer for as long as the client keeps it open (issue 15).

    The writer asks a producer to check a transaction back, and pushes settings, down the
    producer's Telemetry stream; the official Python client opens that stream once per set
    of endpoints and does not open it again when it ends (only its settings sync, every
    300 s, notices).  A stream pinned to whichever node was the writer when it opened
    therefore left every new writer without a way to reach the producer: half messages
    recovered after a leader change were never checked back (the chaos harness'
    ``tx_unchecked``).  Here the member the client reached keeps the client's side open
    and serves it itself while it is the writer, else relays it to the writer, and moves
    the relay (replaying the client's last Settings, so the new writer registers it) when
    the writer changes.  Only a kill of this member ends the client's stream.
    """

    def __init__(self, broker: ForwardHost, method: str, path: str, handler: Callable[..., Any],
                 request_type: ProtoType, resp_type: ProtoType, context: grpc.aio.ServicerContext) -> None:
        self.broker = broker
        self.fwd = broker.forwarder
        self.method, self.path, self.handler = method, path, handler
        self.request_type, self.resp_type = request_type, resp_type
        self.context = context
        self.out: asyncio.Queue[Any] = asyncio.Queue()
        self.up: asyncio.Queue[Any] = asyncio.Queue()  # the current attempt's upstream
        self.last_settings: Any = None
        self.client_done = False
        self.moves = 0

    def target(self) -> str | None:
        """LOCAL when this node is the writer, the writer's address, or None when unknown now."""
        if self.broker.is_master:
            return LOCAL
        return self.fwd.writer_now()

    async def _read_client(self, request_iterator: AsyncIterator[Any]) -> None:
        try:
            async for item in request_iterator:
                if isinstance(item, self.request_type) and item.WhichOneof("command") == "settings":
                    self.last_settings = item
                await self.up.put(item)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        finally:
            self.client_done = True
            await self.up.put(None)

    @staticmethod
    def _drain(up: asyncio.Queue[Any], remote: bool, request_type: ProtoType) -> _QueueIterator:
        return _QueueIterator(up, request_type if remote else None)

    async def _pump(self, target: str, up: asyncio.Queue[Any]) -> None:
        if target == LOCAL:
            async for item in self.handler(self._drain(up, False, self.request_type), self.context):
                await self.out.put(item)
            return
        md = self.fwd.metadata(self.context)
        stream = self.fwd.start(target, lambda ch: ch.stream_stream(
            self.path, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=self.resp_type.FromString)(
            self._drain(up, True, self.request_type), metadata=md, wait_for_ready=True))
        try:
            async for item in stream:
                await self.out.put(item)
        finally:
            with contextlib.suppress(Exception):
                stream.cancel()
            # the call's own task reading ``up`` must end too: cancel() leaves it waiting when the writer ended
            # the stream first (the call is over, so grpc does not cancel it), and an abandoned pending task is
            # reported by asyncio as an ERROR ("Task was destroyed but it is pending!") when it is collected,
            # a burst of them at every leader change (chaos DLedger run, session 14)
            up.put_nowait(None)

    async def _attempts(self) -> None:
        first = True
        try:
            while not self.client_done:
                target = self.target()
                if target is None:
                    await asyncio.sleep(WATCH_S)
                    continue
                if not first:
                    self.up = asyncio.Queue()
                    if self.last_settings is not None:
                        await self.up.put(self.last_settings)  # the new writer registers the client from it
                first = False
                up = self.up
                began = time.monotonic()
                task = asyncio.ensure_future(self._pump(target, up))
                try:
                    while not task.done():
                        await asyncio.wait({task}, timeout=WATCH_S)
                        now = self.target()
                        if now is not None and now != target:
                            self.moves += 1
                            log.info("%s stream of %s follows the writer: %s -> %s", self.method,
                                     request_metadata(self.context).get("x-mq-client-id", "?"),
                                     target or "this node", now or "this node")
                            break
                finally:
                    if not task.done():
                        await up.put(None)
                        task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                if not self.client_done:  # an attempt that ended at once (writer refusing, going away): back off
                    await asyncio.sleep(RETRY_PAUSE_S if time.monotonic() - began > 1.0 else 0.5)
        finally:
            await self.out.put(None)

    async def run(self, request_iterator: AsyncIterator[Any]) -> AsyncIterator[Any]:
        cid = request_metadata(self.context).get("x-mq-client-id", "?")
        log.info("%s stream of client %s opened on this member (it follows the writer)", self.method, cid)
        reader = asyncio.ensure_future(self._read_client(request_iterator))
        manager = asyncio.ensure_future(self._attempts())
        try:
            while True:
                item = await self.out.get()
                if item is None:
                    return
                yield item
        finally:
            for t in (manager, reader):
                t.cancel()
            log.info("%s stream of client %s on this member ended (moved %d times)", self.method, cid, self.moves)
            await asyncio.sleep(0)

