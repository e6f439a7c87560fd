"""apache.rocketmq.v2.MessagingService: what the official RocketMQ 5 clients talk to.

Each handler validates its request (validation.py), does its work against the store,
the POP engine and the route service, and answers with the v2 status code RocketMQ's
proxy would use.  No exception escapes a handler: an unexpected one is logged and
answered with INTERNAL_SERVER_ERROR, so a client can never crash or stall the broker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from .convert import to_grpc, to_stored
from .errors import BrokerError
from .grpc_errors import PUT_STATUS_CODES, RequestError, grpc_code, rpc_outcome
from .grpc_registration import Unparseable
from .lite import Action as LiteAction
from .lite import LiteUnsubscribed
from .lite import OffsetKind as LiteOffsetKind
from .lite import OffsetOption as LiteOffsetOption
from .pop import PopError, retry_topic
from .priority import place
from .request_metadata import request_metadata
from .retry_policy import fill_backoff
from .route_view import message_queues
from .sends import SendKind
from .timer import RecallError
from .topics import TopicConfig
from .trace_hooks import CLIENT_TRACE_HEADER
from .transaction import CheckBack, Resolution, TransactionError
from .validation import check_group, check_message, check_topic, parse_tag_filter

if TYPE_CHECKING:
    from rocketscope.broker.protocol import namesrv_pb2
    from rocketscope.config import Settings

    from .client_metrics import ClientMetricsProxy
    from .clients import ClientRegistry
    from .filter import MessageFilter
    from .forwarding import LeaderForwarder
    from .groups import GroupManager
    from .lite import LiteService
    from .metrics import BrokerMetrics
    from .pop import Delivery, PopService
    from .pull import PullService
    from .slave_read import SlaveReader
    from .store.message_store import PutResult
    from .store.record import StoredMessage
    from .topics import TopicManager
    from .trace_hooks import TraceHooks
    from .transaction import TransactionService

log = logging.getLogger(__name__)
CONSUMER_TYPES = (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER, pb.LITE_PUSH_CONSUMER)
Code = pb.Code
R = TypeVar("R")

# RocketMQ's delay levels 3..18: the default retry back-off of a push consumer
GRPC_RESOLUTIONS = {pb.COMMIT: Resolution.COMMIT, pb.ROLLBACK: Resolution.ROLLBACK}  # else UNKNOWN (unspecified)
ACK_WAIT_S = 3.0  # longest an ack waits for a new writer to catch up, or for its record to be replicated


def lite_checked(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` of broker/lite.py, its refusals as v2 statuses (broker/grpc_errors.py)."""
    try:
        return fn(*args)
    except BrokerError as exc:
        raise RequestError.of(exc) from None


def lite_offset_option(opt: pb.OffsetOption) -> LiteOffsetOption:
    """SyncLiteSubscription's OffsetOption, as Apache's proxy reads it (ClientActivity.toOffsetOption)."""
    case = opt.WhichOneof("offset_type")
    if case == "policy":
        return LiteOffsetOption(LiteOffsetKind.POLICY, opt.policy)
    if case == "offset":
        return LiteOffsetOption(LiteOffsetKind.OFFSET, opt.offset)
    if case == "tail_n":
        return LiteOffsetOption(LiteOffsetKind.TAIL_N, opt.tail_n)
    if case == "timestamp":
        return LiteOffsetOption(LiteOffsetKind.TIMESTAMP, opt.timestamp)
    raise RequestError(Code.BAD_REQUEST, "offset_option: no policy, offset, tail_n or timestamp set")


class StreamRefused(Exception):
    """Put in a Telemetry stream's outbox: the stream ends with gRPC INTERNAL and this text."""


