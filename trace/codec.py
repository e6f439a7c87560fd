"""RocketMQ's text trace format: encode and decode trace records.

The format is the one written by the Java remoting client's ``TraceDataEncoder`` so that
existing tools (``mqadmin queryMsgTraceById``, rocketmq-dashboard) can read our trace
topic and we can read theirs.  A record is a list of fields separated by ``\\x01`` and
terminated by ``\\x02``; field 0 names the record type.  docs/TRACE.md has the field
tables.

The decoder follows the Java decoders' compatibility rules rather than only our own
encoder, because trace topics outlive client versions:

* fields are split the way Java's ``String.split`` does it: trailing empty fields are
  removed *before* the field count is looked at (a CLOUD SubAfter ends with a stray
  ``\\x01``; a SubBefore with empty keys is one field short);
* older and newer field counts are accepted (Pub 12/13/14/15+, SubAfter 6/7/8/9+,
  SubBefore 8 or 9 with a clientHost, EndTransaction 13 or the 14-field build that
  carried a clientHost at index 10);
* the literal text ``null`` in tags or keys (Java's ``StringBuilder.append(null)``) means
  empty.

Anything that is not a trace body at all raises :class:`TraceDecodeError` naming the
record type and the field, so a caller can tell garbage from "no records".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, fields
from typing import TypeAlias

PUB = "Pub"
SUB_BEFORE = "SubBefore"
SUB_AFTER = "SubAfter"
END_TRANSACTION = "EndTransaction"
RECALL = "Recall"

RECORD_TYPES = (PUB, SUB_BEFORE, SUB_AFTER, END_TRANSACTION, RECALL)

CONTENT_SEPARATOR = "\x01"
"""Separates the fields of one record (Java ``TraceConstants.CONTENT_SPLITOR``)."""
RECORD_SEPARATOR = "\x02"
"""Ends every record (Java ``TraceConstants.FIELD_SPLITOR``)."""

# Message type ordinals (Java org.apache.rocketmq.common.message.MessageType).
MSG_TYPE_NORMAL = 0
MSG_TYPE_TRANS_HALF = 1
MSG_TYPE_TRANS_COMMIT = 2
MSG_TYPE_DELAY = 3
MSG_TYPE_ORDER = 4
MSG_TYPE_NAMES = {
    MSG_TYPE_NORMAL: "Normal_Msg",
    MSG_TYPE_TRANS_HALF: "Trans_Msg_Half",
    MSG_TYPE_TRANS_COMMIT: "Trans_msg_Commit",
    MSG_TYPE_DELAY: "Delay_Msg",
    MSG_TYPE_ORDER: "Order_Msg",
}

# LocalTransactionState names, as written in EndTransaction records ("UNKNOW" is RocketMQ's spelling).
TX_COMMIT = "COMMIT_MESSAGE"
TX_ROLLBACK = "ROLLBACK_MESSAGE"
TX_UNKNOWN = "UNKNOW"

# ConsumeReturnType ordinals, written as SubAfter context codes.
CONSUME_SUCCESS = 0
CONSUME_TIME_OUT = 1
CONSUME_EXCEPTION = 2
CONSUME_RETURN_NULL = 3
CONSUME_FAILED = 4

DEFAULT_REGION = "DefaultRegion"

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_INTEGER_RE = re.compile(r"[+-]?[0-9]+")


class TraceDecodeError(ValueError):
    """A trace body that is not in RocketMQ's trace format; the message names record type and field."""


class TraceEncodeError(ValueError):
    """A record value the text format cannot carry (a separator character, a bad type, an out-of-range number)."""


@dataclass(frozen=True)
class PubRecord:
    """A send, as the producer saw it (Java ``TraceType.Pub``).

    ``client_host`` is not part of the current Java format; the Go client and the Java
    builds of 2020-09..2021-05 append it as a 15th field.  It is written only when set.
    """

    timestamp: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    store_host: str
    body_length: int
    cost_time: int
    msg_type: int
    offset_msg_id: str
    success: bool
    client_host: str = ""


@dataclass(frozen=True)
class SubBeforeRecord:
    """The start of one delivery to a consumer (Java ``TraceType.SubBefore``)."""

    timestamp: int
    region_id: str
    group: str
    request_id: str
    msg_id: str
    retry_times: int
    keys: str


