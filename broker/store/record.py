"""Commit-log record codec: one message, one self-checking binary record.

Every record carries its total size and a CRC32 of everything after the CRC field, so
recovery can tell a torn tail (truncate) from a corrupted record in the middle (skip it,
never serve it) without trusting anything but the bytes themselves.  The layout is in
docs/STORAGE.md.
"""

from __future__ import annotations

import struct

try:  # ISA-L's CRC-32 (the same polynomial as zlib's, several times faster); zlib's otherwise
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a declared dependency
    from zlib import crc32
from dataclasses import dataclass, field

from ..speedups import compiled as _C

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194

# total_size, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
# born_ts, store_ts, reconsume_times, prepared_tx_offset
_FIXED = struct.Struct(">IIIiiqqiqqiq")
FIXED_SIZE = _FIXED.size  # 68
_HEAD = struct.Struct(">III")  # total_size, magic, crc
_CRC = struct.Struct(">I")
_B = struct.Struct(">B")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
MIN_BLANK = 8  # a blank filler needs at least total_size + magic

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 32767
MAX_TOPIC_BYTES = 127 * 2  # RocketMQ allows 127 chars; we store UTF-8 with a 16-bit length

# sys_flag bits (RocketMQ's MessageSysFlag values where they exist)
TRANSACTION_PREPARED = 0x1 << 2
TRANSACTION_COMMIT = 0x2 << 2
TRANSACTION_ROLLBACK = 0x3 << 2
TRANSACTION_MASK = 0x3 << 2


class RecordError(ValueError):
    """A record that cannot be encoded or decoded; the message names the field."""


