"""Broker request codes over remoting: the second front door onto the same broker core.

Sends go through ``Broker.topic_for_send``/``select_queue``/``put_messages`` (auto-create,
master check, timer and transaction wrapping, metrics), reads through the store and the
POP engine's committed offsets, redelivery through the POP engine's retry/DLQ copies and
the timer, so a message sent here is received over gRPC and the other way round.  What
only remoting has lives here: client connections and their heartbeat subscriptions,
PULL_MESSAGE's offset semantics and long polling, queue locks of orderly consumers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rocketscope.names import RETRY_PREFIX

from ..clients import ClientType
from ..errors import BrokerError
from ..filter import FilterProblem, FilterRefused, MessageFilter, compile_filter, keep, store_tags
from ..groups import group_name_problem
from ..pop import retry_topic
from ..priority import LITE_TOPIC_PROPERTY, PRIORITY_PROPERTY, place
from ..sends import PLAIN, SendKind, new_uniq_key
from ..speedups import compiled as _C
from ..store.message_store import PutResult, PutStatus
from ..store.multi_dispatch import is_lmq
from ..store.record import StoredMessage
from ..topics import read_topic_problem, topic_name_problem
from ..trace_hooks import NoTrace
from ..transaction import CheckBack
from .client_config import CHECK_CLIENT_CONFIG, client_config_handler
from .codec import (
    CODE_NAMES,
    FrameError,
    Header,
    HeaderError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    WireMessage,
    batch_entries,
    encode_message,
    encode_response,
    json_body,
    offset_msg_id,
    parse_json_body,
    string_to_properties,
)
from .compression import SYSFLAG_COMPRESSED, inflate
from .config import parse_delay_levels
from .errors import PUT_CODES, remoting_code
from .mq_version import version_desc
from .server import LATER, Connection, GroupReply, Handler, Later, RemotingServer
from .tags import parse_tags

if TYPE_CHECKING:
    from .host import RemotingHost

log = logging.getLogger(__name__)

FILTER_DATA_NOT_EXIST = 27  # RocketMQ's ResponseCode.FILTER_DATA_NOT_EXIST


def filter_refusal(exc: FilterRefused, in_request: bool) -> HeaderError:
    """PULL_MESSAGE's answer to a subscription it cannot filter by, with Apache 5.3.3's codes (read with javap).

    SQL92 while enablePropertyFilter is false: SYSTEM_ERROR. A SQL92 expression that does not compile,
    registered by a HEART_BEAT (which Apache accepts without compiling it) and pulled without the
    subscription flag: FILTER_DATA_NOT_EXIST (27), as Apache's broker then has no filter data for the
    group. Sent in the pull itself (subscription flag): SUBSCRIPTION_PARSE_FAILED (23), Apache's code
    for a subscription that pull cannot build; Apache 5.3.3 answers 23 only for an empty expression and
    serves a bad one unfiltered (docs/COMPATIBILITY.md). Every remark names the expression.
    """
    if exc.kind is FilterProblem.DISABLED:
        return HeaderError(exc.message, RC.SYSTEM_ERROR)
    if exc.kind is FilterProblem.TYPE:
        return HeaderError(exc.message, RC.SUBSCRIPTION_PARSE_FAILED)
    if not in_request:
        return HeaderError("The broker's consumer filter data is not exist!Your expression may be wrong! "
                           f"({exc.message})", FILTER_DATA_NOT_EXIST)
    return HeaderError(f"parse the consumer's subscription failed: {exc.message}", RC.SUBSCRIPTION_PARSE_FAILED)
RC = ResponseCode

SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_TRANSACTION_PREPARED = 0x4
PULL_COMMIT_OFFSET, PULL_SUSPEND, PULL_SUBSCRIPTION = 0x1, 0x2, 0x4
MAX_PULL_MESSAGES = 32  # Java's maxTransferCountOnMessageInMemory
MAX_PULL_BYTES = 256 * 1024  # maxTransferBytesOnMessageInMemory: a pull answer stays far below a client's frame limit
CLIENT_EXPIRY_S = 120.0
LOCK_EXPIRY_S = 60.0
TIMER_PROPERTIES = ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")

# answers that still carry the stored message's headers (Apache's sendOK=true): the clients report a status, no error
_STORED_CODES = frozenset((RC.SUCCESS, RC.FLUSH_DISK_TIMEOUT, RC.FLUSH_SLAVE_TIMEOUT, RC.SLAVE_NOT_AVAILABLE))
# SendMessageRequestHeaderV2's short names -> the V1 header's names
V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
            "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
            "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}
_V2_SHORT = {long: short for short, long in V2_NAMES.items()}
# the send header's fields _send_fields reads, in its order: V1 names, and SEND_MESSAGE_V2's short ones
_SEND_KEYS = ("producerGroup", "topic", "queueId", "sysFlag", "bornTimestamp", "flag", "reconsumeTimes", "batch",
              "properties")
_SEND_KEYS_V2 = tuple(_V2_SHORT[k] for k in _SEND_KEYS)
_TIMER_KEYS = frozenset(TIMER_PROPERTIES)
# properties that make a single send more than a plain one (its queue, a lite topic, a delay, a transaction)
_SPECIAL_PROPERTIES = frozenset((PRIORITY_PROPERTY, LITE_TOPIC_PROPERTY, "TRAN_MSG", *TIMER_PROPERTIES))


def _send_fields(cmd: RemotingCommand) -> tuple[str, str, int, int, int, int, int, bool, str]:
    """``_send_fields_python``'s result, read by the compiled reader (broker/fastpath.c) when every field is in its
    plain form; a missing or malformed field goes to the Python reader, which names it.  A frame the server's
    compiled loop decoded carries them already (``RemotingCommand.send``, fastpath.decode_frames)."""
    pre = cmd.send
    if pre is not None:
        return pre[0]  # type: ignore[no-any-return]
    ext = cmd.ext_fields
    if _C is not None and ext is not None:
        got = _C.send_fields(ext, cmd.code)
        if got is not None:
            return got
    return _send_fields_python(cmd)


def _send_fields_python(cmd: RemotingCommand) -> tuple[str, str, int, int, int, int, int, bool, str]:
    """A send's header: producerGroup, topic, queueId, sysFlag, bornTimestamp, flag, reconsumeTimes, batch and
    properties, with ``Header``'s checks and remarks (a missing or non-numeric field is named by its V1 name).

    SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE carry SendMessageRequestHeaderV2's one-letter names; a V2 header
    without them (``b``, the topic) is read by the V1 names, and a V2 field missing under its short name is
    looked up under its long one."""
    ext = cmd.fields
    v2 = cmd.code != RequestCode.SEND_MESSAGE and "b" in ext
    raw = list(map(ext.get, _SEND_KEYS_V2 if v2 else _SEND_KEYS))
    if v2 and None in raw:
        raw = [ext.get(long) if v is None else v for v, long in zip(raw, _SEND_KEYS, strict=True)]
    group, topic, queue_id, sys_flag, born, flag, reconsume, batch, props = raw
    if group is None or topic is None:
        name = "producerGroup" if group is None else "topic"
        raise HeaderError(f"the custom field <{name}> is null: {CODE_NAMES.get(cmd.code, str(cmd.code))} needs it")
    numbers = []
    for name, value in (("queueId", queue_id), ("sysFlag", sys_flag), ("bornTimestamp", born), ("flag", flag),
                        ("reconsumeTimes", reconsume)):
        if value is None or value == "":
            if name == "reconsumeTimes":
                numbers.append(0)
                continue
            if value is None:
                raise HeaderError(f"the custom field <{name}> is null: {CODE_NAMES.get(cmd.code, str(cmd.code))} "
                                  "needs it")
        try:
            numbers.append(int(value))
        except ValueError:
            raise HeaderError(f"the custom field <{name}> is not a number: {value[:64]!r}") from None
    is_batch = (batch is not None and batch.lower() == "true") or cmd.code == RequestCode.SEND_BATCH_MESSAGE
    return group, topic, numbers[0], numbers[1], numbers[2], numbers[3], numbers[4], is_batch, props or ""


def _header_properties(cmd: RemotingCommand, text: str) -> dict[str, str]:
    """A single send's properties: the dict fastpath.decode_frames parsed with the frame (handed out once: the
    send path adds UNIQ_KEY to it, so a second call parses the text again), else ``string_to_properties``."""
    pre = cmd.send
    if pre is not None and pre[1] is not None:
        cmd.send = None  # _send_fields reads the same fields from ext_fields after this
        return pre[1]
    return string_to_properties(text)


CODE_TO_METHOD = {
    RequestCode.SEND_MESSAGE: "send_message", RequestCode.SEND_MESSAGE_V2: "send_message_v2",
    RequestCode.SEND_BATCH_MESSAGE: "send_batch_message", RequestCode.PULL_MESSAGE: "pull_message",
    RequestCode.LITE_PULL_MESSAGE: "lite_pull_message", RequestCode.HEART_BEAT: "heart_beat",
}


@dataclass
class Subscription:
    topic: str
    sub_string: str
    tags: set[str] | None
    expression_type: str = "TAG"
    sub_version: int = 0


@dataclass
class RemoteClient:
    client_id: str
    conn: Connection
    language: str = ""
    version: int = 0
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    last_seen: float = field(default_factory=time.monotonic)
    consume_mode: str = "push"  # the gauges' consume_mode: push (CONSUME_PASSIVELY) or pull (CONSUME_ACTIVELY)




@dataclass(slots=True)
class _PreparedSend:
    """A send request checked and turned into the messages to store."""

    cfg: Any
    queue_id: int
    stored: list[StoredMessage]
    kinds: list[SendKind]


def _inline_plain(cmd: RemotingCommand, cfg: Any, max_size: int, peer: str) -> _PreparedSend | None:
    """``cmd``'s one message when it is a plain single send the server's compiled loop read whole (its fields and
    properties in ``cmd.send``, sysFlag 0) with a queue id in range, a body within ``max_size`` and no property
    asking for more than a plain send; else None, and the general path (``_prepare_send``) reads it."""
    pre = cmd.send  # the fields and properties the server's compiled loop read (fastpath.decode_frames)
    if pre is None:
        return None
    fields = pre[0]
    props = pre[1] if not fields[3] else None  # a single send, sysFlag 0
    if props is None:
        return None
    queue_id, body = fields[2], cmd.body
    if not (0 <= queue_id < cfg.write_queue_nums and len(body) <= max_size and _SPECIAL_PROPERTIES.isdisjoint(props)):
        return None
    return _plain_single(cfg, queue_id, body, props, fields, peer)


def _plain_single(cfg: Any, queue_id: int, body: bytes, props: dict[str, str],
                  fields: tuple[str, str, int, int, int, int, int, bool, str], peer: str) -> _PreparedSend:
    """A plain single send's one message (its UNIQ_KEY made when the client sent none): the one place both of
    ``send_group``'s ways build it, the fields read with the frame and ``_prepare_send``'s first path."""
    if not props.get("UNIQ_KEY"):
        props["UNIQ_KEY"] = new_uniq_key()
    return _PreparedSend(cfg, queue_id, [StoredMessage(
        topic=cfg.name, queue_id=queue_id, body=body, properties=props, flag=fields[5], born_timestamp=fields[4],
        born_host=peer, reconsume_times=fields[6])], [PLAIN])


class TransactionCheckOutbox:
    """Stands in for a gRPC client's Telemetry outbox: a check-back becomes CHECK_TRANSACTION_STATE."""

    def __init__(self, front: RemotingBroker, conn: Connection, group: str) -> None:
        self.front = front
        self.conn = conn
        self.group = group

    async def put(self, item: object) -> None:
        if not isinstance(item, CheckBack):
            return  # only check-backs reach a remoting producer this way
        half, tx_id = item.half, item.transaction_id
        msg_id = half.msg_id
        wire = self.front.wire(half)
        wire.topic = half.properties.get("REAL_TOPIC", half.topic)
        wire.properties.setdefault("PGROUP", self.group)
        wire.properties["TRANSACTION_ID"] = tx_id
        ext = {"tranStateTableOffset": str(half.queue_offset), "commitLogOffset": str(half.physical_offset),
               "msgId": msg_id, "transactionId": tx_id,
               "offsetMsgId": offset_msg_id(self.front.store_addr, half.physical_offset), "topic": wire.topic}
        self.conn.notify(RequestCode.CHECK_TRANSACTION_STATE, ext, encode_message(wire))


