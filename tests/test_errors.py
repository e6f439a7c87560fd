"""The broker's one error model (broker/errors.py): every kind has exactly one code per protocol (the tables of
the two front doors, broker/grpc_errors.py and broker/remoting/errors.py), and the services' refusals are
BrokerErrors whose kind the front doors map (the codes a client sees are checked
end to end in tests/test_e2e_broker.py, tests/test_e2e_message_types.py and the remoting tests)."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketscope.broker.errors import BrokerError, ErrorKind
from rocketscope.broker.grpc_errors import GRPC_CODES, grpc_code
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