def status(code: int = Code.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


def guarded(response_type: type[R]) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """Turn RequestError into a status, and any other exception into INTERNAL_SERVER_ERROR."""

    def wrap(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        @functools.wraps(fn)
        async def inner(self: MessagingService, request: Any, context: grpc.aio.ServicerContext) -> R:
            started = time.perf_counter()
            code = Code.OK
            try:
                if isinstance(request, Unparseable):
                    raise RequestError(Code.BAD_REQUEST, request.describe())
                resp = await fn(self, request, context)
                code = resp.status.code  # type: ignore[attr-defined]
                return resp
            except RequestError as exc:
                code = exc.code
                return response_type(status=status(exc.code, exc.message))  # type: ignore[call-arg]
            except BrokerError as exc:  # a core refusal no handler mapped itself: its kind's v2 code
                code = grpc_code(exc)
                return response_type(status=status(code, str(exc)))  # type: ignore[call-arg]
            except Exception as exc:
                code = Code.INTERNAL_SERVER_ERROR
                log.exception("%s failed", fn.__name__)
                return response_type(status=status(Code.INTERNAL_SERVER_ERROR,  # type: ignore[call-arg]
                                                   f"internal error in {fn.__name__}: {exc}"))
            finally:
                self.broker.record_rpc(fn.__name__, *rpc_outcome(code), time.perf_counter() - started)

        return inner

    return wrap


def check_back_command(check: CheckBack) -> svc.TelemetryCommand:
    """A check-back as gRPC clients receive it: the half message under its real topic, type TRANSACTION."""
    msg = to_grpc(check.half, check.topic)
    msg.system_properties.message_type = pb.TRANSACTION
    return svc.TelemetryCommand(recover_orphaned_transaction_command=svc.RecoverOrphanedTransactionCommand(
        message=msg, transaction_id=check.transaction_id))


def metadata_value(context: grpc.aio.ServicerContext, key: str) -> str:
    return request_metadata(context).get(key, "")


def peer_host(context: grpc.aio.ServicerContext) -> str:
    peer = context.peer() or ""
    if peer.startswith("ipv4:"):
        return peer[5:]
    if peer.startswith("ipv6:"):
        return peer[5:]
    return peer


def client_traced(context: grpc.aio.ServicerContext) -> bool:
    """The client writes its own trace records (instrumented with rocketscope.trace)."""
    return metadata_value(context, CLIENT_TRACE_HEADER) == "client"



def check_send_type(settings: Settings, msg: pb.Message, index: int, topic: TopicConfig | None) -> None:
    """The message type must fit its properties and its topic (RocketMQ 5's rules)."""
    sp = msg.system_properties
    mtype = sp.message_type
    where = f"messages[{index}].system_properties"
    if mtype in (pb.LITE, pb.PRIORITY) or sp.HasField("priority") or sp.lite_topic:
        mtype = sp.message_type = derived_type(sp, where)
    has_delay = sp.HasField("delivery_timestamp")
    if mtype == pb.DELAY and not has_delay:
        raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"{where}: a DELAY message needs "
                                                                     "delivery_timestamp")
    if has_delay and mtype not in (pb.DELAY, pb.MESSAGE_TYPE_UNSPECIFIED):
        raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                           f"{where}.delivery_timestamp is only allowed on DELAY messages")
    if has_delay:
        deliver_ms = sp.delivery_timestamp.ToMilliseconds()
        if not settings.timerWheelEnable and deliver_ms > time.time() * 1000:
            raise RequestError(Code.UNSUPPORTED, f"{where}.delivery_timestamp: delayed messages are off on "
                                                 "this broker (timerWheelEnable=false)")
        if deliver_ms - time.time() * 1000 > settings.timerMaxDelaySec * 1000:
            raise RequestError(Code.ILLEGAL_DELIVERY_TIME,
                               f"{where}.delivery_timestamp is more than timerMaxDelaySec "
                               f"({settings.timerMaxDelaySec} s) ahead")
    if topic is not None and topic.message_type != "MIXED":
        name = pb.MessageType.Name(mtype) if mtype else "NORMAL"
        if name != topic.message_type:
            raise RequestError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                               f"{where}.message_type {name} does not match topic {topic.name}, whose "
                               f"message.type is {topic.message_type}")


def derived_type(sp: pb.SystemProperties, where: str) -> int:
    """The type of a message with a priority or a lite topic, from what it carries rather than what the client
    declared: Apache RocketMQ 5.5's proxy checks the topic against the type its properties give (a transaction,
    a delay, a message group, a priority, a lite topic, in that order; broker/priority.py)."""
    if sp.message_type == pb.TRANSACTION:
        return pb.TRANSACTION
    if sp.HasField("delivery_timestamp"):
        return pb.DELAY
    if sp.message_group:
        return pb.FIFO
    if sp.HasField("priority"):
        if sp.priority < 0:
            raise RequestError(Code.BAD_REQUEST, f"{where}.priority {sp.priority} is negative: a priority must be "
                                                 "0 or more")
        return pb.PRIORITY
    if sp.lite_topic:
        return pb.LITE
    return pb.NORMAL


def send_kind(msg: pb.Message) -> SendKind:
    """A v2 message's transaction flag and delivery time as the broker takes them (broker/sends.py)."""
    sp = msg.system_properties
    deliver = sp.delivery_timestamp.ToMilliseconds() if sp.HasField("delivery_timestamp") else None
    return SendKind(sp.message_type == pb.TRANSACTION, deliver)


