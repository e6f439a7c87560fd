"""Conversion between the RocketMQ 5 gRPC Message and the stored message.

System properties map to RocketMQ's property names (UNIQ_KEY, TAGS, KEYS,
__SHARDINGKEY, ...) so stored messages look like RocketMQ's to every tool; anything
else is a user property and must not use a reserved name.
"""

from __future__ import annotations

import zlib

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from .priority import LITE_TOPIC_PROPERTY, PRIORITY_PROPERTY, priority_of
from .store.multi_dispatch import MULTI_DISPATCH, MULTI_QUEUE_OFFSET
from .store.record import StoredMessage

UNIQ_KEY = "UNIQ_KEY"
TAGS = "TAGS"
KEYS = "KEYS"
SHARDING_KEY = "__SHARDINGKEY"
START_DELIVER_TIME = "__STARTDELIVERTIME"
TRAN_MSG = "TRAN_MSG"
TRACE_CONTEXT = "TRACE_CONTEXT"
MSG_REGION = "MSG_REGION"
TRACE_ON = "TRACE_ON"
MESSAGE_TYPE = "__MSGTYPE"
BORN_HOST = "__BORNHOST"

RESERVED_PROPERTIES = frozenset({
    UNIQ_KEY, TAGS, KEYS, SHARDING_KEY, START_DELIVER_TIME, TRAN_MSG, TRACE_CONTEXT, MSG_REGION, TRACE_ON,
    MESSAGE_TYPE, BORN_HOST, "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "ORIGIN_MESSAGE_ID",
    "DLQ_ORIGIN_TOPIC", "WAIT", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "TRANSACTION_ID", "TRAN_PREPARED_QUEUE_OFFSET",
    "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "CHECK_IMMUNITY_TIME_IN_SECONDS", "__RECALL_HANDLE",
    "CLUSTER", "INNER_NUM", "INNER_BASE", "TRANSFER_FLAG", "CORRECTION_FLAG", "MSG_TYPE", "TRACE_SWITCH",
    PRIORITY_PROPERTY, LITE_TOPIC_PROPERTY, MULTI_DISPATCH, MULTI_QUEUE_OFFSET,
})

_TYPE_NAMES = {pb.NORMAL: "NORMAL", pb.FIFO: "FIFO", pb.DELAY: "DELAY", pb.TRANSACTION: "TRANSACTION",
               pb.LITE: "LITE", pb.PRIORITY: "PRIORITY"}
_TYPE_VALUES = {v: k for k, v in _TYPE_NAMES.items()}


def ts_to_ms(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def ms_to_ts(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def message_type_name(value: int) -> str:
    return _TYPE_NAMES.get(value, "NORMAL")


def to_stored(msg: pb.Message, queue_id: int, peer_host: str) -> StoredMessage:
    sp = msg.system_properties
    props: dict[str, str] = dict(msg.user_properties)
    props[UNIQ_KEY] = sp.message_id
    if sp.tag:
        props[TAGS] = sp.tag
    if sp.keys:
        props[KEYS] = " ".join(sp.keys)
    if sp.message_group:
        props[SHARDING_KEY] = sp.message_group
    if sp.HasField("delivery_timestamp"):
        props[START_DELIVER_TIME] = str(ts_to_ms(sp.delivery_timestamp))
    if sp.message_type == pb.TRANSACTION:
        props[TRAN_MSG] = "true"
    if sp.trace_context:
        props[TRACE_CONTEXT] = sp.trace_context
    if sp.HasField("priority"):
        props[PRIORITY_PROPERTY] = str(sp.priority)
    if sp.lite_topic:
        props[LITE_TOPIC_PROPERTY] = sp.lite_topic
    props[MESSAGE_TYPE] = message_type_name(sp.message_type)
    born_host = sp.born_host or peer_host
    return StoredMessage(topic=msg.topic.name, queue_id=queue_id, body=msg.body, properties=props,
                         born_timestamp=ts_to_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0,
                         born_host=born_host)


def to_grpc(stored: StoredMessage, topic: str, namespace: str = "", receipt_handle: str = "",
            attempt: int = 0, invisible_ms: int = 0) -> pb.Message:
    out = pb.Message(body=stored.body)
    out.topic.name = topic
    out.topic.resource_namespace = namespace
    props = stored.properties
    for k, v in props.items():
        if k not in RESERVED_PROPERTIES:
            out.user_properties[k] = v
    sp = out.system_properties
    sp.message_id = props.get(UNIQ_KEY, "")
    if props.get(TAGS):
        sp.tag = props[TAGS]
    keys = [k for k in props.get(KEYS, "").split(" ") if k]
    if keys:
        sp.keys.extend(keys)
    sp.body_digest.type = pb.CRC32
    sp.body_digest.checksum = f"{zlib.crc32(stored.body):08X}"
    sp.body_encoding = pb.IDENTITY
    sp.message_type = _TYPE_VALUES.get(props.get(MESSAGE_TYPE, "NORMAL"), pb.NORMAL)
    sp.born_timestamp.CopyFrom(ms_to_ts(stored.born_timestamp))
    sp.born_host = stored.born_host
    sp.store_timestamp.CopyFrom(ms_to_ts(stored.store_timestamp))
    sp.store_host = stored.store_host
    if props.get(START_DELIVER_TIME, "").isdigit():
        sp.delivery_timestamp.CopyFrom(ms_to_ts(int(props[START_DELIVER_TIME])))
    if receipt_handle:
        sp.receipt_handle = receipt_handle
        sp.invisible_duration.FromMilliseconds(invisible_ms)
    sp.queue_id = stored.queue_id
    sp.queue_offset = stored.queue_offset
    if attempt:
        sp.delivery_attempt = attempt
    if props.get(SHARDING_KEY):
        sp.message_group = props[SHARDING_KEY]
    if props.get(TRACE_CONTEXT):
        sp.trace_context = props[TRACE_CONTEXT]
    priority = priority_of(props)
    if priority is not None and priority >= 0:
        sp.priority = priority
    if props.get(LITE_TOPIC_PROPERTY):
        sp.lite_topic = props[LITE_TOPIC_PROPERTY]
    return out
