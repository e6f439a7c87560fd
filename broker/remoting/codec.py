"""RemotingCommand frames and RocketMQ's wire encodings, with no I/O.

A frame is ``length(4) | serializeType<<24 | headerLen (4) | header | body`` where the
header is JSON (type 0) or RocketMQ's binary layout (type 1); all integers big-endian.
Decoding never trusts a length: every problem raises ``FrameError`` whose text names the
field, so the server can answer (or close) instead of crashing.  The stored-message
encoding (pull, query and view bodies) and the MessageBatch body of SEND_BATCH_MESSAGE
are here too, because both directions must agree byte for byte with Apache's clients.
"""

from __future__ import annotations

import builtins
import json
import json.encoder
import json.scanner
import socket
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..speedups import compiled as _C

JSON, ROCKETMQ = 0, 1
SERIALIZE_NAMES = {JSON: "JSON", ROCKETMQ: "ROCKETMQ"}
FLAG_RESPONSE = 1
FLAG_ONEWAY = 2
DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # Netty's NettyDecoder limit, counting the 4-byte length prefix
SERVER_VERSION = 479  # MQVersion V5_3_3: Java consumers refuse SQL92 pulls from brokers below 232

LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS",
             "RUST", "NODE_JS")
LANGUAGE_CODES = {name: i for i, name in enumerate(LANGUAGES)}

_I32 = struct.Struct(">i")
_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag (21 bytes with remarkLen + extLen)
_STR_ONLY = frozenset((str,))
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1

# JSON headers are encoded and parsed for every request and answer (issue 20's profile of the remoting path):
# ``json.dumps`` with non-default arguments builds a JSONEncoder per call and ``json.loads`` runs two regular
# expressions and three Python calls around the C scanner, so both are built once here; the results are the
# same as json.dumps(obj, separators=(",", ":"), ensure_ascii=False) and json.loads(text).
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed: the C half of JSONEncoder
_ENCODE_HEADER = (_C_ENCODER(None, json.JSONEncoder().default, json.encoder.encode_basestring, None, ":", ",",
                             False, False, True) if _C_ENCODER is not None else None)
_SCAN: Any = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed: a context


def _dumps(obj: dict[str, Any]) -> str:
    """``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)`` without a JSONEncoder per call."""
    if _ENCODE_HEADER is None:  # pragma: no cover - CPython always has the C encoder
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return "".join(_ENCODE_HEADER(obj, 0))


def _loads(text: str) -> Any:
    """``json.loads(text)`` through the C scanner directly; the same values and the same errors."""
    if not text or text[0] != "{" or text[-1] != "}":  # leading or trailing whitespace, or not an object
        return json.loads(text)
    try:
        obj, end = _SCAN(text, 0)
    except StopIteration as exc:
        raise json.JSONDecodeError("Expecting value", text, exc.value) from None
    if end != len(text):
        return json.loads(text)  # raises "Extra data" as json.loads does
    return obj


class RequestCode:
    """Request codes served (or recognised) here; RocketMQ's ``RequestCode`` names and values."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    GET_CONSUME_STATS = 208
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    SEND_MESSAGE_V2 = 310
    GET_TOPIC_CONFIG = 351
    SEND_BATCH_MESSAGE = 320
    LITE_PULL_MESSAGE = 361
    QUERY_ASSIGNMENT = 400
    POP_MESSAGE = 200050  # JSON headers only: the binary header's code is a short
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151


class ResponseCode:
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    INVALID_PARAMETER = 29


CODE_NAMES = {v: k for k, v in vars(RequestCode).items() if not k.startswith("_")}
RESPONSE_NAMES = {v: k for k, v in vars(ResponseCode).items() if not k.startswith("_")}


class FrameError(ValueError):
    """A frame or header that cannot be decoded; the text names the problem.

    ``opaque`` is the request id when it could be read, so an answer can still be matched.
    """

    def __init__(self, message: str, opaque: int | None = None) -> None:
        super().__init__(message)
        self.opaque = opaque


@dataclass(slots=True)  # one per request and per answer: slots make it a third cheaper to build (issue 20)
class RemotingCommand:
    code: int
    ext_fields: dict[str, str] | None = None
    body: bytes = b""
    remark: str | None = None
    opaque: int = 0
    flag: int = 0
    language: str = "JAVA"
    version: int = SERVER_VERSION
    serialize_type: int = JSON
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # unknown JSON keys, kept for symmetry
    # a send request's header fields and properties as fastpath.decode_frames read them with the frame (None: not
    # read; _send_fields and _prepare_send then read ext_fields); not part of the command's value
    send: tuple[Any, dict[str, str] | None] | None = field(default=None, repr=False, compare=False)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def fields(self) -> dict[str, str]:
        return self.ext_fields if self.ext_fields is not None else {}

    def response(self, code: int = ResponseCode.SUCCESS, remark: str | None = None,
                 ext_fields: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
        """The answer to this request: same opaque, RESPONSE flag, this server's language and version."""
        return RemotingCommand(code=code, ext_fields=ext_fields, body=body, remark=remark, opaque=self.opaque,
                               flag=FLAG_RESPONSE, language="JAVA", version=SERVER_VERSION,
                               serialize_type=self.serialize_type)


