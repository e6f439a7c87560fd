"""One error model for the broker's services: a kind per refusal, mapped once per protocol.

The POP engine, the transaction service and the timer refuse requests for reasons a client must
be able to tell apart (a stale receipt handle, an unknown transaction, a half message already
gone).  Each raises a :class:`BrokerError` with an :class:`ErrorKind`; the gRPC front door turns
the kind into a v2 status code through :data:`GRPC_CODES` and the remoting front door into a
RemotingCommand response code through :data:`REMOTING_CODES`, so a new kind is added in one
place per protocol instead of in every handler (Apache RocketMQ's proxy does the same with one
code enum and a mapping per protocol).
"""

from __future__ import annotations

from enum import StrEnum

from rocketmq.grpc_protocol import definition_pb2 as pb

from .remoting.codec import ResponseCode


class ErrorKind(StrEnum):
    """Why a service refused a request, independent of the protocol that carried it."""

    BAD_REQUEST = "BAD_REQUEST"  # a field the service cannot use (its message names the field)
    NOT_FOUND = "NOT_FOUND"  # the thing the request names does not exist (or no longer)
    MESSAGE_NOT_FOUND = "MESSAGE_NOT_FOUND"  # the stored message the request refers to is gone
    INVALID_RECEIPT_HANDLE = "INVALID_RECEIPT_HANDLE"  # expired, malformed or from another delivery
    INVALID_TRANSACTION_ID = "INVALID_TRANSACTION_ID"
    ILLEGAL_MESSAGE_ID = "ILLEGAL_MESSAGE_ID"
    INTERNAL = "INTERNAL"  # the broker failed to do what was asked (a write failed)
    # Lite mode (broker/lite.py), Apache RocketMQ 5.5's codes
    ILLEGAL_LITE_TOPIC = "ILLEGAL_LITE_TOPIC"  # blank, too long or outside [A-Za-z0-9_-]
    ILLEGAL_TOPIC = "ILLEGAL_TOPIC"  # a lite group used with another topic than its lite.bind.topic
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED = "LITE_SUBSCRIPTION_QUOTA_EXCEEDED"  # past the group's lite.sub.client.quota
    LITE_TOPIC_QUOTA_EXCEEDED = "LITE_TOPIC_QUOTA_EXCEEDED"  # past maxLmqConsumeQueueNum lite queues


class BrokerError(Exception):
    """A refused request: ``kind`` says why in protocol-neutral terms, the message says it to a person."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = ErrorKind(kind)


GRPC_CODES: dict[ErrorKind, int] = {
    ErrorKind.BAD_REQUEST: pb.Code.BAD_REQUEST,
    ErrorKind.NOT_FOUND: pb.Code.NOT_FOUND,
    ErrorKind.MESSAGE_NOT_FOUND: pb.Code.MESSAGE_NOT_FOUND,
    ErrorKind.INVALID_RECEIPT_HANDLE: pb.Code.INVALID_RECEIPT_HANDLE,
    ErrorKind.INVALID_TRANSACTION_ID: pb.Code.INVALID_TRANSACTION_ID,
    ErrorKind.ILLEGAL_MESSAGE_ID: pb.Code.ILLEGAL_MESSAGE_ID,
    ErrorKind.INTERNAL: pb.Code.INTERNAL_SERVER_ERROR,
    ErrorKind.ILLEGAL_LITE_TOPIC: pb.Code.ILLEGAL_LITE_TOPIC,
    ErrorKind.ILLEGAL_TOPIC: pb.Code.ILLEGAL_TOPIC,
    ErrorKind.LITE_SUBSCRIPTION_QUOTA_EXCEEDED: pb.Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
    ErrorKind.LITE_TOPIC_QUOTA_EXCEEDED: pb.Code.LITE_TOPIC_QUOTA_EXCEEDED,
}
"""The v2 status code of each kind (apache/rocketmq-apis' Code)."""

REMOTING_CODES: dict[ErrorKind, int] = {
    # Apache's remoting processors answer refused transactions and lookups with SYSTEM_ERROR and a
    # remark; QUERY_NOT_FOUND only for message queries, which do not go through this model
    ErrorKind.BAD_REQUEST: ResponseCode.SYSTEM_ERROR,
    ErrorKind.NOT_FOUND: ResponseCode.SYSTEM_ERROR,
    ErrorKind.MESSAGE_NOT_FOUND: ResponseCode.SYSTEM_ERROR,
    ErrorKind.INVALID_RECEIPT_HANDLE: ResponseCode.SYSTEM_ERROR,
    ErrorKind.INVALID_TRANSACTION_ID: ResponseCode.SYSTEM_ERROR,
    ErrorKind.ILLEGAL_MESSAGE_ID: ResponseCode.SYSTEM_ERROR,
    ErrorKind.INTERNAL: ResponseCode.SYSTEM_ERROR,
    # Lite mode is served over gRPC only; Apache's remoting codes for the two quotas (its ResponseCode)
    ErrorKind.ILLEGAL_LITE_TOPIC: ResponseCode.SYSTEM_ERROR,
    ErrorKind.ILLEGAL_TOPIC: ResponseCode.SYSTEM_ERROR,
    ErrorKind.LITE_SUBSCRIPTION_QUOTA_EXCEEDED: 2018,  # LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    ErrorKind.LITE_TOPIC_QUOTA_EXCEEDED: 2017,  # LMQ_QUOTA_EXCEEDED
}
"""The RemotingCommand response code of each kind."""


def grpc_code(exc: BrokerError) -> int:
    return GRPC_CODES[exc.kind]


def remoting_code(exc: BrokerError) -> int:
    return REMOTING_CODES[exc.kind]
