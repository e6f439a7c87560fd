"""The route table, with no I/O: registrations in, routes and cluster views out.

Kept pure so its rules (which registrations update topic queues, when brokers expire,
what a route looks like when a group has lost its master) are unit-testable without
sockets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketscope.broker.protocol import common_pb2, namesrv_pb2

log = logging.getLogger(__name__)

DEFAULT_BROKER_EXPIRED_MS = 120_000
PERM_READ = 4
PERM_WRITE = 2


@dataclass
class LiveBroker:
    registration: namesrv_pb2.BrokerRegistration
    last_update_ms: int
    session: int

    @property
    def key(self) -> tuple[str, str, int]:
        r = self.registration
        return (r.cluster_name, r.broker_name, r.broker_id)


@dataclass
class RouteInfo:
    expired_ms: int = DEFAULT_BROKER_EXPIRED_MS
    brokers: dict[tuple[str, str, int], LiveBroker] = field(default_factory=dict)
    # topic -> broker name -> (TopicConfig, DataVersion counter of the registration that set it)
    topic_queues: dict[str, dict[str, common_pb2.TopicConfig]] = field(default_factory=dict)
    on_expired: Callable[[str], None] | None = None
    # broker names whose write permission an operator took away (wipeWritePerm): their queues are read-only in
    # every route until addWritePerm, or until the broker name has no live member (Apache RocketMQ rebuilds a
    # broker's queue data, with its own permission, when it registers anew)
    write_wiped: set[str] = field(default_factory=set)

    def register(self, reg: namesrv_pb2.BrokerRegistration, session: int, now_ms: int | None = None
                 ) -> namesrv_pb2.RegisterResult:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        key = (reg.cluster_name, reg.broker_name, reg.broker_id)
        for other, lb in list(self.brokers.items()):  # the same broker under a new id (switch-over, election)
            if other != key and lb.session == session and lb.registration.broker_addr == reg.broker_addr:
                del self.brokers[other]
                log.info("broker %s at %s changed id %d -> %d", reg.broker_name, reg.broker_addr, other[2],
                         reg.broker_id)
        old = self.brokers.get(key)
        fresh = old is None or old.registration.broker_addr != reg.broker_addr
        if (fresh and old is not None and reg.broker_id == 0 and reg.epoch >= 0
                and old.registration.epoch > reg.epoch and now_ms - old.last_update_ms < self.expired_ms):
            # controller mode: a deposed master cut off from the controllers still registers as master;
            # the live one of a newer epoch keeps the route (RocketMQ compares the state version the same way)
            log.warning("ignoring master registration of %s at %s with epoch %d: %s holds epoch %d",
                        reg.broker_name, reg.broker_addr, reg.epoch, old.registration.broker_addr,
                        old.registration.epoch)
            return namesrv_pb2.RegisterResult(status=common_pb2.Status(code=0),
                                              master_addr=old.registration.broker_addr,
                                              ha_server_addr=old.registration.ha_server_addr)
        self.brokers[key] = LiveBroker(reg, now_ms, session)
        if reg.broker_id == 0:  # only the master's topic configs define queues, as in RocketMQ
            seen = set()
            for tc in reg.topics:
                seen.add(tc.topic_name)
                self.topic_queues.setdefault(tc.topic_name, {})[reg.broker_name] = tc
            for topic, by_broker in list(self.topic_queues.items()):
                if topic not in seen and reg.broker_name in by_broker:
                    del by_broker[reg.broker_name]
                    if not by_broker:
                        del self.topic_queues[topic]
                    log.info("topic %s removed from broker %s", topic, reg.broker_name)
        if fresh:
            log.info("broker registered: cluster=%s name=%s id=%d addr=%s grpc=%s role=%s topics=%d",
                     reg.cluster_name, reg.broker_name, reg.broker_id, reg.broker_addr, reg.grpc_addr, reg.role,
                     len(reg.topics))
        master = self.brokers.get((reg.cluster_name, reg.broker_name, 0))
        return namesrv_pb2.RegisterResult(
            status=common_pb2.Status(code=0),
            master_addr=master.registration.broker_addr if master else "",
            ha_server_addr=master.registration.ha_server_addr if master else "",
        )

    def unregister(self, cluster: str, name: str, broker_id: int, reason: str) -> bool:
        live = self.brokers.pop((cluster, name, broker_id), None)
        if live is None:
            return False
        log.info("broker removed: cluster=%s name=%s id=%d addr=%s (%s)", cluster, name, broker_id,
                 live.registration.broker_addr, reason)
        if not any(k[1] == name for k in self.brokers):
            if name in self.write_wiped:
                self.write_wiped.discard(name)
                log.info("write permission of broker %s restored: no member of it is registered", name)
            for topic, by_broker in list(self.topic_queues.items()):
                by_broker.pop(name, None)
                if not by_broker:
                    del self.topic_queues[topic]
        return True

    def session_closed(self, session: int) -> int:
        gone = [lb.key for lb in self.brokers.values() if lb.session == session]
        for key in gone:
            self.unregister(*key, reason="connection closed")
        return len(gone)

    def scan_not_active(self, now_ms: int | None = None) -> int:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        gone = []
        for lb in self.brokers.values():
            timeout = lb.registration.heartbeat_timeout_ms or self.expired_ms
            if now_ms - lb.last_update_ms > timeout:
                gone.append(lb.key)
        for key in gone:
            self.unregister(*key, reason="no registration within the expiry time")
            if self.on_expired is not None:
                self.on_expired(key[0])
        return len(gone)

    def delete_topic(self, topic: str) -> bool:
        return self.topic_queues.pop(topic, None) is not None

    def route(self, topic: str) -> namesrv_pb2.TopicRouteData | None:
        by_broker = self.topic_queues.get(topic)
        if not by_broker:
            return None
        route = namesrv_pb2.TopicRouteData()
        for broker_name, tc in sorted(by_broker.items()):
            members = {k: lb for k, lb in self.brokers.items() if k[1] == broker_name}
            if not members:
                continue
            perm = tc.perm
            serves = any(lb.registration.extras.get("anyNodeServes") == "true" for lb in members.values())
            if not serves and not any(k[2] == 0 for k in members):
                perm &= ~PERM_WRITE  # no master: read-only, like RocketMQ's acting master
            if broker_name in self.write_wiped:
                perm &= ~PERM_WRITE  # wipeWritePerm: producers go elsewhere, consumers still drain it
            route.queue_datas.add(broker_name=broker_name, read_queue_nums=tc.read_queue_nums,
                                  write_queue_nums=tc.write_queue_nums, perm=perm, topic_sys_flag=tc.topic_sys_flag)
            bd = route.broker_datas.add(broker_name=broker_name, cluster=next(iter(members))[0])
            for (_, _, bid), lb in members.items():
                bd.broker_addrs[bid] = lb.registration.broker_addr
                bd.grpc_addrs[bid] = lb.registration.grpc_addr
                if lb.registration.extras.get("anyNodeServes") == "true":
                    bd.any_node_serves = True
            route.order = route.order or tc.order
            route.attributes.update(tc.attributes)
        return route if route.queue_datas else None

    def topics_on_broker(self, broker_name: str) -> int:
        return sum(1 for by_broker in self.topic_queues.values() if broker_name in by_broker)

    def wipe_write_perm(self, broker_name: str) -> int:
        """Take write permission from every route of ``broker_name``; the number of its topics (RocketMQ's
        WIPE_WRITE_PERM_OF_BROKER answer), 0 when the name server knows no such broker."""
        count = self.topics_on_broker(broker_name)
        if count or any(k[1] == broker_name for k in self.brokers):
            self.write_wiped.add(broker_name)
            log.info("write permission of broker %s wiped (%d topics)", broker_name, count)
        return count

    def add_write_perm(self, broker_name: str) -> int:
        """Give write permission back (ADD_WRITE_PERM_OF_BROKER); the number of the broker's topics."""
        count = self.topics_on_broker(broker_name)
        if broker_name in self.write_wiped:
            self.write_wiped.discard(broker_name)
            log.info("write permission of broker %s added back (%d topics)", broker_name, count)
        return count

    def cluster_info(self) -> list[tuple[namesrv_pb2.BrokerRegistration, int]]:
        return [(lb.registration, lb.last_update_ms) for _, lb in sorted(self.brokers.items())]

    def topics(self) -> list[str]:
        return sorted(self.topic_queues)
