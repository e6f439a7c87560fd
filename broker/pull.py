"""Pull APIs for readers that manage their own offsets: PullMessage, GetOffset, QueryOffset, UpdateOffset.

Semantics follow RocketMQ 5's proxy: an offset below the queue's minimum or above its
maximum is ILLEGAL_OFFSET with ``next_offset`` set to the nearest valid offset (so a
reader can correct itself); pulling at the end long-polls for new messages and answers
MESSAGE_NOT_FOUND when none came.  The Spark data source reads topics through these.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from rocketscope.names import COMMITLOG_OFFSET_PROPERTY

from .convert import to_grpc
from .filter import keep, store_tags
from .grpc_errors import RequestError
from .pop import origin_topic
from .topics import read_topic_problem
from .validation import check_group, parse_filter

if TYPE_CHECKING:
    from rocketscope.config import Settings

    from .groups import GroupManager
    from .pop import PopService
    from .store.message_store import MessageStore
    from .store.record import StoredMessage
    from .topics import TopicManager

Code = pb.Code
MAX_PULL_BATCH = 1024


def _status(code: int = Code.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


class PullMetrics(Protocol):
    def on_pulled(self, group: str, messages: Iterable[StoredMessage]) -> None: ...


class PullHost(Protocol):
    """What the pull APIs use of their broker (issue 17: this, not the whole Broker)."""

    store: MessageStore
    topics: TopicManager
    groups: GroupManager
    pop: PopService
    settings: Settings
    broker_name: str
    metrics: PullMetrics  # replaced when telemetry starts: read at each use


class PullService:
    def __init__(self, broker: PullHost) -> None:
        self.broker = broker

    def _queue(self, mq: pb.MessageQueue) -> Any:
        """The config of the queue's topic; an LMQ queue (``%LMQ%...``, lite queues' ``$`` allowed) is served
        with enableLmq as Apache's broker serves it (TopicManager.select)."""
        b = self.broker
        problem = read_topic_problem(mq.topic.name)
        if problem:
            raise RequestError(Code.ILLEGAL_TOPIC, f"message_queue.topic.name: {problem}")
        cfg = b.topics.select(mq.topic.name)
        if cfg is None:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"message_queue.topic.name: topic {mq.topic.name} does not "
                                                     f"exist on broker {b.broker_name}")
        if mq.broker.name and mq.broker.name != b.broker_name:
            raise RequestError(Code.BAD_REQUEST, f"message_queue.broker.name {mq.broker.name} is not this broker")
        if not 0 <= mq.id < max(cfg.read_queue_nums, cfg.write_queue_nums):
            raise RequestError(Code.BAD_REQUEST, f"message_queue.id {mq.id} does not exist in topic {cfg.name}")
        return cfg

    async def pull(self, request: svc.PullMessageRequest, remaining_s: float | None
                   ) -> AsyncIterator[svc.PullMessageResponse]:
        b = self.broker
        try:
            check_group(request.group.name)
            cfg = self._queue(request.message_queue)
            tags = parse_filter(request.filter_expression, b.settings.enablePropertyFilter)
            if not 0 < request.batch_size <= MAX_PULL_BATCH:
                raise RequestError(Code.BAD_REQUEST, f"batch_size must be between 1 and {MAX_PULL_BATCH}")
        except RequestError as exc:
            yield svc.PullMessageResponse(status=_status(exc.code, exc.message))
            return
        topic, qid, offset = cfg.name, request.message_queue.id, request.offset
        lo, hi = b.store.min_offset(topic, qid), b.store.max_offset(topic, qid)
        if offset < lo or offset > hi:
            where = "below the queue's minimum" if offset < lo else "past the queue's maximum"
            yield svc.PullMessageResponse(status=_status(Code.ILLEGAL_OFFSET,
                                                         f"offset {offset} is {where} ({lo}..{hi})"))
            yield svc.PullMessageResponse(next_offset=lo if offset < lo else hi)
            return
        poll_s = request.long_polling_timeout.ToMilliseconds() / 1000 if request.HasField("long_polling_timeout") \
            else 0.0
        if remaining_s is not None:
            poll_s = max(0.0, min(poll_s, remaining_s - 0.5))
        got = b.store.get(topic, qid, offset, request.batch_size, store_tags(tags))
        if not got.messages and got.next_offset == offset and poll_s > 0:
            await b.pop.wait_for_topic(topic, poll_s, lambda: b.store.max_offset(topic, qid) > offset)
            got = b.store.get(topic, qid, offset, request.batch_size, store_tags(tags))
        got.messages = keep(tags, got.messages)  # SQL92: the store gave every message of the range
        ns = request.message_queue.topic.resource_namespace
        b.metrics.on_pulled(request.group.name, got.messages)
        if not got.messages:
            yield svc.PullMessageResponse(status=_status(Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield svc.PullMessageResponse(status=_status())
            for msg in got.messages:
                out = to_grpc(msg, origin_topic(msg), ns, attempt=msg.reconsume_times + 1)
                # readers that manage offsets (the Spark source) also want the commit-log position,
                # which the v2 protocol has no field for
                out.user_properties[COMMITLOG_OFFSET_PROPERTY] = str(msg.physical_offset)
                yield svc.PullMessageResponse(message=out)
        yield svc.PullMessageResponse(next_offset=got.next_offset)

    def get_offset(self, request: svc.GetOffsetRequest) -> svc.GetOffsetResponse:
        check_group(request.group.name)
        cfg = self._queue(request.message_queue)
        offset = self.broker.pop.committed(request.group.name, cfg.name, request.message_queue.id)
        if offset is None:
            raise RequestError(Code.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset for "
                                                      f"{cfg.name} queue {request.message_queue.id}")
        return svc.GetOffsetResponse(status=_status(), offset=offset)

    def query_offset(self, request: svc.QueryOffsetRequest) -> svc.QueryOffsetResponse:
        cfg = self._queue(request.message_queue)
        store, qid = self.broker.store, request.message_queue.id
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            offset = store.min_offset(cfg.name, qid)
        elif policy == pb.END:
            offset = store.max_offset(cfg.name, qid)
        elif policy == pb.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise RequestError(Code.BAD_REQUEST, "timestamp is required with query_offset_policy TIMESTAMP")
            offset = store.offset_by_time(cfg.name, qid, request.timestamp.ToMilliseconds())
        else:
            raise RequestError(Code.BAD_REQUEST, f"query_offset_policy {policy} is not BEGINNING, END or TIMESTAMP")
        return svc.QueryOffsetResponse(status=_status(), offset=offset)

    def update_offset(self, request: svc.UpdateOffsetRequest) -> svc.UpdateOffsetResponse:
        check_group(request.group.name)
        cfg = self._queue(request.message_queue)
        qid = request.message_queue.id
        lo, hi = self.broker.store.min_offset(cfg.name, qid), self.broker.store.max_offset(cfg.name, qid)
        if not lo <= request.offset <= hi:
            raise RequestError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is outside {lo}..{hi}")
        if self.broker.groups.get(request.group.name) is None:
            self.broker.groups.create_if_absent(request.group.name)
        self.broker.pop.reset_offset(request.group.name, cfg.name, qid, request.offset)
        return svc.UpdateOffsetResponse(status=_status())
