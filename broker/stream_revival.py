"""Routes that make the official Python client open a Telemetry stream again after losing it (issue 15).

The client opens a Telemetry stream for each set of endpoints a route names, when that
set is new to it, and otherwise only re-opens one at its settings sync, every 300 s.  A
stream ends for good when the member holding it is killed, and the writer then cannot
check the producer's transactions back for up to five minutes (tests/chaos,
``tx_unchecked``).  So the writer, answering a route to a producer that has had no stream
here (served or relayed, broker/forwarding.py ``StreamRelay``) for ``GRACE_S``, names a
*variant* of each queue's endpoints: a set the client has not seen, for which it opens a
channel and a stream at once.  The variant changes every ``STEP_S`` while the stream stays
missing; once it is back, routes name every live member again (the client then opens one
more stream for that set, which is harmless).  The client asks for routes every 30 s,
which bounds how long a producer stays unreachable.

A variant never leaves the client fewer than two live members: the client sends on the
channel of the endpoints its route names, and gRPC's pick_first can only fail over
between the addresses of that one channel.  Session 9's chaos run (DLedger seed 7,
docs/CHAOS.md) had a two-member variant cut to one address while a member was down; when
that one member (the writer) was killed next, 270 sends failed until it came back,
although the new leader was up.  So:

* three or more live members: leave one out, in turn (at least two remain);
* two live members: add a member this broker listed earlier and that is gone now (its
  address refuses at once, and it is usually back within seconds), or else name the
  live set as it is (it may itself be new to a client that last saw a third member);
* one live member (a standalone broker, a Master/Slave master, a group down to one): the
  same address under the DOMAIN_NAME scheme instead of IPv4.  The client keys its channels
  and streams by scheme and addresses (``dns:127.0.0.1:8081`` is not ``ipv4:127.0.0.1:8081``),
  so it opens a new channel and stream, which gRPC's DNS resolver takes to the same address
  (an IP literal resolves to itself).  The Master/Slave chaos schedule found this case
  (tests/chaos: an open transaction never checked back after the master's restart, since the
  client re-opens a stream by itself only at its settings sync, every 300 s).

A group of two whose members are both up gets no variant; its producers get a stream back at
their next settings sync (300 s) or the next membership change.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from rocketmq.grpc_protocol import definition_pb2 as pb

if TYPE_CHECKING:
    from .clients import ClientRegistry

log = logging.getLogger(__name__)
Address = tuple[str, int]


class RevivalHost(Protocol):
    """What route variants use of the broker (issue 17): its clients (who lost a stream) and whether it is the
    writer (only the writer varies routes); read-only views."""

    @property
    def clients(self) -> ClientRegistry: ...
    @property
    def is_master(self) -> bool: ...


class StreamRevival:
    GRACE_S = 5.0
    STEP_S = 20.0
    REMEMBER_S = 600.0  # how long a member that left a route is still offered in two-member variants

    def __init__(self, broker: RevivalHost) -> None:
        self.broker = broker
        self._variant: dict[str, tuple[int, float]] = {}  # producer -> (variant number, since)
        self._seen: dict[str, dict[Address, float]] = {}  # broker name -> address -> last listed (monotonic)
        self.routes_varied = 0

    def apply(self, client_id: str, queues: Any) -> None:
        """Give ``queues`` a variant of their endpoints when ``client_id`` is a producer that lost its stream."""
        now = time.monotonic()
        self._remember(queues, now)
        info = self.broker.clients.clients.get(client_id) if client_id else None
        if info is None or info.client_type != pb.PRODUCER or not self.broker.is_master:
            return
        if info.outbox is not None:
            self._variant.pop(client_id, None)
            return
        if now - info.no_stream_since < self.GRACE_S:
            return
        k, since = self._variant.get(client_id, (-1, 0.0))
        if now - since >= self.STEP_S:
            k, since = k + 1, now
            self._variant[client_id] = (k, since)
            self.routes_varied += 1
            log.info("producer %s has no Telemetry stream: its routes name endpoint variant %d so it opens one",
                     client_id, k)
        for mq in queues:
            live = sorted((a.host, a.port) for a in mq.broker.endpoints.addresses)
            if len(live) == 1 and mq.broker.endpoints.scheme == pb.IPv4:
                mq.broker.endpoints.scheme = pb.DOMAIN_NAME
                continue
            chosen = self.variant(live, self._gone(mq.broker.name, live, now), k)
            if chosen == live:
                continue
            del mq.broker.endpoints.addresses[:]
            for host, port in chosen:
                mq.broker.endpoints.addresses.add(host=host, port=port)

    @staticmethod
    def variant(live: list[Address], gone: list[Address], k: int) -> list[Address]:
        """Variant ``k`` of a route naming ``live``; never fewer than two live members (module docstring)."""
        if len(live) >= 3:
            return [a for i, a in enumerate(live) if i != k % len(live)]
        if len(live) == 2:
            options = [sorted([*live, g]) for g in gone] + [live]
            return options[k % len(options)]
        return live

    def _remember(self, queues: Any, now: float) -> None:
        for mq in queues:
            seen = self._seen.setdefault(mq.broker.name, {})
            for a in mq.broker.endpoints.addresses:
                seen[(a.host, a.port)] = now

    def _gone(self, broker_name: str, live: list[Address], now: float) -> list[Address]:
        """Members listed for ``broker_name`` within ``REMEMBER_S`` that the current route leaves out."""
        seen = self._seen.get(broker_name, {})
        for address, at in list(seen.items()):
            if now - at > self.REMEMBER_S:
                del seen[address]
        return sorted(a for a in seen if a not in live)
