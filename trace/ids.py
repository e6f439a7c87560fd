"""RocketMQ's offsetMsgId: where a message sits, written as hex.

RocketMQ has two message IDs and users confuse them (rocketmq-externals#410):

* the *msgId* (property ``UNIQ_KEY``) is made by the client before sending; it is what
  trace lookup uses;
* the *offsetMsgId* is made by the broker when it stores the message: the store host's
  address and the commit-log physical offset.  A Pub trace record carries it, and from
  it the timeline can find the message's physical offset without asking the broker.

Layout (Java ``MessageDecoder.createMessageId``): IPv4 address (4 bytes) + port (int32,
big-endian) + physical offset (int64, big-endian) = 16 bytes = 32 upper-case hex
characters; with an IPv6 address 16 + 4 + 8 bytes = 56 hex characters.
"""

from __future__ import annotations

import ipaddress
import string

IPV4_ID_LENGTH = 32
IPV6_ID_LENGTH = 56
_HEX = frozenset(string.hexdigits)
_MAX_OFFSET = 2**63 - 1


def make_offset_msg_id(host: str, port: int, offset: int) -> str:
    """The offsetMsgId of the message stored at ``offset`` by the broker at ``host:port``.

    ``host`` is an IPv4 or IPv6 literal (not a name: the ID holds address bytes).
    """
    try:
        address = ipaddress.ip_address(host.strip("[]") if isinstance(host, str) else host)
    except ValueError:
        raise ValueError(f"offsetMsgId host must be an IPv4 or IPv6 address literal, got {host!r}") from None
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"offsetMsgId port must be an int in 0..65535, got {port!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= _MAX_OFFSET:
        raise ValueError(f"offsetMsgId physical offset must be an int in 0..2**63-1, got {offset!r}")
    raw = address.packed + port.to_bytes(4, "big") + offset.to_bytes(8, "big")
    return raw.hex().upper()


def parse_offset_msg_id(text: str) -> tuple[str, int, int]:
    """``(host, port, physical offset)`` of an offsetMsgId; lower-case hex is accepted.

    Raises ``ValueError`` saying what is wrong: the length, a non-hex character, a port
    or offset that no broker could have written.
    """
    if not isinstance(text, str):
        raise ValueError(f"offsetMsgId must be a str, got {type(text).__name__}")
    if len(text) not in (IPV4_ID_LENGTH, IPV6_ID_LENGTH):
        raise ValueError(
            f"offsetMsgId must be {IPV4_ID_LENGTH} hex characters (IPv4 broker) or {IPV6_ID_LENGTH} (IPv6), "
            f"got {len(text)}"
        )
    for position, char in enumerate(text):
        if char not in _HEX:
            raise ValueError(f"offsetMsgId has a non-hex character {char!r} at position {position}")
    raw = bytes.fromhex(text)
    address_length = 4 if len(raw) == 16 else 16
    host = str(ipaddress.ip_address(raw[:address_length]))
    port = int.from_bytes(raw[address_length : address_length + 4], "big", signed=True)
    offset = int.from_bytes(raw[address_length + 4 :], "big", signed=True)
    if not 0 <= port <= 65535:
        raise ValueError(f"offsetMsgId port field is {port}, not a TCP port: this is not an offsetMsgId")
    if offset < 0:
        raise ValueError(f"offsetMsgId physical offset field is negative ({offset}): this is not an offsetMsgId")
    return host, port, offset


def split_address(address: str) -> tuple[str, int]:
    """``("10.0.0.1", 10911)`` from ``"10.0.0.1:10911"`` or ``"[::1]:10911"`` (store-host strings)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not (port_text.isascii() and port_text.isdigit()) or not host:
        raise ValueError(f"address must be host:port, got {address!r}")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"address port {port} is out of range in {address!r}")
    return host.strip("[]"), port