@dataclass(frozen=True)
class SubAfterRecord:
    """The end of one delivery; joined to its SubBefore by ``request_id``.

    ``timestamp`` and ``group`` are 0 and "" when the writer left them out (CLOUD access
    channel, or Java builds between 2021-06 and 4.9.2).
    """

    request_id: str
    msg_id: str
    cost_time: int
    success: bool
    keys: str
    context_code: int
    timestamp: int = 0
    group: str = ""


@dataclass(frozen=True)
class EndTransactionRecord:
    """A transactional producer's commit, rollback or unknown answer (Java ``TraceType.EndTransaction``)."""

    timestamp: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    store_host: str
    msg_type: int
    transaction_id: str
    transaction_state: str
    from_check: bool


@dataclass(frozen=True)
class RecallRecord:
    """A recall of a delay message (Java ``TraceType.Recall``, RocketMQ 5.3.2+)."""

    timestamp: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    success: bool


TraceRecord: TypeAlias = PubRecord | SubBeforeRecord | SubAfterRecord | EndTransactionRecord | RecallRecord

RECORD_CLASSES: dict[str, type] = {
    PUB: PubRecord,
    SUB_BEFORE: SubBeforeRecord,
    SUB_AFTER: SubAfterRecord,
    END_TRANSACTION: EndTransactionRecord,
    RECALL: RecallRecord,
}
_TYPE_OF_CLASS = {cls: name for name, cls in RECORD_CLASSES.items()}


def record_type(record: TraceRecord) -> str:
    """The type name written in field 0 (``Pub``, ``SubBefore``, ...)."""
    try:
        return _TYPE_OF_CLASS[type(record)]
    except KeyError:
        raise TraceEncodeError(f"not a trace record: {type(record).__name__}") from None


# ---------------------------------------------------------------------------------------
# Encoding


