"""POP over remoting: POP_MESSAGE (200050), ACK_MESSAGE (200051), CHANGE_MESSAGE_INVISIBLETIME (200053),
BATCH_ACK_MESSAGE (200151), QUERY_ASSIGNMENT (400), with which Apache's push consumer
(``setClientRebalance(false)``) asks the broker for its queues and whether to pull or pop them, and
SET_MESSAGE_REQUEST_MODE (401, ``mqadmin setConsumeMode``), which chooses that per topic@group
(broker/request_modes.py; the shares: broker/remoting/assignment.py).  POP_MESSAGE with ``order=true``
is Apache's ordered POP (broker/pop.py ``_pop_ordered_queue``): its answer carries ``orderCountInfo`` and
reviveQid 999 and no POP_CK, which Apache's client then builds itself (docs/REMOTING.md).

RocketMQ 5's remoting POP consumers (and its proxy) pop from the broker, acknowledge each
message with the ``extraInfo`` string the pop answer gave it (the ``POP_CK`` property), and
extend a message's invisible time with it.  Here the three codes run on the same
``PopService`` gRPC's ReceiveMessage / AckMessage / ChangeInvisibleDuration use (broker/pop.py),
so a group popped over remoting and over gRPC shares one state, and an ack over remoting is
answered only once its op is in the replicated log (``PopService.durable``), as a gRPC ack is.

``extraInfo`` has Apache's eight space-separated fields (``ExtraInfoUtil`` in rocketmq-common):
check-point offset, pop time, invisible time, revive queue, retry mark, broker name, queue id,
queue offset.  The check-point offset is, as on Apache, the lowest offset the pop took from that
queue (the answer's ``startOffsetInfo`` says the same): Apache's ``batchAckMessageAsync`` names each
message of a BATCH_ACK_MESSAGE by its distance from it (a bit of ``BatchAck.bitSet``).  The broker
keeps a map from (group, topic, queue, offset, pop time) to the PopService receipt handle, filled at
each pop and change, emptied at each ack and when an entry's invisible time is a minute past.  An
extraInfo the map does not hold (a new leader after a failover has an empty map) is matched with
the PopService's replicated in-flight entry of that offset when that entry's deadline is the
extraInfo's pop time plus invisible time (within ``HANDOUT_SLACK_MS``); a later hand-out has
another deadline, so a stale extraInfo stays refused.
"""

from __future__ import annotations

import base64
import logging
import time
from typing import TYPE_CHECKING, Any

from rocketscope.names import RETRY_PREFIX

from ..namesrv_client import NamesrvUnavailable
from ..pop import Delivery, PopError
from ..receipt import ReceiptHandle
from ..request_modes import POP, PULL, ModeError, RequestMode
from ..topics import PERM_READ
from . import assignment
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
from .tags import parse_tags

if TYPE_CHECKING:
    from .broker_handlers import RemotingBroker
    from .server import Connection, Handler

log = logging.getLogger(__name__)
POP_MESSAGE, ACK_MESSAGE = RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE
SET_MESSAGE_REQUEST_MODE = 401
GET_ALL_MESSAGE_REQUEST_MODE = 402
CHANGE_MESSAGE_INVISIBLETIME = RequestCode.CHANGE_MESSAGE_INVISIBLETIME
POLLING_TIMEOUT = 210  # ResponseCode.POLLING_TIMEOUT: the client reports POLLING_NOT_FOUND
PROPERTY_POP_CK = "POP_CK"
MAX_POP = 32  # Apache's PopMessageProcessor refuses more than 32 per pop
MAX_POLL_MS = 30_000
_FORGET_AFTER_MS = 60_000
NO_MESSAGE = 208  # ResponseCode.NO_MESSAGE: Apache's answer to a BATCH_ACK_MESSAGE without acks
HANDOUT_SLACK_MS = 2_000  # a hand-out's deadline vs the answer's popTime + invisibleTime (taken just after)
MAX_BITSET_BYTES = 512  # 4096 offsets after one check-point offset: far above a pop's 32 messages
ACK_WAIT_S = 3.0  # as broker/grpc_service.py: a new writer catching up, or the ack's record being replicated

