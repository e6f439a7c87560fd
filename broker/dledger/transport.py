"""Raft messages over gRPC client streams: the controller group's transport (broker/controller/node.py).

DLedger's members no longer use it: they talk length-prefixed frames over plain TCP
(broker/dledger/peer_link.py, peer_port.py), because grpc.aio's per-message cost was most of
a DLedger leader's event loop (issue 20); moving the controller too is a next step.  ``to_pb`` and
``from_pb`` are shared by both transports.

One outbound stream per peer carries batches of messages; nothing is acknowledged per
message because Raft tolerates loss, duplication and reordering.  A peer that is down
is retried with back-off, and messages queued for it meanwhile are dropped beyond a
bound (the leader's next heartbeat or append replaces them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import grpc

from rocketscope.broker.protocol import dledger_pb2, dledger_pb2_grpc
from rocketscope.broker.raft import Entry, EntryKind, Message, MsgType

log = logging.getLogger(__name__)
QUEUE_LIMIT = 4096


def to_pb(m: Message) -> dledger_pb2.RaftMessage:
    return dledger_pb2.RaftMessage(
        type=int(m.type), frm=m.frm, to=m.to, term=m.term, log_term=m.log_term, index=m.index,
        entries=[dledger_pb2.RaftEntry(index=e.index, term=e.term, kind=int(e.kind), data=e.data) for e in m.entries],
        commit=m.commit, reject=m.reject, reject_hint=m.reject_hint, force=m.force)


def from_pb(p: dledger_pb2.RaftMessage) -> Message:
    return Message(type=MsgType(p.type), frm=p.frm, to=p.to, term=p.term, log_term=p.log_term, index=p.index,
                   entries=[Entry(e.index, e.term, EntryKind(e.kind), e.data) for e in p.entries],
                   commit=p.commit, reject=p.reject, reject_hint=p.reject_hint, force=p.force)


class PeerServicer(dledger_pb2_grpc.DLedgerPeerServicer):
    def __init__(self, group: str, on_batch: Callable[[dledger_pb2.RaftBatch], None]) -> None:
        self.group = group
        self.on_batch = on_batch

    async def Send(self, request_iterator: AsyncIterator[dledger_pb2.RaftBatch],
                   context: grpc.aio.ServicerContext) -> dledger_pb2.RaftAck:
        try:
            async for batch in request_iterator:
                if batch.group != self.group:
                    return dledger_pb2.RaftAck(error=f"group {batch.group!r} is not {self.group!r}")
                self.on_batch(batch)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        return dledger_pb2.RaftAck()


class LinkTask:
    """The background task of an outbound link to one peer (both transports' ``PeerLink``): ``start``
    runs the subclass's ``_run`` (connect, send, reconnect with back-off) on the loop; ``stop`` cancels it
    and waits, so the link's sockets or channel are closed when it returns."""

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


class PeerLink(LinkTask):
    """The outbound stream to one peer."""

    def __init__(self, peer_id: str, address: str, header: Callable[[], dledger_pb2.RaftBatch],
                 channel: Callable[..., grpc.aio.Channel] = grpc.aio.insecure_channel) -> None:
        """``channel`` builds the outbound channel (the broker's TLS client settings)."""
        self.peer_id = peer_id
        self.make_channel = channel
        self.address = address
        self.header = header
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self.dropped = 0
        self.connected = False
        self._task: asyncio.Task[None] | None = None

    def send(self, m: Message) -> None:
        if self.queue.qsize() >= QUEUE_LIMIT:
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
            self.dropped += 1
        self.queue.put_nowait(m)

    async def _batches(self) -> AsyncIterator[dledger_pb2.RaftBatch]:
        while True:
            first = await self.queue.get()
            batch = self.header()
            batch.messages.append(to_pb(first))
            while not self.queue.empty() and len(batch.messages) < 64:
                batch.messages.append(to_pb(self.queue.get_nowait()))
            yield batch

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                async with self.make_channel(
                        self.address, options=[("grpc.max_send_message_length", 64 * 1024 * 1024),
                                               ("grpc.initial_reconnect_backoff_ms", 50),
                                               ("grpc.max_reconnect_backoff_ms", 500)]) as channel:
                    # wait until the peer really answers: a stream opened on a dead address only fails later
                    await asyncio.wait_for(channel.channel_ready(), 1.0)
                    stub = dledger_pb2_grpc.DLedgerPeerStub(channel)
                    self.connected = True
                    if failures:
                        log.info("dledger: link to %s (%s) up", self.peer_id, self.address)
                    failures = 0
                    ack = await stub.Send(self._batches())
                    if ack.error:
                        log.error("dledger: peer %s refused our messages: %s", self.peer_id, ack.error)
            except (grpc.aio.AioRpcError, TimeoutError) as exc:
                if failures == 0:
                    reason = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else "not reachable"
                    log.warning("dledger: link to %s (%s) down: %s", self.peer_id, self.address, reason)
                failures += 1
            self.connected = False
            while not self.queue.empty():  # stale while disconnected: Raft resends what matters
                self.queue.get_nowait()
            await asyncio.sleep(0.05)
