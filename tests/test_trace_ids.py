"""offsetMsgId: RocketMQ's layout, both address families, and clear refusals."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketscope.trace.ids import make_offset_msg_id, parse_offset_msg_id, split_address


def test_rocketmq_sample_from_trace_encoder_test() -> None:
    # 0A9A0026 = 10.154.0.38, 00002A9F = port 10911, 0000000000002329 = offset 9001.
    assert parse_offset_msg_id("0A9A002600002A9F0000000000002329") == ("10.154.0.38", 10911, 9001)
    assert make_offset_msg_id("10.154.0.38", 10911, 9001) == "0A9A002600002A9F0000000000002329"


def test_lower_case_is_accepted() -> None:
    assert parse_offset_msg_id("0a9a002600002a9f0000000000002329") == ("10.154.0.38", 10911, 9001)


def test_ipv6_is_56_hex_characters() -> None:
    text = make_offset_msg_id("::1", 10911, 2**40)
    assert len(text) == 56
    assert parse_offset_msg_id(text) == ("::1", 10911, 2**40)
    assert make_offset_msg_id("[::1]", 10911, 2**40) == text


@given(st.ip_addresses(), st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_round_trip(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, offset: int) -> None:
    text = make_offset_msg_id(str(address), port, offset)
    assert text == text.upper() and len(text) == (32 if address.version == 4 else 56)
    assert parse_offset_msg_id(text) == (str(address), port, offset)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0A9A0026", "32 hex characters"),
        ("", "got 0"),
        ("0A9A002600002A9F000000000000232G", "non-hex character 'G' at position 31"),
        ("0A9A0026FFFFFFFF0000000000002329", "not a TCP port"),
        ("0A9A002600002A9F8000000000000000", "negative"),
    ],
)
def test_parse_errors_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_offset_msg_id(text)


@pytest.mark.parametrize(
    ("host", "port", "offset", "problem"),
    [
        ("broker-a", 10911, 0, "address literal"),
        ("10.0.0.1", 70000, 0, "port must be an int in 0..65535"),
        ("10.0.0.1", 10911, -1, "physical offset"),
        ("10.0.0.1", 10911, 2**63, "physical offset"),
    ],
)
def test_make_errors_say_what_is_wrong(host: str, port: int, offset: int, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        make_offset_msg_id(host, port, offset)


def test_split_address() -> None:
    assert split_address("10.0.0.1:10911") == ("10.0.0.1", 10911)
    assert split_address("[::1]:10911") == ("::1", 10911)
    for bad in ("10.0.0.1", "10.0.0.1:x", ":10911", "h:99999"):
        with pytest.raises(ValueError, match="address"):
            split_address(bad)
