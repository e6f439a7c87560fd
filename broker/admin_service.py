"""The broker's admin service (what `rocketscope admin` calls on listenPort).

Codes are RocketMQ remoting response codes so scripts written against mqadmin's
behaviour read the same numbers: 0 success, 1 SYSTEM_ERROR, 17 TOPIC_NOT_EXIST,
24 SUBSCRIPTION_GROUP_NOT_EXIST, 208 QUERY_NOT_FOUND, 13 (ours) bad argument.
"""

from __future__ import annotations

import json
import logging
import time

import grpc

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2
from rocketscope.ha_events import HaEventError
from rocketscope.names import is_retry_or_dlq

from . import group_attributes
from .admin_ops import AdminHost, BrokerAdminOps
from .groups import GroupConfig
from .ha.event_relay import decode_forwarded, read_events
from .retry_policy import parse_group_retry_policy
from .store.record import StoredMessage
from .topics import TopicConfig

log = logging.getLogger(__name__)

SYSTEM_ERROR, TOPIC_NOT_EXIST, GROUP_NOT_EXIST, QUERY_NOT_FOUND, BAD_ARGUMENT = 1, 17, 24, 208, 13


def ok() -> common_pb2.Status:
    return common_pb2.Status(code=0)


def fail(code: int, remark: str) -> common_pb2.Status:
    return common_pb2.Status(code=code, remark=remark)


def offset_msg_id(store_host: str, offset: int) -> str:
    host, _, port = store_host.rpartition(":")
    try:
        parts = [int(p) for p in host.split(".")]
        return (bytes(parts) + int(port).to_bytes(4, "big") + offset.to_bytes(8, "big")).hex().upper()
    except (ValueError, OverflowError):
        return ""


def message_view(msg: StoredMessage, broker_name: str) -> admin_pb2.StoredMessageView:
    view = admin_pb2.StoredMessageView(
        topic=msg.topic, queue_id=msg.queue_id, queue_offset=msg.queue_offset, commitlog_offset=msg.physical_offset,
        store_size=msg.size, born_timestamp=msg.born_timestamp, store_timestamp=msg.store_timestamp,
        born_host=msg.born_host, store_host=msg.store_host, reconsume_times=msg.reconsume_times, body=msg.body,
        msg_id=msg.msg_id, offset_msg_id=offset_msg_id(msg.store_host, msg.physical_offset), sys_flag=msg.sys_flag,
        broker_name=broker_name)
    view.properties.update(msg.properties)
    return view