Key = tuple[str, str, int, int, int]  # group, topic, queue id, queue offset, pop time
ORDER_REVIVE_QID = 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE: marks an ordered pop's extraInfo (ExtraInfoUtil.isOrder)


def order_count_info(deliveries: list[Delivery], handles: list[ReceiptHandle]) -> str:
    """PopMessageResponseHeader.orderCountInfo, as Apache's ConsumerOrderInfoManager.update writes it: per
    queue, ``0 qo<queue>%<offset> <count>`` for each message delivered before (count: earlier deliveries),
    then ``0 <queue> <count>``, the smallest count of the queue's messages (0 when one is new), which
    older clients read.  Apache's parser refuses a key twice, so each appears once."""
    per_queue: dict[int, list[tuple[int, int]]] = {}
    for d, h in zip(deliveries, handles, strict=True):
        per_queue.setdefault(h.queue_id, []).append((h.offset, max(d.attempt - 1, 0)))
    parts = []
    for q, items in per_queue.items():
        parts += [f"0 qo{q}%{off} {n}" for off, n in items if n > 0]
        parts.append(f"0 {q} {min(n for _, n in items)}")
    return ";".join(parts)


class RemotingPop:
    """The three POP codes for one broker, and the extraInfo -> receipt-handle map they need."""

    def __init__(self, front: RemotingBroker) -> None:
        self.front = front
        self.b = front.b
        self.receipts: dict[Key, tuple[str, int]] = {}  # -> (receipt handle, deadline ms)
        self.modes = self.b.request_modes

    def handlers(self) -> dict[int, Handler]:
        return {POP_MESSAGE: self.pop, ACK_MESSAGE: self.ack, CHANGE_MESSAGE_INVISIBLETIME: self.change,
                RequestCode.BATCH_ACK_MESSAGE: self.batch_ack, RequestCode.QUERY_ASSIGNMENT: self.query_assignment,
                SET_MESSAGE_REQUEST_MODE: self.set_mode, GET_ALL_MESSAGE_REQUEST_MODE: self.all_modes}

    async def query_assignment(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """QueryAssignmentRequestBody -> this client's queues of the topic and whether to PULL or POP them.

        As Apache's QueryAssignmentProcessor: the mode ``mqadmin setConsumeMode`` set for topic@group,
        else ``defaultMessageRequestMode`` (a retry topic: PULL); the queues of the topic's route at the
        name server (every broker's), shared among the group's consumers that sent a heartbeat here by
        the client's strategy (``AVG``, ``AVG_BY_CIRCLE``) unless ``serverLoadBalancerEnable`` is off.
        No route, no consumer or an unknown strategy: no ``messageQueueAssignments`` (the client keeps
        what it had).  One deviation: the retry topic of a group that pops here (a topic set to POP, or POP
        the default) gets no queue, because RocketScope's POP takes its redeliveries from
        ``%RETRY%<group>`` itself (broker/pop.py), which a pull of that topic would consume a second time
        (docs/COMPATIBILITY.md R16)."""
        body = parse_json_body(cmd.body, "QueryAssignmentRequestBody")
        topic = body.get("topic") if isinstance(body, dict) else None
        group = body.get("consumerGroup") if isinstance(body, dict) else None
        if not isinstance(topic, str) or not isinstance(group, str) or not topic or not group:
            raise HeaderError("QueryAssignmentRequestBody needs topic and consumerGroup",
                              ResponseCode.INVALID_PARAMETER)
        client = str(body.get("clientId") or "")
        strategy_name = str(body.get("strategyName") or "AVG")
        broadcast = str(body.get("messageModel") or "CLUSTERING") == "BROADCASTING"
        self.front.check_group(group)
        s = self.b.settings
        chosen = self.modes.get(topic, group)
        mode, share = (chosen.mode, chosen.pop_share_queue_num) if chosen else (
            (PULL, 0) if topic.startswith(RETRY_PREFIX) else (s.defaultMessageRequestMode.upper(),
                                                              s.defaultPopShareQueueNum))
        if topic.startswith(RETRY_PREFIX) and (self.modes.pops(group) or s.defaultMessageRequestMode.upper() == POP):
            return cmd.response(body=json_body({"messageQueueAssignments": []}))
        queues = await self._subscribe_queues(topic)
        if queues is None:
            log.info("QUERY_ASSIGNMENT %s@%s from %s: the topic has no route", topic, group, client or conn.peer)
            return cmd.response(body=json_body({}))
        if not broadcast and s.serverLoadBalancerEnable:
            strategy = assignment.STRATEGIES.get(strategy_name)
            clients = list(self.front.consumers.get(group, {}))
            if strategy is None or not clients:
                log.info("QUERY_ASSIGNMENT %s@%s from %s: %s", topic, group, client or conn.peer,
                         f"unknown strategy {strategy_name[:60]!r}" if strategy is None else "no consumer online")
                return cmd.response(body=json_body({}))
            queues = assignment.allocate(strategy, client, queues, clients, mode == POP, share)
        assignments = [{"messageQueue": {"brokerName": b, "queueId": q, "topic": t}, "mode": mode}
                       for t, b, q in queues]
        return cmd.response(body=json_body({"messageQueueAssignments": assignments}))

    async def _subscribe_queues(self, topic: str) -> list[assignment.Queue] | None:
        """The readable queues of ``topic`` on every broker of its route (None: no route); this broker's own
        topic config when no name server answers."""
        b = self.b
        route = None
        if b.namesrv.addresses:
            try:
                route = await b.namesrv.get_route(topic)
            except NamesrvUnavailable as exc:
                log.warning("QUERY_ASSIGNMENT of %s from local topics only: %s", topic, exc)
        route = route or b.local_route(topic)
        if route is None:
            return None
        return sorted((topic, qd.broker_name, q) for qd in route.queue_datas if qd.perm & PERM_READ
                      for q in range(qd.read_queue_nums))

    async def set_mode(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """SET_MESSAGE_REQUEST_MODE (401, ``mqadmin setConsumeMode``): store the mode of topic@group, with
        Apache's answers: a retry topic NO_PERMISSION, an unknown topic TOPIC_NOT_EXIST, an unknown group
        (without autoCreateSubscriptionGroup) SUBSCRIPTION_GROUP_NOT_EXIST."""
        try:
            wanted = RequestMode.parse(parse_json_body(cmd.body, "SetMessageRequestModeRequestBody"))
        except ModeError as exc:
            raise HeaderError(str(exc), ResponseCode.INVALID_PARAMETER) from None
        if wanted.topic.startswith(RETRY_PREFIX):
            return cmd.response(ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
        if self.b.topics.get(wanted.topic) is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{wanted.topic}] not exist")
        self.front.check_group(wanted.group)
        self.modes.set(wanted)
        return cmd.response()

    async def all_modes(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_ALL_MESSAGE_REQUEST_MODE (402): every mode set here, as Apache's AdminBrokerProcessor answers
        it (SUCCESS, body the MessageRequestModeManager JSON, ``{"messageRequestModeMap": {}}`` when none
        is set). Apache's slaves ask their master for it (SlaveSynchronize); no mqadmin command or client
        of 5.3.3 does. RocketScope's slaves copy the modes over the gRPC admin service (broker/ha/slave.py)."""
        return cmd.response(body=json_body(self.modes.encode()))

    def _forget_old(self, now_ms: int) -> None:
        if len(self.receipts) < 4096:
            return
        for key, (_, deadline) in list(self.receipts.items()):
            if deadline + _FORGET_AFTER_MS < now_ms:
                del self.receipts[key]

    @staticmethod
    def extra_info(handle: ReceiptHandle, start: int, pop_time: int, invisible_ms: int) -> str:
        """Apache's POP_CK for one message; ``start``: the lowest offset this pop took from its queue."""
        mark = "1" if handle.topic.startswith(RETRY_PREFIX) else "0"
        return " ".join(str(x) for x in (start, pop_time, invisible_ms, 0, mark, handle.broker, handle.queue_id,
                                         handle.offset))

    def _held(self, key: Key, broker: str, invisible_ms: int) -> str | None:
        """The receipt handle of ``key`` (group, topic, queue, offset, pop time): from the map, else from the
        PopService's in-flight entry whose deadline is that pop time plus ``invisible_ms``."""
        found = self.receipts.get(key)
        if found is not None:
            return found[0]
        group, topic, queue_id, offset, pop_time = key
        st = self.b.pop.states.get((group, topic, queue_id))
        entry = st.inflight.get(offset) if st is not None else None
        if entry is None or abs(entry.deadline_ms - (pop_time + invisible_ms)) > HANDOUT_SLACK_MS:
            return None
        return ReceiptHandle(broker or self.b.settings.brokerName, topic, queue_id, offset, entry.seq,
                             entry.deadline_ms).encode()

    def _lookup(self, h: Header, group: str) -> tuple[Key, str]:
        """The receipt handle an ``extraInfo`` (with the header's topic) stands for; HeaderError naming the field."""
        extra = h.str("extraInfo")
        parts = extra.split(" ")
        if len(parts) < 8:
            raise HeaderError(f"extraInfo '{extra[:200]}' has {len(parts)} fields, 8 expected", ResponseCode.
                              INVALID_PARAMETER)
        try:
            pop_time, invisible, queue_id, offset = int(parts[1]), int(parts[2]), int(parts[6]), int(parts[7])
        except ValueError:
            raise HeaderError(f"extraInfo '{extra[:200]}' has a field that is not a number",
                              ResponseCode.INVALID_PARAMETER) from None
        topic = f"{RETRY_PREFIX}{group}" if parts[4] != "0" else h.str("topic")
        key = (group, topic, queue_id, offset, pop_time)
        handle = self._held(key, parts[5], invisible)
        if handle is None:
            raise HeaderError(f"extraInfo: receipt_handle has expired: offset {offset} of {topic} queue {queue_id} "
                              f"popped at {pop_time} was redelivered since, or it was already acknowledged",
                              ResponseCode.INVALID_PARAMETER)
        return key, handle

    async def pop(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:

        h = Header(cmd)
        group, topic = h.str("consumerGroup"), h.str("topic")
        queue_id, count, invisible = h.int("queueId"), h.int("maxMsgNums"), h.int("invisibleTime")
        poll_ms = h.int("pollTime", default=0)
        if not 1 <= count <= MAX_POP:
            raise HeaderError(f"maxMsgNums {count} must be between 1 and {MAX_POP}", ResponseCode.INVALID_PARAMETER)
        if invisible <= 0:
            raise HeaderError(f"invisibleTime {invisible} must be positive", ResponseCode.INVALID_PARAMETER)
        order = h.bool("order")
        exp_type = h.str("expType", default="TAG") or "TAG"
        if exp_type.upper() != "TAG":
            raise HeaderError(f"expType {exp_type} is not served over remoting (TAG only)",
                              ResponseCode.SUBSCRIPTION_PARSE_FAILED)
        self.front.check_group(group)
        cfg = self.front.topic_config(topic, read=True)
        queue_ids = list(range(cfg.read_queue_nums)) if queue_id < 0 else [self.front.check_queue_id(cfg, queue_id)]
        pop = self.b.pop
        blocked = {q for q in queue_ids if pop.inflight_count(group, topic, q)} if order else set()
        deliveries = await pop.receive(group, topic, queue_ids, count, invisible,
                                       parse_tags(h.str("exp", default="*") or "*"),
                                       min(max(poll_ms, 0), MAX_POLL_MS) / 1000, order)
        self.b.metrics.on_delivered(group, deliveries)
        pop_time = int(time.time() * 1000)  # the answer's popTime: what the client's extraInfo carries back
        ext = {"popTime": str(pop_time), "invisibleTime": str(invisible),
               "reviveQid": str(ORDER_REVIVE_QID if order else 0),
               "restNum": str(pop.rest(group, topic, queue_ids, order, blocked))}
        if not deliveries:
            return cmd.response(POLLING_TIMEOUT if poll_ms > 0 else ResponseCode.PULL_NOT_FOUND,
                                "no new message", ext_fields=ext)
        self._forget_old(pop_time)
        body = []
        handles = [ReceiptHandle.decode(d.handle) for d in deliveries]
        start: dict[tuple[str, int], int] = {}
        offsets: dict[tuple[str, int], list[int]] = {}
        for handle in handles:
            mq = ("1" if handle.topic.startswith(RETRY_PREFIX) else "0", handle.queue_id)
            start[mq] = min(start.get(mq, handle.offset), handle.offset)
            offsets.setdefault(mq, []).append(handle.offset)
        for d, handle in zip(deliveries, handles, strict=True):
            mq = ("1" if handle.topic.startswith(RETRY_PREFIX) else "0", handle.queue_id)
            self.receipts[(group, handle.topic, handle.queue_id, handle.offset, pop_time)] = (d.handle,
                                                                                               handle.deadline_ms)
            wire = self.front.wire(d.message)
            wire.topic = d.topic
            wire.reconsume_times = max(d.attempt - 1, 0)
            if not order:  # ordered: Apache's client builds POP_CK itself, reading orderCountInfo on the way
                wire.properties[PROPERTY_POP_CK] = self.extra_info(handle, start[mq], pop_time, invisible)
            body.append(encode_message(wire))
        ext["startOffsetInfo"] = ";".join(f"{m} {q} {o}" for (m, q), o in start.items())
        ext["msgOffsetInfo"] = ";".join(f"{m} {q} {','.join(map(str, o))}" for (m, q), o in offsets.items())
        if order:
            ext["orderCountInfo"] = order_count_info(deliveries, handles)
        return cmd.response(ext_fields=ext, body=b"".join(body))

    def _consumed(self, h: Header, group: str) -> bool:
        """Whether an ordered (reviveQid 999) extraInfo names an offset below its queue's committed offset:
        Apache's ackOrderly and ordered invisible-time change answer SUCCESS and do nothing then."""
        parts = h.str("extraInfo").split(" ")
        if len(parts) < 8 or parts[3] != str(ORDER_REVIVE_QID) or not parts[6].isdigit() or not parts[7].isdigit():
            return False
        committed = self.b.pop.committed(group, h.str("topic"), int(parts[6]))
        return committed is not None and int(parts[7]) < committed

    async def _settled(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """None once the ack's op is in the replicated log, else the retryable answer (as gRPC's AckMessage)."""
        if await self.b.pop.durable(ACK_WAIT_S):
            return None
        return cmd.response(ResponseCode.SYSTEM_ERROR, "ack not replicated, the leader may have changed; retry")

    async def ack(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        group = h.str("consumerGroup")
        self.front.check_group(group)
        if self._consumed(h, group):
            return cmd.response()
        key, handle = self._lookup(h, group)
        await self.b.pop.until_ready(ACK_WAIT_S)
        try:
            self.b.ack(group, handle, "", self.front.client_id(conn))
        except PopError as exc:
            raise HeaderError(f"extraInfo: {exc}", ResponseCode.INVALID_PARAMETER) from None
        self.receipts.pop(key, None)
        return await self._settled(cmd) or cmd.response()

    async def batch_ack(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """BatchAckMessageRequestBody (``MQClientAPIImpl.batchAckMessageAsync``): per BatchAck the group
        ``c``, topic ``t``, retry mark ``r``, check-point offset ``so``, queue ``q``, pop time ``pt`` and
        ``b``, the BitSet of acked offsets (bit i: offset so + i; fastjson writes its toByteArray() in
        Base64).  Every ack that can be applied is, as Apache's AckMessageProcessor applies each BatchAck
        in turn; the answer is SUCCESS, or the last failure's code with a remark naming it."""
        data = parse_json_body(cmd.body, "BatchAckMessageRequestBody") if cmd.body else None
        acks = data.get("acks") if isinstance(data, dict) else None
        if not acks or not isinstance(acks, list):
            return cmd.response(NO_MESSAGE, "BatchAckMessageRequestBody has no acks")
        parsed = [self._batch_entry(i, a) for i, a in enumerate(acks)]  # all checked before any is applied
        broker = str(data.get("brokerName") or "") if isinstance(data, dict) else ""
        await self.b.pop.until_ready(ACK_WAIT_S)
        code, remark, applied = ResponseCode.SUCCESS, None, 0
        for i, (group, topic, queue_id, pop_time, invisible, offsets) in enumerate(parsed):
            self.front.check_group(group)
            for offset in offsets:
                key = (group, topic, queue_id, offset, pop_time)
                handle = self._held(key, broker, invisible)
                if handle is None:
                    code, remark = ResponseCode.INVALID_PARAMETER, (
                        f"acks[{i}]: offset {offset} of {topic} queue {queue_id} popped at {pop_time}: receipt_handle "
                        "has expired: redelivered since, or it was already acknowledged")
                    continue
                try:
                    self.b.ack(group, handle, "", self.front.client_id(conn))
                except PopError as exc:
                    code, remark = ResponseCode.INVALID_PARAMETER, f"acks[{i}] offset {offset}: {exc}"
                    continue
                self.receipts.pop(key, None)
                applied += 1
        if applied:
            settled = await self._settled(cmd)
            if settled is not None:
                return settled
        return cmd.response(code, remark)

    @staticmethod
    def _batch_entry(i: int, ack: Any) -> tuple[str, str, int, int, int, list[int]]:
        """(group, topic as the receipts map keys it, queue id, pop time, invisible time, offsets) of ``acks[i]``."""
        if not isinstance(ack, dict):
            raise HeaderError(f"acks[{i}] is not a BatchAck object", ResponseCode.INVALID_PARAMETER)
        try:
            group, topic = str(ack["c"]), str(ack["t"])
            start, queue_id, pop_time = int(ack["so"]), int(ack["q"]), int(ack["pt"])
            invisible = int(ack.get("it", 0))
        except KeyError as exc:
            raise HeaderError(f"acks[{i}].{exc.args[0]} is missing", ResponseCode.INVALID_PARAMETER) from None
        except (TypeError, ValueError):
            raise HeaderError(f"acks[{i}]: so, q, pt and it must be numbers", ResponseCode.INVALID_PARAMETER) from None
        raw = ack.get("b") or ""
        try:
            bits = base64.b64decode(raw, validate=True) if isinstance(raw, str) else bytes(x & 0xFF for x in raw)
        except (ValueError, TypeError):
            raise HeaderError(f"acks[{i}].b is not a BitSet (Base64 of its bytes)",
                              ResponseCode.INVALID_PARAMETER) from None
        if len(bits) > MAX_BITSET_BYTES:
            raise HeaderError(f"acks[{i}].b names offsets up to {len(bits) * 8} after so; at most "
                              f"{MAX_BITSET_BYTES * 8}", ResponseCode.INVALID_PARAMETER)
        offsets = [start + j * 8 + k for j, byte in enumerate(bits) for k in range(8) if byte >> k & 1]
        if str(ack.get("r", "0")) not in ("0", ""):
            topic = f"{RETRY_PREFIX}{group}"
        return group, topic, queue_id, pop_time, invisible, offsets

    async def change(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        group = h.str("consumerGroup")
        invisible = h.int("invisibleTime")
        if invisible <= 0:
            raise HeaderError(f"invisibleTime {invisible} must be positive", ResponseCode.INVALID_PARAMETER)
        self.front.check_group(group)
        revive_qid = h.str("extraInfo").split(" ")[3:4] or ["0"]
        ext: dict[str, Any] = {"popTime": str(int(time.time() * 1000)), "invisibleTime": str(invisible),
                               "reviveQid": revive_qid[0] if revive_qid[0].isdigit() else "0"}
        if self._consumed(h, group):
            return cmd.response(ext_fields=ext)
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
        ext["popTime"] = str(pop_time)
        return cmd.response(ext_fields=ext)
