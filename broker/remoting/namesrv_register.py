"""Apache brokers registering with RocketScope's name server over remoting.

RocketScope's own brokers register over a gRPC session (broker/namesrv/service.py); Apache's
brokers send REGISTER_BROKER (103) every ``registerNameServerPeriod`` (30 s) with their topic
configs, UNREGISTER_BROKER (104) at shutdown, and, depending on their settings,
QUERY_DATA_VERSION (322) and BROKER_HEARTBEAT (904) in between. Both land in the same
``RouteInfo``, so Apache's clients (and RocketScope's gRPC route readers) see one route table.

The remoting connection plays the part of the gRPC session: when it closes, the brokers that
registered on it are removed at once, as Apache's name server does on a channel close
(RouteInfoManager.onChannelDestroy). The header and body names are those of rocketmq-remoting
5.3.3's RegisterBrokerRequestHeader / RegisterBrokerBody (read with javap).
"""

from __future__ import annotations

import logging
import time
import zlib
from typing import Any

from ..namesrv.route_info import RouteInfo
from ..protocol import common_pb2, namesrv_pb2
from .codec import Header, HeaderError, RemotingCommand, ResponseCode, json_body, parse_json_body
from .server import Connection, Handler

log = logging.getLogger(__name__)

REGISTER_BROKER = 103
UNREGISTER_BROKER = 104
QUERY_DATA_VERSION = 322
BROKER_HEARTBEAT = 904
MASTER_ID = 0
DEFAULT_HEARTBEAT_TIMEOUT_MS = 120_000  # RegisterBrokerRequestHeader's default (brokerNotActiveTimeoutMillis)


def _session(conn: Connection) -> int:
    """gRPC sessions count up from 1 (service.py); remoting connections take the negative numbers."""
    return -conn.id


def _crc32(body: bytes) -> int:
    """UtilAll.crc32: java.util.zip.CRC32 masked to a positive int."""
    return zlib.crc32(body) & 0x7FFFFFFF


def _topic_config(name: str, tc: dict[str, Any]) -> common_pb2.TopicConfig:
    try:
        return common_pb2.TopicConfig(
            topic_name=str(tc.get("topicName") or name), read_queue_nums=int(tc.get("readQueueNums", 0)),
            write_queue_nums=int(tc.get("writeQueueNums", 0)), perm=int(tc.get("perm", 6)),
            topic_sys_flag=int(tc.get("topicSysFlag", 0)), order=bool(tc.get("order", False)),
            attributes={str(k): str(v) for k, v in (tc.get("attributes") or {}).items()})
    except (TypeError, ValueError, AttributeError) as exc:
        raise HeaderError(f"body: topicConfigTable[{name!r}] is not a TopicConfig: {exc}") from None


def _data_version(obj: Any) -> tuple[common_pb2.DataVersion, int]:
    if not isinstance(obj, dict):
        return common_pb2.DataVersion(), 0
    try:
        return (common_pb2.DataVersion(timestamp=int(obj.get("timestamp", 0)), counter=int(obj.get("counter", 0))),
                int(obj.get("stateVersion", 0)))
    except (TypeError, ValueError) as exc:
        raise HeaderError(f"body: dataVersion is not a DataVersion: {exc}") from None


def registration(h: Header, body: bytes) -> namesrv_pb2.BrokerRegistration:
    """A BrokerRegistration from REGISTER_BROKER's header and its (uncompressed, JSON) RegisterBrokerBody."""
    broker_id = h.int("brokerId")
    reg = namesrv_pb2.BrokerRegistration(
        cluster_name=h.str("clusterName"), broker_name=h.str("brokerName"), broker_id=broker_id,
        broker_addr=h.str("brokerAddr"), ha_server_addr=h.str("haServerAddr", default=""),
        heartbeat_timeout_ms=h.int("heartbeatTimeoutMillis", default=DEFAULT_HEARTBEAT_TIMEOUT_MS),
        role="MASTER" if broker_id == MASTER_ID else "SLAVE", term=-1, epoch=-1,
        extras={"protocol": "remoting"})
    if not body:
        return reg
    doc = parse_json_body(body, "RegisterBrokerBody")
    if not isinstance(doc, dict):
        raise HeaderError("body: RegisterBrokerBody is not a JSON object")
    wrapper = doc.get("topicConfigSerializeWrapper") or {}
    if not isinstance(wrapper, dict):
        raise HeaderError("body: topicConfigSerializeWrapper is not an object")
    version, state = _data_version(wrapper.get("dataVersion"))
    reg.data_version.CopyFrom(version)
    reg.extras["stateVersion"] = str(state)
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise HeaderError("body: topicConfigTable is not an object")
    reg.topics.extend(_topic_config(str(name), tc if isinstance(tc, dict) else {}) for name, tc in table.items())
    return reg


