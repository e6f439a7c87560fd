"""The broker's one error model (broker/errors.py): every kind has exactly one code per protocol (the tables of
the two front doors, broker/grpc_errors.py and broker/remoting/errors.py), and the services' refusals are
BrokerErrors whose kind the front doors map (the codes a client sees are checked
end to end in tests/test_e2e_broker.py, tests/test_e2e_message_types.py and the remoting tests)."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketscope.broker.errors import BrokerError, ErrorKind
from rocketscope.broker.grpc_errors import GRPC_CODES, grpc_code, rpc_outcome
from rocketscope.broker.pop import PopError
from rocketscope.broker.remoting.errors import REMOTING_CODES, remoting_code
from rocketscope.broker.timer import RecallError
from rocketscope.broker.transaction import TransactionError


def test_every_kind_has_a_code_in_each_protocol() -> None:
    assert set(GRPC_CODES) == set(ErrorKind) == set(REMOTING_CODES)


@pytest.mark.parametrize("cls", [PopError, TransactionError, RecallError])
def test_service_errors_share_the_model(cls: type[BrokerError]) -> None:
    exc = cls(ErrorKind.INVALID_RECEIPT_HANDLE, "receipt_handle expired")
    assert isinstance(exc, BrokerError) and str(exc) == "receipt_handle expired"
    assert grpc_code(exc) == pb.Code.INVALID_RECEIPT_HANDLE
    assert remoting_code(exc) == 1  # RemotingCommand SYSTEM_ERROR, with the message as remark


def test_a_kind_given_as_text_is_checked() -> None:
    assert BrokerError("NOT_FOUND", "gone").kind is ErrorKind.NOT_FOUND  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        BrokerError("NO_SUCH_KIND", "?")  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "v2", "remoting"), [
    # Apache's answers to a send the broker cannot take: its proxy's v2 codes, and its SendMessageProcessor's
    # remoting codes (ResponseCode 14 SERVICE_NOT_AVAILABLE from a slave's store, 17 TOPIC_NOT_EXIST, 16
    # NO_PERMISSION), as before this model (end to end: tests/test_remoting_replication_e2e.py, test_remoting_e2e.py)
    (ErrorKind.NOT_WRITER, pb.Code.FORBIDDEN, 14),
    (ErrorKind.TOPIC_NOT_FOUND, pb.Code.TOPIC_NOT_FOUND, 17),
    (ErrorKind.FORBIDDEN, pb.Code.FORBIDDEN, 16),
])
def test_a_send_refused_by_the_core_gets_each_doors_code(kind: ErrorKind, v2: int, remoting: int) -> None:
    exc = BrokerError(kind, "topic.name: topic T does not exist on broker b")
    assert grpc_code(exc) == v2 and remoting_code(exc) == remoting


def test_rpc_outcomes_name_the_v2_code() -> None:
    """rocketmq_rpc_latency's response_code and result labels (docs/METRICS.md): the v2 code's lower-case name;
    an empty receive is served, a refusal is not; a code this protocol version does not know keeps its number."""
    assert rpc_outcome(pb.Code.OK) == ("ok", True)
    assert rpc_outcome(pb.Code.MESSAGE_NOT_FOUND) == ("message_not_found", True)
    assert rpc_outcome(pb.Code.BAD_REQUEST) == ("bad_request", False)
    assert rpc_outcome(99999) == ("99999", False)
