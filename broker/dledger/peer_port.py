"""A Raft port: accepts the other members' links and hands their batches to the node.

DLedger's (``dLegerPeers``, broker/broker.py) and, since session 18, the controllers'
(``controllerDLegerPeers``, broker/controller/node.py) are both this class.

The port itself (TLS modes, ``internalPeerSecret``, hello timeout, bad input closed with one log line) is
broker/peer_frames/port.py; the byte format is broker/dledger/peer_wire.py.  What is Raft's here: each
frame is a ``RaftBatch`` of this group, decoded by broker/dledger/raft_codec.py into a ``Batch`` of Raft
messages and handed to ``on_batch`` synchronously (grpc.aio's ``PeerServicer.Send`` cost the followers most
of their CPU per message, issue 20).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rocketscope.tls import TlsServerConfig

from ..peer_frames import wire
from ..peer_frames.port import HELLO_TIMEOUT_S, Conn, FramedPort
from . import peer_wire
from .raft_codec import Batch, BatchError, decode_batch

log = logging.getLogger(__name__)
PORT_NAME = "Raft"


class _RaftSession:
    """One member's inbound link after its hello: frames of RaftBatch, nothing written back."""

    def __init__(self, port: PeerPort, conn: Conn) -> None:
        self.port = port
        self.conn = conn

    def frame(self, payload: bytes) -> None:
        conn = self.conn
        try:
            batch = decode_batch(payload)
        except BatchError as exc:
            conn.drop(f"a frame of {len(payload)} bytes is not a RaftBatch: {exc}")
            return
        if batch.group != self.port.group:
            conn.drop(f"a batch of group {batch.group!r}, not {self.port.group!r}")
            return
        try:
            self.port.on_batch(batch)
        except Exception:  # the node's bug, not the peer's bytes: say so, keep the connection
            log.exception("%s port: a batch from %s (%s) failed", PORT_NAME, conn.sender, conn.peer)

    def writable(self, yes: bool) -> None:
        pass

    def closed(self) -> None:
        pass


class PeerPort(FramedPort):
    """The listening Raft port: ``bind`` (at start-up, so a taken port fails loudly), ``start``, ``stop``."""

    group: str

    def __init__(self, group: str, on_batch: Callable[[Batch], None], *, secret: str = "",
                 tls: TlsServerConfig | None = None, max_frame: int = wire.MAX_FRAME,
                 hello_timeout_s: float = HELLO_TIMEOUT_S, key: str = "dLegerPeers") -> None:
        """``key``: the config key that names this port's address (in the error when it cannot bind)."""
        super().__init__(PORT_NAME, peer_wire.MAGIC, peer_wire.PROTOCOL, group, lambda c: _RaftSession(self, c),
                         key=key, secret=secret, tls=tls, max_frame=max_frame, hello_timeout_s=hello_timeout_s)
        self.on_batch = on_batch
