"""DLedger's Raft port (``dLegerPeers``) speaks the framed peer protocol (broker/peer_frames/wire.py) with
magic ``RSRF``: a hello, then one-way frames from the client, each a serialised ``RaftBatch``
(broker/protocol/dledger.proto); the server sends nothing after its reply.

Raft messages need no RPC semantics: nothing is acknowledged per message because Raft tolerates
loss, duplication and reordering.
"""

from __future__ import annotations

from ..peer_frames.wire import (
    MAX_FRAME,
    OK,
    REFUSED,
    VERSION,
    FrameDecoder,
    WireError,
    frame,
    parse_hello,
    parse_reply,
    reply,
)
from ..peer_frames.wire import check_preamble as _check_preamble
from ..peer_frames.wire import hello as _hello

MAGIC = b"RSRF"
PROTOCOL = "the Raft peer protocol"
__all__ = ["MAGIC", "MAX_FRAME", "OK", "PROTOCOL", "REFUSED", "VERSION", "FrameDecoder", "WireError",
           "check_preamble", "frame", "hello", "parse_hello", "parse_reply", "reply"]


def hello(group: str, sender: str, secret: str) -> bytes:
    """What a member sends first on a new connection to a Raft port."""
    return _hello(MAGIC, group, sender, secret)


def check_preamble(data: bytes) -> None:
    """WireError unless ``data`` (a connection's first 5 bytes) opens the Raft peer protocol."""
    _check_preamble(data, MAGIC, PROTOCOL)
