"""The remoting front door's side of the error model: RemotingCommand response codes, in one place.

The core raises :class:`~..errors.BrokerError` with a protocol-neutral kind and reports a store write
as a :class:`~..store.message_store.PutStatus`; this module holds the one table from each to the
response code Apache's remoting processors answer (``REMOTING_CODES``, ``PUT_CODES``).  Checks of a
frame's own headers raise :class:`~.codec.HeaderError` with the remoting code directly.
"""

from __future__ import annotations

from ..errors import BrokerError, ErrorKind
from ..store.message_store import PutStatus
from .codec import ResponseCode

RC = ResponseCode

REMOTING_CODES: dict[ErrorKind, int] = {
    # Apache's remoting processors answer refused transactions and lookups with SYSTEM_ERROR and a
    # remark; QUERY_NOT_FOUND only for message queries, which do not go through this model
    ErrorKind.BAD_REQUEST: RC.SYSTEM_ERROR,
    ErrorKind.NOT_FOUND: RC.SYSTEM_ERROR,
    ErrorKind.MESSAGE_NOT_FOUND: RC.SYSTEM_ERROR,
    ErrorKind.INVALID_RECEIPT_HANDLE: RC.SYSTEM_ERROR,
    ErrorKind.INVALID_TRANSACTION_ID: RC.SYSTEM_ERROR,
    ErrorKind.ILLEGAL_MESSAGE_ID: RC.SYSTEM_ERROR,
    ErrorKind.INTERNAL: RC.SYSTEM_ERROR,
    # a send's topic check, as Apache's SendMessageProcessor answers it
    ErrorKind.TOPIC_NOT_FOUND: RC.TOPIC_NOT_EXIST,
    ErrorKind.FORBIDDEN: RC.NO_PERMISSION,
    # a slave (or DLedger follower) answers a write SERVICE_NOT_AVAILABLE, as Apache's store does for
    # BrokerRole.SLAVE: the clients retry another broker (gRPC's answer is FORBIDDEN)
    ErrorKind.NOT_WRITER: RC.SERVICE_NOT_AVAILABLE,
    # Lite mode is served over gRPC only; Apache's remoting codes for the two quotas (its ResponseCode)
    ErrorKind.ILLEGAL_LITE_TOPIC: RC.SYSTEM_ERROR,
    ErrorKind.ILLEGAL_TOPIC: RC.SYSTEM_ERROR,
    ErrorKind.LITE_SUBSCRIPTION_QUOTA_EXCEEDED: 2018,  # LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    ErrorKind.LITE_TOPIC_QUOTA_EXCEEDED: 2017,  # LMQ_QUOTA_EXCEEDED
    ErrorKind.TOO_MANY_REQUESTS: RC.SYSTEM_BUSY,
}
"""The RemotingCommand response code of each kind."""

PUT_CODES: dict[PutStatus, int] = {
    PutStatus.PUT_OK: RC.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: RC.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: RC.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SERVICE_NOT_AVAILABLE: RC.SERVICE_NOT_AVAILABLE,
    # Apache's SendMessageProcessor answers SYSTEM_ERROR "in-sync replicas not enough" (not SLAVE_NOT_AVAILABLE),
    # which its clients retry; DLedger's quorum timeout is this status on both (docs/COMPATIBILITY.md R6-R8)
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: RC.SYSTEM_ERROR,
    PutStatus.MESSAGE_ILLEGAL: RC.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: RC.MESSAGE_ILLEGAL,
    PutStatus.OS_PAGE_CACHE_BUSY: RC.SYSTEM_BUSY,
}
"""The response code of each outcome of a store write (SEND_MESSAGE, CONSUMER_SEND_MSG_BACK)."""


def remoting_code(exc: BrokerError) -> int:
    return REMOTING_CODES[exc.kind]
