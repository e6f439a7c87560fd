"""rocketscope/remoting_client.py without a server: the protocol choice from a name-server address,
compressed bodies as Apache's Java producer writes them, and the v2 shape readers get."""

from __future__ import annotations

import zlib

import pytest

from rocketscope import remoting_client as rc
from rocketscope.broker.remoting.codec import WireMessage, decode_messages, encode_message
from rocketscope.names import COMMITLOG_OFFSET_PROPERTY


@pytest.mark.parametrize(("given", "expected"), [
    ("127.0.0.1:9876", ("auto", ["127.0.0.1:9876"])),
    ("remoting://a:1;b:2", ("remoting", ["a:1", "b:2"])),
    ("grpc://a:1; grpc://b:2 ;", ("grpc", ["a:1", "b:2"])),
    ("REMOTING://a:1", ("remoting", ["a:1"])),
    ("", ("auto", [])),
])
def test_split_namesrv(given: str, expected: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rc.PROTOCOL_ENV, raising=False)
    assert rc.split_namesrv(given) == expected


def test_split_namesrv_refuses_unknown_and_mixed_schemes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rc.PROTOCOL_ENV, raising=False)
    with pytest.raises(ValueError, match="'http'"):
        rc.split_namesrv("http://a:1")
    with pytest.raises(ValueError, match="mix"):
        rc.split_namesrv("grpc://a:1;remoting://b:2")


def test_env_sets_the_default_for_bare_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rc.PROTOCOL_ENV, "remoting")
    assert rc.split_namesrv("a:1") == ("remoting", ["a:1"])
    assert rc.split_namesrv("grpc://a:1") == ("grpc", ["a:1"])
    monkeypatch.setenv(rc.PROTOCOL_ENV, "carrier-pigeon")
    with pytest.raises(ValueError, match=rc.PROTOCOL_ENV):
        rc.split_namesrv("a:1")


def test_zlib_body_with_apaches_flags_is_decompressed_and_converted() -> None:
    body = b"compressed " * 1000
    stored = WireMessage("T", 2, zlib.compress(body), {"UNIQ_KEY": "ID1", "TAGS": "t", "KEYS": "k1 k2", "u": "v"},
                         queue_offset=7, physical_offset=1234, sys_flag=1 | (3 << 8), store_host="127.0.0.1:10911",
                         born_host="127.0.0.1:5555", store_timestamp=1_700_000_000_123)
    (m,) = decode_messages(encode_message(stored))
    plain = rc.decompressed(m)
    assert plain.body == body and plain.sys_flag & (rc.COMPRESSED_FLAG | rc.COMPRESSION_TYPE_MASK) == 0
    v2 = rc.to_v2(plain, COMMITLOG_OFFSET_PROPERTY)
    sp = v2.system_properties
    assert (v2.topic.name, v2.body, sp.message_id, sp.tag, list(sp.keys)) == ("T", body, "ID1", "t", ["k1", "k2"])
    assert (sp.queue_id, sp.queue_offset, sp.store_timestamp.ToMilliseconds()) == (2, 7, 1_700_000_000_123)
    assert dict(v2.user_properties) == {"u": "v", COMMITLOG_OFFSET_PROPERTY: "1234"}


def test_a_message_without_uniq_key_is_known_by_its_offset_msg_id() -> None:
    m = WireMessage("T", 0, b"x", {}, physical_offset=0x112, store_host="127.0.0.1:26077")
    assert rc.message_id(m) == "7F000001000065DD0000000000000112"  # as Apache's producer reported it
    assert rc.to_v2(m, COMMITLOG_OFFSET_PROPERTY).system_properties.message_id == rc.message_id(m)
