"""Who is connected: producers and consumers seen through Heartbeat and Telemetry.

Feeds the connection metrics, consumerConnection in admin, FIFO/settings decisions,
and (for transactions) the Telemetry stream on which to ask a producer to check back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from enum import IntEnum

log = logging.getLogger(__name__)

CLIENT_EXPIRY_S = 120.0


class ClientType(IntEnum):
    """What kind of client this is, whatever protocol it speaks.  The numbers are the gRPC v2 ClientType's, so the
    gRPC door checks a request's value and passes it through; the remoting door maps a heartbeat's producer and
    consumer data (consumeType) onto the same kinds."""

    CLIENT_TYPE_UNSPECIFIED = 0
    PRODUCER = 1
    PUSH_CONSUMER = 2
    SIMPLE_CONSUMER = 3
    PULL_CONSUMER = 4
    LITE_PUSH_CONSUMER = 5
    LITE_SIMPLE_CONSUMER = 6


@dataclass
class ClientInfo:
    client_id: str
    client_type: int = ClientType.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    language: str = ""
    version: str = ""
    address: str = ""
    protocol: str = "grpc"  # the front door it came through (grpc, remoting): the gauges' protocol_type label
    topics: set[str] = field(default_factory=set)
    last_seen: float = field(default_factory=time.time)
    outbox: asyncio.Queue[object] | None = None  # server-to-client Telemetry commands (the newest stream's)
    # every open Telemetry stream of this client: the official client opens one per set of endpoints a
    # route names, so a route change leaves it with several (the newest one is used)
    outboxes: list[asyncio.Queue[object]] = field(default_factory=list)
    no_stream_since: float = field(default_factory=time.monotonic)  # when its last stream here ended (monotonic)

    @property
    def type_name(self) -> str:
        try:
            return ClientType(self.client_type).name
        except ValueError:
            return f"UNKNOWN_{self.client_type}"


class ClientRegistry:
    def __init__(self) -> None:
        self.clients: dict[str, ClientInfo] = {}

    def touch(self, client_id: str, **fields: object) -> ClientInfo:
        info = self.clients.get(client_id)
        if info is None:
            info = ClientInfo(client_id)
            self.clients[client_id] = info
        fresh = info.client_type == ClientType.CLIENT_TYPE_UNSPECIFIED and fields.get("client_type") not in (
            None, ClientType.CLIENT_TYPE_UNSPECIFIED)
        for name, value in fields.items():
            if value not in (None, "", ClientType.CLIENT_TYPE_UNSPECIFIED):
                setattr(info, name, value)
        info.last_seen = time.time()
        if fresh:
            log.info("client connected: id=%s type=%s group=%s language=%s address=%s", client_id, info.type_name,
                     info.group or "-", info.language or "-", info.address or "-")
        return info

    def attach(self, client_id: str, outbox: asyncio.Queue[object]) -> ClientInfo:
        """A Telemetry stream of ``client_id`` opened here (or was relayed here by another member)."""
        info = self.touch(client_id)
        info.outboxes.append(outbox)
        info.outbox = outbox
        log.info("telemetry stream of client %s opened (%d open)", client_id, len(info.outboxes))
        return info

    def detach(self, client_id: str, outbox: asyncio.Queue[object]) -> None:
        """That stream ended; commands go to the client's newest stream still open, if any."""
        info = self.clients.get(client_id)
        if info is None or outbox not in info.outboxes:
            return
        info.outboxes.remove(outbox)
        info.outbox = info.outboxes[-1] if info.outboxes else None
        if info.outbox is None:
            info.no_stream_since = time.monotonic()
        log.info("telemetry stream of client %s closed (%d open)", client_id, len(info.outboxes))

    def remove(self, client_id: str, reason: str) -> None:
        info = self.clients.pop(client_id, None)
        if info is not None:
            log.info("client disconnected: id=%s type=%s group=%s (%s)", client_id, info.type_name,
                     info.group or "-", reason)

    def expire(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for cid, info in list(self.clients.items()):
            if now - info.last_seen > CLIENT_EXPIRY_S and info.outbox is None:
                self.remove(cid, "no heartbeat")

    def of_group(self, group: str) -> list[ClientInfo]:
        return [c for c in self.clients.values() if c.group == group]

    def producers(self) -> list[ClientInfo]:
        return [c for c in self.clients.values() if c.client_type == ClientType.PRODUCER]

    def consumers(self) -> list[ClientInfo]:
        not_consumers = (ClientType.PRODUCER, ClientType.CLIENT_TYPE_UNSPECIFIED)
        return [c for c in self.clients.values() if c.client_type not in not_consumers]
