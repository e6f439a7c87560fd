"""Read-side calls of RocketMQ's classic "remoting" protocol, for observing any RocketMQ cluster.

Why this exists: RocketScope's tools read topics and look messages up over gRPC
(rocketscope/topic_reader.py, rocketscope/admin_client.py).  An Apache RocketMQ 5 name server
speaks only remoting, and Apache's proxy answers UNIMPLEMENTED to the gRPC QueryOffset and
PullMessage calls, so observing an Apache cluster (its trace topic, its topics in Spark, its
name server in the dashboard) needs the protocol its own tools (mqadmin, the Java and Go
clients) use: GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO and GET_ALL_TOPIC_LIST on the
name server; GET_MIN_OFFSET, GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, PULL_MESSAGE,
QUERY_MESSAGE and VIEW_MESSAGE_BY_ID on the brokers.  RocketScope's own servers answer the
same codes (broker/remoting/), so everything here runs against both.

Frames, headers and the stored-message layout are RocketScope's broker codec
(``rocketscope.broker.remoting.codec``, ``.client``): there is one codec in the project.

Which protocol a tool uses is chosen by the name-server address (docs/OBSERVING_APACHE.md):
``remoting://host:port`` forces remoting, ``grpc://host:port`` forces gRPC, and a bare
``host:port`` (the default) tries gRPC first and falls back to remoting when no name server
answers gRPC, remembering the answer for the process.  ``ROCKETSCOPE_NAMESRV_PROTOCOL``
(grpc, remoting or auto) sets the default for bare addresses.
"""

from __future__ import annotations

import os
import threading
import time
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import (
    FrameError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    WireMessage,
    decode_messages,
    offset_msg_id,
    parse_json_body,
)

GRPC, REMOTING, AUTO = "grpc", "remoting", "auto"
PROTOCOLS = (GRPC, REMOTING, AUTO)
PROTOCOL_ENV = "ROCKETSCOPE_NAMESRV_PROTOCOL"

# PULL_MESSAGE's sysFlag bits (RocketMQ's PullSysFlag): the subscription travels in the request,
# so the broker needs no heartbeat from this reader to know what it reads
PULL_FLAG_SUBSCRIPTION = 0x4
# MessageSysFlag: the body is compressed; bits 8-10 say how (0 or 3: zlib, 1: lz4, 2: zstd)
COMPRESSED_FLAG = 0x1
COMPRESSION_TYPE_MASK = 0x7 << 8
COMPRESSION_NAMES = {0: "zlib", 1 << 8: "lz4", 2 << 8: "zstd", 3 << 8: "zlib"}

TIMEOUT_S = 10.0


class RemotingCallError(Exception):
    """A remoting answer with a non-success code; ``code`` and ``remark`` are the server's."""

    def __init__(self, what: str, addr: str, code: int, remark: str | None) -> None:
        super().__init__(f"{what} at {addr}: code {code} ({remark or 'no remark'})")
        self.addr, self.code, self.remark = addr, code, remark


class RemotingUnreachable(ConnectionError):
    """No address of a list answered (refused, closed, timed out or not speaking remoting)."""


# ------------------------------------------------------------------ addresses
def split_namesrv(namesrv: str) -> tuple[str, list[str]]:
    """``"remoting://a:1;b:2"`` -> ``("remoting", ["a:1", "b:2"])``; no scheme -> the env default (auto).

    The scheme may prefix the whole list or each address; mixing schemes is refused because one
    cluster speaks one protocol to its readers.
    """
    default = (os.environ.get(PROTOCOL_ENV) or AUTO).strip().lower()
    if default not in PROTOCOLS:
        raise ValueError(f"{PROTOCOL_ENV}={default!r}: expected one of {', '.join(PROTOCOLS)}")
    schemes: set[str] = set()
    addrs: list[str] = []
    for part in (p.strip() for p in namesrv.split(";")):
        if not part:
            continue
        scheme, sep, rest = part.partition("://")
        if sep:
            scheme = scheme.lower()
            if scheme not in PROTOCOLS:
                raise ValueError(f"name server address {part!r}: scheme {scheme!r} is not one of "
                                 f"{', '.join(p + '://' for p in PROTOCOLS)}")
            schemes.add(scheme)
            part = rest.strip()
        if part:
            addrs.append(part)
    if len(schemes) > 1:
        raise ValueError(f"name server addresses {namesrv!r} mix the schemes {', '.join(sorted(schemes))}")
    return (schemes.pop() if schemes else default), addrs


_detected: dict[tuple[str, ...], str] = {}
_detected_lock = threading.Lock()


def remembered(addrs: list[str]) -> str | None:
    """The protocol an earlier ``auto`` call found for these name servers in this process, if any."""
    with _detected_lock:
        return _detected.get(tuple(addrs))


def remember(addrs: list[str], protocol: str) -> None:
    with _detected_lock:
        _detected[tuple(addrs)] = protocol