def _check_text(kind: str, name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TraceEncodeError(f"{kind} field '{name}' must be a str, got {type(value).__name__}")
    if CONTENT_SEPARATOR in value or RECORD_SEPARATOR in value:
        raise TraceEncodeError(
            f"{kind} field '{name}' contains the separator character \\x01 or \\x02, which the trace "
            "format cannot carry; remove control characters from the value"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise TraceEncodeError(
            f"{kind} field '{name}' contains a lone surrogate and cannot be sent as UTF-8"
        ) from None
    return value


def _check_int(kind: str, name: str, value: object, bounds: tuple[int, int] = _INT32) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TraceEncodeError(f"{kind} field '{name}' must be an int, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        width = "64" if bounds == _INT64 else "32"
        raise TraceEncodeError(f"{kind} field '{name}' = {value} does not fit a signed {width}-bit integer")
    return str(value)


def _check_bool(kind: str, name: str, value: object) -> str:
    if not isinstance(value, bool):
        raise TraceEncodeError(f"{kind} field '{name}' must be a bool, got {type(value).__name__}")
    return "true" if value else "false"


def _check_msg_type(kind: str, value: object) -> str:
    text = _check_int(kind, "msg_type", value)
    if value not in MSG_TYPE_NAMES:
        raise TraceEncodeError(f"{kind} field 'msg_type' = {value} is not a message type ordinal (0..4)")
    return text


def _encode_fields(record: TraceRecord) -> list[str]:
    kind = record_type(record)
    t, i, b = _check_text, _check_int, _check_bool
    if isinstance(record, PubRecord):
        out = [
            PUB,
            i(kind, "timestamp", record.timestamp, _INT64),
            t(kind, "region_id", record.region_id),
            t(kind, "group", record.group),
            t(kind, "topic", record.topic),
            t(kind, "msg_id", record.msg_id),
            t(kind, "tags", record.tags),
            t(kind, "keys", record.keys),
            t(kind, "store_host", record.store_host),
            i(kind, "body_length", record.body_length),
            i(kind, "cost_time", record.cost_time),
            _check_msg_type(kind, record.msg_type),
            t(kind, "offset_msg_id", record.offset_msg_id),
            b(kind, "success", record.success),
        ]
        if t(kind, "client_host", record.client_host):
            out.append(record.client_host)
        return out
    if isinstance(record, SubBeforeRecord):
        return [
            SUB_BEFORE,
            i(kind, "timestamp", record.timestamp, _INT64),
            t(kind, "region_id", record.region_id),
            t(kind, "group", record.group),
            t(kind, "request_id", record.request_id),
            t(kind, "msg_id", record.msg_id),
            i(kind, "retry_times", record.retry_times),
            t(kind, "keys", record.keys),
        ]
    if isinstance(record, SubAfterRecord):
        return [
            SUB_AFTER,
            t(kind, "request_id", record.request_id),
            t(kind, "msg_id", record.msg_id),
            i(kind, "cost_time", record.cost_time),
            b(kind, "success", record.success),
            t(kind, "keys", record.keys),
            i(kind, "context_code", record.context_code),
            i(kind, "timestamp", record.timestamp, _INT64),
            t(kind, "group", record.group),
        ]
    if isinstance(record, EndTransactionRecord):
        return [
            END_TRANSACTION,
            i(kind, "timestamp", record.timestamp, _INT64),
            t(kind, "region_id", record.region_id),
            t(kind, "group", record.group),
            t(kind, "topic", record.topic),
            t(kind, "msg_id", record.msg_id),
            t(kind, "tags", record.tags),
            t(kind, "keys", record.keys),
            t(kind, "store_host", record.store_host),
            _check_msg_type(kind, record.msg_type),
            t(kind, "transaction_id", record.transaction_id),
            t(kind, "transaction_state", record.transaction_state),
            b(kind, "from_check", record.from_check),
        ]
    assert isinstance(record, RecallRecord)
    return [
        RECALL,
        i(kind, "timestamp", record.timestamp, _INT64),
        t(kind, "region_id", record.region_id),
        t(kind, "group", record.group),
        t(kind, "topic", record.topic),
        t(kind, "msg_id", record.msg_id),
        b(kind, "success", record.success),
    ]


def encode_record(record: TraceRecord) -> str:
    """One record in the text format, ending with ``\\x02``.

    Raises :class:`TraceEncodeError` (a ``ValueError``) for values the format cannot
    carry, before anything is written, so a bad record never corrupts a trace message.
    """
    return CONTENT_SEPARATOR.join(_encode_fields(record)) + RECORD_SEPARATOR


def encode(records: Iterable[TraceRecord]) -> str:
    """A trace message body: the records one after the other."""
    return "".join(encode_record(r) for r in records)


# ---------------------------------------------------------------------------------------
# Decoding


class _Fields:
    """The fields of one record, with typed accessors that name the field in errors."""

    def __init__(self, kind: str, values: list[str], index: int) -> None:
        self.kind = kind
        self.values = values
        self.index = index

    def _fail(self, pos: int, name: str, problem: str) -> TraceDecodeError:
        return TraceDecodeError(f"{self.kind} record #{self.index}: field {pos} ({name}) {problem}")

    def text(self, pos: int, name: str) -> str:
        """A string field; absent trailing fields (Java split removed them) are empty."""
        return self.values[pos] if pos < len(self.values) else ""

    def nullable_text(self, pos: int, name: str) -> str:
        """Tags and keys: Java writes a null value as the literal text ``null``."""
        value = self.text(pos, name)
        return "" if value == "null" else value

    def integer(self, pos: int, name: str, bounds: tuple[int, int] = _INT32) -> int:
        if pos >= len(self.values):
            raise self._fail(pos, name, "is missing")
        value = self.values[pos]
        if not _INTEGER_RE.fullmatch(value):
            raise self._fail(pos, name, f"must be an integer, got {value[:40]!r}")
        number = int(value)
        if not bounds[0] <= number <= bounds[1]:
            raise self._fail(pos, name, f"= {value[:40]} is out of range")
        return number

    def boolean(self, pos: int, name: str) -> bool:
        """Java ``Boolean.parseBoolean`` semantics for true/false/empty/null; anything else is garbage."""
        if pos >= len(self.values):
            raise self._fail(pos, name, "is missing")
        value = self.values[pos].lower()
        if value == "true":
            return True
        if value in ("false", "", "null"):
            return False
        raise self._fail(pos, name, f"must be true or false, got {self.values[pos][:40]!r}")

    def msg_type(self, pos: int) -> int:
        number = self.integer(pos, "msg_type")
        if number not in MSG_TYPE_NAMES:
            raise self._fail(pos, "msg_type", f"= {number} is not a message type ordinal (0..4)")
        return number

    def require(self, count: int, *names: str) -> None:
        if len(self.values) < count:
            missing = ", ".join(names[len(self.values) :]) if names else ""
            raise TraceDecodeError(
                f"{self.kind} record #{self.index}: has {len(self.values)} fields, needs at least {count}"
                + (f" (missing {missing})" if missing else "")
            )


_PUB_NAMES = ("type", "timestamp", "region_id", "group", "topic", "msg_id", "tags", "keys",
              "store_host", "body_length", "cost_time", "msg_type")
_SUB_BEFORE_NAMES = ("type", "timestamp", "region_id", "group", "request_id", "msg_id", "retry_times")
_SUB_AFTER_NAMES = ("type", "request_id", "msg_id", "cost_time", "success")
_END_TX_NAMES = ("type", "timestamp", "region_id", "group", "topic", "msg_id", "tags", "keys",
                 "store_host", "msg_type", "transaction_id", "transaction_state", "from_check")
_RECALL_NAMES = ("type", "timestamp", "region_id", "group", "topic", "msg_id", "success")


def _decode_pub(f: _Fields) -> PubRecord:
    # 12 fields: oldest format, no success (Java default true); 13: + success;
    # 14: + offsetMsgId before success; 15+: + clientHost (Go client, Java 2020-09..2021-05).
    f.require(12, *_PUB_NAMES)
    n = len(f.values)
    offset_msg_id, success, client_host = "", True, ""
    if n == 13:
        success = f.boolean(12, "success")
    elif n >= 14:
        offset_msg_id = f.text(12, "offset_msg_id")
        success = f.boolean(13, "success")
        client_host = f.text(14, "client_host")
    return PubRecord(
        timestamp=f.integer(1, "timestamp", _INT64),
        region_id=f.text(2, "region_id"),
        group=f.text(3, "group"),
        topic=f.text(4, "topic"),
        msg_id=f.text(5, "msg_id"),
        tags=f.nullable_text(6, "tags"),
        keys=f.nullable_text(7, "keys"),
        store_host=f.text(8, "store_host"),
        body_length=f.integer(9, "body_length"),
        cost_time=f.integer(10, "cost_time"),
        msg_type=f.msg_type(11),
        offset_msg_id=offset_msg_id,
        success=success,
        client_host=client_host,
    )


def _decode_sub_before(f: _Fields) -> SubBeforeRecord:
    # 8 fields; 7 when keys is empty (Java split); a 9th clientHost is ignored.
    f.require(7, *_SUB_BEFORE_NAMES)
    return SubBeforeRecord(
        timestamp=f.integer(1, "timestamp", _INT64),
        region_id=f.text(2, "region_id"),
        group=f.text(3, "group"),
        request_id=f.text(4, "request_id"),
        msg_id=f.text(5, "msg_id"),
        retry_times=f.integer(6, "retry_times"),
        keys=f.nullable_text(7, "keys"),
    )


def _decode_sub_after(f: _Fields) -> SubAfterRecord:
    # 6 fields (5 with empty keys): no contextCode; 7: + contextCode (also the CLOUD variant,
    # whose trailing \x01 Java split removes); 8: + timestamp with an empty group; 9+: + group.
    f.require(5, *_SUB_AFTER_NAMES)
    n = len(f.values)
    return SubAfterRecord(
        request_id=f.text(1, "request_id"),
        msg_id=f.text(2, "msg_id"),
        cost_time=f.integer(3, "cost_time"),
        success=f.boolean(4, "success"),
        keys=f.nullable_text(5, "keys"),
        context_code=f.integer(6, "context_code") if n >= 7 else 0,
        timestamp=f.integer(7, "timestamp", _INT64) if n >= 8 else 0,
        group=f.text(8, "group"),
    )


def _decode_end_transaction(f: _Fields) -> EndTransactionRecord:
    # 13 fields; the 14-field build of 2021-04..05 (#2834) carried clientHost at index 10.
    f.require(13, *_END_TX_NAMES)
    shift = 1 if len(f.values) >= 14 else 0
    return EndTransactionRecord(
        timestamp=f.integer(1, "timestamp", _INT64),
        region_id=f.text(2, "region_id"),
        group=f.text(3, "group"),
        topic=f.text(4, "topic"),
        msg_id=f.text(5, "msg_id"),
        tags=f.nullable_text(6, "tags"),
        keys=f.nullable_text(7, "keys"),
        store_host=f.text(8, "store_host"),
        msg_type=f.msg_type(9),
        transaction_id=f.text(10 + shift, "transaction_id"),
        transaction_state=f.text(11 + shift, "transaction_state"),
        from_check=f.boolean(12 + shift, "from_check"),
    )


def _decode_recall(f: _Fields) -> RecallRecord:
    f.require(7, *_RECALL_NAMES)
    return RecallRecord(
        timestamp=f.integer(1, "timestamp", _INT64),
        region_id=f.text(2, "region_id"),
        group=f.text(3, "group"),
        topic=f.text(4, "topic"),
        msg_id=f.text(5, "msg_id"),
        success=f.boolean(6, "success"),
    )


_DECODERS: dict[str, Callable[[_Fields], TraceRecord]] = {
    PUB: _decode_pub,
    SUB_BEFORE: _decode_sub_before,
    SUB_AFTER: _decode_sub_after,
    END_TRANSACTION: _decode_end_transaction,
    RECALL: _decode_recall,
}


def _java_split(text: str, separator: str) -> list[str]:
    """``str.split`` with Java's removal of trailing empty strings."""
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def decode(text: str | bytes, *, skip_unknown: bool = False) -> list[TraceRecord]:
    """All records of a trace message body, in order.

    Bytes are read as UTF-8.  Empty records (two ``\\x02`` in a row) are skipped, as the
    Java decoder does; a last record without its ``\\x02`` is accepted.  A record of an
    unknown type raises :class:`TraceDecodeError` unless ``skip_unknown`` is set (Java
    ignores them silently; we default to strict so that a body which is not trace data
    is reported as such).
    """
    if isinstance(text, bytes | bytearray | memoryview):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceDecodeError(f"trace body is not UTF-8: {exc}") from None
    if not isinstance(text, str):
        raise TraceDecodeError(f"trace body must be str or bytes, got {type(text).__name__}")
    records: list[TraceRecord] = []
    for index, chunk in enumerate(text.split(RECORD_SEPARATOR)):
        values = _java_split(chunk, CONTENT_SEPARATOR)
        if not values:
            continue
        kind = values[0]
        decoder = _DECODERS.get(kind)
        if decoder is None:
            if skip_unknown:
                continue
            raise TraceDecodeError(
                f"record #{index}: field 0 (type) is {kind[:40]!r}, not one of {', '.join(RECORD_TYPES)}"
            )
        records.append(decoder(_Fields(kind, values, index)))
    return records


def record_to_dict(record: TraceRecord) -> dict[str, object]:
    """A JSON-ready dict of the record's fields plus ``type``; the inverse of :func:`record_from_dict`."""
    data: dict[str, object] = {"type": record_type(record)}
    for f in fields(record):
        data[f.name] = getattr(record, f.name)
    return data


def record_from_dict(data: dict[str, object]) -> TraceRecord:
    """Rebuild a record from :func:`record_to_dict` output; ``ValueError`` names a missing or mistyped field."""
    kind = data.get("type")
    cls = RECORD_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"trace record dict has unknown type {kind!r}")
    kwargs: dict[str, object] = {}
    for f in fields(cls):
        if f.name not in data:
            if f.default is not MISSING:
                continue
            raise ValueError(f"{kind} record dict is missing field '{f.name}'")
        value = data[f.name]
        expected = {"int": int, "str": str, "bool": bool}[str(f.type)]
        if expected is int and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"{kind} record field '{f.name}' must be an int, got {value!r}")
        if expected is not int and not isinstance(value, expected):
            raise ValueError(f"{kind} record field '{f.name}' must be a {expected.__name__}, got {value!r}")
        kwargs[f.name] = value
    return cls(**kwargs)
