"""Remoting codec: RocketMQ's worked examples byte for byte, round trips (hypothesis), and decoder fuzzing."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketscope.broker.remoting.codec import (
    JSON,
    LANGUAGES,
    ROCKETMQ,
    BatchEntry,
    FrameError,
    Header,
    HeaderError,
    RemotingCommand,
    WireMessage,
    check_length,
    decode,
    decode_batch,
    decode_messages,
    encode,
    encode_batch,
    encode_message,
    offset_msg_id,
    parse_json_body,
    parse_offset_msg_id,
    properties_to_string,
    string_to_properties,
)

# the frames rocketmq-remoting.md §1.1 gives for GET_ROUTEINFO_BY_TOPIC, topic T, opaque 1, version 479
BINARY_EXAMPLE = bytes.fromhex("00000025" "01000021" "006900 01df 00000001 00000000 00000000 0000000c"
                               "0005 746f706963 00000001 54".replace(" ", ""))
JSON_EXAMPLE = (b'\x00\x00\x00\x7f\x00\x00\x00\x7b{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA",'
                b'"opaque":1,"serializeTypeCurrentRPC":"JSON","version":479}')


def route_request(stype: int) -> RemotingCommand:
    return RemotingCommand(code=105, ext_fields={"topic": "T"}, opaque=1, version=479, language="JAVA",
                           serialize_type=stype)


def test_encodes_rocketmqs_worked_examples_byte_for_byte() -> None:
    assert encode(route_request(ROCKETMQ)) == BINARY_EXAMPLE
    assert encode(route_request(JSON)) == JSON_EXAMPLE
    for frame, stype in ((BINARY_EXAMPLE, ROCKETMQ), (JSON_EXAMPLE, JSON)):
        cmd = decode(frame[4:])
        assert (cmd.code, cmd.fields, cmd.opaque, cmd.version, cmd.language, cmd.serialize_type) == (
            105, {"topic": "T"}, 1, 479, "JAVA", stype)


def test_go_style_json_header_is_accepted() -> None:
    """Go v2 sends language "GO", an empty remark and extFields with string values only."""
    header = json.dumps({"code": 34, "language": "GO", "version": 317, "opaque": 7, "flag": 0, "remark": "",
                         "extFields": {}}).encode()
    cmd = decode(struct.pack(">i", len(header)) + header + b"{}")
    assert (cmd.code, cmd.language, cmd.version, cmd.remark, cmd.body) == (34, "GO", 317, "", b"{}")


texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767),
    ext_fields=st.one_of(st.none(), st.dictionaries(texts, texts, min_size=1, max_size=6)),
    body=st.binary(max_size=300),
    remark=st.one_of(st.none(), texts),
    opaque=st.integers(-(1 << 31), (1 << 31) - 1),
    flag=st.integers(0, 3),
    language=st.sampled_from(LANGUAGES),
    version=st.integers(-32768, 32767),
    serialize_type=st.sampled_from([JSON, ROCKETMQ]),
)


@settings(max_examples=300, deadline=None)
@given(commands)
def test_round_trip_in_both_serialize_types(cmd: RemotingCommand) -> None:
    frame = encode(cmd)
    (length,) = struct.unpack(">i", frame[:4])
    assert length == len(frame) - 4
    assert frame[4] == cmd.serialize_type
    back = decode(frame[4:])
    for name in ("code", "body", "remark", "opaque", "flag", "language", "version", "serialize_type"):
        assert getattr(back, name) == getattr(cmd, name), name
    assert back.fields == (cmd.ext_fields or {})
    assert back.is_response == bool(cmd.flag & 1) and back.is_oneway == bool(cmd.flag & 2)


def test_response_echoes_opaque_and_sets_the_response_flag() -> None:
    req = RemotingCommand(code=105, opaque=4242, flag=0, serialize_type=ROCKETMQ)
    resp = decode(encode(req.response(17, "no route"))[4:])
    assert (resp.opaque, resp.flag, resp.code, resp.remark, resp.serialize_type) == (4242, 1, 17, "no route", 1)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_decoding_garbage_raises_frame_error_or_decodes(data: bytes) -> None:
    try:
        decode(data)
    except FrameError as exc:
        assert str(exc)


@settings(max_examples=300, deadline=None)
@given(commands, st.integers(0, 400), st.binary(min_size=1, max_size=4))
def test_corrupted_frames_never_raise_anything_but_frame_error(cmd: RemotingCommand, pos: int, junk: bytes) -> None:
    frame = bytearray(encode(cmd)[4:])
    pos %= len(frame)
    frame[pos:pos + len(junk)] = junk
    try:
        decode(bytes(frame))
    except FrameError:
        pass


@pytest.mark.parametrize("frame, problem", [
    (b"\x00\x00", "no header-length field"),
    (struct.pack(">i", 500) + b"{}", "header length 500 exceeds"),
    (struct.pack(">i", 5) + b"nope!", "header is not JSON"),
    (struct.pack(">i", 2) + b"[]", "not an object"),
    (struct.pack(">i", 12) + b'{"flag":0}xx', "header is not JSON"),
    (struct.pack(">i", 10) + b'{"flag":0}', "has no code"),
    (struct.pack(">i", (7 << 24) | 2) + b"{}", "unknown serialize type 7"),
    (struct.pack(">i", (1 << 24) | 5) + b"\x00" * 5, "shorter than its 21-byte fixed part"),
    (struct.pack(">i", (1 << 24) | 21) + b"\x00" * 13 + struct.pack(">i", 99) + b"\x00" * 4, "remark length 99"),
    (struct.pack(">i", (1 << 24) | 21) + b"\x00" * 17 + struct.pack(">i", 99), "extFields length 99"),
])
def test_decode_errors_name_the_problem(frame: bytes, problem: str) -> None:
    with pytest.raises(FrameError, match=problem):
        decode(frame)


def test_length_checks() -> None:
    check_length(4)
    with pytest.raises(FrameError, match="shorter"):
        check_length(-1)
    with pytest.raises(FrameError, match="exceeds the maximum frame size 100"):
        check_length(97, max_frame=100)


def test_missing_required_header_field_names_it() -> None:
    h = Header(RemotingCommand(code=105, ext_fields={"x": "1"}))
    with pytest.raises(HeaderError, match=r"<topic> is null: GET_ROUTEINFO_BY_TOPIC"):
        h.str("topic")
    with pytest.raises(HeaderError, match="<x> is not a number"):
        Header(RemotingCommand(code=11, ext_fields={"x": "y"})).int("x")


@given(st.dictionaries(st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                               min_size=1, max_size=10),
                       st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                               min_size=1, max_size=10), max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert string_to_properties(properties_to_string(props)) == props


def test_properties_parser_drops_fragments_like_rocketmq() -> None:
    assert string_to_properties("A\x011\x02B\x01\x02\x01x\x02junk\x02C\x013") == {"A": "1", "C": "3"}


@given(st.lists(st.builds(BatchEntry, body=st.binary(max_size=100), flag=st.integers(-(1 << 31), (1 << 31) - 1),
                          properties=st.just({"UNIQ_KEY": "ABC", "KEYS": "k1 k2"})), min_size=1, max_size=5))
def test_batch_round_trip(entries: list[BatchEntry]) -> None:
    assert decode_batch(encode_batch(entries)) == entries


def test_batch_with_a_lying_record_size_is_rejected() -> None:
    raw = bytearray(encode_batch([BatchEntry(b"abc", 0, {"A": "b"})]))
    raw[0:4] = struct.pack(">i", 9999)
    with pytest.raises(FrameError, match="says 9999 bytes"):
        decode_batch(bytes(raw))


@given(st.text(st.characters(whitelist_categories=("Lu", "Ll", "Nd")), min_size=1, max_size=200),
       st.binary(max_size=200), st.integers(0, (1 << 62)), st.sampled_from(["10.1.2.3:10911", "[::1]:10911"]))
def test_stored_message_round_trip(topic: str, body: bytes, phy: int, host: str) -> None:
    m = WireMessage(topic=topic, queue_id=3, body=body, properties={"UNIQ_KEY": "X1", "TAGS": "t"}, flag=5,
                    queue_offset=42, physical_offset=phy, born_timestamp=1, born_host="192.168.0.1:5555",
                    store_timestamp=2, store_host=host, reconsume_times=1)
    (back,) = decode_messages(encode_message(m))
    assert back.topic == topic and back.body == body and back.physical_offset == phy
    assert back.properties == m.properties and back.queue_offset == 42 and back.reconsume_times == 1
    assert back.store_host.endswith(":10911") and back.born_host == "192.168.0.1:5555"


def test_offset_msg_id_is_rocketmqs_layout() -> None:
    mid = offset_msg_id("127.0.0.1:10911", 0x1A6)
    assert mid == "7F00000100002A9F00000000000001A6"  # what Apache's Go client computed against our broker
    assert parse_offset_msg_id(mid) == ("127.0.0.1:10911", 0x1A6)
    with pytest.raises(ValueError):
        parse_offset_msg_id("ABCD")


def test_fastjson_bare_numeric_keys_are_accepted() -> None:
    assert parse_json_body(b'{"brokerAddrs":{0:"a:1",1:"b:2"}}', "x") == {"brokerAddrs": {"0": "a:1", "1": "b:2"}}
    with pytest.raises(HeaderError, match="HeartbeatData body is not JSON"):
        parse_json_body(b"\xff{", "HeartbeatData")
