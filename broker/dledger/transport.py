"""What the Raft links of DLedger members and controllers share: message conversion and the link task.

Both groups talk length-prefixed frames over TCP (broker/dledger/peer_link.py to a peer's
``PeerPort``, broker/dledger/peer_port.py); the gRPC client streams this module held until
session 18 are gone (grpc.aio's per-message cost was most of a DLedger leader's event loop,
issue 20, and the controllers moved to the frames too).  ``to_pb`` and ``from_pb`` turn Raft
messages into the ``RaftMessage`` a frame's ``RaftBatch`` carries (broker/protocol/dledger.proto)
and back.
"""

from __future__ import annotations

import asyncio
import contextlib

from rocketscope.broker.protocol import dledger_pb2
from rocketscope.broker.raft import Entry, EntryKind, Message, MsgType


def to_pb(m: Message) -> dledger_pb2.RaftMessage:
    return dledger_pb2.RaftMessage(
        type=int(m.type), frm=m.frm, to=m.to, term=m.term, log_term=m.log_term, index=m.index,
        entries=[dledger_pb2.RaftEntry(index=e.index, term=e.term, kind=int(e.kind), data=e.data) for e in m.entries],
        commit=m.commit, reject=m.reject, reject_hint=m.reject_hint, force=m.force)


def from_pb(p: dledger_pb2.RaftMessage) -> Message:
    return Message(type=MsgType(p.type), frm=p.frm, to=p.to, term=p.term, log_term=p.log_term, index=p.index,
                   entries=[Entry(e.index, e.term, EntryKind(e.kind), e.data) for e in p.entries],
                   commit=p.commit, reject=p.reject, reject_hint=p.reject_hint, force=p.force)


class LinkTask:
    """The background task of an outbound link to one peer (``PeerLink``): ``start`` runs the subclass's
    ``_run`` (connect, send, reconnect with back-off) on the loop; ``stop`` cancels it and waits, so the
    link's socket is closed when it returns."""

    peer_id: str
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dledger-link-{self.peer_id}")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        raise NotImplementedError