# ------------------------------------------------------------------ encoding
def _json_header(cmd: RemotingCommand) -> bytes:
    """fastjson's form: keys in alphabetical order, nulls left out, every extFields value a string."""
    obj: dict[str, Any] = {"code": cmd.code}
    ext = cmd.ext_fields
    if ext is not None:
        # the common case (every key and value already a string) is kept as is: no copy per answer
        obj["extFields"] = ext if set(map(type, ext.values())) <= _STR_ONLY and set(map(type, ext)) <= _STR_ONLY \
            else {str(k): str(v) for k, v in ext.items() if v is not None}
    obj["flag"] = cmd.flag
    obj["language"] = cmd.language
    obj["opaque"] = cmd.opaque
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = cmd.version
    return _dumps(obj).encode("utf-8")


def _binary_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    ext = bytearray()
    for k, v in (cmd.ext_fields or {}).items():
        if k is None or v is None:
            continue
        kb, vb = str(k).encode("utf-8"), str(v).encode("utf-8")
        ext += struct.pack(">h", len(kb)) + kb + _I32.pack(len(vb)) + vb
    lang = LANGUAGE_CODES.get(cmd.language, LANGUAGE_CODES["OTHER"])
    return (_FIXED.pack(_short(cmd.code, "code"), lang, _short(cmd.version, "version"), cmd.opaque, cmd.flag)
            + _I32.pack(len(remark)) + remark + _I32.pack(len(ext)) + bytes(ext))


def _short(value: int, what: str) -> int:
    if not -32768 <= value <= 32767:
        raise FrameError(f"{what} {value} does not fit the ROCKETMQ binary header's int16")
    return value


def encode(cmd: RemotingCommand) -> bytes:
    """A command -> its frame, length prefix included (the compiled encoder for a JSON header, when it takes it)."""
    if _C is not None and cmd.serialize_type == JSON:
        got = _C.encode_json_frame(cmd.code, cmd.ext_fields, cmd.remark, cmd.opaque, cmd.flag, cmd.language,
                                   cmd.version, cmd.body)
        if got is not None:
            return got
    return encode_python(cmd)


def encode_response(req: RemotingCommand, code: int, ext_fields: dict[str, str] | None) -> bytes | None:
    """``encode(req.response(code, None, ext_fields))`` without building the answer's command (the send path's
    answers, one per single send: issue 20), or None when only that command can be encoded (a ROCKETMQ binary
    header, no compiled encoder, or a field the compiled encoder leaves to ``encode``)."""
    if _C is None or req.serialize_type != JSON:
        return None
    got: bytes | None = _C.encode_json_frame(code, ext_fields, None, req.opaque, FLAG_RESPONSE, "JAVA",
                                             SERVER_VERSION, b"")
    return got


def encode_python(cmd: RemotingCommand) -> bytes:
    """``encode`` in Python: the reference the compiled encoder is tested against."""
    header = _binary_header(cmd) if cmd.serialize_type == ROCKETMQ else _json_header(cmd)
    return (_I32.pack(4 + len(header) + len(cmd.body)) + _I32.pack((cmd.serialize_type << 24) | len(header))
            + header + cmd.body)


