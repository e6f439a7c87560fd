"""What a send asks of the broker beyond the stored message, in plain values (issue 17: protobuf stays in
the protocol layers).  The gRPC front door reads it from a v2 ``Message``'s system properties
(broker/grpc_service.py), the remoting one from RocketMQ's properties and system flag
(broker/remoting/broker_handlers.py); ``Broker.put_messages`` turns it into a transaction half or a
timer record.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SendKind:
    transaction: bool = False  # a half message: stored in the half topic until committed or rolled back
    deliver_at_ms: int | None = None  # a delivery time (ms since the epoch); only a future one delays


PLAIN = SendKind()  # a normal message: no transaction, no delivery time


_UNIQ_PREFIX = os.urandom(8).hex().upper()  # this process's: ids of two processes differ in it
_UNIQ_COUNTER = itertools.count(int.from_bytes(os.urandom(4), "big"))


def new_uniq_key() -> str:
    """A UNIQ_KEY for a message its client sent without one (the Go client's batch entries): 32 upper-case hex
    digits like ``uuid.uuid4().hex.upper()``, which it replaces on the send path (uuid4 reads the OS's random
    source for every message: 7 % of the broker's CPU on batches in issue 20's profile).  Unique within a
    process by the counter, between processes by the random prefix drawn at start."""
    return f"{_UNIQ_PREFIX}{next(_UNIQ_COUNTER):016X}"
