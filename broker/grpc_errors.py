"""The gRPC front door's side of the error model: v2 status codes, in one place.

The core raises :class:`~.errors.BrokerError` with a protocol-neutral kind and reports a store write
as a :class:`~.store.message_store.PutStatus`; this module holds the one table from each to the v2
``Code`` a client of the official SDK expects (``GRPC_CODES``, ``PUT_STATUS_CODES``).  Checks of fields
only the v2 protocol has (broker/validation.py, broker/pull.py, broker/grpc_service.py) raise
:class:`RequestError` with the v2 code directly, as Apache RocketMQ's proxy's gRPC validators do.
How an RPC's outcome is named in the request metrics (``rpc_outcome``) is also the door's: the code
names are v2's.
"""

from __future__ import annotations

import functools

from rocketmq.grpc_protocol import definition_pb2 as pb

from .errors import BrokerError, ErrorKind
from .store.message_store import PutStatus

Code = pb.Code

GRPC_CODES: dict[ErrorKind, int] = {
    ErrorKind.BAD_REQUEST: Code.BAD_REQUEST,
    ErrorKind.NOT_FOUND: Code.NOT_FOUND,
    ErrorKind.MESSAGE_NOT_FOUND: Code.MESSAGE_NOT_FOUND,
    ErrorKind.INVALID_RECEIPT_HANDLE: Code.INVALID_RECEIPT_HANDLE,
    ErrorKind.INVALID_TRANSACTION_ID: Code.INVALID_TRANSACTION_ID,
    ErrorKind.ILLEGAL_MESSAGE_ID: Code.ILLEGAL_MESSAGE_ID,
    ErrorKind.INTERNAL: Code.INTERNAL_SERVER_ERROR,
    ErrorKind.TOPIC_NOT_FOUND: Code.TOPIC_NOT_FOUND,
    ErrorKind.FORBIDDEN: Code.FORBIDDEN,
    # the proxy's answer to a send reaching a slave: the client retries another endpoint
    ErrorKind.NOT_WRITER: Code.FORBIDDEN,
    ErrorKind.ILLEGAL_LITE_TOPIC: Code.ILLEGAL_LITE_TOPIC,
    ErrorKind.ILLEGAL_TOPIC: Code.ILLEGAL_TOPIC,
    ErrorKind.LITE_SUBSCRIPTION_QUOTA_EXCEEDED: Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
    ErrorKind.LITE_TOPIC_QUOTA_EXCEEDED: Code.LITE_TOPIC_QUOTA_EXCEEDED,
    ErrorKind.TOO_MANY_REQUESTS: Code.TOO_MANY_REQUESTS,
}
"""The v2 status code of each kind (apache/rocketmq-apis' Code)."""

PUT_STATUS_CODES: dict[PutStatus, int] = {
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SERVICE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: Code.HA_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.OS_PAGE_CACHE_BUSY: Code.TOO_MANY_REQUESTS,
}
"""The v2 status code of each outcome of a store write (a code per message of a SendMessage)."""

# the answers of a served request (rocketmq_rpc_latency result=success): an empty receive is one
_SERVED = frozenset((Code.OK, Code.MULTIPLE_RESULTS, Code.MESSAGE_NOT_FOUND))


class RequestError(Exception):
    """A request the gRPC door refuses, with the v2 code to answer and a message naming the field."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def of(cls, exc: BrokerError, prefix: str = "") -> RequestError:
        """The core's refusal ``exc`` as the door answers it: its kind's v2 code, its message after ``prefix``."""
        return cls(GRPC_CODES[exc.kind], prefix + str(exc))


def grpc_code(exc: BrokerError) -> int:
    return GRPC_CODES[exc.kind]


@functools.lru_cache(maxsize=256)
def rpc_outcome(code: int) -> tuple[str, bool]:
    """(response_code, served) of a v2 status code in the request metrics: the code's lower-case name
    (the number when the code is unknown to this protocol version) and whether the request was served."""
    try:
        name = Code.Name(code).lower()
    except ValueError:
        name = str(code)
    return name, code in _SERVED
