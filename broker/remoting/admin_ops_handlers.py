"""Apache mqadmin's maintenance request codes (issue 21) answered by the broker's admin service.

getBrokerConfig / updateBrokerConfig carry java.util.Properties text in the body; topicStatus,
resetOffsetByTime and brokerConsumeStats answer fastjson maps keyed by a MessageQueue object
(which no standard JSON encoder writes, see ``mq_key``). Each handler calls the same
BrokerAdminService methods `rocketscope admin` calls over gRPC (broker/admin_ops.py), so the
two tools cannot disagree.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from ..admin_ops import BAD_ARGUMENT, TOPIC_NOT_EXIST
from ..protocol import admin_pb2, common_pb2
from .codec import Header, RemotingCommand, ResponseCode
from .server import Connection, Handler
from .stats_body import consume_stats_json

if TYPE_CHECKING:
    from ..admin_service import BrokerAdminService
    from .broker_handlers import RemotingBroker
    from .host import RemotingHost

log = logging.getLogger(__name__)

UPDATE_BROKER_CONFIG = 25
GET_BROKER_CONFIG = 26
GET_TOPIC_STATS_INFO = 202
GET_PRODUCER_CONNECTION_LIST = 204
DELETE_SUBSCRIPTIONGROUP = 207
DELETE_TOPIC_IN_BROKER = 215
INVOKE_BROKER_TO_RESET_OFFSET = 222
VIEW_BROKER_STATS_DATA = 315
GET_BROKER_CONSUME_STATS = 317


def mq_key(broker_name: str, topic: str, queue_id: int) -> str:
    """A MessageQueue as a fastjson map key: the object itself, fields in alphabetical order."""
    return json.dumps({"brokerName": broker_name, "queueId": queue_id, "topic": topic}, separators=(",", ":"),
                      sort_keys=True)


def compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)


def properties_text(config: dict[str, str]) -> str:
    """java.util.Properties' ``key=value`` lines (what MixAll.string2Properties reads)."""
    return "".join(f"{k}={v}\n" for k, v in sorted(config.items()))


