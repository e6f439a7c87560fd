"""Name-server request codes over remoting, answered from the same ``RouteInfo`` the gRPC service reads.

RocketScope's brokers register over gRPC; Apache's brokers register over remoting
(``namesrv_register.py``). Remoting serves the client side here: routes, cluster info and topic
lists, in the JSON Apache's Java and Go clients parse.
"""

from __future__ import annotations

import logging
from typing import Any

from rocketscope.names import TBW102

from ..namesrv.route_info import RouteInfo
from ..protocol import namesrv_pb2
from .codec import Header, RemotingCommand, RequestCode, ResponseCode, json_body
from .namesrv_register import register_handlers
from .server import Connection, Handler

log = logging.getLogger(__name__)

WIPE_WRITE_PERM_OF_BROKER = 205
ADD_WRITE_PERM_OF_BROKER = 327
DELETE_TOPIC_IN_NAMESRV = 216


def route_json(route: namesrv_pb2.TopicRouteData) -> dict[str, Any]:
    """TopicRouteData in the standard-JSON form (quoted brokerId keys), which Go and Java both parse."""
    return {
        "brokerDatas": [
            {"brokerAddrs": {str(bid): addr for bid, addr in sorted(bd.broker_addrs.items())},
             "brokerName": bd.broker_name, "cluster": bd.cluster, "enableActingMaster": False}
            for bd in route.broker_datas],
        "filterServerTable": {},
        "queueDatas": [
            {"brokerName": q.broker_name, "perm": q.perm, "readQueueNums": q.read_queue_nums,
             "topicSysFlag": q.topic_sys_flag, "writeQueueNums": q.write_queue_nums}
            for q in route.queue_datas],
    }


def template_route(routes: RouteInfo) -> namesrv_pb2.TopicRouteData | None:
    """A TBW102 route over every live master: Java producers send new topics there and the broker creates them."""
    route = namesrv_pb2.TopicRouteData()
    masters = sorted((reg for reg, _ in routes.cluster_info() if reg.broker_id == 0), key=lambda r: r.broker_name)
    for reg in masters:
        perm = 7 & ~2 if reg.broker_name in routes.write_wiped else 7  # wipeWritePerm applies to TBW102 too
        route.queue_datas.add(broker_name=reg.broker_name, read_queue_nums=8, write_queue_nums=8, perm=perm)
        bd = route.broker_datas.add(broker_name=reg.broker_name, cluster=reg.cluster_name)
        bd.broker_addrs[0] = reg.broker_addr
    return route if masters else None


def cluster_info_json(routes: RouteInfo) -> dict[str, Any]:
    brokers: dict[str, dict[str, Any]] = {}
    clusters: dict[str, list[str]] = {}
    for reg, _ in routes.cluster_info():
        bd = brokers.setdefault(reg.broker_name, {"brokerAddrs": {}, "brokerName": reg.broker_name,
                                                  "cluster": reg.cluster_name, "enableActingMaster": False})
        bd["brokerAddrs"][str(reg.broker_id)] = reg.broker_addr
        names = clusters.setdefault(reg.cluster_name, [])
        if reg.broker_name not in names:
            names.append(reg.broker_name)
    return {"brokerAddrTable": brokers, "clusterAddrTable": {c: sorted(n) for c, n in clusters.items()}}


def _perm_change(cmd: RemotingCommand, change: Any) -> RemotingCommand:
    """mqadmin wipeWritePerm / addWritePerm: header ``brokerName``, answer header ``wipeTopicCount`` or
    ``addTopicCount`` (the number of the broker's topics)."""
    name = Header(cmd).str("brokerName", default="")
    if not name:
        return cmd.response(ResponseCode.SYSTEM_ERROR, "brokerName: the request names no broker")
    field = "wipeTopicCount" if change.__name__ == "wipe_write_perm" else "addTopicCount"
    return cmd.response(ext_fields={field: str(change(name))})


def namesrv_handlers(routes: RouteInfo, on_route_query: Any = None) -> dict[int, Handler]:
    async def get_route(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = Header(cmd).str("topic")
        route = routes.route(topic)
        if route is None and topic == TBW102:
            route = template_route(routes)
        if on_route_query is not None:
            on_route_query(route is not None)
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: "
                                                              f"{topic}")
        return cmd.response(body=json_body(route_json(route)))

    async def cluster_info(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(body=json_body(cluster_info_json(routes)))

    async def all_topics(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(body=json_body({"topicList": routes.topics()}))

    async def topics_by_cluster(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        cluster = Header(cmd).str("cluster")
        names = {reg.broker_name for reg, _ in routes.cluster_info() if reg.cluster_name == cluster}
        topics = [t for t in routes.topics() if names & set(routes.topic_queues.get(t, {}))]
        return cmd.response(body=json_body({"topicList": topics}))

    async def kv_not_found(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        # no KV store on RocketScope's name server: clients treat this as "no order-topic config"
        h = Header(cmd)
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.str('namespace', default='')}"
                                                          f" Key: {h.str('key', default='')}")

    async def wipe_write_perm(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return _perm_change(cmd, routes.wipe_write_perm)

    async def add_write_perm(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return _perm_change(cmd, routes.add_write_perm)

    async def delete_topic(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = Header(cmd).str("topic")
        if routes.delete_topic(topic):  # Apache answers SUCCESS for an unknown topic too
            log.info("topic %s deleted from the name server (remoting)", topic)
        return cmd.response()

    async def kv_delete(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        # nothing to delete (no KV store); mqadmin deleteSubGroup deletes the group's ORDER_TOPIC_CONFIG entry
        return cmd.response()

    return {
        **register_handlers(routes),
        RequestCode.DELETE_KV_CONFIG: kv_delete,
        DELETE_TOPIC_IN_NAMESRV: delete_topic,
        WIPE_WRITE_PERM_OF_BROKER: wipe_write_perm,
        ADD_WRITE_PERM_OF_BROKER: add_write_perm,
        RequestCode.GET_ROUTEINFO_BY_TOPIC: get_route,
        RequestCode.GET_BROKER_CLUSTER_INFO: cluster_info,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: all_topics,
        RequestCode.GET_TOPICS_BY_CLUSTER: topics_by_cluster,
        RequestCode.GET_KV_CONFIG: kv_not_found,
        RequestCode.GET_KVLIST_BY_NAMESPACE: kv_not_found,
    }
