"""Broker-side operations of mqadmin's maintenance commands (issue 21), mixed into BrokerAdminService.

resetOffsetByTime and cloneGroupOffset move a group's committed offsets; producerConnection,
topicStatus and statsAll read what the broker already tracks; getBrokerConfig and
updateBrokerConfig read and change the running configuration, where only the keys in
``HOT_RELOADABLE`` may change: those are read from ``settings`` on every use (broker/broker.py,
broker/grpc_service.py, broker/remoting/broker_handlers.py), so a new value applies to the next
request. Any other key is fixed at start (ports, store layout, HA mode, ...) and is refused
with a message that names it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from rocketscope.broker.protocol import admin_pb2, common_pb2
from rocketscope.config import ConfigError
from rocketscope.names import is_retry_or_dlq

if TYPE_CHECKING:
    from rocketscope.config import Settings

    from .clients import ClientRegistry
    from .groups import GroupManager
    from .ha.event_log import HaEventLog
    from .offsets import OffsetManager
    from .pop import PopService
    from .request_modes import RequestModes
    from .store.message_store import MessageStore
    from .timer import TimerService
    from .topics import TopicManager

log = logging.getLogger(__name__)

SYSTEM_ERROR, TOPIC_NOT_EXIST, GROUP_NOT_EXIST, BAD_ARGUMENT = 1, 17, 24, 13

# Keys updateBrokerConfig applies to a running broker (docs/CONFIG.md lists them too): each is read
# from settings on every use, never copied into another object at start.
HOT_RELOADABLE: tuple[str, ...] = (
    "brokerPermission",          # routes and sends: Broker.writable, Broker.registration (re-registered at once)
    "autoCreateTopicEnable",     # Broker.route_for, Broker.topic_for_send
    "autoCreateSubscriptionGroup",  # gRPC and remoting consumers of an unknown group
    "sendMessageQueueSelection",  # Broker.select_queue
    "timerMaxDelaySec",          # delay checks of gRPC and remoting sends
    "maxInvisibleTimeMills",     # gRPC ReceiveMessage / ChangeInvisibleDuration bound
    "enablePropertyFilter",      # SQL92 subscriptions of pulls
    "priorityOrderAsc",          # PopService.pop of a PRIORITY topic (broker/priority.py)
    "popFromRetryProbabilityForPriority",  # same
)

MINUTE_MS, DAY_MS = 60_000, 24 * 3600_000


def _status(code: int = 0, remark: str = "") -> common_pb2.Status:
    return common_pb2.Status(code=code, remark=remark)


class AdminHost(Protocol):
    """What the admin service (this module and broker/admin_service.py) uses of its broker (issue 17: this, not
    the whole Broker); read-only views, the role change and the HA status table."""

    @property
    def topics(self) -> TopicManager: ...
    @property
    def groups(self) -> GroupManager: ...
    @property
    def offsets(self) -> OffsetManager: ...
    @property
    def pop(self) -> PopService: ...
    @property
    def store(self) -> MessageStore: ...
    @property
    def clients(self) -> ClientRegistry: ...
    @property
    def request_modes(self) -> RequestModes: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def timer(self) -> TimerService: ...
    @property
    def ha_events(self) -> HaEventLog: ...
    @property
    def topics_on_change(self) -> Callable[[], None]: ...
    @property
    def cluster(self) -> str: ...
    @property
    def broker_name(self) -> str: ...
    @property
    def broker_id(self) -> int: ...
    @property
    def node_id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def is_master(self) -> bool: ...
    @property
    def grpc_addr(self) -> str: ...
    @property
    def internal_addr(self) -> str: ...
    @property
    def started_at(self) -> float: ...
    async def change_role(self, role: str, broker_id: int) -> None: ...
    def ha_status(self) -> dict[str, Any]: ...


class BrokerAdminOps:
    """The RPCs of mqadmin's maintenance commands; ``self.broker`` is set by BrokerAdminService."""

    broker: AdminHost

    async def ResetOffset(self, request: admin_pb2.ResetOffsetRequest, context: grpc.aio.ServicerContext
                          ) -> admin_pb2.ResetOffsetResponse:
        """Every queue of the topic to its first message stored at or after ``timestamp`` (resetOffsetByTime),
        or to the given offsets (cloneGroupOffset). Without ``force`` an offset only moves backwards,
        as mqadmin's ``-f false``. The group's in-flight hand-outs on the reset queues are dropped.

        A remoting push or lite-pull consumer keeps its offsets in the client: as Apache 5.3.3 does by default
        (useServerSideResetOffset), the reset is also kept as a one-shot per queue, and that queue's next
        PULL_MESSAGE answers PULL_OFFSET_MOVED (OFFSET_RESET) with the new offset, which the client adopts
        (broker/remoting/broker_handlers.py ``pull``). No RESET_CONSUMER_CLIENT_OFFSET is sent, as on Apache."""
        b = self.broker
        cfg = b.topics.get(request.topic)
        if cfg is None:
            return admin_pb2.ResetOffsetResponse(status=_status(
                TOPIC_NOT_EXIST, f"topic: {request.topic} does not exist on broker {b.broker_name}"))
        if not request.group:
            return admin_pb2.ResetOffsetResponse(status=_status(BAD_ARGUMENT, "group: empty consumer group"))
        explicit = {o.queue_id: o.offset for o in request.offsets if o.topic in ("", request.topic)}
        known = b.groups.get(request.group) is not None or any(
            g == request.group for (g, _, _) in b.offsets.offsets)
        if not known and not explicit:  # cloneGroupOffset may give a new group its first offsets
            return admin_pb2.ResetOffsetResponse(status=_status(
                GROUP_NOT_EXIST, f"group: consumer group {request.group} does not exist on broker {b.broker_name}"))
        if not b.is_master:
            return admin_pb2.ResetOffsetResponse(status=_status(
                SYSTEM_ERROR, f"broker {b.node_id} is not a master: reset offsets on the master of {b.broker_name}"))
        outside = sorted(q for q in explicit if not 0 <= q < cfg.read_queue_nums)
        if outside:
            return admin_pb2.ResetOffsetResponse(status=_status(
                BAD_ARGUMENT, f"offsets: queue {outside[0]} is outside 0..{cfg.read_queue_nums - 1} of topic "
                              f"{cfg.name} on broker {b.broker_name}"))
        if not explicit and request.timestamp < 0:
            return admin_pb2.ResetOffsetResponse(status=_status(BAD_ARGUMENT, "timestamp: must not be negative"))
        if explicit and not known:
            try:
                b.groups.create_if_absent(request.group)  # cloneGroupOffset's destination, with default settings
            except ValueError as exc:
                return admin_pb2.ResetOffsetResponse(status=_status(BAD_ARGUMENT, f"group: {exc}"))
        resp = admin_pb2.ResetOffsetResponse(status=_status())
        for qid in range(cfg.read_queue_nums):
            lo, hi = b.store.min_offset(cfg.name, qid), b.store.max_offset(cfg.name, qid)
            if explicit:
                if qid not in explicit:
                    continue
                target = min(max(explicit[qid], lo), hi)
            else:
                target = b.store.offset_by_time(cfg.name, qid, request.timestamp)
            old = b.pop.committed(request.group, cfg.name, qid)
            old = lo if old is None else old
            if not request.force and not explicit and target >= old:
                target = old
            b.pop.reset_offset(request.group, cfg.name, qid, target)
            b.pop.client_resets[(request.group, cfg.name, qid)] = target  # a running remoting consumer moves too
            resp.queues.add(topic=cfg.name, queue_id=qid, old_offset=old, new_offset=target)
        b.offsets.flush()
        log.info("offsets of group %s on topic %s reset (%s): %s", request.group, cfg.name,
                 "explicit" if explicit else f"timestamp {request.timestamp} force={request.force}",
                 ", ".join(f"q{q.queue_id} {q.old_offset}->{q.new_offset}" for q in resp.queues))
        return resp

    async def ProducerConnections(self, request: admin_pb2.ProducerConnectionsRequest,
                                  context: grpc.aio.ServicerContext) -> admin_pb2.ConsumerConnectionsResponse:
        """Producers connected to this broker. A remoting producer has a group (its heartbeat names no topic):
        it matches by ``group``. A gRPC producer declares topics but no group: it matches by ``topic``,
        whatever ``group`` says."""
        resp = admin_pb2.ConsumerConnectionsResponse(status=_status())
        for c in self.broker.clients.producers():
            if c.group:
                if request.group and c.group != request.group:
                    continue
            elif request.topic and request.topic not in c.topics:
                continue
            resp.connections.add(client_id=c.client_id, language=c.language, version=c.version,
                                 client_type=c.type_name, address=c.address, last_seen_ms=int(c.last_seen * 1000))
        return resp

    async def GetBrokerConfig(self, request: common_pb2.Empty, context: grpc.aio.ServicerContext
                              ) -> admin_pb2.BrokerConfigResponse:
        resp = admin_pb2.BrokerConfigResponse(status=_status(), hot_reloadable=list(HOT_RELOADABLE))
        for name, value in sorted(self.broker.settings.as_dict().items()):
            resp.config[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return resp

    async def UpdateBrokerConfig(self, request: admin_pb2.UpdateBrokerConfigRequest,
                                 context: grpc.aio.ServicerContext) -> common_pb2.Status:
        """All keys are checked before any is applied: one refused key leaves the configuration as it was."""
        s = self.broker.settings
        if not request.config:
            return _status(BAD_ARGUMENT, "config: no key given")
        parsed = {}
        for name, text in sorted(request.config.items()):
            key = s.key(name)
            if key is None:
                return _status(BAD_ARGUMENT, f"{name}: not a broker config key")
            if name not in HOT_RELOADABLE:
                return _status(BAD_ARGUMENT, f"{name}: needs a broker restart (hot-reloadable keys: "
                                             f"{', '.join(HOT_RELOADABLE)})")
            try:
                parsed[name] = key.parse(text)
            except ConfigError as exc:
                return _status(BAD_ARGUMENT, str(exc))
        for name, value in parsed.items():
            old = s.get(name)
            s.set(name, value)
            s.raw[name] = str(request.config[name])
            log.info("broker config %s changed from %s to %s by updateBrokerConfig", name, old, value)
        if "brokerPermission" in parsed:
            self.broker.topics.broker_perm = parsed["brokerPermission"]
            self.broker.topics_on_change()  # the name servers learn the new permission at once
        return _status()

    async def TopicStats(self, request: admin_pb2.TopicStatsRequest, context: grpc.aio.ServicerContext
                         ) -> admin_pb2.TopicStatsResponse:
        """Per queue: offsets, newest store time and messages stored in the last minute and day (found by
        binary search on store time, so they count what is still stored)."""
        b = self.broker
        if request.topic:
            cfg = b.topics.get(request.topic)
            if cfg is None:
                return admin_pb2.TopicStatsResponse(status=_status(
                    TOPIC_NOT_EXIST, f"topic: {request.topic} does not exist on broker {b.broker_name}"))
            configs = [cfg]
        else:
            configs = [c for c in b.topics.all() if not is_retry_or_dlq(c.name)]
        now = int(time.time() * 1000)
        resp = admin_pb2.TopicStatsResponse(status=_status())
        for cfg in configs:
            for qid in range(max(cfg.read_queue_nums, cfg.write_queue_nums)):
                lo, hi = b.store.min_offset(cfg.name, qid), b.store.max_offset(cfg.name, qid)
                last = b.store.store_time(cfg.name, qid, hi - 1) if hi > lo else 0
                resp.queues.add(topic=cfg.name, queue_id=qid, min_offset=lo, max_offset=hi,
                                last_update_timestamp=last or 0,
                                in_last_minute=hi - b.store.offset_by_time(cfg.name, qid, now - MINUTE_MS),
                                in_last_day=hi - b.store.offset_by_time(cfg.name, qid, now - DAY_MS))
        return resp
