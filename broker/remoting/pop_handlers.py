"""POP over remoting: POP_MESSAGE (200050), ACK_MESSAGE (200051), CHANGE_MESSAGE_INVISIBLETIME (200053),
and QUERY_ASSIGNMENT (400), with which Apache's push consumer (``setClientRebalance(false)``) asks the
broker for its queues and whether to pull or pop them: here every readable queue, in POP mode.

RocketMQ 5's remoting POP consumers (and its proxy) pop from the broker, acknowledge each
message with the ``extraInfo`` string the pop answer gave it (the ``POP_CK`` property), and
extend a message's invisible time with it.  Here the three codes run on the same
``PopService`` gRPC's ReceiveMessage / AckMessage / ChangeInvisibleDuration use (broker/pop.py),
so a group popped over remoting and over gRPC shares one state, and an ack over remoting is
answered only once its op is in the replicated log (``PopService.durable``), as a gRPC ack is.

``extraInfo`` has Apache's eight space-separated fields (``ExtraInfoUtil`` in rocketmq-common):
check-point offset, pop time, invisible time, revive queue, retry mark, broker name, queue id,
queue offset.  Apache's client rebuilds it from the answer's header when it parses a pop answer
(pop time and invisible time of the answer, the message's own queue id and offset), so the
receipt cannot live in its fields; the broker keeps a map from (group, topic, queue, offset, pop
time) to the PopService receipt handle, filled at each pop and change, emptied at each ack and
when an entry's invisible time is a minute past.  The check-point offset carries the hand-out
sequence for raw clients; nothing relies on it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rocketscope.names import RETRY_PREFIX

from ..pop import PopError
from ..receipt import ReceiptHandle
from .codec import (
    Header,
    HeaderError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_message,
    json_body,
    parse_json_body,
)

if TYPE_CHECKING:
    from .broker_handlers import RemotingBroker
    from .server import Connection, Handler

POP_MESSAGE, ACK_MESSAGE = RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE
CHANGE_MESSAGE_INVISIBLETIME = RequestCode.CHANGE_MESSAGE_INVISIBLETIME
POLLING_TIMEOUT = 210  # ResponseCode.POLLING_TIMEOUT: the client reports POLLING_NOT_FOUND
PROPERTY_POP_CK = "POP_CK"
MAX_POP = 32  # Apache's PopMessageProcessor refuses more than 32 per pop
MAX_POLL_MS = 30_000
_FORGET_AFTER_MS = 60_000
ACK_WAIT_S = 3.0  # as broker/grpc_service.py: a new writer catching up, or the ack's record being replicated

Key = tuple[str, str, int, int, int]  # group, topic, queue id, queue offset, pop time


class RemotingPop:
    """The three POP codes for one broker, and the extraInfo -> receipt-handle map they need."""

    def __init__(self, front: RemotingBroker) -> None:
        self.front = front
        self.b = front.b
        self.receipts: dict[Key, tuple[str, int]] = {}  # -> (receipt handle, deadline ms)

    def handlers(self) -> dict[int, Handler]:
        return {POP_MESSAGE: self.pop, ACK_MESSAGE: self.ack, CHANGE_MESSAGE_INVISIBLETIME: self.change,
                RequestCode.QUERY_ASSIGNMENT: self.query_assignment}

    async def query_assignment(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """QueryAssignmentRequestBody -> every readable queue of the topic here, mode POP (the PopService
        balances the group's consumers itself).  The group's retry topic gets no queue: its messages come
        back through the pops of the topic (broker/pop.py)."""
        body = parse_json_body(cmd.body, "QueryAssignmentRequestBody")
        topic = body.get("topic") if isinstance(body, dict) else None
        group = body.get("consumerGroup") if isinstance(body, dict) else None
        if not isinstance(topic, str) or not isinstance(group, str) or not topic or not group:
            raise HeaderError("QueryAssignmentRequestBody needs topic and consumerGroup",
                              ResponseCode.INVALID_PARAMETER)
        assignments: list[dict[str, Any]] = []
        if not topic.startswith(RETRY_PREFIX):
            self.front._group(group)
            cfg = self.front._topic(topic, read=True)
            name = self.b.settings.brokerName
            assignments = [{"messageQueue": {"brokerName": name, "queueId": q, "topic": topic}, "mode": "POP"}
                           for q in range(cfg.read_queue_nums)]
        return cmd.response(body=json_body({"messageQueueAssignments": assignments}))

    def _forget_old(self, now_ms: int) -> None:
        if len(self.receipts) < 4096:
            return
        for key, (_, deadline) in list(self.receipts.items()):
            if deadline + _FORGET_AFTER_MS < now_ms:
                del self.receipts[key]

    @staticmethod
    def extra_info(handle: ReceiptHandle, pop_time: int, invisible_ms: int) -> str:
        mark = "1" if handle.topic.startswith(RETRY_PREFIX) else "0"
        return " ".join(str(x) for x in (handle.seq, pop_time, invisible_ms, 0, mark, handle.broker, handle.queue_id,
                                         handle.offset))

    def _lookup(self, h: Header, group: str) -> tuple[Key, str]:
        """The receipt handle an ``extraInfo`` (with the header's topic) stands for; HeaderError naming the field."""
        extra = h.str("extraInfo")
        parts = extra.split(" ")
        if len(parts) < 8:
            raise HeaderError(f"extraInfo '{extra[:200]}' has {len(parts)} fields, 8 expected", ResponseCode.
                              INVALID_PARAMETER)
        try:
            seq, pop_time, invisible, queue_id, offset = (int(parts[0]), int(parts[1]), int(parts[2]),
                                                          int(parts[6]), int(parts[7]))
        except ValueError:
            raise HeaderError(f"extraInfo '{extra[:200]}' has a field that is not a number",
                              ResponseCode.INVALID_PARAMETER) from None
        topic = f"{RETRY_PREFIX}{group}" if parts[4] != "0" else h.str("topic")
        key = (group, topic, queue_id, offset, pop_time)
        found = self.receipts.get(key)
        handle = found[0] if found else ReceiptHandle(parts[5], topic, queue_id, offset, seq,
                                                      pop_time + invisible).encode()
        return key, handle

    async def pop(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        from .broker_handlers import parse_tags

        h = Header(cmd)
        group, topic = h.str("consumerGroup"), h.str("topic")
        queue_id, count, invisible = h.int("queueId"), h.int("maxMsgNums"), h.int("invisibleTime")
        poll_ms = h.int("pollTime", default=0)
        if not 1 <= count <= MAX_POP:
            raise HeaderError(f"maxMsgNums {count} must be between 1 and {MAX_POP}", ResponseCode.INVALID_PARAMETER)
        if invisible <= 0:
            raise HeaderError(f"invisibleTime {invisible} must be positive", ResponseCode.INVALID_PARAMETER)
        if h.bool("order"):
            raise HeaderError("order (FIFO) pop is not served over remoting; use gRPC", ResponseCode.INVALID_PARAMETER)
        exp_type = h.str("expType", default="TAG") or "TAG"
        if exp_type.upper() != "TAG":
            raise HeaderError(f"expType {exp_type} is not served over remoting (TAG only)",
                              ResponseCode.SUBSCRIPTION_PARSE_FAILED)
        self.front._group(group)
        cfg = self.front._topic(topic, read=True)
        queue_ids = list(range(cfg.read_queue_nums)) if queue_id < 0 else [self.front._queue_id(cfg, queue_id)]
        deliveries = await self.b.pop.receive(group, topic, queue_ids, count, invisible,
                                              parse_tags(h.str("exp", default="*") or "*"),
                                              min(max(poll_ms, 0), MAX_POLL_MS) / 1000)
        self.b.metrics.on_delivered(group, deliveries)
        pop_time = int(time.time() * 1000)  # the answer's popTime: what the client's extraInfo carries back
        if not deliveries:
            return cmd.response(POLLING_TIMEOUT if poll_ms > 0 else ResponseCode.PULL_NOT_FOUND,
                                "no new message")
        self._forget_old(pop_time)
        body = []
        start: dict[tuple[str, int], int] = {}
        offsets: dict[tuple[str, int], list[int]] = {}
        for d in deliveries:
            handle = ReceiptHandle.decode(d.handle)
            extra = self.extra_info(handle, pop_time, invisible)
            self.receipts[(group, handle.topic, handle.queue_id, handle.offset, pop_time)] = (d.handle,
                                                                                               handle.deadline_ms)
            wire = self.front.wire(d.message)
            wire.topic = d.topic
            wire.reconsume_times = max(d.attempt - 1, 0)
            wire.properties[PROPERTY_POP_CK] = extra
            body.append(encode_message(wire))
            mark = 1 if handle.topic.startswith(RETRY_PREFIX) else 0
            start.setdefault((str(mark), handle.queue_id), handle.offset)
            offsets.setdefault((str(mark), handle.queue_id), []).append(handle.offset)
        ext = {"popTime": str(pop_time), "invisibleTime": str(invisible), "reviveQid": "0", "restNum": "0",
               "startOffsetInfo": ";".join(f"{m} {q} {o}" for (m, q), o in start.items()),
               "msgOffsetInfo": ";".join(f"{m} {q} {','.join(map(str, o))}" for (m, q), o in offsets.items())}
        return cmd.response(ext_fields=ext, body=b"".join(body))

    async def _settled(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """None once the ack's op is in the replicated log, else the retryable answer (as gRPC's AckMessage)."""
        if await self.b.pop.durable(ACK_WAIT_S):
            return None
        return cmd.response(ResponseCode.SYSTEM_ERROR, "ack not replicated, the leader may have changed; retry")

    async def ack(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        group = h.str("consumerGroup")
        self.front._group(group)
        key, handle = self._lookup(h, group)
        await self.b.pop.until_ready(ACK_WAIT_S)
        try:
            self.b.ack(group, handle, "", self.front._client_id(conn))
        except PopError as exc:
            raise HeaderError(f"extraInfo: {exc}", ResponseCode.INVALID_PARAMETER) from None
        self.receipts.pop(key, None)
        return await self._settled(cmd) or cmd.response()

    async def change(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        group = h.str("consumerGroup")
        invisible = h.int("invisibleTime")
        if invisible <= 0:
            raise HeaderError(f"invisibleTime {invisible} must be positive", ResponseCode.INVALID_PARAMETER)
        self.front._group(group)
        key, handle = self._lookup(h, group)
        await self.b.pop.until_ready(ACK_WAIT_S)
        try:
            new_handle = self.b.change_invisible(group, handle, invisible, "")
        except PopError as exc:
            raise HeaderError(f"extraInfo: {exc}", ResponseCode.INVALID_PARAMETER) from None
        self.receipts.pop(key, None)
        pop_time = int(time.time() * 1000)
        parsed = ReceiptHandle.decode(new_handle)
        self.receipts[(group, parsed.topic, parsed.queue_id, parsed.offset, pop_time)] = (new_handle,
                                                                                          parsed.deadline_ms)
        ext: dict[str, Any] = {"popTime": str(pop_time), "invisibleTime": str(invisible), "reviveQid": "0"}
        return cmd.response(ext_fields=ext)