# ------------------------------------------------------------------ decoding
def check_length(length: int, max_frame: int = DEFAULT_MAX_FRAME) -> None:
    """Validate a frame's 4-byte length prefix before reading what it announces."""
    if length < 4:
        raise FrameError(f"frame length {length} is shorter than the 4-byte header-length field")
    if length + 4 > max_frame:
        raise FrameError(f"frame length {length} exceeds the maximum frame size {max_frame}")


def decode(frame: bytes | memoryview) -> RemotingCommand:
    """A frame without its 4-byte length prefix -> RemotingCommand; FrameError names what is wrong.

    ``frame`` may be a memoryview of the connection's read buffer: the header is read from it in
    place and the body copied once.  A JSON header in the common form is read by the compiled decoder
    (broker/fastpath.c); every other frame, a malformed one included, by ``decode_python``."""
    if _C is not None:
        got = _C.decode_json_frame(frame)
        if got is not None:
            return RemotingCommand(*got)
    return decode_python(frame)


def decode_python(frame: bytes | memoryview) -> RemotingCommand:
    """``decode`` in Python: the reference the compiled decoder is tested against, and its fallback."""
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes has no header-length field")
    (mark,) = _I32.unpack_from(frame, 0)
    stype = (mark >> 24) & 0xFF
    header_len = mark & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise FrameError(f"header length {header_len} exceeds the frame's {len(frame) - 4} remaining bytes")
    header = bytes(frame[4:4 + header_len])
    body = bytes(frame[4 + header_len:])
    if stype == JSON:
        cmd = _decode_json(header)
    elif stype == ROCKETMQ:
        cmd = _decode_binary(header)
    else:
        raise FrameError(f"unknown serialize type {stype} (0 = JSON, 1 = ROCKETMQ)")
    cmd.body = body
    cmd.serialize_type = stype
    return cmd


def _int_field(obj: dict[str, Any], key: str, default: int | None, opaque: int | None) -> int:
    value = obj.get(key, default)
    if type(value) is int and _INT32_MIN <= value <= _INT32_MAX:  # the common case, checked first
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        if value is None:
            raise FrameError(f"JSON header has no {key}", opaque)
        raise FrameError(f"JSON header field {key} is not an integer: {value!r}", opaque)
    if not -(1 << 31) <= value < (1 << 31):
        raise FrameError(f"JSON header field {key} {value} does not fit an int32", opaque)
    return value