class BrokerAdminService(BrokerAdminOps, admin_pb2_grpc.BrokerAdminServicer):
    """The internal admin gRPC service; given its broker as an ``AdminHost`` (broker/admin_ops.py)."""

    def __init__(self, broker: AdminHost) -> None:
        self.broker = broker

    async def UpdateTopic(self, request: admin_pb2.UpdateTopicRequest, context: grpc.aio.ServicerContext
                          ) -> common_pb2.Status:
        c = request.config
        try:
            self.broker.topics.update(TopicConfig(c.topic_name, c.read_queue_nums or 8, c.write_queue_nums or 8,
                                                  c.perm or 6, c.order, attributes=dict(c.attributes)))
        except ValueError as exc:
            return fail(BAD_ARGUMENT, f"updateTopic {c.topic_name!r}: {exc}")
        self.broker.topics_on_change()
        return ok()

    async def DeleteTopic(self, request: admin_pb2.TopicRequest, context: grpc.aio.ServicerContext
                          ) -> common_pb2.Status:
        if not self.broker.topics.delete(request.topic):
            return fail(TOPIC_NOT_EXIST, f"topic {request.topic} does not exist on {self.broker.broker_name}")
        self.broker.topics_on_change()
        return ok()

    async def GetTopicConfigs(self, request: common_pb2.Empty, context: grpc.aio.ServicerContext
                              ) -> admin_pb2.TopicConfigsResponse:
        resp = admin_pb2.TopicConfigsResponse(status=ok())
        for cfg in self.broker.topics.all():
            tc = resp.topics.add(topic_name=cfg.name, read_queue_nums=cfg.read_queue_nums,
                                 write_queue_nums=cfg.write_queue_nums, perm=cfg.perm, order=cfg.order)
            tc.attributes.update(cfg.attributes)
        return resp

    async def UpdateSubGroup(self, request: admin_pb2.UpdateSubGroupRequest, context: grpc.aio.ServicerContext
                             ) -> common_pb2.Status:
        c = request.config
        old = self.broker.groups.get(c.group_name)
        try:
            policy = parse_group_retry_policy(c.group_retry_policy) if c.group_retry_policy else None
            self.update_group(GroupConfig(
                c.group_name,
                consume_enable=c.consume_enable if old is None else c.consume_enable or old.consume_enable,
                consume_message_orderly=c.consume_message_orderly,
                retry_max_times=c.retry_max_times if c.retry_max_times >= 0 else 16,
                retry_queue_nums=c.retry_queue_nums or 1, consume_broadcast_enable=c.consume_broadcast_enable,
                which_broker_when_consume_slowly=c.which_broker_when_consume_slowly or 1, retry_policy=policy),
                group_attributes.signed(dict(c.attributes)))
        except ValueError as exc:
            return fail(BAD_ARGUMENT, f"updateSubGroup {c.group_name!r}: {exc}")
        return ok()

    def update_group(self, cfg: GroupConfig, attribute_changes: dict[str, str]) -> GroupConfig:
        """Create or replace a group's config, its attributes changed as Apache 5.5.0 changes them (``+k`` adds or
        updates, ``-k`` deletes, a new group only adds: broker/group_attributes.py); what both mqadmin's remoting
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and `rocketscope admin updateSubGroup` call.  ValueError (an
        ``AttributeRefused`` for the attributes) when refused."""
        old = self.broker.groups.get(cfg.name)
        cfg.attributes = group_attributes.alter(old is None, old.attributes if old else {}, attribute_changes)
        return self.broker.groups.update(cfg)

    async def DeleteSubGroup(self, request: admin_pb2.GroupRequest, context: grpc.aio.ServicerContext
                             ) -> common_pb2.Status:
        b = self.broker
        had_offsets = any(g == request.group for (g, _, _) in b.offsets.offsets)
        if not b.groups.delete(request.group) and not (request.remove_offset and had_offsets):
            return fail(GROUP_NOT_EXIST, f"consumer group {request.group} does not exist on {b.broker_name}")
        if request.remove_offset:
            b.offsets.delete_group(request.group)
            for key in [k for k in b.pop.states if k[0] == request.group]:
                del b.pop.states[key]
            log.info("committed offsets of consumer group %s removed", request.group)
        return ok()

    async def GetSubGroups(self, request: common_pb2.Empty, context: grpc.aio.ServicerContext
                           ) -> admin_pb2.SubGroupsResponse:
        resp = admin_pb2.SubGroupsResponse(status=ok())
        for g in self.broker.groups.all():
            resp.groups.add(group_name=g.name, consume_enable=g.consume_enable,
                            consume_message_orderly=g.consume_message_orderly, retry_max_times=g.retry_max_times,
                            retry_queue_nums=g.retry_queue_nums, consume_broadcast_enable=g.consume_broadcast_enable,
                            which_broker_when_consume_slowly=g.which_broker_when_consume_slowly,
                            group_retry_policy=json.dumps(g.retry_policy) if g.retry_policy else "",
                            attributes=g.attributes)
        return resp

    async def GetMessageRequestModes(self, request: common_pb2.Empty, context: grpc.aio.ServicerContext
                                     ) -> admin_pb2.MessageRequestModesResponse:
        """mqadmin setConsumeMode's table, for a slave's metadata copy (broker/ha/slave.py)."""
        resp = admin_pb2.MessageRequestModesResponse(status=ok())
        for m in self.broker.request_modes.all():
            resp.modes.add(topic=m.topic, group=m.group, mode=m.mode, pop_share_queue_num=m.pop_share_queue_num)
        return resp

    async def QueryMessage(self, request: admin_pb2.QueryMessageRequest, context: grpc.aio.ServicerContext
                           ) -> admin_pb2.QueryMessageResponse:
        store = self.broker.store
        if not request.key:
            if request.commitlog_offset < 0:
                return admin_pb2.QueryMessageResponse(status=fail(BAD_ARGUMENT, "give a key or a commitlog_offset"))
            msg = store.read_physical(request.commitlog_offset)
            found = [msg] if msg is not None else []
        else:
            end = request.end_timestamp or int(time.time() * 1000) + 60_000
            found = store.lookup(request.topic or None, request.key, max(1, min(request.max_num or 32, 64)),
                                 request.begin_timestamp, end)
        if not found:
            return admin_pb2.QueryMessageResponse(status=fail(
                QUERY_NOT_FOUND, f"query message by key finished, but no message: key={request.key!r} "
                                 f"topic={request.topic or '*'} on broker {self.broker.broker_name}"))
        resp = admin_pb2.QueryMessageResponse(status=ok())
        for msg in found:
            resp.messages.append(message_view(msg, self.broker.broker_name))
        return resp

    async def ConsumerProgress(self, request: admin_pb2.ConsumerProgressRequest, context: grpc.aio.ServicerContext
                               ) -> admin_pb2.ConsumerProgressResponse:
        b = self.broker
        if b.groups.get(request.group) is None:
            return admin_pb2.ConsumerProgressResponse(status=fail(
                GROUP_NOT_EXIST, f"consumer group {request.group} does not exist on {b.broker_name}"))
        topics = {t for t, _ in b.offsets.of_group(request.group)}
        topics |= {t for (g, t, _) in b.pop.states if g == request.group}
        topics |= {t for c in b.clients.of_group(request.group) for t in c.topics}
        if request.topic:  # asked for by name (statsAll's accumulation): its queues even where the group never read,
            topics.add(request.topic)  # as Apache's GET_CONSUME_STATS with a topic lists every queue of it
        resp = admin_pb2.ConsumerProgressResponse(status=ok())
        total = 0
        for topic in sorted(topics):
            if request.topic and topic != request.topic:
                continue
            cfg = b.topics.get(topic)
            if cfg is None or is_retry_or_dlq(topic):
                continue
            for qid in range(cfg.read_queue_nums):
                max_off = b.store.max_offset(topic, qid)
                committed = b.pop.committed(request.group, topic, qid)
                committed = max_off if committed is None and max_off == 0 else (committed or 0)
                last = b.store.store_time(topic, qid, committed - 1) if committed > 0 else 0
                lag = max(0, max_off - committed)
                total += lag
                resp.queues.add(topic=topic, queue_id=qid, broker_offset=max_off, consumer_offset=committed,
                                inflight=b.pop.inflight_count(request.group, topic, qid), last_timestamp=last or 0,
                                min_offset=b.store.min_offset(topic, qid))
        resp.total_lag = total
        return resp

    async def ConsumerConnections(self, request: admin_pb2.GroupRequest, context: grpc.aio.ServicerContext
                                  ) -> admin_pb2.ConsumerConnectionsResponse:
        resp = admin_pb2.ConsumerConnectionsResponse(status=ok())
        for c in self.broker.clients.of_group(request.group):
            resp.connections.add(client_id=c.client_id, language=c.language, version=c.version,
                                 client_type=c.type_name, address=c.address, last_seen_ms=int(c.last_seen * 1000))
        return resp

    async def BrokerStatus(self, request: common_pb2.Empty, context: grpc.aio.ServicerContext
                           ) -> admin_pb2.BrokerStatusResponse:
        b = self.broker
        store = b.store
        table = {
            "brokerName": b.broker_name, "brokerId": str(b.broker_id), "cluster": b.cluster, "role": b.role,
            "grpcAddr": b.grpc_addr, "internalAddr": b.internal_addr,
            "commitLogMinOffset": str(store.commit_log.min_offset),
            "commitLogMaxOffset": str(store.commit_log.max_offset),
            "commitLogSyncedOffset": str(store.commit_log.log.synced_offset),
            "dispatchBehindBytes": str(store.commit_log.max_offset - store.dispatched),
            "commitLogDiskBytes": str(store.commit_log.log.disk_bytes()), "diskRatio": f"{store.disk_ratio():.3f}",
            "topicNumber": str(len(b.topics.topics)), "consumerGroupNumber": str(len(b.groups.groups)),
            "clients": str(len(b.clients.clients)), "bootTimestamp": str(int(b.started_at * 1000)),
            "flushDiskType": b.settings.flushDiskType, "corruptRanges": str(len(store.commit_log.corrupt)),
            **b.timer.status(),  # RocketMQ's runtime info has timer* keys too (timerOffsetBehind, ...)
        }
        return admin_pb2.BrokerStatusResponse(status=ok(), table=table)

    async def QueueOffsets(self, request: admin_pb2.QueueOffsetsRequest, context: grpc.aio.ServicerContext
                           ) -> admin_pb2.QueueOffsetsResponse:
        cfg = self.broker.topics.get(request.topic)
        if cfg is None:
            return admin_pb2.QueueOffsetsResponse(status=fail(TOPIC_NOT_EXIST, f"topic {request.topic} does not exist"))
        resp = admin_pb2.QueueOffsetsResponse(status=ok())
        for qid in range(max(cfg.read_queue_nums, cfg.write_queue_nums)):
            resp.queues.add(queue_id=qid, min_offset=self.broker.store.min_offset(cfg.name, qid),
                            max_offset=self.broker.store.max_offset(cfg.name, qid))
        return resp

    async def ConsumerOffsets(self, request: common_pb2.Empty, context: grpc.aio.ServicerContext
                              ) -> admin_pb2.ConsumerOffsetsResponse:
        resp = admin_pb2.ConsumerOffsetsResponse(status=ok())
        offsets = dict(self.broker.offsets.offsets)
        for (g, t, q), st in list(self.broker.pop.states.items()):
            offsets[(g, t, q)] = st.committed
        for (g, t, q), off in sorted(offsets.items()):
            resp.offsets.add(group=g, topic=t, queue_id=q, offset=off)
        return resp

    async def ChangeRole(self, request: admin_pb2.ChangeRoleRequest, context: grpc.aio.ServicerContext
                         ) -> common_pb2.Status:
        role = request.role.upper()
        if role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            return fail(BAD_ARGUMENT, f"role {request.role!r} is not ASYNC_MASTER, SYNC_MASTER or SLAVE")
        if (role == "SLAVE") != (request.broker_id > 0):
            return fail(BAD_ARGUMENT, "a master takes broker id 0 and a slave an id > 0")
        try:
            await self.broker.change_role(role, request.broker_id)
        except ValueError as exc:
            return fail(BAD_ARGUMENT, str(exc))
        return ok()

    async def HaStatus(self, request: common_pb2.Empty, context: grpc.aio.ServicerContext
                       ) -> admin_pb2.HaStatusResponse:
        import json

        return admin_pb2.HaStatusResponse(status=ok(), json=json.dumps(self.broker.ha_status(), sort_keys=True))

    async def HaEvents(self, request: admin_pb2.HaEventsRequest, context: grpc.aio.ServicerContext
                       ) -> admin_pb2.HaEventsResponse:
        """From RMQ_SYS_HA_EVENTS in this node's store (every node's events, replicated), not from memory."""
        events = read_events(self.broker.store, self.broker.ha_events, request.max or 100)
        return admin_pb2.HaEventsResponse(status=ok(), events=[e.to_json() for e in events])

    async def AppendHaEvents(self, request: admin_pb2.AppendHaEventsRequest, context: grpc.aio.ServicerContext
                             ) -> common_pb2.Status:
        """A slave or follower of this group hands its replication events to the writer (broker/ha/event_relay.py)."""
        b = self.broker
        try:
            events = decode_forwarded(list(request.events))
        except HaEventError as exc:
            return fail(BAD_ARGUMENT, f"appendHaEvents: {exc}")
        foreign = [e for e in events if (e.cluster, e.group) != (b.cluster, b.ha_events.group)]
        if foreign:
            return fail(BAD_ARGUMENT, f"appendHaEvents: event of group {foreign[0].cluster}/{foreign[0].group} "
                                      f"sent to {b.cluster}/{b.ha_events.group}")
        if not b.is_master:
            return fail(SYSTEM_ERROR, f"{b.node_id} is not the writer of {b.broker_name} ({b.role})")
        if not await b.ha_events.accept(events):
            return fail(SYSTEM_ERROR, f"{b.node_id} could not append the events (no longer the writer?)")
        return ok()
