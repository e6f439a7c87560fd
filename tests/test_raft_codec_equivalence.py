"""The compiled RaftBatch codec (broker/raftpath.c) against its reference, the protobuf runtime
(broker/dledger/raft_codec.py ``py_encode_frame`` / ``py_decode_batch``).

Ground truth is the protobuf runtime's own serialisation of broker/protocol/dledger.proto: a member on the
compiled path must put exactly those bytes on the wire (a group may mix members on either path) and read
back exactly the messages the protobuf parser reads, from frames built by either.  Inputs are generated
(hypothesis): Raft messages of every type with random fields (negative and 64-bit values, non-ASCII ids,
empty and large entries) and frames damaged by truncation, byte flips and inserted garbage; a damaged frame
must be rejected by both (a ``BatchError`` naming what is wrong) or read identically by both, never crash.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rocketscope.broker.dledger import raft_codec as rc
from rocketscope.broker.peer_frames.wire import frame
from rocketscope.broker.protocol import dledger_pb2
from rocketscope.broker.raft import Entry, EntryKind, Message, MsgType
from rocketscope.broker.speedups import PURE_ENV
from rocketscope.broker.store import record

if os.environ.get(PURE_ENV, "") not in ("", "0"):  # the reference alone has nothing to be compared with
    pytest.skip("the compiled codec is switched off", allow_module_level=True)

from rocketscope.broker import raftpath  # after the skip: absent only in a broken install

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
SMALL = st.integers(0, 1 << 40)
IDS = st.text(min_size=0, max_size=12)


def test_the_members_run_the_compiled_codec_unless_told_otherwise() -> None:
    """A broken selection would leave every member on the slow path without a word: the environment did not
    ask for the reference, so the compiled functions must be the ones in use."""
    assert rc.IMPLEMENTATION == "c"
    assert rc.encode_frame is raftpath.encode_frame


def c_decode(payload: bytes) -> rc.Batch:
    return rc.Batch._make(raftpath.decode_batch(payload))


entries = st.builds(Entry, st.one_of(SMALL, I64), st.one_of(SMALL, I64), st.sampled_from(list(EntryKind)),
                    st.binary(max_size=300))
messages = st.builds(
    Message, st.sampled_from(list(MsgType)), IDS, IDS, st.one_of(SMALL, I64),
    log_term=st.one_of(st.just(0), SMALL, I64), index=st.one_of(st.just(0), SMALL, I64),
    entries=st.lists(entries, max_size=4), commit=st.one_of(st.just(0), SMALL),
    reject=st.booleans(), reject_hint=st.one_of(st.just(0), SMALL, I64), force=st.booleans())
heads = st.builds(lambda g, s, a, b: dledger_pb2.RaftBatch(group=g, sender=s, sender_grpc_addr=a,
                                                           sender_admin_addr=b).SerializeToString(),
                  IDS, IDS, IDS, IDS)


def outcome(decode: object, payload: bytes) -> object:
    try:
        return decode(payload)  # type: ignore[operator]
    except rc.BatchError as exc:
        return ("rejected", bool(str(exc)))
    except ValueError as exc:  # the raw C module raises ValueError; raft_codec turns it into BatchError
        return ("rejected", bool(str(exc)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads, st.lists(messages, max_size=8), st.integers(1, 10), st.integers(0, 2000))
def test_frames_are_byte_identical_and_decode_to_the_sent_messages(head: bytes, msgs: list[Message], max_messages: int,
                                                                   max_bytes: int) -> None:
    compiled = raftpath.encode_frame(head, msgs, max_messages, max_bytes)
    reference = rc.py_encode_frame(head, msgs, max_messages, max_bytes)
    assert compiled == reference
    data, count, _ = compiled
    assert data[:4] == len(data[4:]).to_bytes(4, "big")
    decoded = c_decode(data[4:])
    assert decoded == rc.py_decode_batch(data[4:])
    assert decoded.messages == [Message(m.type, m.frm, m.to, m.term, m.log_term, m.index, list(m.entries), m.commit,
                                        m.reject, m.reject_hint, m.force) for m in msgs[:count]]
    assert decoded.bad == []
    # the link's limits: at most max_messages, and one more only while the entries' data is under max_bytes
    data_bytes = sum(len(e.data) for m in msgs[:count] for e in m.entries)
    assert count == min(len(msgs), max_messages) or data_bytes >= max_bytes


def _damage(payload: bytes, how: int, at: int, byte: int) -> bytes:
    at = at % (len(payload) + 1)
    if how == 0:
        return payload[:at]
    if how == 1 and payload:
        at = min(at, len(payload) - 1)
        return payload[:at] + bytes([byte]) + payload[at + 1:]
    return payload[:at] + bytes([byte, byte ^ 0x55]) + payload[at:]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads, st.lists(messages, min_size=1, max_size=3), st.integers(0, 2), st.integers(0, 1 << 16),
       st.integers(0, 255))
@example(b"", [Message(MsgType.APP, "a", "b", 1)], 0, 3, 0)  # a truncated message
def test_damaged_frames_are_rejected_or_read_the_same_by_both(head: bytes, msgs: list[Message], how: int, at: int,
                                                              byte: int) -> None:
    payload = raftpath.encode_frame(head, msgs, 64, 1 << 20)[0][4:]
    damaged = _damage(payload, how, at, byte)
    assert outcome(c_decode, damaged) == outcome(rc.py_decode_batch, damaged)


CORPUS = {
    "a truncated tag": b"\x80",
    "a varint of 11 bytes": b"\x08" + b"\xff" * 10 + b"\x01",
    "field number 0": b"\x02\x00",
    "wire type 7": b"\x0f",
    "an end-group tag outside a group": b"\x0c",
    "a group that never ends": b"\x33\x08\x01",
    "a group closed by another field": b"\x33\x3c",
    "messages past the end": b"\x2a\x05\x08\x01",
    "an entry past the end": b"\x2a\x04\x3a\x09\x08\x01",
    "a group invalid UTF-8": b"\x0a\x02\xc3\x28",
    "a sender that is a lone surrogate": b"\x12\x03\xed\xa0\x80",
    "frm not UTF-8": b"\x2a\x05\x08\x01\x12\x01\xff",
    "a fixed64 cut short": b"\x29\x01\x02",
}
ACCEPTED = {
    "nothing at all": b"",
    "unknown fields of every wire type":
        b"\x30\x05\x39" + b"\x00" * 8 + b"\x42\x01x\x4d\x00\x00\x00\x00\x53\x08\x01\x54",
    "a known number with another wire type (skipped)": b"\x08\x05\x2a\x02\x08\x01",
    "a message of an unknown type (left out, named)": b"\x2a\x02\x08\x63\x2a\x02\x08\x01",
    "an entry of an unknown kind (its message left out)": b"\x2a\x06\x08\x01\x3a\x02\x18\x07",
    "a repeated scalar (the last wins)": b"\x2a\x06\x08\x01\x20\x05\x20\x07",
    "a negative int32 type": b"\x2a\x0b\x08" + b"\xff" * 9 + b"\x01",
}


@pytest.mark.parametrize("name", list(CORPUS))
def test_malformed_frames_are_rejected_by_both_with_a_named_reason(name: str) -> None:
    payload = CORPUS[name]
    with pytest.raises(rc.BatchError) as reference:
        rc.py_decode_batch(payload)
    with pytest.raises(ValueError, match=r"not a RaftBatch: .+") as compiled:
        raftpath.decode_batch(payload)
    assert str(reference.value) and str(compiled.value)


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_valid_but_unusual_frames_are_read_the_same(name: str) -> None:
    payload = ACCEPTED[name]
    assert c_decode(payload) == rc.py_decode_batch(payload)


def test_unknown_types_and_kinds_are_left_out_and_named() -> None:
    batch = c_decode(ACCEPTED["a message of an unknown type (left out, named)"])
    assert [m.type for m in batch.messages] == [MsgType.APP]
    assert batch.bad == ["message 0: field type has unknown value 99"]
    batch = c_decode(ACCEPTED["an entry of an unknown kind (its message left out)"])
    assert batch.messages == [] and batch.bad == ["message 0 entry 0: field kind has unknown value 7"]


def test_bad_values_to_encode_raise_naming_the_message_and_field() -> None:
    good = Message(MsgType.APP, "n0", "n1", 1)
    cases = [
        (Message(MsgType.APP, "n0", "n1", 1 << 64), ValueError, "message 1: field term"),
        (Message(MsgType.APP, "n0", 5, 1), TypeError, "message 1: field to"),  # type: ignore[arg-type]
        (Message(MsgType.APP, "n0", "n1", 1, entries=[Entry(1, 1, EntryKind.NORMAL, "text")]),  # type: ignore[arg-type]
         TypeError, "message 1: field entries.data"),
    ]
    for bad, exc, text in cases:
        with pytest.raises(exc, match=text):
            raftpath.encode_frame(b"", [good, bad], 64, 1 << 20)
        with pytest.raises((TypeError, ValueError)):
            rc.py_encode_frame(b"", [good, bad], 64, 1 << 20)


def test_a_frame_of_the_compiled_link_is_what_the_protobuf_runtime_reads() -> None:
    """The cross-version case spelled out: a compiled member's frame parsed by a protobuf-only member."""
    head = dledger_pb2.RaftBatch(group="g", sender="n0", sender_grpc_addr="h:1").SerializeToString()
    msgs = [Message(MsgType.APP, "n0", "n1", 7, 6, 41, [Entry(42, 7, EntryKind.NORMAL, b"r" * 1000)], 40),
            Message(MsgType.HEARTBEAT, "n0", "n1", 7, commit=40)]
    data, count, carries = raftpath.encode_frame(head, msgs, 64, 1 << 20)
    assert (count, carries) == (2, True)
    pb = dledger_pb2.RaftBatch.FromString(data[4:])
    assert (pb.group, pb.sender, len(pb.messages)) == ("g", "n0", 2)
    assert (pb.messages[0].entries[0].index, pb.messages[0].entries[0].data) == (42, b"r" * 1000)
    assert pb.messages[1].commit == 40 and pb.messages[1].type == int(MsgType.HEARTBEAT)
    assert frame(pb.SerializeToString()) == data