def _decode_json(header: bytes) -> RemotingCommand:
    try:
        obj = _loads(header.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FrameError(f"header is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"JSON header is a {type(obj).__name__}, not an object")
    opaque_raw = obj.get("opaque")
    opaque = opaque_raw if isinstance(opaque_raw, int) and not isinstance(opaque_raw, bool) else None
    code = _int_field(obj, "code", None, opaque)
    ext_raw = obj.get("extFields")
    ext: dict[str, str] | None = None
    if ext_raw is not None:
        if not isinstance(ext_raw, dict):
            raise FrameError("JSON header field extFields is not an object", opaque)
        if set(map(type, ext_raw.values())) <= _STR_ONLY:
            ext = ext_raw  # what every client sends: JSON object keys are strings already
        else:
            ext = {}
            for k, v in ext_raw.items():
                if v is None:
                    continue
                if isinstance(v, dict | list):
                    raise FrameError(f"extFields value of {k} is not a string", opaque)
                ext[str(k)] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    lang = obj.get("language", "JAVA")
    if isinstance(lang, int) and not isinstance(lang, bool):
        lang = LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER"
    elif not isinstance(lang, str):
        lang = "OTHER"
    remark = obj.get("remark")
    if remark is not None and not isinstance(remark, str):
        remark = str(remark)
    return RemotingCommand(code=code, ext_fields=ext, remark=remark, opaque=_int_field(obj, "opaque", 0, opaque),
                           flag=_int_field(obj, "flag", 0, opaque), language=lang,
                           version=_int_field(obj, "version", 0, opaque),
                           extra={} if _KNOWN_JSON_KEYS.issuperset(obj) else
                           {k: v for k, v in obj.items() if k not in _KNOWN_JSON_KEYS})


_KNOWN_JSON_KEYS = frozenset({"code", "extFields", "flag", "language", "opaque", "remark", "version",
                              "serializeTypeCurrentRPC"})


def _decode_binary(header: bytes) -> RemotingCommand:
    n = len(header)
    if n < 21:
        raise FrameError(f"ROCKETMQ header of {n} bytes is shorter than its 21-byte fixed part")
    code, lang, version, opaque, flag = _FIXED.unpack_from(header, 0)
    pos = _FIXED.size
    (remark_len,) = _I32.unpack_from(header, pos)
    pos += 4
    if remark_len < 0 or remark_len > n - pos - 4:
        raise FrameError(f"remark length {remark_len} exceeds the header's {n - pos - 4} remaining bytes", opaque)
    remark = _utf8(header[pos:pos + remark_len], "remark", opaque) if remark_len else None
    pos += remark_len
    (ext_len,) = _I32.unpack_from(header, pos)
    pos += 4
    if ext_len < 0 or ext_len > n - pos:
        raise FrameError(f"extFields length {ext_len} exceeds the header's {n - pos} remaining bytes", opaque)
    end = pos + ext_len
    ext: dict[str, str] = {}
    while pos < end:
        if end - pos < 2:
            raise FrameError("extFields entry is cut inside its key length", opaque)
        (klen,) = struct.unpack_from(">h", header, pos)
        pos += 2
        if klen < 0 or klen > end - pos - 4:
            raise FrameError(f"extFields key length {klen} runs past the map", opaque)
        key = _utf8(header[pos:pos + klen], "extFields key", opaque)
        pos += klen
        (vlen,) = _I32.unpack_from(header, pos)
        pos += 4
        if vlen < 0 or vlen > end - pos:
            raise FrameError(f"extFields value length {vlen} of {key!r} runs past the map", opaque)
        value = _utf8(header[pos:pos + vlen], f"extFields value of {key!r}", opaque)
        pos += vlen
        if key and value:  # Java's readStr: an empty string decodes to null, and nulls are dropped
            ext[key] = value
    language = LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER"
    return RemotingCommand(code=code, ext_fields=ext if ext_len else None, remark=remark, opaque=opaque, flag=flag,
                           language=language, version=version, serialize_type=ROCKETMQ)


def _utf8(raw: bytes, what: str, opaque: int | None) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError(f"{what} is not UTF-8", opaque) from None


# ------------------------------------------------------------ header fields
class HeaderError(ValueError):
    """A request header field that is missing or malformed; answered with ``code`` and the text as remark."""

    def __init__(self, message: str, code: int = ResponseCode.SYSTEM_ERROR) -> None:
        super().__init__(message)
        self.code = code


class Header:
    """Typed access to a request's extFields; missing required fields raise HeaderError naming the field."""

    def __init__(self, cmd: RemotingCommand) -> None:
        self.ext = cmd.fields
        self.code_name = CODE_NAMES.get(cmd.code, str(cmd.code))

    def str(self, *names: str, default: str | None = None) -> str:
        for name in names:
            value = self.ext.get(name)
            if value is not None:
                return value
        if default is None:
            raise HeaderError(f"the custom field <{names[0]}> is null: {self.code_name} needs it")
        return default

    def int(self, *names: builtins.str, default: int | None = None) -> int:  # str: the method above
        raw = self.str(*names, default="" if default is not None else None)
        if raw == "" and default is not None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise HeaderError(f"the custom field <{names[0]}> is not a number: {raw[:64]!r}") from None

    def bool(self, *names: builtins.str, default: bool = False) -> bool:
        raw = self.str(*names, default="")
        return default if raw == "" else raw.lower() == "true"


# --------------------------------------------------------------- properties
def properties_to_string(props: dict[str, str]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items() if k and v)


def string_to_properties(text: str | None) -> dict[str, str]:
    """RocketMQ's ``string2messageProperties``: fragments without a name, a separator or a value are dropped."""
    if _C is not None and text:
        got = _C.parse_properties(text)
        if got is not None:
            return got
    return string_to_properties_python(text)


def string_to_properties_python(text: str | None) -> dict[str, str]:
    """``string_to_properties`` in Python (the reference of the compiled parser)."""
    out: dict[str, str] = {}
    if not text:
        return out
    for part in text.split("\x02"):
        name, sep, value = part.partition("\x01")
        if sep and name and value:
            out[name] = value
    return out


# ---------------------------------------------------------- message batches
@dataclass
class BatchEntry:
    body: bytes
    flag: int
    properties: dict[str, str]


def decode_batch(body: bytes) -> list[BatchEntry]:
    """SEND_BATCH_MESSAGE's body: TOTALSIZE MAGIC BODYCRC FLAG BODYLEN BODY PROPLEN(int16) PROPERTIES, repeated."""
    out: list[BatchEntry] = []
    pos, n = 0, len(body)
    while pos < n:
        if n - pos < 20:
            raise FrameError(f"batch record {len(out)} is cut inside its 20-byte fixed part")
        total, _magic, _crc, flag, body_len = struct.unpack_from(">iiiii", body, pos)
        if total < 22 or total > n - pos:
            raise FrameError(f"batch record {len(out)} says {total} bytes; {n - pos} remain")
        if body_len < 0 or 20 + body_len + 2 > total:
            raise FrameError(f"batch record {len(out)} body length {body_len} runs past its record")
        b = body[pos + 20:pos + 20 + body_len]
        (prop_len,) = struct.unpack_from(">h", body, pos + 20 + body_len)
        if prop_len < 0 or 20 + body_len + 2 + prop_len > total:
            raise FrameError(f"batch record {len(out)} properties length {prop_len} runs past its record")
        raw_props = body[pos + 22 + body_len:pos + 22 + body_len + prop_len]
        props = string_to_properties(_utf8(raw_props, f"batch record {len(out)} properties", None))
        out.append(BatchEntry(bytes(b), flag, props))
        pos += total
    return out


def batch_entries(body: bytes) -> list[tuple[bytes, int, dict[str, str]]]:
    """``decode_batch`` as (body, flag, properties) tuples, what the send path stores (compiled when it can)."""
    if _C is not None:
        got = _C.decode_batch(body)
        if got is not None:
            return got
    return [(e.body, e.flag, e.properties) for e in decode_batch(body)]


def encode_batch(entries: list[BatchEntry]) -> bytes:
    out = bytearray()
    for e in entries:
        props = properties_to_string(e.properties).encode("utf-8")
        total = 20 + len(e.body) + 2 + len(props)
        out += struct.pack(">iiiii", total, 0, 0, e.flag, len(e.body)) + e.body + struct.pack(">h", len(props))
        out += props
    return bytes(out)


# --------------------------------------------------------- stored messages
MAGIC_V1 = -626843481  # 0xDAA320A7: 1-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: 2-byte topic length
BORN_HOST_V6 = 0x10
STORE_HOST_V6 = 0x20


def _host_bytes(addr: str) -> tuple[bytes, int, bool]:
    """'ip:port', '[v6]:port' or a bare ip -> (4 or 16 address bytes, port, is_v6); others become 127.0.0.1."""
    addr = addr.strip()
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        port_s = rest.lstrip(":")
    elif addr.count(":") == 1:
        host, port_s = addr.split(":")
    else:
        host, port_s = addr, "0"
    try:
        port = int(port_s or 0)
    except ValueError:
        port = 0
    if not 0 <= port < 1 << 31:
        port = 0
    try:
        if ":" in host:
            return socket.inet_pton(socket.AF_INET6, host), port, True
        return socket.inet_aton(host) if host.count(".") == 3 else socket.inet_aton("127.0.0.1"), port, False
    except OSError:
        return socket.inet_aton("127.0.0.1"), port, False


def offset_msg_id(store_host: str, physical_offset: int) -> str:
    """RocketMQ's offset msgId: hex of store IP, port (int32) and commit-log offset (int64), upper case."""
    ip, port, _ = _host_bytes(store_host)
    return (ip + struct.pack(">iq", port, physical_offset)).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """Offset msgId -> ('ip:port', commit-log offset); ValueError when it is not one."""
    raw = bytes.fromhex(msg_id)
    if len(raw) == 16:
        ip = socket.inet_ntoa(raw[:4])
    elif len(raw) == 28:
        ip = socket.inet_ntop(socket.AF_INET6, raw[:16])
    else:
        raise ValueError(f"{msg_id!r} is not an offset message id (32 or 56 hex characters)")
    port, offset = struct.unpack(">iq", raw[-12:])
    return f"{ip}:{port}", offset


@dataclass
class WireMessage:
    """A message in RocketMQ's stored (MessageDecoder) layout, as pull, query and view bodies carry it."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_timestamp: int = 0
    store_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_tx_offset: int = 0


def encode_message(m: WireMessage) -> bytes:
    born_ip, born_port, born_v6 = _host_bytes(m.born_host)
    store_ip, store_port, store_v6 = _host_bytes(m.store_host)
    sys_flag = m.sys_flag & ~(BORN_HOST_V6 | STORE_HOST_V6)
    sys_flag |= (BORN_HOST_V6 if born_v6 else 0) | (STORE_HOST_V6 if store_v6 else 0)
    topic = m.topic.encode("utf-8")
    props = properties_to_string(m.properties).encode("utf-8")
    if len(props) > 32767:
        raise ValueError(f"properties of {len(props)} bytes exceed 32767")
    v2 = len(topic) > 127
    topic_len = struct.pack(">h", len(topic)) if v2 else struct.pack(">b", len(topic))
    tail = (struct.pack(">q", m.born_timestamp) + born_ip + struct.pack(">i", born_port)
            + struct.pack(">q", m.store_timestamp) + store_ip + struct.pack(">i", store_port)
            + struct.pack(">iq", m.reconsume_times, m.prepared_tx_offset)
            + _I32.pack(len(m.body)) + m.body + topic_len + topic + struct.pack(">h", len(props)) + props)
    head_len = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4
    total = head_len + len(tail)
    crc = zlib.crc32(m.body) & 0x7FFFFFFF
    head = struct.pack(">iiiiiqqi", total, MAGIC_V2 if v2 else MAGIC_V1, crc, m.queue_id, m.flag, m.queue_offset,
                       m.physical_offset, sys_flag)
    return head + tail


def decode_messages(data: bytes) -> list[WireMessage]:
    """The inverse of ``encode_message`` over concatenated records (used by tests and tools)."""
    out: list[WireMessage] = []
    pos = 0
    while pos + 4 <= len(data):
        total, magic, _crc, qid, flag, qoff, phy, sys_flag = struct.unpack_from(">iiiiiqqi", data, pos)
        p = pos + 40
        born_len = 16 if sys_flag & BORN_HOST_V6 else 4
        store_len = 16 if sys_flag & STORE_HOST_V6 else 4
        (born_ts,) = struct.unpack_from(">q", data, p)
        p += 8
        born_ip = data[p:p + born_len]
        p += born_len
        (born_port,) = struct.unpack_from(">i", data, p)
        p += 4
        (store_ts,) = struct.unpack_from(">q", data, p)
        p += 8
        store_ip = data[p:p + store_len]
        p += store_len
        (store_port, reconsume, prepared) = struct.unpack_from(">iiq", data, p)
        p += 16
        (body_len,) = struct.unpack_from(">i", data, p)
        p += 4
        body = bytes(data[p:p + body_len])
        p += body_len
        if magic == MAGIC_V2:
            (tlen,) = struct.unpack_from(">h", data, p)
            p += 2
        else:
            (tlen,) = struct.unpack_from(">b", data, p)
            p += 1
        topic = data[p:p + tlen].decode("utf-8")
        p += tlen
        (plen,) = struct.unpack_from(">h", data, p)
        p += 2
        props = string_to_properties(data[p:p + plen].decode("utf-8"))

        def host(ip: bytes, port: int) -> str:
            return f"{socket.inet_ntop(socket.AF_INET6 if len(ip) == 16 else socket.AF_INET, ip)}:{port}"

        out.append(WireMessage(topic, qid, body, props, flag, qoff, phy, sys_flag, born_ts, host(born_ip, born_port),
                               store_ts, host(store_ip, store_port), reconsume, prepared))
        pos += total
    return out


# ------------------------------------------------------------ JSON bodies
def json_body(obj: Any) -> bytes:
    """Compact JSON with sorted keys: the Go client's route parser is whitespace-sensitive."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")


def parse_json_body(body: bytes, what: str) -> Any:
    """A JSON request body, tolerating fastjson's bare numeric keys (``{0:"addr"}``)."""
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        pass
    import re

    try:
        fixed = re.sub(r'([{,])\s*(-?\d+)\s*:', r'\1"\2":', body.decode("utf-8", "replace"))
        return json.loads(fixed)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise HeaderError(f"{what} body is not JSON: {exc}") from None