def parse_properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def admin_ops_handlers(broker: RemotingHost, front: RemotingBroker, svc: BrokerAdminService) -> dict[int, Handler]:
    async def get_config(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        resp = await svc.GetBrokerConfig(common_pb2.Empty(), None)  # type: ignore[arg-type]
        version = compact({"counter": broker.topics.data_version[1], "stateVersion": 0,
                           "timestamp": broker.topics.data_version[0]})
        return cmd.response(ext_fields={"version": version}, body=properties_text(dict(resp.config)).encode())

    async def update_config(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        config = parse_properties(cmd.body.decode("utf-8", "replace"))
        status = await svc.UpdateBrokerConfig(admin_pb2.UpdateBrokerConfigRequest(config=config), None)  # type: ignore[arg-type]
        if status.code:
            # a key that needs a restart is refused as Apache refuses its blacklisted keys: NO_PERMISSION
            code = ResponseCode.NO_PERMISSION if "restart" in status.remark else ResponseCode.INVALID_PARAMETER
            return cmd.response(code, status.remark)
        return cmd.response()

    async def topic_stats(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = Header(cmd).str("topic")
        resp = await svc.TopicStats(admin_pb2.TopicStatsRequest(topic=topic), None)  # type: ignore[arg-type]
        if resp.status.code == TOPIC_NOT_EXIST:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        cfg = broker.topics.get(topic)
        entries = [f"{mq_key(broker.broker_name, q.topic, q.queue_id)}:" + compact(
            {"lastUpdateTimestamp": q.last_update_timestamp, "maxOffset": q.max_offset, "minOffset": q.min_offset})
            for q in resp.queues if cfg is None or q.queue_id < cfg.write_queue_nums]
        return cmd.response(body=('{"offsetTable":{' + ",".join(entries) + "}}").encode())

    async def producer_connections(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = Header(cmd).str("producerGroup")
        members = front.producers.get(group, {})
        if not members:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = {"connectionSet": [{"clientAddr": c.conn.peer, "clientId": cid, "language": c.language or "JAVA",
                                   "version": c.version} for cid, c in sorted(members.items())]}
        return cmd.response(body=compact(body).encode())

    async def delete_group(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        group = h.str("groupName")
        req = admin_pb2.GroupRequest(group=group, remove_offset=h.bool("cleanOffset", "removeOffset"))
        status = await svc.DeleteSubGroup(req, None)  # type: ignore[arg-type]
        if status.code:  # Apache answers SUCCESS for a group it does not have (and logs it); so do we
            log.info("deleteSubGroup over remoting: %s", status.remark)
        return cmd.response()

    async def delete_topic(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = Header(cmd).str("topic")
        status = await svc.DeleteTopic(admin_pb2.TopicRequest(topic=topic), None)  # type: ignore[arg-type]
        if status.code:  # as Apache: deleting a topic the broker does not have succeeds
            log.info("deleteTopic over remoting: %s", status.remark)
        return cmd.response()

    async def reset_offset(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        topic, group = h.str("topic"), h.str("group")
        req = admin_pb2.ResetOffsetRequest(group=group, topic=topic, timestamp=h.int("timestamp", default=0),
                                           force=h.bool("isForce", default=True))
        queue_id, offset = h.int("queueId", default=-1), h.str("offset", default="")
        if queue_id >= 0 and offset not in ("", "-1"):
            try:
                req.offsets.add(group=group, topic=topic, queue_id=queue_id, offset=int(offset))
            except ValueError:
                return cmd.response(ResponseCode.INVALID_PARAMETER, f"offset: not a number: {offset[:32]!r}")
        resp = await svc.ResetOffset(req, None)  # type: ignore[arg-type]
        if resp.status.code:
            code = {TOPIC_NOT_EXIST: ResponseCode.TOPIC_NOT_EXIST, BAD_ARGUMENT: ResponseCode.INVALID_PARAMETER
                    }.get(resp.status.code, ResponseCode.SYSTEM_ERROR)
            return cmd.response(code, resp.status.remark)
        entries = [f"{mq_key(broker.broker_name, q.topic, q.queue_id)}:{q.new_offset}" for q in resp.queues]
        return cmd.response(body=('{"offsetTable":{' + ",".join(entries) + "}}").encode())

    async def broker_consume_stats(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """ConsumeStatsList: ``{"brokerAddr":..,"consumeStatsList":[{group:[ConsumeStats per topic]}],..}``."""

        is_order = Header(cmd).bool("isOrder")
        offsets = await svc.ConsumerOffsets(common_pb2.Empty(), None)  # type: ignore[arg-type]
        groups = sorted({o.group for o in offsets.offsets})
        per_group, total = [], 0
        for g in groups:
            resp = await svc.ConsumerProgress(admin_pb2.ConsumerProgressRequest(group=g), None)  # type: ignore[arg-type]
            if resp.status.code:
                continue
            by_topic: dict[str, list[Any]] = {}
            for q in resp.queues:
                cfg = broker.topics.get(q.topic)
                if is_order and not (cfg and cfg.order):
                    continue
                by_topic.setdefault(q.topic, []).append(q)
                total += max(0, q.broker_offset - q.consumer_offset)
            if by_topic:
                stats = ",".join(consume_stats_json(broker.broker_name, rows).decode() for rows in by_topic.values())
                per_group.append("{" + json.dumps(g) + ":[" + stats + "]}")
        body = ('{"brokerAddr":' + json.dumps(broker.internal_addr) + ',"consumeStatsList":[' + ",".join(per_group)
                + '],"totalDiff":' + str(total) + ',"totalInflightDiff":0}')
        return cmd.response(body=body.encode())

    async def view_stats(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """BrokerStatsData of one counter (broker/broker_stats.py): what mqadmin statsAll sums per topic and group."""
        h = Header(cmd)
        name, key = h.str("statsName"), h.str("statsKey")
        data = broker.metrics.stats.get(name, key)
        if data is None:  # Apache's answer for a counter nothing has touched yet
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return cmd.response(body=compact(data).encode())

    return {UPDATE_BROKER_CONFIG: update_config, GET_BROKER_CONFIG: get_config, GET_TOPIC_STATS_INFO: topic_stats,
            GET_PRODUCER_CONNECTION_LIST: producer_connections, DELETE_SUBSCRIPTIONGROUP: delete_group,
            DELETE_TOPIC_IN_BROKER: delete_topic,
            INVOKE_BROKER_TO_RESET_OFFSET: reset_offset, GET_BROKER_CONSUME_STATS: broker_consume_stats,
            VIEW_BROKER_STATS_DATA: view_stats}

