"""The admin codes Apache's mqadmin sends to a broker, answered by the same admin service `rocketscope admin` uses.

Each handler builds the internal admin request, calls ``BrokerAdminService`` and turns its
answer into what mqadmin parses: a KVTable for GET_BROKER_RUNTIME_INFO, fastjson's ConsumeStats
(whose map keys are JSON objects, which no standard encoder writes) for GET_CONSUME_STATS.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..admin_service import BrokerAdminService
from ..protocol import admin_pb2, common_pb2
from .admin_ops_handlers import admin_ops_handlers
from .codec import Header, RemotingCommand, ResponseCode, json_body
from .group_handlers import group_handlers
from .server import Connection, Handler
from .stats_body import consume_stats_json

if TYPE_CHECKING:
    from .broker_handlers import RemotingBroker
    from .host import RemotingHost

UPDATE_AND_CREATE_TOPIC = 17
GET_BROKER_RUNTIME_INFO = 28
GET_CONSUMER_CONNECTION_LIST = 203
GET_CONSUME_STATS = 208
QUERY_TOPIC_CONSUME_BY_WHO = 300
GET_TOPIC_CONFIG = 351
BROKER_VERSION_DESC = "V5_3_3"  # what mqadmin clusterList prints as the broker's version


def admin_handlers(broker: RemotingHost, front: RemotingBroker) -> dict[int, Handler]:
    svc = BrokerAdminService(broker)

    async def update_topic(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        cfg = common_pb2.TopicConfig(topic_name=h.str("topic"), read_queue_nums=h.int("readQueueNums", default=8),
                                     write_queue_nums=h.int("writeQueueNums", default=8), perm=h.int("perm", default=6),
                                     order=h.bool("order"))
        attrs = h.str("attributes", default="")
        for item in attrs.split(","):
            key, sep, value = item.lstrip("+").partition("=")
            if sep and key:
                cfg.attributes[key] = value
        status = await svc.UpdateTopic(admin_pb2.UpdateTopicRequest(config=cfg), None)  # type: ignore[arg-type]
        if status.code:
            return cmd.response(ResponseCode.INVALID_PARAMETER, status.remark)
        return cmd.response()

    async def runtime_info(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        resp = await svc.BrokerStatus(common_pb2.Empty(), None)  # type: ignore[arg-type]
        table = dict(resp.table)
        oldest = min((broker.store.store_time(t, q, broker.store.min_offset(t, q)) or 0
                      for t, q in broker.store.topics_and_queues()), default=0)
        table.update({
            "brokerVersionDesc": BROKER_VERSION_DESC, "brokerVersion": "479", "brokerActive": "true",
            "putTps": "0.0 0.0 0.0", "getTransferredTps": "0.0 0.0 0.0", "msgPutTotalTodayNow": "0",
            "msgGetTotalTodayNow": "0", "msgPutTotalYesterdayMorning": "0", "msgGetTotalYesterdayMorning": "0",
            "msgPutTotalTodayMorning": "0", "msgGetTotalTodayMorning": "0", "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0", "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0", "pageCacheLockTimeMills": "0",
            "earliestMessageTimeStamp": str(oldest), "commitLogDiskRatio": table.get("diskRatio", "0"),
            "runtime": f"[ {int(time.time() - broker.started_at)} s ]",
        })
        return cmd.response(body=json_body({"table": table}))

    async def consume_stats(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = Header(cmd)
        req = admin_pb2.ConsumerProgressRequest(group=h.str("consumerGroup"), topic=h.str("topic", default=""))
        resp = await svc.ConsumerProgress(req, None)  # type: ignore[arg-type]
        if resp.status.code:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, resp.status.remark)
        return cmd.response(body=consume_stats_json(broker.broker_name, list(resp.queues)))

    async def topic_config(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        name = Header(cmd).str("topic")
        cfg = broker.topics.get(name)
        if cfg is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {name}")
        return cmd.response(body=json_body({
            "attributes": dict(cfg.attributes), "order": cfg.order, "perm": cfg.perm & broker.settings.brokerPermission,
            "readQueueNums": cfg.read_queue_nums, "topicFilterType": "SINGLE_TAG", "topicName": cfg.name,
            "topicSysFlag": 0, "writeQueueNums": cfg.write_queue_nums}))

    async def consume_by_who(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = Header(cmd).str("topic")
        groups = {g for (g, t, _) in broker.offsets.offsets if t == topic}
        groups |= {g for g, members in front.consumers.items() for c in members.values() if topic in c.subscriptions}
        return cmd.response(body=json_body({"groupList": sorted(groups)}))

    async def connections(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = Header(cmd).str("consumerGroup")
        members = front.consumers.get(group, {})
        if not members:
            return cmd.response(206, f"the consumer group[{group}] not online")  # CONSUMER_NOT_ONLINE
        subs = {t: s for c in members.values() for t, s in c.subscriptions.items()}
        body = {"connectionSet": [{"clientAddr": c.conn.peer, "clientId": cid, "language": c.language,
                                   "version": c.version} for cid, c in sorted(members.items())],
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "subscriptionTable": {t: {"classFilterMode": False, "codeSet": [], "expressionType": s.expression_type,
                                          "subString": s.sub_string, "subVersion": s.sub_version,
                                          "tagsSet": sorted(s.tags or []), "topic": t} for t, s in subs.items()}}
        return cmd.response(body=json_body(body))

    return admin_ops_handlers(broker, front, svc) | group_handlers(broker.groups, svc) | {
        UPDATE_AND_CREATE_TOPIC: update_topic, GET_BROKER_RUNTIME_INFO: runtime_info,
        GET_CONSUME_STATS: consume_stats, QUERY_TOPIC_CONSUME_BY_WHO: consume_by_who,
        GET_CONSUMER_CONNECTION_LIST: connections, GET_TOPIC_CONFIG: topic_config}