# ------------------------------------------------------------------ connections
class Connections:
    """One blocking connection per address, opened on first use and reopened once after a failure.

    Not thread-safe: each reader (a Spark task, a lookup) holds its own.
    """

    def __init__(self, timeout_s: float = TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._clients: dict[str, RemotingClient] = {}

    def __enter__(self) -> Connections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for client in self._clients.values():
            try:
                client.close()
            except OSError:
                pass
        self._clients.clear()

    def invoke(self, addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
        """Send one request and return the response (any code); OSError/FrameError when the peer fails."""
        fields = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (ext or {}).items()}
        for attempt in (1, 2):
            client = self._clients.get(addr)
            try:
                if client is None:
                    client = self._clients[addr] = RemotingClient(addr, timeout_s=self.timeout_s)
                return client.invoke(code, fields, body)
            except (OSError, FrameError, ValueError):
                stale = self._clients.pop(addr, None)
                if stale is not None:
                    stale.close()
                if attempt == 2 or client is None:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def call(self, addr: str, what: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
             ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """``invoke`` that raises RemotingCallError unless the answer's code is in ``ok``."""
        resp = self.invoke(addr, code, ext, body)
        if resp.code not in ok:
            raise RemotingCallError(what, addr, resp.code, resp.remark)
        return resp

    def first(self, addrs: list[str], what: str, code: int, ext: dict[str, Any] | None = None,
              ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """The answer of the first address that answers at all (name servers are interchangeable)."""
        errors: list[str] = []
        for addr in addrs:
            try:
                return self.call(addr, what, code, ext, ok=ok)
            except (OSError, FrameError, ValueError) as exc:
                errors.append(f"{addr}: {type(exc).__name__} {exc}")
        raise RemotingUnreachable(f"no name server answered {what} over remoting "
                                  f"({'; '.join(errors) or 'no address given'})")


# ------------------------------------------------------------------ name server
def route(conns: Connections, addrs: list[str], topic: str) -> dict[str, Any] | None:
    """The topic's TopicRouteData (``brokerDatas``, ``queueDatas``), or None when it has no route."""
    resp = conns.first(addrs, f"GET_ROUTEINFO_BY_TOPIC {topic}", RequestCode.GET_ROUTEINFO_BY_TOPIC,
                       {"topic": topic}, ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    data = parse_json_body(resp.body, "TopicRouteData")
    return data if isinstance(data, dict) else None


def cluster_info(conns: Connections, addrs: list[str]) -> dict[str, Any]:
    """ClusterInfo: ``brokerAddrTable`` {name: BrokerData} and ``clusterAddrTable`` {cluster: [names]}."""
    resp = conns.first(addrs, "GET_BROKER_CLUSTER_INFO", RequestCode.GET_BROKER_CLUSTER_INFO)
    data = parse_json_body(resp.body, "ClusterInfo")
    return data if isinstance(data, dict) else {}


def topic_list(conns: Connections, addrs: list[str]) -> list[str]:
    resp = conns.first(addrs, "GET_ALL_TOPIC_LIST_FROM_NAMESERVER", RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    data = parse_json_body(resp.body, "TopicList")
    return sorted(data.get("topicList") or []) if isinstance(data, dict) else []


def broker_addrs(broker_data: dict[str, Any]) -> list[tuple[int, str]]:
    """(broker id, address) of one BrokerData, the master (id 0) first."""
    out = []
    for bid, addr in (broker_data.get("brokerAddrs") or {}).items():
        try:
            out.append((int(bid), str(addr)))
        except ValueError:
            continue
    return sorted(out)


# ------------------------------------------------------------------ broker: offsets
def _offset(resp: RemotingCommand) -> int:
    return int(resp.fields.get("offset", "0"))


def min_offset(conns: Connections, addr: str, topic: str, queue_id: int) -> int:
    return _offset(conns.call(addr, f"GET_MIN_OFFSET {topic}/{queue_id}", RequestCode.GET_MIN_OFFSET,
                              {"topic": topic, "queueId": queue_id}))


def max_offset(conns: Connections, addr: str, topic: str, queue_id: int) -> int:
    """The offset the queue's next message will get (``committed``: what readers may see)."""
    return _offset(conns.call(addr, f"GET_MAX_OFFSET {topic}/{queue_id}", RequestCode.GET_MAX_OFFSET,
                              {"topic": topic, "queueId": queue_id, "committed": True}))


def search_offset(conns: Connections, addr: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
    """The first offset stored at or after ``timestamp_ms`` (RocketMQ's lower boundary)."""
    return _offset(conns.call(addr, f"SEARCH_OFFSET_BY_TIMESTAMP {topic}/{queue_id}",
                              RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                              {"topic": topic, "queueId": queue_id, "timestamp": timestamp_ms,
                               "boundaryType": "lower"}))


# ------------------------------------------------------------------ broker: messages
@dataclass
class PullResult:
    code: int
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[WireMessage] = field(default_factory=list)
    remark: str | None = None


PULL_OK = (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
           ResponseCode.PULL_OFFSET_MOVED)


def pull(conns: Connections, addr: str, group: str, topic: str, queue_id: int, offset: int,
         max_nums: int) -> PullResult:
    """One PULL_MESSAGE without suspension and without committing an offset.

    The reader's group commits nothing, so reading leaves no consumer progress behind; a
    broker with ``autoCreateSubscriptionGroup=false`` must have the group created first.
    """
    resp = conns.call(addr, f"PULL_MESSAGE {topic}/{queue_id}@{offset}", RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
        "maxMsgNums": max_nums, "sysFlag": PULL_FLAG_SUBSCRIPTION, "commitOffset": 0,
        "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": int(time.time() * 1000),
        "expressionType": "TAG",
    }, ok=PULL_OK)
    f = resp.fields
    msgs = [decompressed(m) for m in decode_messages(resp.body)] if resp.code == ResponseCode.SUCCESS else []
    return PullResult(resp.code, int(f.get("nextBeginOffset", offset)), int(f.get("minOffset", 0)),
                      int(f.get("maxOffset", 0)), msgs, resp.remark)


def query_message(conns: Connections, addr: str, topic: str, key: str, max_num: int = 32,
                  begin_ms: int = 0, end_ms: int | None = None, unique_key: bool = False) -> list[WireMessage]:
    """QUERY_MESSAGE: messages of ``topic`` indexed under ``key`` (its KEYS, or UNIQ_KEY with ``unique_key``).

    The index is a hash: callers filter what comes back by the key they asked for.
    """
    resp = conns.call(addr, f"QUERY_MESSAGE {topic} key {key}", RequestCode.QUERY_MESSAGE, {
        "topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin_ms,
        "endTimestamp": end_ms if end_ms is not None else int(time.time() * 1000) + 86_400_000,
        "_UNIQUE_KEY_QUERY": unique_key,
    }, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
    if resp.code != ResponseCode.SUCCESS:
        return []
    return [decompressed(m) for m in decode_messages(resp.body)]


def view_message(conns: Connections, addr: str, commitlog_offset: int) -> WireMessage | None:
    """VIEW_MESSAGE_BY_ID: the message at one commit-log offset (what an offset msgId encodes)."""
    resp = conns.invoke(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": commitlog_offset})
    if resp.code != ResponseCode.SUCCESS:
        return None
    msgs = decode_messages(resp.body)
    return decompressed(msgs[0]) if msgs else None


def decompressed(m: WireMessage) -> WireMessage:
    """The message with its body as the producer sent it.

    Apache's Java producer compresses bodies above 4 KiB (zlib by default) and the broker stores
    and returns them compressed, flagged in sysFlag: trace batches often are.
    """
    if not m.sys_flag & COMPRESSED_FLAG:
        return m
    kind = COMPRESSION_NAMES.get(m.sys_flag & COMPRESSION_TYPE_MASK, "zlib")
    if kind == "zlib":
        body = zlib.decompress(m.body)
    else:
        try:
            if kind == "lz4":
                import lz4.frame  # type: ignore[import-not-found]

                body = lz4.frame.decompress(m.body)
            else:
                import zstandard  # type: ignore[import-not-found]

                body = zstandard.ZstdDecompressor().decompress(m.body, max_output_size=64 << 20)
        except ImportError:
            raise ValueError(f"message {m.topic}/{m.queue_id}@{m.queue_offset} is {kind}-compressed and the "
                             f"Python package for {kind} is not installed") from None
    return replace(m, body=body, sys_flag=m.sys_flag & ~(COMPRESSED_FLAG | COMPRESSION_TYPE_MASK))


def message_id(m: WireMessage) -> str:
    """The id clients know a message by: its UNIQ_KEY, else its offset msgId (store host + commit-log offset)."""
    return m.properties.get("UNIQ_KEY") or offset_msg_id(m.store_host, m.physical_offset)


def to_v2(m: WireMessage, commitlog_property: str) -> Any:
    """A stored message as the v2 gRPC ``Message`` RocketScope's PullMessage returns (broker/pull.py),
    so a reader's callers (the Spark source, the trace lookup) see one shape whatever the protocol."""
    from rocketscope.broker.convert import to_grpc
    from rocketscope.broker.store.record import StoredMessage

    stored = StoredMessage(topic=m.topic, queue_id=m.queue_id, body=m.body, properties=dict(m.properties),
                           flag=m.flag, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host=m.born_host,
                           store_timestamp=m.store_timestamp, store_host=m.store_host,
                           reconsume_times=m.reconsume_times, queue_offset=m.queue_offset,
                           physical_offset=m.physical_offset)
    out = to_grpc(stored, m.topic, attempt=m.reconsume_times + 1)
    if not out.system_properties.message_id:
        out.system_properties.message_id = message_id(m)
    out.user_properties[commitlog_property] = str(m.physical_offset)
    return out
