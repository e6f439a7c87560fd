"""What the replication-event log is given of its broker (forward, context), and reading back.

* **Forwarding.** A node that cannot write its own log (slave, follower, candidate) sends its
  events to the writer of its group through the writer's admin ``AppendHaEvents``: the Raft
  leader in DLedger mode, the master in Master/Slave and controller mode.  The writer appends
  them as they are, so ``RMQ_SYS_HA_EVENTS`` holds every node's events and is replicated
  with the rest of the log.
* **Spool.** Undelivered events live in ``<storePathRootDir>/ha_events.spool`` (JSON lines)
  until the topic holds them, so a restart re-sends them.
* **Context.** An event that names no term (epoch) gets the node's current one: the first
  role change after a restart carries the term loaded from the Raft hard state.
* **Reading back.** ``admin haEvents`` answers from the topic in the node's own store (the
  committed, dispatched prefix, identical on every replica), newest ``limit`` events plus
  every older change event the index finds, merged with this node's undelivered events.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc
from rocketscope.ha_events import (
    COMMIT_ADVANCED,
    EVENT_TYPES,
    REPLICA_ACK,
    HaEvent,
    HaEventError,
)
from rocketscope.names import HA_EVENTS_TOPIC

if TYPE_CHECKING:
    from rocketscope.broker.controller.replicas import ReplicasManager
    from rocketscope.broker.dledger.node import DLedgerNode
    from rocketscope.broker.security import SecurityConfig
    from rocketscope.broker.store.message_store import MessageStore

    from .event_log import HaEventLog
    from .slave import ReplicationSlave

log = logging.getLogger(__name__)
SPOOL_NAME = "ha_events.spool"
CHANGE_TYPES = sorted(set(EVENT_TYPES) - {REPLICA_ACK, COMMIT_ADVANCED})
CHANGES_PER_TYPE = 1000  # older change events read back per type (the index lookup's bound)


class ThrottleCounter(Protocol):
    def on_ha_event_throttled(self, event_type: str, n: int) -> None: ...


class RelayHost(Protocol):
    """What the event relay uses of its broker (issue 17: this, not the whole Broker); read-only views."""

    @property
    def security(self) -> SecurityConfig: ...
    @property
    def dledger(self) -> DLedgerNode | None: ...
    @property
    def replicas(self) -> ReplicasManager | None: ...
    @property
    def replication_slave(self) -> ReplicationSlave: ...
    @property
    def metrics(self) -> ThrottleCounter: ...
    @property
    def internal_addr(self) -> str: ...
    @property
    def node_id(self) -> str: ...


def writer_admin_addr(broker: RelayHost) -> str:
    """The admin address of the node that appends to this group's log, '' if unknown or this node."""
    if broker.dledger is not None:
        return broker.dledger.leader_admin_addr() or ""
    if broker.replicas is not None:
        addr = broker.replicas.master_addr
        return "" if addr == broker.internal_addr else addr
    slave = broker.replication_slave
    return slave.master_admin_addr or slave.master_addresses()[1]


class EventRelay:
    """What the node's event log (broker/ha/event_log.py) is given at construction to reach beyond the node:
    the forward path to the writer, the term/epoch context and the throttle counter.  Each looks the broker's
    HA objects up when called, since they are built after the event log."""

    def __init__(self, host: RelayHost) -> None:
        self.host = host
        self._failures = 0

    def context(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.host.dledger is not None:
            out["term"] = self.host.dledger.term
        if self.host.replicas is not None:
            out["epoch"] = self.host.replicas.master_epoch
        return out

    async def forward(self, batch: list[HaEvent]) -> bool:
        addr = writer_admin_addr(self.host)
        if not addr:
            return False
        security = self.host.security
        request = admin_pb2.AppendHaEventsRequest(events=[e.to_json() for e in batch])
        try:  # a channel per forward (at most one every FORWARD_LINGER_S): the writer moves with elections
            async with security.client_tls.channel(addr) as channel:
                status = await admin_pb2_grpc.BrokerAdminStub(channel).AppendHaEvents(
                    request, timeout=5, metadata=security.inner_metadata())
        except grpc.aio.AioRpcError as exc:
            self._note_failure(f"forwarding {len(batch)} replication events to {addr} failed: {exc.code().name}")
            return False
        if status.code:
            self._note_failure(f"writer {addr} refused {len(batch)} replication events: {status.remark}")
            return False
        self._failures = 0
        return True

    def on_throttled(self, event_type: str, n: int) -> None:
        self.host.metrics.on_ha_event_throttled(event_type, n)

    def _note_failure(self, text: str) -> None:
        """The first failure of a row at INFO (an outage would otherwise log twice a second)."""
        self._failures += 1
        log.log(logging.INFO if self._failures == 1 else logging.DEBUG, "%s (retrying)", text)


def decode_forwarded(texts: list[str]) -> list[HaEvent]:
    """The events of an AppendHaEvents request; HaEventError names the bad one."""
    out = []
    for i, text in enumerate(texts):
        try:
            out.append(HaEvent.from_json(text))
        except HaEventError as exc:
            raise HaEventError(f"events[{i}]: {exc}") from None
    return out


def read_events(store: MessageStore, events: HaEventLog, limit: int) -> list[HaEvent]:
    """Events of this group from the topic (newest ``limit`` + older changes) and undelivered local ones."""
    found: dict[str, HaEvent] = {}

    def add(body: bytes) -> None:
        try:
            e = HaEvent.from_json(body)
        except HaEventError:
            return
        found.setdefault(e.to_json(), e)

    hi = store.max_offset(HA_EVENTS_TOPIC, 0)
    lo = max(store.min_offset(HA_EVENTS_TOPIC, 0), hi - max(limit, 0))
    pos = lo
    while pos < hi:
        got = store.get(HA_EVENTS_TOPIC, 0, pos, min(hi - pos, 256))
        if not got.messages:
            break
        for m in got.messages:
            add(m.body)
        pos = got.next_offset
    group = events.group
    for type_ in CHANGE_TYPES:
        for m in store.lookup(HA_EVENTS_TOPIC, f"{group}#{type_}", CHANGES_PER_TYPE):
            add(m.body)
    for e in list(events.pending):
        found.setdefault(e.to_json(), e)
    return sorted(found.values(), key=lambda e: (e.ts, e.node, e.type))


def dedupe(texts: list[str]) -> list[dict[str, Any]]:
    """Parsed events without duplicates (several replicas answer the same topic), oldest first."""
    seen: dict[str, dict[str, Any]] = {}
    for t in texts:
        d = json.loads(t)
        seen.setdefault(json.dumps(d, sort_keys=True), d)
    return sorted(seen.values(), key=lambda d: (d["ts"], d["node"], d["type"]))
