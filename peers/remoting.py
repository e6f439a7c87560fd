"""A minimal client of Apache RocketMQ's remoting protocol (JSON headers), for the reference cluster.

Starting a JVM for every ``mqadmin`` call costs seconds on a loaded 2-core machine, and the
readiness check and the differential tests need a route query or a topic creation many times, so
the few admin requests they use are sent straight from Python:

* frame: ``total length`` (4 bytes, big-endian, everything after it), ``header length`` (4 bytes:
  serialize type 0 = JSON in the high byte, length in the low three), the JSON header, the body;
* header: ``code``, ``language``, ``version``, ``opaque``, ``flag`` (bit 0 set on responses),
  ``remark``, ``extFields`` (string values only);
* bodies are fastjson text, whose maps with number keys (``brokerAddrs``) are written with the
  keys unquoted, which Python's json refuses: :func:`loads_fastjson` quotes them first.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import struct
from dataclasses import dataclass
from typing import Any

# request codes (org.apache.rocketmq.remoting.protocol.RequestCode)
QUERY_MESSAGE = 12
UPDATE_AND_CREATE_TOPIC = 17
DELETE_TOPIC_IN_BROKER = 215
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206

_opaque = itertools.count(1)


class RemotingError(Exception):
    """A response with a non-zero code; ``code`` and ``remark`` are Apache's."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"remoting code {code}: {remark}")
        self.code = code
        self.remark = remark


@dataclass
class Response:
    code: int
    remark: str | None
    ext: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return loads_fastjson(self.body)


def loads_fastjson(body: bytes) -> Any:
    """Parse fastjson output: quote bare number keys (``{0:"127.0.0.1:10911"}``) first."""
    text = body.decode("utf-8")
    return json.loads(re.sub(r'([{,])(-?\d+):', r'\1"\2":', text))


def call(addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
         timeout: float = 10.0) -> Response:
    """One request on a fresh connection; returns the response or raises :class:`RemotingError`."""
    header = json.dumps({
        "code": code, "language": "PYTHON", "version": 473, "opaque": next(_opaque), "flag": 0,
        "extFields": {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (ext or {}).items()},
        "serializeTypeCurrentRPC": "JSON",
    }).encode()
    frame = struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(frame)
        total = struct.unpack(">I", _read(sock, 4))[0]
        data = _read(sock, total)
    hlen = struct.unpack(">I", data[:4])[0] & 0xFFFFFF
    head = json.loads(data[4:4 + hlen])
    resp = Response(head.get("code", -1), head.get("remark"), head.get("extFields") or {}, data[4 + hlen:])
    if resp.code != 0:
        raise RemotingError(resp.code, resp.remark)
    return resp


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the server")
        buf += chunk
    return bytes(buf)


def route(namesrv: str, topic: str) -> dict[str, Any]:
    """TopicRouteData of ``topic`` from a name server (code 17 TOPIC_NOT_EXIST when it has none)."""
    return call(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).json()


def cluster_info(namesrv: str) -> dict[str, Any]:
    """ClusterInfo: ``brokerAddrTable`` and ``clusterAddrTable``."""
    return call(namesrv, GET_BROKER_CLUSTER_INFO).json()


def topic_list(namesrv: str) -> set[str]:
    return set(call(namesrv, GET_ALL_TOPIC_LIST_FROM_NAMESERVER).json()["topicList"])


def create_topic(broker: str, topic: str, queues: int = 4, message_type: str | None = "NORMAL",
                 order: bool = False) -> None:
    """Create ``topic`` on one broker with the 5.x ``message.type`` attribute (as mqadmin updateTopic);
    ``message_type=None``: without attributes (see peers/reference_cluster.py on DLedger groups)."""
    call(broker, UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
        "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": order,
        **({"attributes": f"+message.type={message_type}"} if message_type else {}),
    })


def delete_topic(broker: str, topic: str) -> None:
    """DELETE_TOPIC_IN_BROKER: the topic's config and queues on one broker (as mqadmin deleteTopic does per broker)."""
    call(broker, DELETE_TOPIC_IN_BROKER, {"topic": topic})


def create_group(broker: str, group: str, orderly: bool = False, retry_max_times: int = 16) -> None:
    """Create or update a subscription group (as mqadmin updateSubGroup); unset fields keep Apache's defaults."""
    body = json.dumps({"groupName": group, "consumeEnable": True, "consumeMessageOrderly": orderly,
                       "retryMaxTimes": retry_max_times, "retryQueueNums": 1}).encode()
    call(broker, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)


# ---------------------------------------------------------------------------- stored messages
# magic codes of the stored message format (MessageDecoder): V2 writes the topic length in 2 bytes
# (Java's `0xAABBCCDD ^ 1880681586 + 8` adds first)
MAGIC_V1 = 0xAABBCCDD ^ (1880681586 + 8)
MAGIC_V2 = 0xAABBCCDD ^ (1880681586 + 4)
BORNHOST_V6_FLAG = 1 << 4
STOREHOST_V6_FLAG = 1 << 5
QUERY_NOT_FOUND = 22


@dataclass
class StoredMessage:
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int
    body: bytes
    properties: dict[str, str]


def decode_messages(data: bytes) -> list[StoredMessage]:
    """Messages as the broker stores and returns them (QUERY_MESSAGE, PULL_MESSAGE bodies), one after another."""
    out = []
    pos = 0
    while pos + 8 <= len(data):
        total, magic = struct.unpack_from(">iI", data, pos)
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise ValueError(f"not a stored message at byte {pos}: magic {magic:#x}")
        v2 = magic == MAGIC_V2
        r = pos + 8 + 4  # body CRC
        queue_id, _flag, queue_offset, phys, sys_flag, born_ts = struct.unpack_from(">iiqqiq", data, r)
        r += 4 + 4 + 8 + 8 + 4 + 8
        r += 20 if sys_flag & BORNHOST_V6_FLAG else 8
        (store_ts,) = struct.unpack_from(">q", data, r)
        r += 8
        r += 20 if sys_flag & STOREHOST_V6_FLAG else 8
        reconsume, _prepared, body_len = struct.unpack_from(">iqi", data, r)
        r += 4 + 8 + 4
        body = data[r:r + body_len]
        r += body_len
        if v2:
            (topic_len,) = struct.unpack_from(">h", data, r)
            r += 2
        else:
            topic_len = data[r]
            r += 1
        topic = data[r:r + topic_len].decode()
        r += topic_len
        (props_len,) = struct.unpack_from(">h", data, r)
        r += 2
        props = {}
        for pair in data[r:r + props_len].decode().split("\x02"):
            if "\x01" in pair:
                k, v = pair.split("\x01", 1)
                props[k] = v
        out.append(StoredMessage(topic, queue_id, queue_offset, phys, born_ts, store_ts, reconsume, body, props))
        pos += total
    return out


def query_message(broker: str, topic: str, key: str, max_num: int = 64) -> list[StoredMessage]:
    """Messages of ``topic`` indexed under ``key`` on one broker (as mqadmin queryMsgByKey and
    queryMsgTraceById do; the index is a hash, so callers filter what comes back)."""
    try:
        resp = call(broker, QUERY_MESSAGE, {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": 0,
                                            "endTimestamp": 2**62, "_UNIQUE_KEY_QUERY": False})
    except RemotingError as exc:
        if exc.code == QUERY_NOT_FOUND:
            return []
        raise
    return decode_messages(resp.body)