# ------------------------------------------------------------------ a follower's records (decode_records)
PROP_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02")  # storable text
PROPS = st.dictionaries(st.text(PROP_CHARS, max_size=8), st.text(PROP_CHARS, max_size=12), max_size=4)
stored = st.builds(
    record.StoredMessage, st.text(min_size=1, max_size=20), st.integers(0, 1 << 10), st.binary(max_size=200),
    properties=PROPS, flag=st.integers(-(1 << 31), (1 << 31) - 1), sys_flag=st.integers(0, 1 << 20),
    born_timestamp=st.integers(0, 1 << 50), born_host=st.text(max_size=20), store_timestamp=st.integers(0, 1 << 50),
    store_host=st.text(max_size=20), reconsume_times=st.integers(0, 16), prepared_tx_offset=st.integers(0, 1 << 40),
    queue_offset=st.integers(0, 1 << 40), physical_offset=st.integers(0, 1 << 40))


def records_outcome(decode: object, data: bytes) -> object:
    try:
        return decode(data)  # type: ignore[operator]
    except record.RecordError:
        return "rejected"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored, min_size=1, max_size=5), st.integers(0, 2), st.integers(0, 1 << 16), st.integers(0, 255))
def test_records_decode_as_record_decode_does(msgs: list[record.StoredMessage], how: int, at: int, byte: int) -> None:
    """The follower's compiled record decode gives the StoredMessages record.decode gives, the records' own
    fields included; a damaged entry gives the same messages or the same RecordError (the compiled path
    hands anything unusual to record.decode)."""
    data = b"".join(record.encode(m) for m in msgs)
    decoded = raftpath.decode_records(data)
    assert decoded == rc.py_decode_records(data)
    assert [(m.topic, m.body, m.properties, m.born_host, m.queue_offset) for m in decoded or []] == \
        [(m.topic, m.body, m.properties, m.born_host, m.queue_offset) for m in msgs]
    damaged = _damage(data, how, at, byte)
    assert records_outcome(rc.decode_records, damaged) == records_outcome(rc.py_decode_records, damaged)
    compiled = raftpath.decode_records(damaged)
    assert compiled is None or compiled == rc.py_decode_records(damaged)


def test_records_outside_the_common_case_fall_back_to_the_reference_error() -> None:
    good = record.encode(record.StoredMessage("t", 0, b"x", {"a": "1"}))
    no_separator = good.replace(b"a\x011", b"a\x02\x02")
    for data in (good[:-1], b"\x00" * 68, no_separator, good[:30]):
        assert raftpath.decode_records(data) is None
        with pytest.raises(record.RecordError):
            rc.decode_records(data)
