"""The Raft peer frames' payload: Raft messages to a ``RaftBatch``'s bytes and back, compiled or in Python.

Why: building ``RaftBatch`` protobuf objects per frame (upb attribute setting, the container copies) and
reading them back (``FromString``, then ``from_pb`` per message) were among the largest per-frame costs
left on the three members of a DLedger group (session 19's profile, docs/BENCHMARKS.md).
broker/raftpath.c writes and reads the same bytes directly; the protobuf path below is the reference it
must equal (tests/test_raft_codec_equivalence.py), and runs when ``ROCKETSCOPE_PURE_PYTHON=1`` is set
(broker/speedups.py's switch, read once at import).  The wire does not change: a member on either path
talks to one on the other (broker/protocol/dledger.proto).

``encode_frame`` takes the oldest queued messages that fit one frame (the link's limits) and returns the
whole frame, length prefix included; ``decode_batch`` returns a ``Batch`` whose ``messages`` are the
driver's ``Message`` values.  A message whose type (or an entry's kind) this member does not know is
left out and named in ``Batch.bad``, as ``from_pb``'s error used to cost only that message; a payload that
is not a RaftBatch raises ``BatchError`` naming the field.

``decode_records`` decodes the commit-log records of an entry a follower appended (record.decode is the
reference); ``check_records`` only checks that they would decode: the follower hands the entry's bytes
themselves to the store's pending dispatch (broker/dledger/node.py ``_pend_appended``,
``MessageStore.add_pending_records``), which builds queue entries and index keys from them.  Both are
compiled for the common case, and record.decode says what is wrong with anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from google.protobuf.message import DecodeError

from rocketscope.broker.protocol import dledger_pb2
from rocketscope.broker.raft import Entry, EntryKind, Message, MsgType
from rocketscope.broker.store import record
from rocketscope.broker.store.record import StoredMessage

from ..peer_frames.wire import frame
from ..speedups import pure_python_requested
from .peer_wire import add_pb

__all__ = ["IMPLEMENTATION", "Batch", "BatchError", "check_records", "decode_batch", "decode_records",
           "encode_frame", "py_check_records", "py_decode_batch", "py_decode_records", "py_encode_frame"]


class BatchError(ValueError):
    """A frame's payload is not a RaftBatch (the text names the field where it went wrong)."""


class Batch(NamedTuple):
    """A received frame: who sent it (its group, id and addresses) and its Raft messages."""

    group: str
    sender: str
    sender_grpc_addr: str
    sender_admin_addr: str
    messages: list[Message]
    bad: list[str]  # why each left-out message was left out


EncodeFrame = Callable[[bytes, Sequence[Message], int, int], tuple[bytes, int, bool]]
DecodeBatch = Callable[[bytes], Batch]
DecodeRecords = Callable[[bytes], list[StoredMessage]]
CheckRecords = Callable[[bytes], None]


def _by_value(enum: type[MsgType] | type[EntryKind]) -> tuple[object, ...]:
    """A tuple indexed by value: the member, or None where no member has that value."""
    members = {int(v): v for v in enum}
    return tuple(members.get(i) for i in range(max(members) + 1))


_TYPES = frozenset(int(v) for v in MsgType)
_KINDS = frozenset(int(v) for v in EntryKind)


def py_encode_frame(head: bytes, messages: Sequence[Message], max_messages: int,
                    max_bytes: int) -> tuple[bytes, int, bool]:
    """The reference: ``(frame, count, carries)`` for the first ``count`` of ``messages`` (up to
    ``max_messages``, and no more once their entries' data reach ``max_bytes``); ``head`` is a serialised
    RaftBatch without messages; ``carries``: some of them have entries."""
    batch = dledger_pb2.RaftBatch.FromString(head)
    out = batch.messages
    size = count = 0
    carries = False
    for m in messages:
        if count >= max_messages or size >= max_bytes:
            break
        if m.entries:
            carries = True
            for e in m.entries:
                size += len(e.data)
        try:
            add_pb(out, m)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"message {count}: {exc}") from None
        count += 1
    return frame(batch.SerializeToString()), count, carries


def py_decode_batch(payload: bytes) -> Batch:
    """The reference: parse with the protobuf runtime, then turn each RaftMessage into a ``Message``."""
    try:
        pb = dledger_pb2.RaftBatch.FromString(payload)
    except DecodeError as exc:
        raise BatchError(f"not a RaftBatch: {exc}") from None
    messages: list[Message] = []
    bad: list[str] = []
    for i, p in enumerate(pb.messages):
        if p.type not in _TYPES:
            bad.append(f"message {i}: field type has unknown value {p.type}")
            continue
        wrong = next((j for j, e in enumerate(p.entries) if e.kind not in _KINDS), None)
        if wrong is not None:
            bad.append(f"message {i} entry {wrong}: field kind has unknown value {p.entries[wrong].kind}")
            continue
        messages.append(Message(
            type=MsgType(p.type), frm=p.frm, to=p.to, term=p.term, log_term=p.log_term, index=p.index,
            entries=[Entry(e.index, e.term, EntryKind(e.kind), e.data) for e in p.entries],
            commit=p.commit, reject=p.reject, reject_hint=p.reject_hint, force=p.force))
    return Batch(pb.group, pb.sender, pb.sender_grpc_addr, pb.sender_admin_addr, messages, bad)


def py_decode_records(data: bytes) -> list[StoredMessage]:
    """The reference: the records filling ``data`` (a follower's appended entry), in order; RecordError
    names what is wrong.  The CRC is not checked: these are the bytes just written (a read of the log
    checks it)."""
    return record.decode_run(data)


def py_check_records(data: bytes) -> None:
    """The reference: raise RecordError naming what is wrong when a record filling ``data`` does not decode."""
    py_decode_records(data)


def _load() -> tuple[str, EncodeFrame, DecodeBatch, DecodeRecords, CheckRecords]:
    if pure_python_requested():
        return "python", py_encode_frame, py_decode_batch, py_decode_records, py_check_records
    from .. import raftpath  # an ImportError here is a broken install: setup.py always builds it

    raftpath.bind(Message, Entry, _by_value(MsgType), _by_value(EntryKind))
    raftpath.bind_records(StoredMessage)
    compiled_records = raftpath.decode_records

    def c_decode_records(data: bytes) -> list[StoredMessage]:
        msgs = compiled_records(data)
        return msgs if msgs is not None else py_decode_records(data)  # not the common case: the reference says why

    compiled_check = raftpath.check_records

    def c_check_records(data: bytes) -> None:
        if not compiled_check(data):
            py_decode_records(data)  # raises RecordError naming the field (or decodes: then the C is too strict)

    compiled_decode = raftpath.decode_batch

    def c_decode_batch(payload: bytes) -> Batch:
        try:
            return Batch._make(compiled_decode(payload))
        except ValueError as exc:
            raise BatchError(str(exc)) from None

    return "c", raftpath.encode_frame, c_decode_batch, c_decode_records, c_check_records


IMPLEMENTATION, encode_frame, decode_batch, decode_records, check_records = _load()
