"""DLedger's Raft port (``dLegerPeers``) speaks the framed peer protocol (broker/peer_frames/wire.py) with
magic ``RSRF``: a hello, then one-way frames from the client, each a serialised ``RaftBatch``
(broker/protocol/dledger.proto); the server sends nothing after its reply.

Raft messages need no RPC semantics: nothing is acknowledged per message because Raft tolerates
loss, duplication and reordering.  ``to_pb`` and ``from_pb`` turn Raft messages into the ``RaftMessage``
a frame's ``RaftBatch`` carries and back (DLedger members and controllers alike).
"""

from __future__ import annotations

from typing import Any

from rocketscope.broker.protocol import dledger_pb2
from rocketscope.broker.raft import Entry, EntryKind, Message, MsgType

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
           "add_pb", "check_preamble", "frame", "from_pb", "hello", "parse_hello", "parse_reply", "reply", "to_pb"]


def hello(group: str, sender: str, secret: str) -> bytes:
    """What a member sends first on a new connection to a Raft port."""
    return _hello(MAGIC, group, sender, secret)


def check_preamble(data: bytes) -> None:
    """WireError unless ``data`` (a connection's first 5 bytes) opens the Raft peer protocol."""
    _check_preamble(data, MAGIC, PROTOCOL)


def to_pb(m: Message) -> dledger_pb2.RaftMessage:
    return dledger_pb2.RaftMessage(
        type=int(m.type), frm=m.frm, to=m.to, term=m.term, log_term=m.log_term, index=m.index,
        entries=[dledger_pb2.RaftEntry(index=e.index, term=e.term, kind=int(e.kind), data=e.data) for e in m.entries],
        commit=m.commit, reject=m.reject, reject_hint=m.reject_hint, force=m.force)


def add_pb(messages: Any, m: Message) -> None:
    """Append ``m`` to a ``RaftBatch.messages`` container as ``to_pb`` would, built in place.

    Why: ``messages.append(to_pb(m))`` builds the message (its entries' bytes copied in) and then
    copies it whole into the container (upb's MergeFrom); ``add`` builds it there once, and
    fields at their default are not passed at all.  On the leader this is every append to every
    follower (session 19's profile, docs/BENCHMARKS.md).
    """
    pm = messages.add(type=int(m.type), frm=m.frm, to=m.to, term=m.term)
    if m.log_term:
        pm.log_term = m.log_term
    if m.index:
        pm.index = m.index
    if m.commit:
        pm.commit = m.commit
    if m.reject:
        pm.reject = True
    if m.reject_hint:
        pm.reject_hint = m.reject_hint
    if m.force:
        pm.force = True
    if m.entries:
        add = pm.entries.add
        for e in m.entries:
            add(index=e.index, term=e.term, kind=int(e.kind), data=e.data)


def from_pb(p: dledger_pb2.RaftMessage) -> Message:
    return Message(type=MsgType(p.type), frm=p.frm, to=p.to, term=p.term, log_term=p.log_term, index=p.index,
                   entries=[Entry(e.index, e.term, EntryKind(e.kind), e.data) for e in p.entries],
                   commit=p.commit, reject=p.reject, reject_hint=p.reject_hint, force=p.force)
