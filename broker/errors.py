"""One error model for the broker's core: a kind per refusal, mapped once per protocol by each front door.

The core (the store's callers, the POP engine, the transaction service, the timer, lite mode, the
send path's topic check) refuses requests for reasons a client must be able to tell apart (a stale
receipt handle, an unknown transaction, a topic that does not exist, a node that is not the writer).
Each raises a :class:`BrokerError` with an :class:`ErrorKind`; this module knows no protocol.  The
gRPC front door turns the kind into a v2 status code through ``GRPC_CODES`` (broker/grpc_errors.py)
and the remoting front door into a RemotingCommand response code through ``REMOTING_CODES``
(broker/remoting/errors.py), so a new kind is added here and in one table per protocol instead of in
every handler (Apache RocketMQ's proxy does the same with one code enum and a mapping per protocol).
"""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    """Why a service refused a request, independent of the protocol that carried it."""

    BAD_REQUEST = "BAD_REQUEST"  # a field the service cannot use (its message names the field)
    NOT_FOUND = "NOT_FOUND"  # the thing the request names does not exist (or no longer)
    MESSAGE_NOT_FOUND = "MESSAGE_NOT_FOUND"  # the stored message the request refers to is gone
    INVALID_RECEIPT_HANDLE = "INVALID_RECEIPT_HANDLE"  # expired, malformed or from another delivery
    INVALID_TRANSACTION_ID = "INVALID_TRANSACTION_ID"
    ILLEGAL_MESSAGE_ID = "ILLEGAL_MESSAGE_ID"
    INTERNAL = "INTERNAL"  # the broker failed to do what was asked (a write failed)
    # the send path's topic check (Broker.topic_for_send)
    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"  # no such topic here and auto-creation does not apply
    FORBIDDEN = "FORBIDDEN"  # the topic exists but is not writable here (its permission, or the broker's)
    NOT_WRITER = "NOT_WRITER"  # this node is a slave or follower: writes go to its master or leader
    # Lite mode (broker/lite.py), Apache RocketMQ 5.5's codes
    ILLEGAL_LITE_TOPIC = "ILLEGAL_LITE_TOPIC"  # blank, too long or outside [A-Za-z0-9_-]
    ILLEGAL_TOPIC = "ILLEGAL_TOPIC"  # a lite group used with another topic than its lite.bind.topic
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED = "LITE_SUBSCRIPTION_QUOTA_EXCEEDED"  # past the group's lite.sub.client.quota
    LITE_TOPIC_QUOTA_EXCEEDED = "LITE_TOPIC_QUOTA_EXCEEDED"  # past maxLmqConsumeQueueNum lite queues
    TOO_MANY_REQUESTS = "TOO_MANY_REQUESTS"  # over a rate limit (SyncLiteSubscription: maxSyncLiteSubscriptionRate)


class BrokerError(Exception):
    """A refused request: ``kind`` says why in protocol-neutral terms, the message says it to a person."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = ErrorKind(kind)