class RemotingBroker:
    """The broker's remoting handlers and the client state only remoting needs."""

    def __init__(self, broker: RemotingHost) -> None:
        self.b = broker
        s = broker.settings
        port = s.remotingListenPort or s.listenPort
        self.store_addr = f"{s.brokerIP1}:{port}"
        # offset_msg_id(store_addr, offset) is this prefix + the offset as 16 hex digits: built once, not per send
        self._msg_id_prefix = offset_msg_id(self.store_addr, 0)[:-16]
        self._valid_topic_names: set[str] = set()  # names topic_name_problem passed: checked once, not per send
        self.delay_levels_ms = parse_delay_levels(s.messageDelayLevel)
        self.consumers: dict[str, dict[str, RemoteClient]] = {}
        self.producers: dict[str, dict[str, RemoteClient]] = {}
        self.locks: dict[tuple[str, str, str, int], tuple[str, float]] = {}
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = {}
        self._watched: set[int] = set()
        broker.store.add_queue_listener(self._on_dispatch)
        R = RequestCode
        self.server = RemotingServer("broker", self.handlers(), max_frame=s.remotingFrameMaxLength,
                                     idle_s=s.serverChannelMaxIdleTimeSeconds, recorder=self._record,
                                     group_handlers={R.SEND_MESSAGE: self.send_group,
                                                     R.SEND_MESSAGE_V2: self.send_group,
                                                     R.SEND_BATCH_MESSAGE: self.send_group},
                                     group_handlers_now={R.SEND_MESSAGE: self.send_group_now,
                                                         R.SEND_MESSAGE_V2: self.send_group_now})
        self._latency: Any = None

    # ------------------------------------------------------------ plumbing
    def handlers(self) -> dict[int, Handler]:
        from .admin_handlers import admin_handlers
        from .pop_handlers import RemotingPop

        R = RequestCode
        return admin_handlers(self.b, self) | RemotingPop(self).handlers() | {
            R.SEND_MESSAGE: self.send, R.SEND_MESSAGE_V2: self.send, R.SEND_BATCH_MESSAGE: self.send,
            R.PULL_MESSAGE: self.pull, R.LITE_PULL_MESSAGE: self.pull,
            R.QUERY_CONSUMER_OFFSET: self.query_consumer_offset, R.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            R.GET_MAX_OFFSET: self.get_max_offset, R.GET_MIN_OFFSET: self.get_min_offset,
            R.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            R.GET_EARLIEST_MSG_STORETIME: self.earliest_store_time,
            R.HEART_BEAT: self.heart_beat, R.UNREGISTER_CLIENT: self.unregister_client,
            R.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list, R.CONSUMER_SEND_MSG_BACK: self.send_back,
            R.LOCK_BATCH_MQ: self.lock_batch, R.UNLOCK_BATCH_MQ: self.unlock_batch,
            R.QUERY_MESSAGE: self.query_message, R.VIEW_MESSAGE_BY_ID: self.view_message,
            R.END_TRANSACTION: self.end_transaction,
            CHECK_CLIENT_CONFIG: client_config_handler(self.b.settings),
        }

    def _record(self, code: int, response_code: int, seconds: float) -> None:
        """rocketmq_rpc_latency with protocol_type=remoting, on the broker's own instrument."""
        metrics = self.b.metrics
        if not getattr(metrics, "enabled", False):
            return
        from .codec import CODE_NAMES, RESPONSE_NAMES

        ok = response_code in (RC.SUCCESS, RC.PULL_NOT_FOUND, RC.QUERY_NOT_FOUND)
        metrics.rpc_latency.record(seconds * 1000, {
            "protocol_type": "remoting", "request_code": CODE_NAMES.get(code, str(code)).lower(),
            "response_code": RESPONSE_NAMES.get(response_code, str(response_code)).lower(),
            "is_long_polling": code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE),
            "result": "success" if ok else "process_request_failed"})

    def wire(self, m: StoredMessage) -> WireMessage:
        return WireMessage(topic=m.topic, queue_id=m.queue_id, body=m.body, properties=dict(m.properties), flag=m.flag,
                           queue_offset=max(m.queue_offset, 0), physical_offset=max(m.physical_offset, 0),
                           sys_flag=m.sys_flag & SYSFLAG_TRANSACTION_MASK, born_timestamp=m.born_timestamp,
                           born_host=m.born_host or "127.0.0.1:0", store_timestamp=m.store_timestamp,
                           store_host=self.store_addr, reconsume_times=m.reconsume_times,
                           prepared_tx_offset=m.prepared_tx_offset)

    def topic_config(self, name: str, *, read: bool = False, lmq: bool = False) -> Any:
        """The config of the header's ``topic``; ``lmq``: the request may name an LMQ queue (``%LMQ%...``),
        served with enableLmq as Apache's selectTopicConfig serves it (TopicManager.select)."""
        # the rule and lookup the gRPC reads use too (broker/topics.py); a name without %LMQ% takes the topic ones
        problem = read_topic_problem(name) if lmq else topic_name_problem(name)
        if problem:
            raise HeaderError(f"topic[{name[:200]}] is not valid: {problem}", RC.INVALID_PARAMETER)
        cfg = self.b.topics.select(name) if lmq else self.b.topics.get(name)
        if cfg is None:
            raise HeaderError(f"topic[{name}] not exist, apply first please!", RC.TOPIC_NOT_EXIST)
        if read and not cfg.readable:
            raise HeaderError(f"the topic[{name}] pulling message is forbidden", RC.NO_PERMISSION)
        return cfg

    def check_queue_id(self, cfg: Any, queue_id: int) -> int:
        if not 0 <= queue_id < max(cfg.read_queue_nums, cfg.write_queue_nums):
            raise HeaderError(f"queueId[{queue_id}] is illegal, topic:[{cfg.name}] topicConfig.readQueueNums:"
                              f"[{cfg.read_queue_nums}]", RC.INVALID_PARAMETER)
        return queue_id

    def check_group(self, name: str) -> None:
        problem = group_name_problem(name)
        if problem:
            raise HeaderError(f"consumer group {name[:200]!r} is not valid: {problem}", RC.INVALID_PARAMETER)
        if self.b.groups.get(name) is None:
            if not self.b.settings.autoCreateSubscriptionGroup:
                raise HeaderError(f"subscription group [{name}] does not exist", RC.SUBSCRIPTION_GROUP_NOT_EXIST)
            self.b.groups.create_if_absent(name)

    def client_id(self, conn: Connection) -> str:
        return conn.client_id

    def _deliver_ms(self, props: dict[str, str], now_ms: int) -> int | None:
        """The delivery time a DELAY level or a 5.x timer property asks for (None: deliver now)."""
        level = props.get("DELAY", "")
        if level.lstrip("-").isdigit() and int(level) > 0:
            return now_ms + self.delay_levels_ms[min(int(level), len(self.delay_levels_ms)) - 1]
        for name, scale in (("TIMER_DELIVER_MS", 0), ("TIMER_DELAY_SEC", 1000), ("TIMER_DELAY_MS", 1)):
            raw = props.get(name, "")
            if raw:
                if not raw.isdigit():
                    raise HeaderError(f"timer property {name} is not a number: {raw[:32]!r}", RC.MESSAGE_ILLEGAL)
                return int(raw) if scale == 0 else now_ms + int(raw) * scale
        return None

    # --------------------------------------------------------------- send
    async def send(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = _send_fields(cmd)
        prepared = self._prepare_send(cmd, conn, fields, await self._send_topic(fields[1], fields[7]),
                                      int(time.time() * 1000), self.b.settings.maxMessageSize)
        cid = self.client_id(conn)
        stored = prepared.stored
        if (isinstance(self.b.trace_hooks, NoTrace) and all(k is PLAIN for k in prepared.kinds)
                and self.b.put_plain_run(stored)):  # stored without an await (Broker.put_plain_run)
            ok = PutStatus.PUT_OK
            return cmd.response(*self._answer_send(prepared, [PutResult(ok, m) for m in stored], cid, 0))
        started = time.perf_counter()
        results = await self.b.put_messages(stored, prepared.kinds, cid)
        return cmd.response(*self._answer_send(prepared, results, cid, int((time.perf_counter() - started) * 1000)))

    def send_group_now(self, cmds: list[RemotingCommand], conn: Connection, reply: GroupReply
                       ) -> list[RemotingCommand | bytes | None] | bytes | Later | None:
        """``send_group``'s answers without a task, for the common read: every send a plain single to a topic this
        broker takes sends for as it is, trace off, on a broker whose store takes the run without a wait (``Broker.
        put_plain_run``: the answers), a SYNC_MASTER's (``put_plain_run_replicated``: LATER, and ``reply`` gets
        the answers once the copies are in or slaveTimeout passed) or a DLedger member's (``propose_plain_run``:
        LATER, the answers once the entries are committed or maxWaitAckTimeMs passed).  None, having stored
        nothing, for any other read: ``send_group`` then runs it in a task (RemotingServer.answer_now says why this
        costs less).  The messages, their records and the answers are those ``send_group`` makes of the same read
        (tests/test_remoting_send_now.py)."""
        b = self.b
        if not isinstance(b.trace_hooks, NoTrace):
            return None
        # how the run is stored: now ("now"), now and answered once the slaves copied it ("copied"), or as a Raft
        # proposal answered once committed ("proposed")
        how = "now" if b.stores_plain_runs else "copied" if b.replicates_plain_runs else \
            "proposed" if b.proposes_plain_runs else ""
        if not how:
            return None
        max_size = b.settings.maxMessageSize
        peer = conn.peer
        valid = self._valid_topic_names
        stored: list[StoredMessage] = []
        prepared: list[_PreparedSend] = []
        last_topic, cfg = "", None
        for cmd in cmds:
            pre = cmd.send
            if pre is None:
                return None
            topic = pre[0][1]
            if topic != last_topic:
                # a name _send_topic checked already, not a retry topic (their group is checked each time), and
                # a config topic_for_send would return without creating or refusing
                cfg = b.writable_topic(topic) if topic in valid and not topic.startswith(RETRY_PREFIX) else None
                if cfg is None:
                    return None
                last_topic = topic
            p = _inline_plain(cmd, cfg, max_size, peer)
            if p is None:
                return None
            stored.append(p.stored[0])
            prepared.append(p)
        cid = self.client_id(conn)
        if how == "now":
            if not b.put_plain_run(stored):
                return None  # declined, nothing stored: send_group reads the same sends again
            return self._answer_plain_run(cmds, stored, prepared, cid)
        started = time.perf_counter()

        def answer(results: list[PutResult] | None) -> None:
            """``reply`` with ``put_messages``' answers: from the stored messages when every one is PUT_OK (None),
            else each send's own status (not the leader, not committed or copied in time)."""
            if results is None:
                reply(self._answer_plain_run(cmds, stored, prepared, cid))
            else:
                reply(self._answer_each(cmds, [None] * len(cmds), list(enumerate(prepared)), results, cid,
                                        int((time.perf_counter() - started) * 1000)))

        if how == "proposed":
            ok = PutStatus.PUT_OK
            b.propose_plain_run(stored, lambda results: answer(
                None if all(r.status is ok and r.message is not None for r in results) else results))
            return LATER
        timeout = PutStatus.FLUSH_SLAVE_TIMEOUT
        if not b.put_plain_run_replicated(stored, lambda copied: answer(
                None if copied else [PutResult(timeout, m) for m in stored])):
            return None
        return LATER

    async def send_group(self, cmds: list[RemotingCommand], conn: Connection
                         ) -> list[RemotingCommand | bytes | None] | bytes:
        """The sends of one connection that arrived in one read: one ``put_messages`` for all their messages.

        A producer with many sends in flight has them read together; storing them with one
        commit-log write (and, with SYNC_FLUSH or replication, one wait) instead of one task
        and one put each is what issue 20's profile of the remoting path asked for.  A request
        with a bad header gets its own answer and does not hold up the others.  Each topic of the
        run is resolved once (``_send_topic``: nothing else runs between the run's sends, so the
        answer is the one each send would get), the clock is read once, and a plain stored send's
        answer is returned encoded (``_answer_send``'s frame, no command object); when every send of
        the run is one (the common case) all their answers are one ``bytes`` (fastpath.send_answers)."""
        out: list[RemotingCommand | bytes | None] = [None] * len(cmds)
        ready: list[tuple[int, _PreparedSend]] = []
        topics: dict[str, Any] = {}
        now_ms = int(time.time() * 1000)
        max_size = self.b.settings.maxMessageSize  # read once per run, not per send
        peer = conn.peer
        # the plain single sends built inline, in order: when they are the whole run (the common case) the checks
        # below are known and their passes over the run are skipped
        plain_stored: list[StoredMessage] = []
        plain_prepared: list[_PreparedSend] = []
        for i, cmd in enumerate(cmds):
            try:
                pre = cmd.send  # the fields and properties the server's compiled loop read (fastpath.decode_frames)
                fields = pre[0] if pre is not None else _send_fields(cmd)
                topic = fields[1]
                cfg = topics.get(topic)
                if cfg is None:
                    cfg = await self._send_topic(topic, fields[7])
                    if not topic.startswith(RETRY_PREFIX):  # a retry topic checks its group each time
                        topics[topic] = cfg
                # _prepare_send's first path inline, taken only where it gives the same (else the general path
                # below, which parses the properties again from the header's text)
                prepared = _inline_plain(cmd, cfg, max_size, peer)
                if prepared is not None:
                    cmd.send = None
                    ready.append((i, prepared))
                    plain_stored.append(prepared.stored[0])
                    plain_prepared.append(prepared)
                    continue
                ready.append((i, self._prepare_send(cmd, conn, fields, cfg, now_ms, max_size)))
            except HeaderError as exc:
                out[i] = cmd.response(exc.code, str(exc))
        if not ready:
            return out
        cid = self.client_id(conn)
        untraced = isinstance(self.b.trace_hooks, NoTrace)
        tried = len(plain_stored) == len(cmds) and untraced  # every send a plain single built inline
        if tried and self.b.put_plain_run(plain_stored):  # the general case's first test below, its passes skipped
            return self._answer_plain_run(cmds, plain_stored, plain_prepared, cid)
        singles = len(ready) == len(cmds) and all(len(p.stored) == 1 for _, p in ready)
        if singles:
            stored = [p.stored[0] for _, p in ready]
            kinds = [p.kinds[0] for _, p in ready]
        else:
            stored = [m for _, p in ready for m in p.stored]
            kinds = [k for _, p in ready for k in p.kinds]
        results: list[Any]
        if not tried and untraced and all(k is PLAIN for k in kinds) and self.b.put_plain_run(stored):
            # the run stored as one: no await, and for singles no PutResult per message (Broker.put_plain_run)
            if singles:
                return self._answer_plain_run(cmds, stored, [p for _, p in ready], cid)
            ok = PutStatus.PUT_OK
            results, cost_ms = [PutResult(ok, m) for m in stored], 0
            return self._answer_each(cmds, out, ready, results, cid, cost_ms)
        started = time.perf_counter()
        results = await self.b.put_messages(stored, kinds, cid)
        cost_ms = int((time.perf_counter() - started) * 1000)
        if singles and _C is not None and untraced:
            # every answer a plain stored single send's: one compiled call writes them all (None: any other answer)
            settings = self.b.settings
            frames: bytes | None = _C.send_answers(cmds, results, [p for _, p in ready], self._msg_id_prefix,
                                                   settings.regionId, "true" if settings.traceOn else "false",
                                                   PutStatus.PUT_OK)
            if frames is not None:
                return frames
        return self._answer_each(cmds, out, ready, results, cid, cost_ms)

    def _answer_plain_run(self, cmds: list[RemotingCommand], stored: list[StoredMessage],
                          prepared: list[_PreparedSend], cid: str) -> list[RemotingCommand | bytes | None] | bytes:
        """The answers to a run of single sends that ``Broker.put_plain_run`` stored, every one of them: one
        compiled call writes their frames from the stored messages (``send_answers`` with ``ok`` None); when it
        declines (a request that is not JSON, say) or without the compiled module, each is ``_answer_send``'s
        for a PUT_OK ``PutResult``, the answer ``put_messages`` would have led to."""
        if _C is not None:
            settings = self.b.settings
            frames: bytes | None = _C.send_answers(cmds, stored, prepared, self._msg_id_prefix, settings.regionId,
                                                   "true" if settings.traceOn else "false", None)
            if frames is not None:
                return frames
        ok = PutStatus.PUT_OK
        return self._answer_each(cmds, [None] * len(cmds), list(enumerate(prepared)),
                                 [PutResult(ok, m) for m in stored], cid, 0)

    def _answer_each(self, cmds: list[RemotingCommand], out: list[RemotingCommand | bytes | None],
                     ready: list[tuple[int, _PreparedSend]], results: list[Any], cid: str, cost_ms: int
                     ) -> list[RemotingCommand | bytes | None]:
        """Each stored send's answer in ``out`` (``_answer_send``'s, encoded straight to its frame when a
        SUCCESS); ``results`` holds the results of ``ready``'s messages in order."""
        pos = 0
        for i, p in ready:
            n = len(p.stored)
            code, remark, ext = self._answer_send(p, results[pos:pos + n] if n != 1 else [results[pos]], cid, cost_ms)
            cmd = cmds[i]
            out[i] = (code == RC.SUCCESS and encode_response(cmd, code, ext)) or cmd.response(code, remark, ext)
            pos += n
        return out

    async def _send_topic(self, topic: str, batch: bool) -> Any:
        """The topic config a send writes to, or HeaderError with the code a bad or refused topic gets."""
        b = self.b
        if topic.startswith(RETRY_PREFIX):
            if batch:
                raise HeaderError("batch request does not support retry group", RC.MESSAGE_ILLEGAL)
            if topic_name_problem(topic):
                raise HeaderError(f"topic[{topic[:200]}] is not valid", RC.INVALID_PARAMETER)
            self.check_group(topic[len(RETRY_PREFIX):])
            return b.topics.create_if_absent(topic, 1, system=True)
        if topic not in self._valid_topic_names:
            problem = topic_name_problem(topic)
            if problem:
                raise HeaderError(f"topic[{topic[:200]}] is not valid: {problem}", RC.INVALID_PARAMETER)
            if len(self._valid_topic_names) >= 4096:
                self._valid_topic_names.clear()
            self._valid_topic_names.add(topic)
        try:
            return await b.topic_for_send(topic)
        except BrokerError as exc:  # a slave's NOT_WRITER is SERVICE_NOT_AVAILABLE (broker/remoting/errors.py)
            raise HeaderError(str(exc), remoting_code(exc)) from None

    def _prepare_send(self, cmd: RemotingCommand, conn: Connection,
                      fields: tuple[str, str, int, int, int, int, int, bool, str], cfg: Any,
                      now_ms: int, max_size: int) -> _PreparedSend:
        """Check a send's header and body against its topic's ``cfg``; the messages to store (HeaderError names
        what is wrong).

        Runs for every send: the header's fields come from ``_send_fields`` (read straight from the decoded
        extFields, V2's short names without a renamed copy), settings are read once per request, and each
        message gets the properties dict decoded for it (no copy) and a UNIQ_KEY from ``new_uniq_key``."""
        _group, topic, queue_id, sys_flag, born, flag, reconsume, batch, header_props = fields
        b = self.b
        if queue_id >= max(cfg.read_queue_nums, cfg.write_queue_nums):
            raise HeaderError(f"request queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.writeQueueNums:"
                              f"[{cfg.write_queue_nums}]", RC.INVALID_PARAMETER)
        if not 0 <= queue_id < cfg.write_queue_nums:
            queue_id = b.select_queue(cfg, "")
        half_flag = (sys_flag & SYSFLAG_TRANSACTION_MASK) == SYSFLAG_TRANSACTION_PREPARED
        # (body, flag, properties): each properties dict is decoded for this message alone, so it is not copied
        if not batch and not sys_flag & SYSFLAG_COMPRESSED:
            # the common single send first: no property asks for a queue, a lite topic, a delay or a transaction
            # (one set test instead of five lookups); any that does goes on to the checks below, which repeat the
            # size and UNIQ_KEY steps with the same outcome
            body, props = cmd.body, _header_properties(cmd, header_props)
            if len(body) > max_size:
                raise HeaderError(f"message body of {len(body)} bytes exceeds maxMessageSize {max_size}",
                                  RC.MESSAGE_ILLEGAL)
            if not half_flag and _SPECIAL_PROPERTIES.isdisjoint(props):
                return _plain_single(cfg, queue_id, body, props, fields, conn.peer)
            entries = [(body, flag, props)]  # the loop below makes its UNIQ_KEY
        elif batch:
            try:
                entries = batch_entries(cmd.body)
            except FrameError as exc:
                raise HeaderError(f"batch body: {exc}", RC.MESSAGE_ILLEGAL) from None
            if not entries:
                raise HeaderError("batch body holds no message", RC.MESSAGE_ILLEGAL)
        else:
            entries = [(cmd.body, flag, _header_properties(cmd, header_props))]
        settings = b.settings
        topic_name = cfg.name
        peer = conn.peer
        stored: list[StoredMessage] = []
        kinds: list[SendKind] = []
        for i, (body, msg_flag, props) in enumerate(entries):
            if sys_flag & SYSFLAG_COMPRESSED and not batch:
                body = inflate(body, sys_flag, max_size)
            if len(body) > max_size:
                raise HeaderError(f"message body of {len(body)} bytes exceeds maxMessageSize "
                                  f"{max_size}", RC.MESSAGE_ILLEGAL)
            if not props.get("UNIQ_KEY"):
                props["UNIQ_KEY"] = new_uniq_key()
            if not batch and PRIORITY_PROPERTY in props:  # Apache's single send: a priority's own queue
                queue_id = place(props, cfg.write_queue_nums, queue_id)
            if not batch and LITE_TOPIC_PROPERTY in props:  # Apache's single send: the lite queue (broker/lite.py)
                try:
                    b.lite.prepare_send(topic_name, props, "properties")
                except BrokerError as exc:
                    raise HeaderError(str(exc), remoting_code(exc)) from None
            deliver_ms = None if _TIMER_KEYS.isdisjoint(props) else self._deliver_ms(props, now_ms)
            if deliver_ms is not None:
                if batch:
                    raise HeaderError(f"batch message {i} asks for a delay; batches cannot be delayed",
                                      RC.MESSAGE_ILLEGAL)
                if not settings.timerWheelEnable and deliver_ms > now_ms:
                    raise HeaderError("accurate timer message is not enabled, timerWheelEnable is false",
                                      RC.MESSAGE_ILLEGAL)  # RocketMQ's WHEEL_TIMER_NOT_ENABLE answer
                if deliver_ms - now_ms > settings.timerMaxDelaySec * 1000:
                    raise HeaderError(f"delay of {deliver_ms - now_ms} ms exceeds timerMaxDelaySec "
                                      f"({settings.timerMaxDelaySec} s)", RC.MESSAGE_ILLEGAL)
                for name in TIMER_PROPERTIES:
                    props.pop(name, None)
            half = half_flag or props.get("TRAN_MSG") == "true"
            if half and batch:
                raise HeaderError("batch messages cannot be transactional", RC.MESSAGE_ILLEGAL)
            stored.append(StoredMessage(topic=topic_name, queue_id=queue_id, body=body, properties=props,
                                        flag=msg_flag, born_timestamp=born, born_host=peer,
                                        reconsume_times=reconsume))
            kinds.append(SendKind(half, deliver_ms) if half or deliver_ms is not None else PLAIN)
        return _PreparedSend(cfg, queue_id, stored, kinds)

    def _answer_send(self, prepared: _PreparedSend, results: list[Any], cid: str, cost_ms: int
                     ) -> tuple[int, str | None, dict[str, str] | None]:
        """The answer to a send as (code, remark, extFields): SendMessageResponseHeader of a stored send (or the
        first failure's code and reason)."""
        b = self.b
        cfg, queue_id = prepared.cfg, prepared.queue_id
        ids = []
        first = None
        code = RC.SUCCESS  # the first failure's, else SUCCESS
        trace = b.trace_hooks
        traced = not isinstance(trace, NoTrace)  # NoTrace.on_stored does nothing: not called per message
        prefix = self._msg_id_prefix
        for res in results:
            status = res.status
            if status is not PutStatus.PUT_OK and code == RC.SUCCESS:  # PutStatus hashes in Python: looked up
                code = PUT_CODES.get(status, RC.SYSTEM_ERROR)                  # only for a failure
            msg = res.message
            if msg is not None:
                if traced:
                    trace.on_stored(msg, client_id=cid, client_traced=False, cost_ms=cost_ms, status=status.value)
                ids.append(f"{prefix}{msg.physical_offset:016X}")
                if first is None:
                    first = msg
        if first is None or code not in _STORED_CODES:
            # stored, but not as the send asked (DLedger: not committed at a majority): an error the client retries,
            # without the headers of a stored message, as Apache answers (SendMessageProcessor's sendOK=false)
            reason = next((r.reason for r in results if r.reason), results[0].status.value if results else "")
            if code == RC.SYSTEM_ERROR and any(r.status is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH for r in results):
                reason = f"in-sync replicas not enough: {reason}"
            return code if code != RC.SUCCESS else RC.SYSTEM_ERROR, reason or "message not stored", None
        ext = {"msgId": ",".join(ids), "queueId": str(queue_id), "queueOffset": str(first.queue_offset),
               "MSG_REGION": b.settings.regionId, "TRACE_ON": "true" if b.settings.traceOn else "false"}
        props = first.properties
        ext["transactionId"] = props.get("TRANSACTION_ID") or props.get("UNIQ_KEY", "")
        if first.topic != cfg.name:  # wrapped by the timer or as a half message: the queue the client named
            ext["queueOffset"] = str(max(first.queue_offset, 0))
        return code, None if code == RC.SUCCESS else results[0].status.value, ext

    # --------------------------------------------------------------- pull
    def _on_dispatch(self, queues: list[tuple[str, int]]) -> None:
        """Wake the pulls held on the queues a dispatched batch grew (``MessageStore.add_queue_listener``)."""
        waiters = self._waiters
        if waiters:
            for key in queues:
                for fut in waiters.pop(key, ()):
                    if not fut.done():
                        fut.set_result(None)

    async def _wait_for_message(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        store = self.b.store
        while store.max_offset(topic, queue_id) <= offset:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault((topic, queue_id), set()).add(fut)
            try:
                await asyncio.wait_for(fut, min(remaining, 5.0))  # RocketMQ re-checks held pulls every 5 s too
            except TimeoutError:
                pass
            finally:
                waiters = self._waiters.get((topic, queue_id))
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        self._waiters.pop((topic, queue_id), None)

    def _subscription(self, h: Header, group: str, topic: str, sys_flag: int) -> Subscription:
        if sys_flag & PULL_SUBSCRIPTION:
            expr = h.str("subscription", default="*")
            return Subscription(topic, expr, parse_tags(expr), h.str("expressionType", default="TAG"),
                                h.int("subVersion", default=0))
        for client in self.consumers.get(group, {}).values():
            sub = client.subscriptions.get(topic)
            if sub is not None:
                return sub
        raise HeaderError(f"the consumer's subscription not exist, group: {group} topic: {topic}",
                          RC.SUBSCRIPTION_NOT_EXIST)

    async def pull(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        group = h.str("consumerGroup")
        topic = h.str("topic")
        queue_id = h.int("queueId")
        offset = h.int("queueOffset")
        max_nums = h.int("maxMsgNums")
        sys_flag = h.int("sysFlag")
        commit_offset = h.int("commitOffset", default=-1)
        suspend_ms = h.int("suspendTimeoutMillis", default=0)
        self.check_group(group)
        cfg = self.topic_config(topic, read=True, lmq=True)
        self.check_queue_id(cfg, queue_id)
        sub = self._subscription(h, group, topic, sys_flag)
        try:  # RocketMQ's PullMessageProcessor: SQL92 needs enablePropertyFilter; a bad expression does not parse
            sub_filter = compile_filter(sub.expression_type, sub.sub_string, self.b.settings.enablePropertyFilter)
        except FilterRefused as exc:
            refusal = filter_refusal(exc, bool(sys_flag & PULL_SUBSCRIPTION))
            log.info("PULL_MESSAGE of group %s on %s from %s refused (code %d): %s", group, topic, conn.peer,
                     refusal.code, exc.message)
            raise refusal from None
        reset = self.b.pop.client_resets.pop((group, cfg.name, queue_id), None)
        if reset is not None:  # an admin reset since this queue's last pull: the client's offsets are stale
            return self._offset_reset(cmd, group, cfg.name, queue_id, offset, reset)
        if sys_flag & PULL_COMMIT_OFFSET and commit_offset >= 0:
            self._commit(group, topic, queue_id, commit_offset)
        resp = self._pull_once(cmd, group, cfg.name, queue_id, offset, max_nums, sub_filter)
        if resp.code == RC.PULL_NOT_FOUND and sys_flag & PULL_SUSPEND and suspend_ms > 0 and not conn.closed:
            me = asyncio.current_task()
            if me is not None:
                conn.holding.add(me)
            try:
                await self._wait_for_message(cfg.name, queue_id, offset, suspend_ms / 1000)
            finally:
                if me is not None:
                    conn.holding.discard(me)
            resp = self._pull_once(cmd, group, cfg.name, queue_id, offset, max_nums, sub_filter)
        return resp

    def _offset_reset(self, cmd: RemotingCommand, group: str, topic: str, queue_id: int, offset: int, reset: int
                      ) -> RemotingCommand:
        """Apache's OFFSET_RESET answer: PULL_OFFSET_MOVED with nextBeginOffset at the reset point. The client (Java
        DefaultMQPushConsumer, Go client v2) stores and commits that offset, drops the queue and pulls from there
        after its next rebalance. The pull's own commitOffset is not applied: it predates the reset."""
        store = self.b.store
        log.info("pull of group %s on %s queue %d at %d answered OFFSET_RESET to %d (admin reset)", group, topic,
                 queue_id, offset, reset)
        return cmd.response(RC.PULL_OFFSET_MOVED, "OFFSET_RESET", {
            "suggestWhichBrokerId": "0", "nextBeginOffset": str(reset),
            "minOffset": str(store.min_offset(topic, queue_id)), "maxOffset": str(store.max_offset(topic, queue_id))})

    def _pull_once(self, cmd: RemotingCommand, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
                   tags: MessageFilter) -> RemotingCommand:
        store = self.b.store
        lo, hi = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)

        def answer(code: int, remark: str, next_offset: int, body: bytes = b"") -> RemotingCommand:
            return cmd.response(code, remark, {"suggestWhichBrokerId": "0", "nextBeginOffset": str(next_offset),
                                               "minOffset": str(lo), "maxOffset": str(hi)}, body)

        if offset < lo:
            return answer(RC.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", lo)
        if offset > hi:
            return answer(RC.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", hi if hi else 0)
        if offset == hi:
            return answer(RC.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE" if hi else "NO_MESSAGE_IN_QUEUE", offset)
        got = store.get(topic, queue_id, offset, max(1, min(max_nums, MAX_PULL_MESSAGES)), store_tags(tags),
                        max_bytes=MAX_PULL_BYTES, record_offsets=is_lmq(topic))
        got.messages = keep(tags, got.messages)  # SQL92: the store gave every message of the range
        if not got.messages:
            if got.next_offset > offset:  # entries there, none matching the filter: skip past them
                return answer(RC.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", got.next_offset)
            return answer(RC.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", offset)
        self.b.metrics.on_pulled(group, got.messages)
        body = b"".join(encode_message(self.wire(m)) for m in got.messages)
        return answer(RC.SUCCESS, "FOUND", got.next_offset, body)

    # ------------------------------------------------------------ offsets
    def _commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        pop = self.b.pop
        if pop.committed(group, topic, queue_id) != offset:
            pop.reset_offset(group, topic, queue_id, offset)

    async def query_consumer_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        group, topic, queue_id = h.str("consumerGroup"), h.str("topic"), h.int("queueId")
        committed = self.b.pop.committed(group, topic, queue_id)
        if committed is None:
            # RocketMQ answers 0 for a queue that was never trimmed, so a new group starts at its beginning
            if self.b.store.min_offset(topic, queue_id) == 0 and h.bool("setZeroIfNotFound", default=True):
                committed = 0
            else:
                return cmd.response(RC.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot "
                                                        "first")
        return cmd.response(ext_fields={"offset": str(committed)})

    async def update_consumer_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        group, topic = h.str("consumerGroup"), h.str("topic")
        queue_id, offset = h.int("queueId"), h.int("commitOffset")
        self.check_group(group)
        cfg = self.topic_config(topic, lmq=True)
        self.check_queue_id(cfg, queue_id)
        if offset < 0:
            raise HeaderError(f"commitOffset {offset} is negative", RC.INVALID_PARAMETER)
        self._commit(group, topic, queue_id, offset)
        return cmd.response()

    async def get_max_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        return cmd.response(ext_fields={"offset": str(self.b.store.max_offset(h.str("topic"), h.int("queueId")))})

    async def get_min_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        return cmd.response(ext_fields={"offset": str(self.b.store.min_offset(h.str("topic"), h.int("queueId")))})

    async def search_offset_by_timestamp(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        offset = self.b.store.offset_by_time(h.str("topic"), h.int("queueId"), h.int("timestamp"))
        return cmd.response(ext_fields={"offset": str(offset)})

    async def earliest_store_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        topic, queue_id = h.str("topic"), h.int("queueId")
        ts = self.b.store.store_time(topic, queue_id, self.b.store.min_offset(topic, queue_id))
        return cmd.response(ext_fields={"timestamp": str(ts or 0)})

    # ------------------------------------------------------------ clients
    def _forget_connection(self, conn: Connection) -> None:
        for table in (self.consumers, self.producers):
            for group, clients in list(table.items()):
                gone = [cid for cid, c in clients.items() if c.conn is conn]
                for cid in gone:
                    del clients[cid]
                    self.b.clients.remove(cid, "remoting connection closed")
                if gone and table is self.consumers:
                    self._notify_changed(group)
                if not clients:
                    del table[group]

    def _notify_changed(self, group: str) -> None:
        for client in self.consumers.get(group, {}).values():
            client.conn.notify(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})

    def _on_watched_close(self, conn: Connection) -> None:
        self._watched.discard(conn.id)
        self._forget_connection(conn)

    def _watch(self, conn: Connection) -> None:
        if conn.id not in self._watched:
            self._watched.add(conn.id)
            conn.on_close.append(self._on_watched_close)

    async def heart_beat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = parse_json_body(cmd.body, "HeartbeatData")
        if not isinstance(data, dict) or not isinstance(data.get("clientID"), str) or not data["clientID"]:
            raise HeaderError("HeartbeatData has no clientID", RC.SYSTEM_ERROR)
        cid = data["clientID"]
        conn.client_id = cid
        self._watch(conn)
        b = self.b
        for pd in data.get("producerDataSet") or []:
            group = pd.get("groupName", "") if isinstance(pd, dict) else ""
            if not group or group_name_problem(group):
                continue
            self.producers.setdefault(group, {})[cid] = RemoteClient(cid, conn, cmd.language, cmd.version)
            info = b.clients.touch(cid, client_type=ClientType.PRODUCER, group=group, language=cmd.language,
                                   version=version_desc(cmd.version), address=conn.peer, protocol="remoting")
            if info.outbox is None or isinstance(info.outbox, TransactionCheckOutbox):
                info.outbox = TransactionCheckOutbox(self, conn, group)  # type: ignore[assignment]
        changed_sub = False
        for cd in data.get("consumerDataSet") or []:
            if not isinstance(cd, dict):
                continue
            group = cd.get("groupName", "")
            if not group or group_name_problem(group):
                continue
            try:
                self.check_group(group)
            except HeaderError:
                continue  # RocketMQ skips a group it does not know
            rtopic = retry_topic(group)
            if b.topics.get(rtopic) is None:
                b.topics.create_if_absent(rtopic, 1, system=True)
                b.topics_on_change()
            subs: dict[str, Subscription] = {}
            for sd in cd.get("subscriptionDataSet") or []:
                if isinstance(sd, dict) and isinstance(sd.get("topic"), str):
                    sub_string = str(sd.get("subString") or "*")
                    subs[sd["topic"]] = Subscription(sd["topic"], sub_string, parse_tags(sub_string),
                                                     str(sd.get("expressionType") or "TAG"),
                                                     int(sd.get("subVersion") or 0))
            mode = "push" if cd.get("consumeType") == "CONSUME_PASSIVELY" else "pull"
            members = self.consumers.setdefault(group, {})
            old = members.get(cid)
            if old is not None and old.conn is conn:
                changed_sub = changed_sub or {k: v.sub_string for k, v in old.subscriptions.items()} != {
                    k: v.sub_string for k, v in subs.items()}
                old.subscriptions, old.last_seen, old.consume_mode = subs, time.monotonic(), mode
            else:
                members[cid] = RemoteClient(cid, conn, cmd.language, cmd.version, subs, consume_mode=mode)
                self._notify_changed(group)
            # consume_mode as Apache labels remoting consumers: CONSUME_PASSIVELY push, CONSUME_ACTIVELY pull
            passive = cd.get("consumeType") == "CONSUME_PASSIVELY"
            kind = ClientType.PUSH_CONSUMER if passive else ClientType.PULL_CONSUMER
            b.clients.touch(cid, client_type=kind, group=group, language=cmd.language,
                            version=version_desc(cmd.version), address=conn.peer, topics=set(subs), protocol="remoting")
        return cmd.response(ext_fields={"IS_SUPPORT_HEART_BEAT_V2": "false",
                                        "IS_SUB_CHANGE": "true" if changed_sub else "false"})

    async def unregister_client(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        cid = h.str("clientID")
        for table, name in ((self.producers, "producerGroup"), (self.consumers, "consumerGroup")):
            group = h.str(name, default="")
            if group and table.get(group, {}).pop(cid, None) is not None and table is self.consumers:
                self._notify_changed(group)
        if not any(cid in clients for t in (self.producers, self.consumers) for clients in t.values()):
            self.b.clients.remove(cid, "client unregistered")
        return cmd.response()

    async def consumer_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = Header(cmd).str("consumerGroup")
        now = time.monotonic()
        ids = sorted(cid for cid, c in self.consumers.get(group, {}).items()
                     if not c.conn.closed and now - c.last_seen < CLIENT_EXPIRY_S)
        if not ids:
            return cmd.response(RC.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return cmd.response(body=json_body({"consumerIdList": ids}))

    # -------------------------------------------------------------- retry
    async def send_back(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        offset, group = h.int("offset"), h.str("group")
        delay_level = h.int("delayLevel", default=0)
        self.check_group(group)
        b = self.b
        msg = b.store.read_physical(offset) if offset >= 0 else None
        if msg is None:
            return cmd.response(RC.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        gcfg = b.groups.get(group)
        max_times = h.int("maxReconsumeTimes", default=-1) if cmd.version >= 121 else -1
        if max_times < 0:
            max_times = gcfg.retry_max_times if gcfg is not None else 16
        if msg.reconsume_times >= max_times or delay_level < 0:
            # Apache's consumerSendMsgBack stores reconsumeTimes + 1 on the DLQ copy as on a retry copy
            # (seen: Apache's DLQ consumer reads 2 after deliveries 0 and 1, tests/test_remoting_java_clients.py)
            if not await b.pop.dead_letter(group, msg, copy_times=msg.reconsume_times + 1):
                return cmd.response(RC.SYSTEM_ERROR, "could not store the message in the dead-letter queue")
            return cmd.response()
        level = delay_level or 3 + msg.reconsume_times
        rtopic = retry_topic(group)
        b.topics.create_if_absent(rtopic, 1, system=True)
        copy = b.pop.retry_copy(msg, rtopic, msg.reconsume_times + 1)
        origin_id = h.str("originMsgId", default="")
        if origin_id:
            copy.properties.setdefault("ORIGIN_MESSAGE_ID", origin_id)
        copy.properties.pop("DELAY", None)
        deliver_at = int(time.time() * 1000) + self.delay_levels_ms[min(level, len(self.delay_levels_ms)) - 1]
        (res,) = await b.put_messages([copy], [SendKind(deliver_at_ms=deliver_at)])
        if res.message is None:
            return cmd.response(PUT_CODES.get(res.status, RC.SYSTEM_ERROR), res.reason or res.status.value)
        return cmd.response()

    # -------------------------------------------------------------- locks
    def _mq_set(self, cmd: RemotingCommand) -> tuple[str, str, list[dict[str, Any]]]:
        body = parse_json_body(cmd.body, "LockBatchRequestBody")
        if not isinstance(body, dict):
            raise HeaderError("LockBatchRequestBody is not an object")
        group, cid = str(body.get("consumerGroup") or ""), str(body.get("clientId") or "")
        mqs = [mq for mq in body.get("mqSet") or [] if isinstance(mq, dict)]
        if not group or not cid:
            raise HeaderError("LockBatchRequestBody needs consumerGroup and clientId")
        return group, cid, mqs

    async def lock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group, cid, mqs = self._mq_set(cmd)
        now = time.monotonic()
        ok = []
        for mq in mqs:
            key = (group, str(mq.get("topic")), str(mq.get("brokerName")), int(mq.get("queueId") or 0))
            holder = self.locks.get(key)
            if holder is None or holder[0] == cid or now > holder[1]:
                self.locks[key] = (cid, now + LOCK_EXPIRY_S)
                ok.append(mq)
        return cmd.response(body=json_body({"lockOKMQSet": ok}))

    async def unlock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group, cid, mqs = self._mq_set(cmd)
        for mq in mqs:
            key = (group, str(mq.get("topic")), str(mq.get("brokerName")), int(mq.get("queueId") or 0))
            if self.locks.get(key, ("",))[0] == cid:
                del self.locks[key]
        return cmd.response()

    # ------------------------------------------------------------ queries
    async def query_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        topic, key = h.str("topic"), h.str("key")
        max_num = h.int("maxNum")
        if h.bool("_UNIQUE_KEY_QUERY"):
            max_num = 32
        begin, end = h.int("beginTimestamp"), h.int("endTimestamp")
        found = self.b.store.lookup(topic, key, max(1, min(max_num, 64)), begin, end)
        ext = {"indexLastUpdateTimestamp": str(int(time.time() * 1000)),
               "indexLastUpdatePhyoffset": str(self.b.store.dispatched)}
        if not found:
            return cmd.response(RC.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext)
        return cmd.response(ext_fields=ext, body=b"".join(encode_message(self.wire(m)) for m in found))

    async def view_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        offset = Header(cmd).int("offset")
        msg = self.b.store.read_physical(offset) if 0 <= offset < self.b.store.dispatched else None
        if msg is None:
            return cmd.response(RC.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        return cmd.response(body=encode_message(self.wire(msg)))

    # -------------------------------------------------------- transactions
    async def end_transaction(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        from ..transaction import Resolution, TransactionError

        h = Header(cmd)
        h.str("producerGroup")
        kind = h.int("commitOrRollback")
        tx_id = h.str("transactionId", default="")
        msg_id = h.str("msgId", default="")
        resolution = {8: Resolution.COMMIT, 12: Resolution.ROLLBACK}.get(kind, Resolution.UNKNOWN)
        if not self.b.is_master:
            return cmd.response(RC.SLAVE_NOT_AVAILABLE, "the broker is a slave: END_TRANSACTION goes to the master")
        if not tx_id:
            raise HeaderError("the custom field <transactionId> is null: END_TRANSACTION needs it")
        try:
            await self.b.transactions.end(tx_id, msg_id, resolution, h.bool("fromTransactionCheck"))
        except TransactionError as exc:
            return cmd.response(remoting_code(exc), str(exc))
        return cmd.response()


def bind_broker_port(broker: RemotingHost, server: Any, host: str, port: int, tls: Any
                     ) -> tuple[Any, RemotingBroker | None]:
    """The broker's listenPort: internal gRPC, plus remoting when enableRemoting (docs/REMOTING.md).

    Returns the port's listener and the remoting front door (None without enableRemoting)."""
    from ..security import bind_listener
    from .server import bind_with_remoting

    s = broker.settings
    if not s.enableRemoting:
        return bind_listener(server, "listenPort", host, port, tls), None
    front = RemotingBroker(broker)
    guard = broker.acl_guard
    if guard is not None:  # aclEnable: the same accounts as gRPC (docs/SECURITY.md)
        from ..security.remoting_acl import RemotingAcl

        front.server.gate = RemotingAcl(guard).gate
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        # remoting is a client front door: TLS it terminates follows tls.server.need.client.auth, not the
        # internal rule ``tls`` carries for the admin gRPC service sharing the port
        return bind_with_remoting(server, address, tls, front.server, s.remotingListenPort,
                                  broker.security.server_tls), front
    except OSError as exc:
        raise OSError(f"config key listenPort: cannot listen on {address}: {exc}") from None
