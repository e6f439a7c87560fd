"""Where the broker tells a tracer what happened to a message (broker-side trace).

The broker calls these hooks at the moments RocketMQ's client hooks would fire, so a
client without instrumentation still gets Pub, SubBefore and SubAfter records.  The
implementation lives in ``rocketscope.trace.broker_side``; this module only fixes the
contract and provides the no-op default.  Every hook must be cheap and must never
raise: it runs on the broker's event loop, in the send and consume paths.

``client_traced`` is True when the client announced its own instrumentation with the
gRPC metadata header ``x-rocketscope-trace: client``; a tracer then writes nothing for
that operation, so nothing is recorded twice.  ``request_id`` pairs SubBefore with
SubAfter: it is unique per hand-out (one delivery attempt).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .store.record import StoredMessage

CLIENT_TRACE_HEADER = "x-rocketscope-trace"


class TraceHooks(Protocol):
    def on_stored(self, msg: StoredMessage, *, client_id: str, client_traced: bool, cost_ms: int,
                  status: str) -> None:
        """A send was stored.  ``msg`` is as stored: for delay and transactional messages its topic is the
        timer or half topic and the real topic is in the REAL_TOPIC property.  ``status`` is the PutStatus
        name (PUT_OK, FLUSH_DISK_TIMEOUT, ...)."""

    def on_send_failed(self, topic: str, msg_id: str, tags: str, keys: str, body_length: int, *, client_id: str,
                       client_traced: bool, code: int, reason: str) -> None:
        """A send was refused (bad request, topic missing, store error)."""

    def on_delivered(self, group: str, msg: StoredMessage, *, attempt: int, request_id: str, client_id: str,
                     client_traced: bool) -> None:
        """A message was handed to a consumer of ``group`` (``msg.topic`` may be the retry topic;
        the origin topic is in RETRY_TOPIC)."""

    def on_acked(self, group: str, load: Callable[[], StoredMessage | None], *, request_id: str, cost_ms: int,
                 client_id: str, client_traced: bool) -> None:
        """The delivery ``request_id`` was acknowledged ``cost_ms`` after it was handed out.

        ``load`` reads the message back from the store; call it only when a record is written:
        the read and decode were 10 % of a traced broker's CPU per message when every ack of an
        instrumented client paid it for nothing."""

    def on_expired(self, group: str, msg: StoredMessage, *, request_id: str, cost_ms: int) -> None:
        """The delivery's invisible duration passed without an ack (nack or timeout): it will be redelivered
        or dead-lettered."""

    def on_dead_lettered(self, group: str, msg: StoredMessage, *, attempts: int) -> None:
        """The message went to ``%DLQ%<group>`` after ``attempts`` deliveries."""

    def on_transaction_end(self, half: StoredMessage, *, state: str, transaction_id: str, from_check: bool) -> None:
        """A half message was resolved: state COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW."""

    def on_recalled(self, topic: str, msg_id: str, *, success: bool) -> None:
        """A delay message was recalled (or the recall failed)."""

    def on_delay_delivered(self, msg: StoredMessage, *, late_ms: int) -> None:
        """A delay message reached its real topic ``late_ms`` after its delivery time."""


class NoTrace:
    """The default: broker-side trace off."""

    def on_stored(self, msg: StoredMessage, *, client_id: str, client_traced: bool, cost_ms: int,
                  status: str) -> None:
        pass

    def on_send_failed(self, topic: str, msg_id: str, tags: str, keys: str, body_length: int, *, client_id: str,
                       client_traced: bool, code: int, reason: str) -> None:
        pass

    def on_delivered(self, group: str, msg: StoredMessage, *, attempt: int, request_id: str, client_id: str,
                     client_traced: bool) -> None:
        pass

    def on_acked(self, group: str, load: Callable[[], StoredMessage | None], *, request_id: str, cost_ms: int,
                 client_id: str, client_traced: bool) -> None:
        pass

    def on_expired(self, group: str, msg: StoredMessage, *, request_id: str, cost_ms: int) -> None:
        pass

    def on_dead_lettered(self, group: str, msg: StoredMessage, *, attempts: int) -> None:
        pass

    def on_transaction_end(self, half: StoredMessage, *, state: str, transaction_id: str, from_check: bool) -> None:
        pass

    def on_recalled(self, topic: str, msg_id: str, *, success: bool) -> None:
        pass

    def on_delay_delivered(self, msg: StoredMessage, *, late_ms: int) -> None:
        pass
