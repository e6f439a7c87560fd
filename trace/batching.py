"""Cut trace records into trace messages: one original topic each, bounded body and KEYS.

Lookup by msgId works only because the broker's index finds the trace message by its
KEYS (``RMQ_SYS_TRACE_TOPIC#<msgId>``), so every trace message must carry as keys the
msgId of every record in it plus the business keys of those records (Java
``TraceDataEncoder.encoderFromContextBean`` and ``AsyncTraceDispatcher``).  Two limits
bite in practice and both have lost traces in RocketMQ:

* the body: the trace producer refuses bodies over 128,000 (apache/rocketmq#8429);
* the properties: the broker refuses a message whose serialized properties exceed
  32,767 bytes; merged KEYS went over it (apache/rocketmq#6579).  Like RocketMQ since
  5.1.1 we keep the joined KEYS within 22,767, leaving 10,000 for the other properties.

Both are measured here in UTF-8 bytes, which is what the broker checks and never less
than the character count Java uses, so our messages pass either check.

A record that cannot fit even alone in an empty trace message is returned apart as
*oversize* rather than sent to certain rejection.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rocketscope.trace.codec import (
    EndTransactionRecord,
    PubRecord,
    RecallRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
    encode_record,
)

MAX_BODY_BYTES = 128_000
"""Largest trace message body (the Java trace producer's ``maxMessageSize``)."""
PROPERTIES_LIMIT = 32_767
"""The broker's limit on a message's serialized properties (``Short.MAX_VALUE``)."""
MAX_KEYS_BYTES = PROPERTIES_LIMIT - 10_000
"""Budget for the joined KEYS property, as in RocketMQ 5.1.1+ (#6580)."""
KEY_SEPARATOR = " "


def record_topic(record: TraceRecord) -> str:
    """The original topic a record is about; "" for Sub records, whose format has no topic."""
    if isinstance(record, PubRecord | EndTransactionRecord | RecallRecord):
        return record.topic
    return ""


def record_keys(record: TraceRecord) -> list[str]:
    """The index keys a record contributes: its msgId, then each space-separated business key, deduplicated."""
    keys: list[str] = []
    seen: set[str] = set()
    business = record.keys if isinstance(record, PubRecord | SubBeforeRecord | SubAfterRecord
                                         | EndTransactionRecord) else ""
    for key in [record.msg_id, *business.split(KEY_SEPARATOR)]:
        if key and key not in seen:
            seen.add(key)
            keys.append(key)
    return keys


def keys_size(keys: Iterable[str]) -> int:
    """UTF-8 size of the KEYS property value once joined with spaces."""
    total, count = 0, 0
    for key in keys:
        total += len(key.encode("utf-8"))
        count += 1
    return total + max(count - 1, 0)


@dataclass
class TraceBatch:
    """One trace message to send: records of one original topic, its body and its KEYS."""

    topic: str
    records: list[TraceRecord] = field(default_factory=list)
    body: str = ""
    keys: list[str] = field(default_factory=list)
    body_bytes: int = 0
    keys_bytes: int = 0

    @property
    def keys_text(self) -> str:
        """The KEYS property value."""
        return KEY_SEPARATOR.join(self.keys)


@dataclass(frozen=True)
class Encoded:
    """A record with its original topic, encoded text and UTF-8 size, for callers that have them."""

    topic: str
    record: TraceRecord
    text: str
    size: int


@dataclass
class BatchPlan:
    """The trace messages for a set of records, and the records too large for any message."""

    batches: list[TraceBatch]
    oversize: list[TraceRecord]


@dataclass
class _Open:
    batch: TraceBatch
    parts: list[str] = field(default_factory=list)
    key_set: set[str] = field(default_factory=set)


def build_batches(
    items: Iterable[TraceRecord | tuple[str, TraceRecord] | Encoded],
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_keys_bytes: int = MAX_KEYS_BYTES,
) -> BatchPlan:
    """Group records by original topic and pack them, in order, into bounded trace messages.

    ``items`` are records, or ``(topic, record)`` pairs when the caller knows the topic
    of a Sub record (the format does not carry it), or :class:`Encoded` items (not encoded
    a second time).  Records keep their relative order
    within a topic; batches are listed in the order they were completed.  Raises
    :class:`~rocketscope.trace.codec.TraceEncodeError` for a record the format cannot
    carry, before producing anything.
    """
    if max_body_bytes <= 0 or max_keys_bytes <= 0:
        raise ValueError("max_body_bytes and max_keys_bytes must be positive")
    prepared: list[tuple[str, TraceRecord, str, int, list[str]]] = []
    for item in items:
        if isinstance(item, Encoded):  # encoded already (the dispatcher measured it when queueing)
            prepared.append((item.topic, item.record, item.text, item.size, record_keys(item.record)))
            continue
        topic, record = item if isinstance(item, tuple) else (record_topic(item), item)
        text = encode_record(record)
        prepared.append((topic, record, text, len(text.encode("utf-8")), record_keys(record)))

    open_by_topic: dict[str, _Open] = {}
    batches: list[TraceBatch] = []
    oversize: list[TraceRecord] = []

    def close(topic: str) -> None:
        current = open_by_topic.pop(topic)
        current.batch.body = "".join(current.parts)
        batches.append(current.batch)

    for topic, record, text, size, keys in prepared:
        if size > max_body_bytes or keys_size(keys) > max_keys_bytes:
            oversize.append(record)
            continue
        current = open_by_topic.get(topic)
        if current is not None:
            new_keys = [k for k in keys if k not in current.key_set]
            grown_keys = current.batch.keys_bytes + keys_size(new_keys) + (1 if new_keys and current.batch.keys else 0)
            if current.batch.body_bytes + size > max_body_bytes or grown_keys > max_keys_bytes:
                close(topic)
                current = None
        if current is None:
            current = open_by_topic[topic] = _Open(TraceBatch(topic=topic))
            new_keys = keys
            grown_keys = keys_size(keys)
        current.batch.records.append(record)
        current.parts.append(text)
        current.batch.body_bytes += size
        current.batch.keys.extend(new_keys)
        current.key_set.update(new_keys)
        current.batch.keys_bytes = grown_keys
    for topic in list(open_by_topic):
        close(topic)
    return BatchPlan(batches=batches, oversize=oversize)
