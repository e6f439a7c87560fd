"""The byte format of RocketScope's framed peer ports: a hello, then length-prefixed frames.

Two ports speak it, each with its own 4-byte magic: DLedger's Raft port (``dLegerPeers``,
broker/dledger/peer_wire.py, magic ``RSRF``) and Master/Slave replication on ``haListenPort``
(broker/ha/wire.py, magic ``RSHA``).  Their messages need no RPC semantics, and grpc.aio's per-message
cost (~180-210 µs of CPU per call on the benchmark host, bench/grpc_floor.py; issue 20) was most of what
a replicated send cost, so they talk over plain TCP (or TLS) instead:

* the client opens with the port's magic (4 bytes) and ``VERSION`` (1 byte), then one **hello frame**
  carrying the group, the sender's name and the cluster's ``internalPeerSecret`` (three strings, each
  a 2-byte big-endian length and UTF-8 bytes);
* the server answers one **reply frame**: ``OK`` (one zero byte) or ``REFUSED`` (one byte 1) and a
  UTF-8 text that names what was wrong (the port closes the connection after it);
* then each side sends frames whose payloads are the port's protobuf messages.

A frame is a 4-byte big-endian payload length and the payload; a length above ``MAX_FRAME`` (64 MiB, the
limit the gRPC ports had) is refused before anything is buffered.  ``FrameDecoder`` is fed whatever the
socket delivers and yields whole payloads, so a frame split over reads (or several in one read) costs no
coroutine switch per frame.
"""

from __future__ import annotations

import struct

VERSION = 1
MAX_FRAME = 64 << 20
OK = 0
REFUSED = 1
_LEN = struct.Struct(">I")
_STR = struct.Struct(">H")


class WireError(ValueError):
    """The bytes on a peer port are not its protocol; the message names what was wrong."""


def frame(payload: bytes) -> bytes:
    """``payload`` as one frame (length prefix and bytes)."""
    return _LEN.pack(len(payload)) + payload


def _str(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 0xFFFF:
        raise WireError(f"hello field of {len(raw)} bytes (at most 65535)")
    return _STR.pack(len(raw)) + raw


def hello(magic: bytes, group: str, sender: str, secret: str) -> bytes:
    """What a client sends first on a new connection: the port's magic, version and the hello frame."""
    return magic + bytes([VERSION]) + frame(_str(group) + _str(sender) + _str(secret))


def parse_hello(payload: bytes) -> tuple[str, str, str]:
    """(group, sender, secret) of a hello frame's payload; WireError naming the broken field."""
    out: list[str] = []
    pos = 0
    for name in ("group", "sender", "secret"):
        if pos + 2 > len(payload):
            raise WireError(f"hello frame ends before its {name} field")
        (n,) = _STR.unpack_from(payload, pos)
        pos += 2
        if pos + n > len(payload):
            raise WireError(f"hello frame's {name} field is cut short ({len(payload) - pos} of {n} bytes)")
        try:
            out.append(payload[pos:pos + n].decode())
        except UnicodeDecodeError:
            raise WireError(f"hello frame's {name} field is not UTF-8") from None
        pos += n
    if pos != len(payload):
        raise WireError(f"hello frame has {len(payload) - pos} bytes after its fields")
    return out[0], out[1], out[2]


def reply(error: str = "") -> bytes:
    """The server's answer to a hello: OK, or REFUSED with ``error``."""
    return frame(bytes([OK])) if not error else frame(bytes([REFUSED]) + error.encode())


def parse_reply(payload: bytes) -> str:
    """'' for OK, else the server's reason (a malformed reply is a reason too)."""
    if payload == bytes([OK]):
        return ""
    if payload[:1] == bytes([REFUSED]):
        return payload[1:].decode(errors="replace") or "refused without a reason"
    return f"the peer answered the hello with {payload[:16]!r}, not this protocol's reply"


def check_preamble(data: bytes, magic: bytes, protocol: str) -> None:
    """WireError unless ``data`` (the first 5 bytes of a connection) is ``magic`` and ``VERSION``;
    ``protocol`` names the port's protocol in the error ("the Raft peer protocol")."""
    if data[:4] != magic:
        raise WireError(f"not {protocol} (first bytes {bytes(data[:4])!r}, expected {magic!r})")
    if data[4] != VERSION:
        raise WireError(f"{protocol} version {data[4]} (this member speaks {VERSION})")


class FrameDecoder:
    """Splits a byte stream into frame payloads; WireError on a length above ``max_frame``."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return the payloads it completed (possibly none)."""
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if n > self.max_frame:
                raise WireError(f"frame of {n} bytes is longer than the maximum {self.max_frame}")
            if end - pos - 4 < n:
                break
            out.append(bytes(buf[pos + 4:pos + 4 + n]))
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)