@dataclass(slots=True)
class StoredMessage:
    """A message as the store keeps it; offsets are filled in by the commit log."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    store_timestamp: int = 0
    store_host: str = ""
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    queue_offset: int = -1
    physical_offset: int = -1
    size: int = 0

    @property
    def msg_id(self) -> str:
        return self.properties.get("UNIQ_KEY", "")

    @property
    def tags(self) -> str:
        return self.properties.get("TAGS", "")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get("KEYS", "").split(" ") if k]


def encode_properties(properties: dict[str, str]) -> bytes:
    if not properties:
        return b""
    try:  # str.join in C; every value a str is the common case
        return ("\x02".join(map("\x01".join, properties.items())) + "\x02").encode("utf-8")
    except TypeError:  # a non-str name or value: format it the way the f-string always did
        return "".join(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
                       for name, value in properties.items()).encode("utf-8")


def decode_properties(data: bytes) -> dict[str, str]:
    props: dict[str, str] = {}
    if not data:
        return props
    for item in data.decode("utf-8").split(PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if not sep:
            raise RecordError(f"property item {item[:40]!r} has no name/value separator")
        props[name] = value
    return props


def check_property(name: str, value: str) -> str | None:
    """Why a property cannot be stored, or None when it can."""
    for ch in (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR):
        if ch in name or ch in value:
            return f"property {name!r} contains a reserved control character"
    return None


def encode(msg: StoredMessage) -> bytes:
    """Encode ``msg`` at its ``physical_offset``/``queue_offset``; sets ``msg.size``."""
    head = prepare(msg)
    buf = bytearray(msg.size)
    encode_into(buf, 0, msg, head)
    return bytes(buf)


# (born_host, store_host, topic) -> their encoded, length-prefixed bytes: a broker sees few of each
_PREFIX_CACHE: dict[tuple[str, str, str], bytes] = {}
_PREFIX_CACHE_MAX = 4096


def prefix_cache() -> dict[tuple[str, str, str], bytes]:
    """The cache ``prepare`` reads record prefixes from (the compiled plan of a run looks them up in it too:
    broker/fastpath.c ``plan_run``); a prefix not in it yet sends that run to ``prepare``, which adds it."""
    return _PREFIX_CACHE


def _prefix(born_host: str, store_host: str, topic: str) -> bytes:
    key = (born_host, store_host, topic)
    got = _PREFIX_CACHE.get(key)
    if got is not None:
        return got
    t = topic.encode("utf-8")
    if len(t) > 0xFFFF:
        raise RecordError("field 'topic' is too long")
    born = born_host.encode("utf-8")[:255]
    store = store_host.encode("utf-8")[:255]
    got = b"".join((_B.pack(len(born)), born, _B.pack(len(store)), store, _H.pack(len(t)), t))
    if len(_PREFIX_CACHE) >= _PREFIX_CACHE_MAX:
        _PREFIX_CACHE.clear()
    _PREFIX_CACHE[key] = got
    return got


def prepare(msg: StoredMessage) -> bytes:
    """Validate ``msg`` and return its offset-independent bytes before the body; sets ``msg.size``.

    The record is ``FIXED`` + this + the body; ``encode_into`` lays it out once the offsets
    are known.  Raises RecordError for a message that cannot be stored.
    """
    body_len = len(msg.body)
    try:
        # the cache looked up here first: this runs for every stored message, and a hit is the rule (issue 20)
        prefix = _PREFIX_CACHE.get((msg.born_host, msg.store_host, msg.topic)) or \
            _prefix(msg.born_host, msg.store_host, msg.topic)
        if _C is not None:  # the compiled head (broker/fastpath.c), None when it does not take these properties
            head = _C.record_head(prefix, msg.properties, body_len)
            if head is not None:
                msg.size = FIXED_SIZE + len(head) + body_len
                return head
        props = encode_properties(msg.properties)
        if len(props) > MAX_PROPERTIES_BYTES:
            raise RecordError(f"field 'properties' is {len(props)} bytes, more than {MAX_PROPERTIES_BYTES}")
        head = b"".join((prefix, _H.pack(len(props)), props, _I.pack(len(msg.body))))
    except UnicodeEncodeError as exc:
        raise RecordError(f"a text field is not valid UTF-8: {exc.reason}") from exc
    msg.size = FIXED_SIZE + len(head) + len(msg.body)
    return head


def encode_into(buf: bytearray, pos: int, msg: StoredMessage, head: bytes) -> None:
    """Write the record of ``msg`` (``head`` from ``prepare``) at ``buf[pos:pos + msg.size]``."""
    total = msg.size
    _FIXED.pack_into(buf, pos, total, MESSAGE_MAGIC, 0, msg.queue_id, msg.flag, msg.queue_offset,
                     msg.physical_offset, msg.sys_flag, msg.born_timestamp, msg.store_timestamp,
                     msg.reconsume_times, msg.prepared_tx_offset)
    at = pos + FIXED_SIZE
    end = at + len(head)
    buf[at:end] = head
    buf[end:pos + total] = msg.body
    _CRC.pack_into(buf, pos + 8, crc32(memoryview(buf)[pos + 12:pos + total]))


def encode_blank(size: int) -> bytes:
    """A filler that ends a segment when the next record does not fit in it."""
    if size < MIN_BLANK:
        return b"\x00" * size
    return struct.pack(">II", size, BLANK_MAGIC) + b"\x00" * (size - MIN_BLANK)


def peek_header(data: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """(total_size, magic) of the record at ``pos``; (0, 0) if fewer than 8 bytes remain."""
    if len(data) - pos < MIN_BLANK:
        return 0, 0
    size, magic = struct.unpack_from(">II", data, pos)
    return size, magic


def crc_ok(data: bytes | memoryview, pos: int, size: int) -> bool:
    (crc,) = struct.unpack_from(">I", data, pos + 8)
    return crc32(memoryview(data)[pos + 12 : pos + size]) == crc


def decode(data: bytes | memoryview, pos: int = 0, verify: bool = True) -> StoredMessage:
    """Decode the record at ``pos``; raise RecordError naming what is wrong."""
    if len(data) - pos < FIXED_SIZE:
        raise RecordError("record is shorter than its fixed header")
    (
        total,
        magic,
        _crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        store_ts,
        reconsume,
        prepared,
    ) = _FIXED.unpack_from(data, pos)
    if magic != MESSAGE_MAGIC:
        raise RecordError(f"field 'magic' is {magic:#x}, not a message record")
    if total < FIXED_SIZE or pos + total > len(data):
        raise RecordError(f"field 'total_size' {total} does not fit the data")
    if verify and not crc_ok(data, pos, total):
        raise RecordError("field 'crc' does not match the record's bytes")
    view = memoryview(data)
    cur = pos + FIXED_SIZE
    try:
        n = view[cur]
        born = bytes(view[cur + 1 : cur + 1 + n]).decode("utf-8")
        cur += 1 + n
        n = view[cur]
        store = bytes(view[cur + 1 : cur + 1 + n]).decode("utf-8")
        cur += 1 + n
        (n,) = struct.unpack_from(">H", view, cur)
        topic = bytes(view[cur + 2 : cur + 2 + n]).decode("utf-8")
        cur += 2 + n
        (n,) = struct.unpack_from(">H", view, cur)
        props = decode_properties(bytes(view[cur + 2 : cur + 2 + n]))
        cur += 2 + n
        (n,) = struct.unpack_from(">I", view, cur)
        body = bytes(view[cur + 4 : cur + 4 + n])
        cur += 4 + n
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise RecordError(f"record fields overrun the record: {exc}") from exc
    if cur != pos + total:
        raise RecordError(f"field 'total_size' {total} disagrees with the fields ({cur - pos} bytes)")
    return StoredMessage(
        topic=topic,
        queue_id=queue_id,
        body=body,
        properties=props,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born,
        store_timestamp=store_ts,
        store_host=store,
        reconsume_times=reconsume,
        prepared_tx_offset=prepared,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        size=total,
    )


def decode_run(data: bytes | memoryview, pos: int = 0) -> list[StoredMessage]:
    """The whole records filling ``data`` from ``pos`` on, in order, without checking their CRC: bytes in memory
    that a replica just wrote (a DLedger follower's entry; a read of the log checks the CRC).  RecordError names
    what is wrong with the first record that does not decode."""
    msgs: list[StoredMessage] = []
    n = len(data)
    while pos < n:
        msg = decode(data, pos, verify=False)
        msgs.append(msg)
        pos += msg.size
    return msgs