def keep_absent_topics(routes: RouteInfo, reg: namesrv_pb2.BrokerRegistration) -> None:
    """Apache's name server adds and updates the topics a registration carries and deletes none
    (RouteInfoManager.registerBroker; ``deleteTopicWithBrokerRegistration`` is false by default): an
    Apache broker registers a new topic alone (registerIncrementBrokerData), and its periodic full
    registration may carry a snapshot taken before that topic existed. ``RouteInfo.register`` drops
    the topics a master's registration leaves out (RocketScope's brokers always send all), so the
    topics held for this broker name are added back here; DELETE_TOPIC_IN_NAMESRV removes one."""
    carried = {tc.topic_name for tc in reg.topics}
    for topic, by_broker in routes.topic_queues.items():
        held = by_broker.get(reg.broker_name)
        if held is not None and topic not in carried:
            reg.topics.append(held)


def _live(routes: RouteInfo, cluster: str, addr: str) -> list[Any]:
    return [lb for lb in routes.brokers.values()
            if lb.registration.cluster_name == cluster and lb.registration.broker_addr == addr]


def register_handlers(routes: RouteInfo) -> dict[int, Handler]:
    watched: set[int] = set()  # connections whose close removes their brokers

    def watch(conn: Connection) -> None:
        if conn.id in watched:
            return
        watched.add(conn.id)

        def closed(c: Connection) -> None:
            watched.discard(c.id)
            removed = routes.session_closed(_session(c))
            if removed:
                log.info("remoting connection %s closed; %d broker(s) removed", c.peer, removed)

        conn.on_close.append(closed)

    async def register(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        if h.bool("compressed"):
            # RegisterBrokerBody.encode(true) is a deflated binary layout; Apache brokers send it only with
            # compressedRegister=true (default false)
            return cmd.response(ResponseCode.SYSTEM_ERROR, "compressed: a compressed RegisterBrokerBody is not "
                                                           "supported here; set compressedRegister=false")
        crc = h.str("bodyCrc32", default="")
        if crc and cmd.body and crc not in ("0", str(_crc32(cmd.body))):
            log.warning("REGISTER_BROKER from %s: bodyCrc32 %s does not match the body's %d", conn.peer, crc,
                        _crc32(cmd.body))
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"crc32 not match: bodyCrc32 {crc}, body "
                                                           f"{_crc32(cmd.body)}")
        reg = registration(h, cmd.body or b"")
        if reg.broker_id == MASTER_ID:
            keep_absent_topics(routes, reg)
        watch(conn)
        result = routes.register(reg, _session(conn))
        fields: dict[str, str] = {}
        if reg.broker_id != MASTER_ID:  # Apache answers the master's addresses to slaves only
            fields = {"masterAddr": result.master_addr, "haServerAddr": result.ha_server_addr}
        return cmd.response(ext_fields={k: v for k, v in fields.items() if v})

    async def unregister(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        routes.unregister(h.str("clusterName"), h.str("brokerName"), h.int("brokerId"), reason="UNREGISTER_BROKER")
        return cmd.response()

    async def query_data_version(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The broker asks whether its registration is current; the ask itself counts as a heartbeat."""
        h = Header(cmd)
        sent, state = _data_version(parse_json_body(cmd.body, "DataVersion") if cmd.body else None)
        live = _live(routes, h.str("clusterName"), h.str("brokerAddr"))
        now = int(time.time() * 1000)
        for lb in live:
            lb.last_update_ms = now
        held = live[0].registration if live else None
        changed = held is None or (held.data_version != sent or held.extras.get("stateVersion", "0") != str(state))
        body = b""
        if held is not None:
            body = json_body({"counter": held.data_version.counter, "stateVersion":
                              int(held.extras.get("stateVersion", "0")), "timestamp": held.data_version.timestamp})
        return cmd.response(ext_fields={"changed": "true" if changed else "false"}, body=body)

    async def heartbeat(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        now = int(time.time() * 1000)
        for lb in _live(routes, h.str("clusterName"), h.str("brokerAddr")):
            lb.last_update_ms = now
        return cmd.response()

    return {REGISTER_BROKER: register, UNREGISTER_BROKER: unregister, QUERY_DATA_VERSION: query_data_version,
            BROKER_HEARTBEAT: heartbeat}