class MessagingHost(Protocol):
    """What the gRPC front door uses of the broker core: the façade's send, receive, ack and recall calls and
    the services it reads or drives directly (issue 17).  A front door translates a whole protocol onto the
    core, so this is most of ``Broker``'s public face; being a Protocol, it keeps the door from importing the
    Broker class and says exactly what the door may touch (mypy checks that the Broker passed fits)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def broker_name(self) -> str: ...
    @property
    def is_master(self) -> bool: ...
    @property
    def writable(self) -> bool: ...
    @property
    def clients(self) -> ClientRegistry: ...
    @property
    def groups(self) -> GroupManager: ...
    @property
    def topics(self) -> TopicManager: ...
    @property
    def topics_on_change(self) -> Callable[[], None]: ...
    @property
    def pop(self) -> PopService: ...
    @property
    def pull(self) -> PullService: ...
    @property
    def lite(self) -> LiteService: ...
    @property
    def transactions(self) -> TransactionService: ...
    @property
    def metrics(self) -> BrokerMetrics: ...
    @property
    def client_metrics(self) -> ClientMetricsProxy: ...
    @property
    def forwarder(self) -> LeaderForwarder: ...
    @property
    def slave_reader(self) -> SlaveReader: ...
    @property
    def trace_hooks(self) -> TraceHooks: ...
    async def route_for(self, topic: str) -> namesrv_pb2.TopicRouteData | None: ...
    async def topic_for_send(self, name: str) -> TopicConfig: ...
    def select_queue(self, cfg: TopicConfig, message_group: str, client_queue: int | None = None) -> int: ...
    async def put_messages(self, stored: list[StoredMessage], kinds: list[SendKind],
                           client_id: str = "") -> list[PutResult]: ...
    async def receive(self, group: str, topic: str, queue_id: int, batch: int, invisible_ms: int,
                      tags: MessageFilter, poll_s: float) -> list[Delivery]: ...
    def ack(self, group: str, handle: str, message_id: str, client_id: str = "", traced: bool = False) -> None: ...
    def change_invisible(self, group: str, handle: str, invisible_ms: int, message_id: str) -> str: ...
    async def forward_to_dlq(self, group: str, handle: str, message_id: str) -> None: ...
    async def recall(self, topic: str, recall_handle: str) -> str: ...
    def record_rpc(self, method: str, response_code: str, served: bool, seconds: float,
                   long_polling: bool = False) -> None: ...


class MessagingService(svc_grpc.MessagingServiceServicer):
    def __init__(self, broker: MessagingHost) -> None:
        self.broker = broker

    # ------------------------------------------------------------------ helpers
    def _client(self, context: grpc.aio.ServicerContext, **fields: object) -> str:
        cid = metadata_value(context, "x-mq-client-id")
        if cid:
            self.broker.clients.touch(cid, language=metadata_value(context, "x-mq-language"),
                                      version=metadata_value(context, "x-mq-client-version"),
                                      address=peer_host(context), **fields)
        return cid

    def _group(self, name: str) -> None:
        check_group(name)
        b = self.broker
        if b.groups.get(name) is None:
            if not b.settings.autoCreateSubscriptionGroup:
                raise RequestError(Code.CONSUMER_GROUP_NOT_FOUND,
                                   f"group.name: consumer group {name} does not exist on broker {b.broker_name}")
            b.groups.create_if_absent(name)

    def _local_topic(self, name: str, *, for_write: bool = False, for_read: bool = False) -> Any:
        check_topic(name)
        cfg = self.broker.topics.get(name)
        if cfg is None:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic.name: topic {name} does not exist on broker "
                                                     f"{self.broker.broker_name}")
        if for_write and not (cfg.writable and self.broker.writable):
            raise RequestError(Code.FORBIDDEN, f"topic.name: topic {name} is not writable on this broker")
        if for_read and not cfg.readable:
            raise RequestError(Code.FORBIDDEN, f"topic.name: topic {name} is not readable on this broker")
        return cfg

    def _queue(self, mq: pb.MessageQueue, for_read: bool = True) -> Any:
        cfg = self._local_topic(mq.topic.name, for_read=for_read)
        if mq.broker.name and mq.broker.name != self.broker.broker_name:
            raise RequestError(Code.BAD_REQUEST, f"message_queue.broker.name {mq.broker.name} is not this broker "
                                                 f"({self.broker.broker_name})")
        limit = cfg.read_queue_nums if for_read else cfg.write_queue_nums
        if not 0 <= mq.id < limit:
            raise RequestError(Code.BAD_REQUEST, f"message_queue.id {mq.id} is outside 0..{limit - 1} of topic "
                                                 f"{cfg.name}")
        return cfg

    def _invisible_ms(self, duration_ms: int, field: str, minimum_ms: int) -> int:
        maximum = self.broker.settings.maxInvisibleTimeMills
        if duration_ms < minimum_ms or duration_ms > maximum:
            raise RequestError(Code.ILLEGAL_INVISIBLE_TIME,
                               f"{field} is {duration_ms} ms; it must be between {minimum_ms} and {maximum} ms")
        return duration_ms

    # ------------------------------------------------------------------- route
    @guarded(svc.QueryRouteResponse)
    async def QueryRoute(self, request: svc.QueryRouteRequest,
                         context: grpc.aio.ServicerContext) -> svc.QueryRouteResponse:
        check_topic(request.topic.name)
        route = await self.broker.route_for(request.topic.name)
        if route is None:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic.name: topic {request.topic.name} does not exist")
        fwd = self.broker.forwarder
        if (master := fwd.master_of_slave(route)) and (resp := await fwd.ask_route(master, request, context)):
            return resp  # type: ignore[no-any-return]
        queues = message_queues(request.topic.name, route, request.topic.resource_namespace,
                                acting_master=self.broker.settings.slaveReadEnable)
        # a producer that lost its Telemetry stream gets endpoints that make it open one (broker/forwarding.py)
        self.broker.forwarder.revival.apply(metadata_value(context, "x-mq-client-id"), queues)
        return svc.QueryRouteResponse(status=status(), message_queues=queues)

    @guarded(svc.QueryAssignmentResponse)
    async def QueryAssignment(self, request: svc.QueryAssignmentRequest,
                              context: grpc.aio.ServicerContext) -> svc.QueryAssignmentResponse:
        check_topic(request.topic.name)
        self._group(request.group.name)
        self._client(context, group=request.group.name)
        route = await self.broker.route_for(request.topic.name)
        if route is None:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic.name: topic {request.topic.name} does not exist")
        resp = svc.QueryAssignmentResponse(status=status())
        queues = message_queues(request.topic.name, route, request.topic.resource_namespace,
                                acting_master=self.broker.settings.slaveReadEnable)
        for mq in queues:
            if mq.permission in (pb.READ, pb.READ_WRITE):
                resp.assignments.add(message_queue=mq)
        return resp

    # ------------------------------------------------------------- heartbeat
    @guarded(svc.HeartbeatResponse)
    async def Heartbeat(self, request: svc.HeartbeatRequest,
                        context: grpc.aio.ServicerContext) -> svc.HeartbeatResponse:
        group = request.group.name if request.HasField("group") else ""
        if request.client_type not in pb.ClientType.values():
            raise RequestError(Code.UNRECOGNIZED_CLIENT_TYPE, f"client_type {request.client_type} is not a known "
                                                              "ClientType")
        if group:
            self._group(group)
        if not self._client(context, client_type=request.client_type, group=group):
            raise RequestError(Code.CLIENT_ID_REQUIRED, "metadata x-mq-client-id is missing")
        if group and request.client_type in CONSUMER_TYPES:
            self._retry_topic(group)
        return svc.HeartbeatResponse(status=status())

    def _retry_topic(self, group: str) -> None:
        """A consumer's heartbeat or subscription settings create its group's ``%RETRY%`` topic, as Apache's broker
        does at every consumer heartbeat: mqadmin consumerProgress and statsAll ask for its route. The Python
        client sends its Settings at once and its first Heartbeat only after a second (a short-lived simple
        consumer may send none)."""
        b = self.broker
        rtopic = retry_topic(group)
        if b.is_master and b.topics.get(rtopic) is None:
            b.topics.create_if_absent(rtopic, 1, system=True)
            b.topics_on_change()
            log.info("retry topic %s created at the first heartbeat of a consumer of group %s", rtopic, group)

    @guarded(svc.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request: svc.NotifyClientTerminationRequest,
                                      context: grpc.aio.ServicerContext) -> svc.NotifyClientTerminationResponse:
        cid = metadata_value(context, "x-mq-client-id")
        if cid:
            self.broker.clients.remove(cid, "client terminated")
            self.broker.lite.forget(cid)
        return svc.NotifyClientTerminationResponse(status=status())

    # ------------------------------------------------------------- telemetry
    def settings_for(self, client_settings: pb.Settings) -> pb.Settings:
        """The server's Settings answer: publishing limits, subscription mode and back-off."""
        out = pb.Settings()
        out.CopyFrom(client_settings)
        b = self.broker
        kind = client_settings.WhichOneof("pub_sub")
        if kind == "publishing":
            out.publishing.max_body_size = b.settings.maxMessageSize
            out.publishing.validate_message_type = True
            out.backoff_policy.max_attempts = 3
            out.backoff_policy.exponential_backoff.initial.FromMilliseconds(10)
            out.backoff_policy.exponential_backoff.max.FromMilliseconds(1000)
            out.backoff_policy.exponential_backoff.multiplier = 2.0
        elif kind == "subscription":
            group = client_settings.subscription.group.name
            cfg = b.groups.get(group)
            retry_max = cfg.retry_max_times if cfg else 16
            out.subscription.fifo = bool(cfg and cfg.consume_message_orderly)
            out.subscription.receive_batch_size = 32
            if not client_settings.subscription.HasField("long_polling_timeout"):
                out.subscription.long_polling_timeout.FromSeconds(20)
            # the group's groupRetryPolicy, as Apache's proxy answers it (tests/test_diff_push_nack.py)
            fill_backoff(out.backoff_policy, cfg.retry_policy if cfg else None, retry_max + 1)
            if client_settings.client_type == pb.LITE_PUSH_CONSUMER:  # what its subscribe_lite checks first
                out.subscription.lite_subscription_quota = b.lite.quota(group)
                out.subscription.max_lite_topic_size = b.settings.maxLiteTopicSize
        b.client_metrics.apply(out)
        return out

    async def Telemetry(self, request_iterator: AsyncIterator[svc.TelemetryCommand],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[svc.TelemetryCommand]:
        cid = metadata_value(context, "x-mq-client-id")
        if not cid:
            yield svc.TelemetryCommand(status=status(Code.CLIENT_ID_REQUIRED, "metadata x-mq-client-id is missing"))
            return
        self._client(context)
        outbox: asyncio.Queue[object] = asyncio.Queue()
        self.broker.clients.attach(cid, outbox)

        async def reader() -> None:
            try:
                async for cmd in request_iterator:
                    await self._on_telemetry(cmd, cid, outbox)
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("telemetry stream of %s failed", cid)
            finally:
                await outbox.put(None)

        task = asyncio.get_running_loop().create_task(reader())
        try:
            while True:
                item = await outbox.get()
                if item is None:
                    break
                if isinstance(item, CheckBack):
                    item = check_back_command(item)
                elif isinstance(item, LiteUnsubscribed):
                    item = svc.TelemetryCommand(notify_unsubscribe_lite_command=svc.NotifyUnsubscribeLiteCommand(
                        lite_topic=item.lite_topic))
                elif isinstance(item, StreamRefused):
                    await context.abort(grpc.StatusCode.INTERNAL, str(item))
                yield item  # type: ignore[misc]
        finally:
            task.cancel()
            self.broker.clients.detach(cid, outbox)

    async def _on_telemetry(self, cmd: svc.TelemetryCommand, cid: str, outbox: asyncio.Queue[object]) -> None:
        if isinstance(cmd, Unparseable):
            await outbox.put(svc.TelemetryCommand(status=status(Code.BAD_REQUEST, cmd.describe())))
            return
        kind = cmd.WhichOneof("command")
        if kind == "settings":
            s = cmd.settings
            if s.client_type == pb.LITE_SIMPLE_CONSUMER:
                # Apache 5.5.0's proxy fails the stream so (observed: docs/COMPATIBILITY.md P9)
                log.info("client %s refused: LITE_SIMPLE_CONSUMER is not served", cid)
                await outbox.put(StreamRefused("Client type is not consumer, type: LITE_SIMPLE_CONSUMER"))
                return
            fields: dict[str, object] = {"client_type": s.client_type}
            if s.HasField("user_agent"):
                fields["language"] = pb.Language.Name(s.user_agent.language) if s.user_agent.language else ""
                fields["version"] = s.user_agent.version
            if s.WhichOneof("pub_sub") == "subscription":
                group = s.subscription.group.name
                try:
                    self._group(group)
                except RequestError as exc:
                    await outbox.put(svc.TelemetryCommand(status=status(exc.code, exc.message)))
                    return
                fields["group"] = group
                fields["topics"] = {e.topic.name for e in s.subscription.subscriptions}
                self._retry_topic(group)  # the consumer's first words to the broker (its Heartbeat may come later)
            elif s.WhichOneof("pub_sub") == "publishing":
                fields["topics"] = {t.name for t in s.publishing.topics}
            self.broker.clients.touch(cid, **fields)
            await outbox.put(svc.TelemetryCommand(status=status(), settings=self.settings_for(s)))
        elif kind == "thread_stack_trace" or kind == "verify_message_result":
            log.info("client %s answered %s", cid, kind)
        else:
            log.debug("ignoring telemetry command %s from %s", kind, cid)

    # ------------------------------------------------------------------ send
    @guarded(svc.SendMessageResponse)
    async def SendMessage(self, request: svc.SendMessageRequest,
                          context: grpc.aio.ServicerContext) -> svc.SendMessageResponse:
        if not request.messages:
            raise RequestError(Code.BAD_REQUEST, "messages is empty")
        cid = self._client(context, client_type=pb.PRODUCER)
        traced = client_traced(context)
        b = self.broker
        started = time.perf_counter()
        host = peer_host(context)
        stored = []
        try:
            for i, msg in enumerate(request.messages):
                check_message(msg, b.settings.maxMessageSize, i)
                if msg.topic.name != request.messages[0].topic.name:
                    raise RequestError(Code.BAD_REQUEST, f"messages[{i}].topic.name differs from messages[0]: one "
                                                         "request carries messages of one topic")
                try:
                    cfg = await b.topic_for_send(msg.topic.name)
                except BrokerError as exc:
                    raise RequestError.of(exc) from None
                check_send_type(b.settings, msg, i, cfg)
                queue_id = b.select_queue(cfg, msg.system_properties.message_group, msg.system_properties.queue_id)
                one = to_stored(msg, queue_id, host)
                one.queue_id = place(one.properties, cfg.write_queue_nums, queue_id)  # a priority's own queue
                lite_checked(b.lite.prepare_send, cfg.name, one.properties, f"messages[{i}].system_properties")
                stored.append(one)
        except RequestError as exc:
            for msg in request.messages:
                b.trace_hooks.on_send_failed(msg.topic.name, msg.system_properties.message_id,
                                             msg.system_properties.tag, " ".join(msg.system_properties.keys),
                                             len(msg.body), client_id=cid, client_traced=traced, code=exc.code,
                                             reason=exc.message)
            raise
        results = await b.put_messages(stored, [send_kind(m) for m in request.messages], cid)
        cost_ms = int((time.perf_counter() - started) * 1000)
        resp = svc.SendMessageResponse()
        codes = set()
        for msg, res in zip(request.messages, results, strict=True):
            code = PUT_STATUS_CODES.get(res.status, Code.INTERNAL_SERVER_ERROR)
            codes.add(code)
            if res.message is not None:
                b.trace_hooks.on_stored(res.message, client_id=cid, client_traced=traced, cost_ms=cost_ms,
                                        status=res.status.value)
            else:
                b.trace_hooks.on_send_failed(msg.topic.name, msg.system_properties.message_id,
                                             msg.system_properties.tag, " ".join(msg.system_properties.keys),
                                             len(msg.body), client_id=cid, client_traced=traced, code=code,
                                             reason=res.reason or res.status.value)
            entry = resp.entries.add(status=status(code, res.reason or res.status.value),
                                     message_id=msg.system_properties.message_id)
            if res.message is not None:
                entry.offset = res.message.queue_offset
                entry.transaction_id = res.message.properties.get("TRANSACTION_ID", "")
                entry.recall_handle = res.message.properties.get("__RECALL_HANDLE", "")
        if codes == {Code.OK}:
            resp.status.CopyFrom(status())
        elif len(codes) == 1:
            resp.status.CopyFrom(resp.entries[0].status)
        else:
            resp.status.CopyFrom(status(Code.MULTIPLE_RESULTS, "entries have different results"))
        return resp

    # --------------------------------------------------------------- receive
    async def ReceiveMessage(self, request: svc.ReceiveMessageRequest,
                             context: grpc.aio.ServicerContext) -> AsyncIterator[svc.ReceiveMessageResponse]:
        started = time.perf_counter()
        code = Code.OK
        try:
            if isinstance(request, Unparseable):
                raise RequestError(Code.BAD_REQUEST, request.describe())
            deliveries = await self._receive(request, context)
            if not deliveries:
                code = Code.MESSAGE_NOT_FOUND
                yield svc.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
                return
            yield svc.ReceiveMessageResponse(status=status())
            ts = svc.ReceiveMessageResponse()
            ts.delivery_timestamp.GetCurrentTime()
            yield ts
            ns = ""  # Apache RocketMQ 5.3.3's proxy answers messages without the namespace (docs/COMPATIBILITY.md)
            for d in deliveries:
                yield svc.ReceiveMessageResponse(message=to_grpc(d.message, d.topic, ns, d.handle, d.attempt,
                                                                 d.invisible_ms))
        except RequestError as exc:
            code = exc.code
            yield svc.ReceiveMessageResponse(status=status(exc.code, exc.message))
        except BrokerError as exc:
            code = grpc_code(exc)
            yield svc.ReceiveMessageResponse(status=status(code, str(exc)))
        except Exception as exc:
            code = Code.INTERNAL_SERVER_ERROR
            log.exception("ReceiveMessage failed")
            yield svc.ReceiveMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, f"internal error: {exc}"))
        finally:
            self.broker.record_rpc("ReceiveMessage", *rpc_outcome(code), time.perf_counter() - started,
                                   long_polling=True)

    async def _receive(self, request: svc.ReceiveMessageRequest, context: grpc.aio.ServicerContext) -> list[Any]:
        b = self.broker
        group = request.group.name
        self._group(group)
        cfg = self._queue(request.message_queue)
        self._client(context, group=group)
        tags = parse_tag_filter(request.filter_expression)
        if request.batch_size <= 0 or request.batch_size > 1024:
            raise RequestError(Code.BAD_REQUEST, f"batch_size {request.batch_size} must be between 1 and 1024")
        if request.HasField("invisible_duration"):
            invisible = self._invisible_ms(request.invisible_duration.ToMilliseconds(), "invisible_duration",
                                           b.settings.minInvisibleTimeMillsForRecv)
        elif request.auto_renew:
            invisible = b.settings.defaultInvisibleTimeMills
        else:
            raise RequestError(Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew")
        poll_ms = request.long_polling_timeout.ToMilliseconds() if request.HasField("long_polling_timeout") else 0
        if poll_ms < 0:
            raise RequestError(Code.ILLEGAL_POLLING_TIME, "long_polling_timeout must not be negative")
        poll_ms = min(poll_ms, b.settings.grpcClientConsumerMaxLongPollingTimeoutMillis)
        remaining = context.time_remaining()
        if remaining is not None:
            poll_ms = max(0, min(poll_ms, int(remaining * 1000) - 500))
        if not b.slave_reader.acting.may_pop():
            # slaveReadEnable: a slave hands out only while its master is down (broker/slave_read.py); a client
            # still routed here after the master came back finds nothing until its route refresh moves it
            await asyncio.sleep(poll_ms / 1000)
            return []
        cid = metadata_value(context, "x-mq-client-id")
        client = b.clients.clients.get(cid)
        if client is not None and client.client_type == pb.LITE_PUSH_CONSUMER:
            deliveries = await b.lite.receive(cid, group, cfg.name, request.batch_size, invisible, poll_ms / 1000)
            b.metrics.on_delivered(group, deliveries)
        else:
            deliveries = await b.receive(group, cfg.name, request.message_queue.id, request.batch_size, invisible,
                                         tags, poll_ms / 1000)
        traced = client_traced(context)
        for d in deliveries:
            b.trace_hooks.on_delivered(group, d.message, attempt=d.attempt, request_id=d.request_id, client_id=cid,
                                       client_traced=traced)
        return deliveries

    # ------------------------------------------------------------------- lite
    @guarded(svc.SyncLiteSubscriptionResponse)
    async def SyncLiteSubscription(self, request: svc.SyncLiteSubscriptionRequest,
                                   context: grpc.aio.ServicerContext) -> svc.SyncLiteSubscriptionResponse:
        """A lite consumer's lite topics (broker/lite.py)."""
        check_topic(request.topic.name)
        check_group(request.group.name)
        cid = self._client(context, group=request.group.name)
        if not cid:
            raise RequestError(Code.CLIENT_ID_REQUIRED, "metadata x-mq-client-id is missing")
        try:
            action = LiteAction(pb.LiteSubscriptionAction.Name(request.action))
        except ValueError:
            raise RequestError(Code.BAD_REQUEST, f"action {request.action} is not a LiteSubscriptionAction") from None
        offset = lite_offset_option(request.offset_option) if request.HasField("offset_option") and \
            action == LiteAction.PARTIAL_ADD else None  # Apache's proxy reads it for a PARTIAL_ADD only
        lite_checked(self.broker.lite.sync, cid, request.group.name, request.topic.name, action,
                     request.lite_topic_set, offset)
        return svc.SyncLiteSubscriptionResponse(status=status())

    # -------------------------------------------------------------------- ack
    @guarded(svc.AckMessageResponse)
    async def AckMessage(self, request: svc.AckMessageRequest,
                         context: grpc.aio.ServicerContext) -> svc.AckMessageResponse:
        self._group(request.group.name)
        check_topic(request.topic.name)
        if not request.entries:
            raise RequestError(Code.BAD_REQUEST, "entries is empty")
        acting = self.broker.slave_reader.acting
        if acting.forwards_acks():  # slaveReadEnable: acks of this slave's hand-outs belong to the master now
            forwarded = await acting.forward_ack(request, context)
            if forwarded is not None:
                return forwarded
        resp = svc.AckMessageResponse()
        codes = set()
        # a new writer first learns what its predecessors handed out (broker/pop_log.py); bounded wait
        await self.broker.pop.until_ready(ACK_WAIT_S)
        for i, entry in enumerate(request.entries):
            try:
                self.broker.ack(request.group.name, entry.receipt_handle, entry.message_id,
                                metadata_value(context, "x-mq-client-id"), client_traced(context))
                st = status()
            except PopError as exc:
                st = status(grpc_code(exc), f"entries[{i}].receipt_handle: {exc}")
            codes.add(st.code)
            resp.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st)
        remaining = context.time_remaining()
        wait_s = ACK_WAIT_S if remaining is None else max(0.01, min(ACK_WAIT_S, remaining - 0.05))
        if Code.OK in codes and not await self.broker.pop.durable(wait_s):
            # not in the replicated log: a new writer would hand the message out again, so the ack is not
            # confirmed; "the leader may have changed" makes a forwarding member retry at the new writer
            codes.discard(Code.OK)
            codes.add(Code.HA_NOT_AVAILABLE)
            for e in resp.entries:
                if e.status.code == Code.OK:
                    e.status.CopyFrom(status(Code.HA_NOT_AVAILABLE, "ack not replicated, the leader may have "
                                                                    "changed; retry"))
        if codes == {Code.OK}:
            resp.status.CopyFrom(status())
        elif len(codes) == 1:
            resp.status.CopyFrom(resp.entries[0].status)
        else:
            resp.status.CopyFrom(status(Code.MULTIPLE_RESULTS, "entries have different results"))
        return resp

    @guarded(svc.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request: svc.ChangeInvisibleDurationRequest,
                                      context: grpc.aio.ServicerContext) -> svc.ChangeInvisibleDurationResponse:
        self._group(request.group.name)
        check_topic(request.topic.name)
        invisible = self._invisible_ms(request.invisible_duration.ToMilliseconds(), "invisible_duration", 0)
        acting = self.broker.slave_reader.acting
        if acting.forwards_acks():  # slaveReadEnable: as AckMessage, this slave's hand-outs belong to the master
            forwarded = await acting.forward_change_invisible(request, context)
            if forwarded is not None:
                return forwarded
        await self.broker.pop.until_ready(ACK_WAIT_S)
        try:
            handle = self.broker.change_invisible(request.group.name, request.receipt_handle, invisible,
                                                  request.message_id)
        except PopError as exc:
            raise RequestError.of(exc, "receipt_handle: ") from None
        return svc.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle)

    @guarded(svc.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(
            self, request: svc.ForwardMessageToDeadLetterQueueRequest,
            context: grpc.aio.ServicerContext) -> svc.ForwardMessageToDeadLetterQueueResponse:
        self._group(request.group.name)
        check_topic(request.topic.name)
        try:
            await self.broker.forward_to_dlq(request.group.name, request.receipt_handle, request.message_id)
        except PopError as exc:
            raise RequestError.of(exc, "receipt_handle: ") from None
        return svc.ForwardMessageToDeadLetterQueueResponse(status=status())

    # ------------------------------------------- message types and pull APIs
    @guarded(svc.EndTransactionResponse)
    async def EndTransaction(self, request: svc.EndTransactionRequest,
                             context: grpc.aio.ServicerContext) -> svc.EndTransactionResponse:
        check_topic(request.topic.name)
        if not request.transaction_id:
            raise RequestError(Code.INVALID_TRANSACTION_ID, "transaction_id is empty")
        try:
            await self.broker.transactions.end(request.transaction_id, request.message_id,
                                               GRPC_RESOLUTIONS.get(request.resolution, Resolution.UNKNOWN),
                                               request.source == pb.SOURCE_SERVER_CHECK)
        except TransactionError as exc:
            raise RequestError.of(exc) from None
        return svc.EndTransactionResponse(status=status())

    @guarded(svc.RecallMessageResponse)
    async def RecallMessage(self, request: svc.RecallMessageRequest,
                            context: grpc.aio.ServicerContext) -> svc.RecallMessageResponse:
        check_topic(request.topic.name)
        try:
            msg_id = await self.broker.recall(request.topic.name, request.recall_handle)
        except RecallError as exc:
            raise RequestError.of(exc, "recall_handle: ") from None
        return svc.RecallMessageResponse(status=status(), message_id=msg_id)

    async def PullMessage(self, request: svc.PullMessageRequest,
                          context: grpc.aio.ServicerContext) -> AsyncIterator[svc.PullMessageResponse]:
        started = time.perf_counter()
        code = Code.OK
        try:
            if isinstance(request, Unparseable):
                yield svc.PullMessageResponse(status=status(Code.BAD_REQUEST, request.describe()))
                return
            async for resp in self._pull(request, context):
                if resp.HasField("status"):
                    code = resp.status.code
                yield resp
        except Exception as exc:
            code = Code.INTERNAL_SERVER_ERROR
            log.exception("PullMessage failed")
            yield svc.PullMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, f"internal error: {exc}"))
        finally:
            self.broker.record_rpc("PullMessage", *rpc_outcome(code), time.perf_counter() - started,
                                   long_polling=True)

    async def _pull(self, request: svc.PullMessageRequest, context: grpc.aio.ServicerContext
                    ) -> AsyncIterator[svc.PullMessageResponse]:
        """Through an in-sync slave when slaveReadEnable says so (broker/slave_read.py), else from this store."""
        b = self.broker
        slave = b.slave_reader.slave_for(request, context)
        if slave is not None:
            answered = False
            try:
                async for resp in b.slave_reader.relay(slave, request, context):
                    answered = True
                    yield resp
                return
            except grpc.aio.AioRpcError as exc:
                if answered:
                    raise
                log.warning("slave read from %s failed (%s): serving the pull here", slave, exc.code().name)
        async for resp in b.pull.pull(request, context.time_remaining()):
            yield resp

    @guarded(svc.GetOffsetResponse)
    async def GetOffset(self, request: svc.GetOffsetRequest,
                        context: grpc.aio.ServicerContext) -> svc.GetOffsetResponse:
        return self.broker.pull.get_offset(request)

    @guarded(svc.QueryOffsetResponse)
    async def QueryOffset(self, request: svc.QueryOffsetRequest,
                          context: grpc.aio.ServicerContext) -> svc.QueryOffsetResponse:
        return self.broker.pull.query_offset(request)

    @guarded(svc.UpdateOffsetResponse)
    async def UpdateOffset(self, request: svc.UpdateOffsetRequest,
                           context: grpc.aio.ServicerContext) -> svc.UpdateOffsetResponse:
        return self.broker.pull.update_offset(request)
