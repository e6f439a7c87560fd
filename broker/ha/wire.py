"""The byte format of Master/Slave replication on ``haListenPort``: framed protobuf over plain TCP (or TLS).

Apache RocketMQ's HA link is plain TCP on haListenPort too (a slave reports its max offset as an
8-byte number, the master streams a 12-byte header and commit-log bytes).  RocketScope keeps its own
messages (broker/protocol/ha.proto: ``SlaveReport`` up, ``TransferChunk`` down) but carries them in
the framed peer protocol of broker/peer_frames/wire.py instead of a grpc.aio stream, whose per-message
cost and thread hops were most of a SYNC_MASTER send's CPU (issue 20):

    slave -> master   b"RSHA" (magic), 0x01 (version), hello frame (broker name, "name#id", internalPeerSecret)
    master -> slave   reply frame: 0x00 (OK) | 0x01 + reason (REFUSED, then the master closes)
    slave -> master   frame(SlaveReport) ...   the first one opens the session; then one after every read
                                               that carried chunks (its new log end: the ack)
    master -> slave   frame(TransferChunk) ... records from the slave's end, heartbeats (no data) when idle,
                                               or one chunk with ``error`` before the master closes

A frame is a 4-byte big-endian length and the payload (at most 64 MiB; a chunk carries at most 256 KiB
of records, or one record larger than that).
"""

from __future__ import annotations

from ..peer_frames.wire import check_preamble as _check_preamble
from ..peer_frames.wire import hello as _hello

MAGIC = b"RSHA"
PROTOCOL = "the HA replication protocol"


def hello(broker_name: str, sender: str, secret: str) -> bytes:
    """What a slave sends first on a new connection to its master's haListenPort."""
    return _hello(MAGIC, broker_name, sender, secret)


def check_preamble(data: bytes) -> None:
    """WireError unless ``data`` (a connection's first 5 bytes) opens the HA replication protocol."""
    _check_preamble(data, MAGIC, PROTOCOL)
