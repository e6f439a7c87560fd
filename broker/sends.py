"""What a send asks of the broker beyond the stored message, in plain values (issue 17: protobuf stays in
the protocol layers).  The gRPC front door reads it from a v2 ``Message``'s system properties
(broker/grpc_service.py), the remoting one from RocketMQ's properties and system flag
(broker/remoting/broker_handlers.py); ``Broker.put_messages`` turns it into a transaction half or a
timer record.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SendKind:
    transaction: bool = False  # a half message: stored in the half topic until committed or rolled back
    deliver_at_ms: int | None = None  # a delivery time (ms since the epoch); only a future one delays


PLAIN = SendKind()  # a normal message: no transaction, no delivery time
