"""Transactional messages: half messages, commit or rollback, and check-back.

A half message is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` (nobody consumes it, so it is
invisible); EndTransaction COMMIT copies it to its real topic, and both COMMIT and
ROLLBACK write an *op* record to ``RMQ_SYS_TRANS_OP_HALF_TOPIC``.  Pending half messages
are rebuilt from the two topics at start-up, so an unresolved transaction survives a
restart.  A half message left unresolved for ``transactionTimeOut`` ms is checked back:
a ``CheckBack`` goes into the outbox of a producer that publishes to the topic (the one
that sent it when still connected) — the gRPC front door turns it into a Telemetry
RecoverOrphanedTransactionCommand, the remoting one into CHECK_TRANSACTION_STATE —, at most
``transactionCheckMax`` times, ``transactionCheckInterval`` ms apart; after that the
message is discarded (rolled back) and logged, as RocketMQ does.

After a leader change (DLedger) or a promotion (controller mode) the resolution of a
half message may have been written by *another* writer: its op record reaches this node
through the replicated log.  So the pending set is never trusted across a role change:
``recover()`` rebuilds it from the two topics, every check pass first reads the op and
half records that became visible since the last pass, and a new writer checks nothing
back until its confirm offset covers the whole log it had when it took over (everything
an earlier writer may have resolved).  Without this, a leader returning after a pause
checked back, and committed a second time, a transaction its successor had committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from rocketscope.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

from .errors import BrokerError, ErrorKind
from .store.record import TRANSACTION_COMMIT, TRANSACTION_PREPARED, StoredMessage

if TYPE_CHECKING:
    from rocketscope.config import Settings

    from .clients import ClientRegistry
    from .store.message_store import MessageStore
    from .topics import TopicManager
    from .trace_hooks import TraceHooks

log = logging.getLogger(__name__)

HALF_TOPIC = TRANS_HALF_TOPIC
OP_TOPIC = TRANS_OP_HALF_TOPIC
TRANSACTION_ID = "TRANSACTION_ID"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
PRODUCER_CLIENT = "__PRODUCER_CLIENT_ID"
OP_OF = "TRAN_OP_OFFSET"
OP_KIND = "TRAN_OP"
COMMITTED_IDS_KEPT = 100_000  # message IDs remembered as committed by this writer (a retried send comes within seconds)
CATCH_UP_WAIT_S = 3.0  # longest an EndTransaction waits for a new writer to confirm its predecessors' log


class TransactionError(BrokerError):
    """A refused EndTransaction (each front door maps its kind once: broker/errors.py)."""


class Resolution(Enum):
    """A producer's answer to a transaction, whatever protocol carried it (each front door maps its own
    values: gRPC's TransactionResolution, remoting's commitOrRollback 8/12/0)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class CheckBack:
    """A check-back for a producer's outbox: the half message as stored (its topic is the half topic; the
    real one is ``topic``) and the transaction id. Each front door turns it into its protocol's command."""

    transaction_id: str
    half: StoredMessage
    topic: str


@dataclass
class Half:
    offset: int
    msg_id: str
    topic: str
    stored_ms: int
    client_id: str
    checks: int = 0
    last_check_ms: int = 0


class TransactionHost(Protocol):
    """What the transaction service uses of its broker (issue 17: this, not the whole Broker)."""

    store: MessageStore
    topics: TopicManager
    clients: ClientRegistry
    settings: Settings
    trace_hooks: TraceHooks  # replaced when broker-side trace starts: read at each use

    @property
    def is_master(self) -> bool: ...

    def writer_lease_held(self) -> bool: ...

    def on_transaction_committed(self, msg: StoredMessage) -> None: ...

    def on_transaction_resolved(self, topic: str, committed: bool, latency_s: float) -> None: ...


class TransactionService:
    def __init__(self, broker: TransactionHost) -> None:
        self.broker = broker
        self.store = broker.store
        self.pending: dict[str, Half] = {}
        self._task: asyncio.Task[None] | None = None
        self.committed_total = 0
        self.rolled_back_total = 0
        self._resolved: set[int] = set()  # queue offsets (in HALF_TOPIC) of resolved half messages
        self._half_pos = 0  # next queue offset of HALF_TOPIC / OP_TOPIC that refresh() reads
        self._op_pos = 0
        self._ready_at = 0  # log end when this node last took over as writer (see writer_caught_up)
        self._resolving: set[str] = set()  # transactions whose commit or rollback is being stored now
        # commits in progress per message ID: halves of one message (a send retried across a failover) committed
        # at once wait for each other, so the later ones find the first commit (chaos controller seed 7, session 9)
        self._committing: dict[str, tuple[asyncio.Lock, int]] = {}  # message ID -> (its lock, commits using it)
        self._committed_ids: dict[str, None] = {}  # message IDs this writer committed, newest last (bounded)

    # ---------------------------------------------------------------- recover
    def recover(self) -> None:
        """Rebuild the pending half messages from the log (start-up and every role change).

        Check-back counts of halves still pending are kept, so a role change does not
        reset ``transactionCheckMax``.
        """
        topics = self.broker.topics
        topics.create_if_absent(HALF_TOPIC, 1, system=True)
        topics.create_if_absent(OP_TOPIC, 1, system=True)
        old = self.pending
        self.pending = {}
        self._resolved = set()
        # what this node committed as an earlier writer may have been truncated since; the store answers
        self._committed_ids.clear()
        self._half_pos = self.store.min_offset(HALF_TOPIC, 0)
        self._op_pos = self.store.min_offset(OP_TOPIC, 0)
        self._ready_at = self.store.commit_log.max_offset
        self.refresh()
        for tx_id, half in self.pending.items():
            prev = old.get(tx_id)
            if prev is not None:
                half.checks, half.last_check_ms = prev.checks, prev.last_check_ms
        if self.pending:
            log.info("transactions recovered: %d half messages unresolved", len(self.pending))

    def refresh(self) -> None:
        """Read the op and half records that became visible since the last call (replicated ones too)."""
        for msg in self._scan_from(OP_TOPIC, "_op_pos"):
            if msg.properties.get(OP_OF, "").isdigit():
                self._resolved.add(int(msg.properties[OP_OF]))
        for msg in self._scan_from(HALF_TOPIC, "_half_pos"):
            tx_id = msg.properties.get(TRANSACTION_ID, "")
            if msg.queue_offset not in self._resolved and tx_id not in self.pending:
                self.pending[tx_id] = Half(msg.queue_offset, msg.msg_id, msg.properties.get(REAL_TOPIC, ""),
                                           msg.store_timestamp, msg.properties.get(PRODUCER_CLIENT, ""))
        if self._resolved:
            for tx_id, half in list(self.pending.items()):
                if half.offset in self._resolved:
                    del self.pending[tx_id]

    def writer_caught_up(self) -> bool:
        """True once this writer sees every record of the log it took over as confirmed (committed).

        A new Raft leader confirms its predecessors' tail only when its own term's first
        entry commits; until then an op record written by the predecessor may be invisible.
        """
        store = self.store
        return min(store.confirm_offset, store.dispatched) >= min(self._ready_at, store.commit_log.max_offset)

    def may_check_back(self) -> bool:
        """Only a writer sure of its role, that sees what earlier writers resolved, checks back."""
        b = self.broker
        if not b.is_master or not b.writer_lease_held():
            return False
        return self.writer_caught_up()

    def _scan_from(self, topic: str, attr: str) -> list[StoredMessage]:
        out: list[StoredMessage] = []
        pos = max(getattr(self, attr), self.store.min_offset(topic, 0))
        end = self.store.max_offset(topic, 0)
        while pos < end:
            got = self.store.get(topic, 0, pos, 256)
            out.extend(got.messages)
            pos = got.next_offset if got.next_offset > pos else pos + 1
        setattr(self, attr, pos)
        return out

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._check_loop(), name="transaction-check")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # --------------------------------------------------------------- prepare
    def wrap(self, msg: StoredMessage, client_id: str) -> str:
        """Turn a message into a half message (in place); return its transaction id."""
        tx_id = uuid.uuid4().hex.upper()
        msg.properties[REAL_TOPIC] = msg.topic
        msg.properties[REAL_QID] = str(msg.queue_id)
        msg.properties[TRANSACTION_ID] = tx_id
        msg.properties[PRODUCER_CLIENT] = client_id
        msg.properties["TRAN_MSG"] = "true"
        msg.sys_flag |= TRANSACTION_PREPARED
        msg.topic = HALF_TOPIC
        msg.queue_id = 0
        return tx_id

    def accepted(self, msg: StoredMessage) -> None:
        tx_id = msg.properties[TRANSACTION_ID]
        self.pending[tx_id] = Half(msg.queue_offset, msg.msg_id, msg.properties[REAL_TOPIC], msg.store_timestamp,
                                   msg.properties.get(PRODUCER_CLIENT, ""))

    # ------------------------------------------------------------------- end
    async def end(self, tx_id: str, msg_id: str, resolution: Resolution, from_check: bool) -> str:
        # A writer that just took over resolves nothing before it sees its predecessors' log confirmed: a
        # predecessor may have stored this very commit (message and op record, one entry) that this node holds
        # but has not confirmed yet, so neither its op record nor its message is visible, and committing again
        # stored the message twice (chaos DLedger, preferred leader returning under load, session 14: two
        # check-backs answered COMMIT, one at each of two successive leaders)
        await self._catch_up()
        half = self.pending.get(tx_id)
        if half is None:
            raise TransactionError(ErrorKind.INVALID_TRANSACTION_ID,
                                   f"transaction_id {tx_id} is unknown or already resolved")
        if not self.writer_caught_up():
            raise TransactionError(ErrorKind.INTERNAL, "this broker has just become the writer and has not yet "
                                   f"confirmed its predecessors' log; transaction {tx_id} stays pending and is "
                                   "checked back")
        if msg_id and msg_id != half.msg_id:
            raise TransactionError(ErrorKind.ILLEGAL_MESSAGE_ID,
                                   f"message_id {msg_id} does not belong to transaction {tx_id}")
        if resolution is Resolution.UNKNOWN:
            return "UNKNOW"
        if tx_id in self._resolving:
            # a second answer while the first is being stored (a check-back repeated because the commit took
            # longer than transactionCheckInterval): storing it again would deliver the message twice
            log.info("transaction %s of message %s: already being resolved; answer ignored", tx_id, half.msg_id)
            return "COMMIT_MESSAGE" if resolution is Resolution.COMMIT else "ROLLBACK_MESSAGE"
        self._resolving.add(tx_id)
        try:
            return await self._resolve(tx_id, half, resolution, from_check)
        finally:
            self._resolving.discard(tx_id)

    async def _resolve(self, tx_id: str, half: Half, resolution: Resolution, from_check: bool) -> str:
        if resolution is Resolution.COMMIT:
            msg = self.store.message_at(HALF_TOPIC, 0, half.offset)
            if msg is None:
                raise TransactionError(ErrorKind.MESSAGE_NOT_FOUND,
                                       f"half message of transaction {tx_id} is no longer stored")
            real = self._unwrap(msg)
            lock, users = self._committing.get(half.msg_id, (asyncio.Lock(), 0))
            self._committing[half.msg_id] = (lock, users + 1)
            try:
                async with lock:
                    if half.msg_id in self._committed_ids or self._already_committed(real, msg):
                        # an earlier commit answered as failed (leader transfer, lost quorum) was stored all the
                        # same, or another half of this message was committed meanwhile: only the op record is
                        # missing, storing the message again would deliver it twice
                        log.info("transaction %s of message %s: already committed; writing its op record only",
                                 tx_id, half.msg_id)
                        await self._write_op(half.offset, "COMMIT_MESSAGE")
                        self._resolved.add(half.offset)
                        self.pending.pop(tx_id, None)
                        return "COMMIT_MESSAGE"
                    # the message and its op record in one write: a commit whose op record was lost with the
                    # writer left the half pending at the next writer, which checked it back and committed it again
                    res, op_res = await self.store.put([real, self._op(half.offset, "COMMIT_MESSAGE")])
                    if not (res.stored and op_res.stored):
                        # not known to be stored (a DLedger entry not committed at a majority keeps its message
                        # in the result, with this status): the half stays pending and is checked back; if the
                        # write survives after all, that resolution finds it and writes the op record only.
                        # Taking it for stored lost the commit (chaos DLedger one-way cut, session 13)
                        raise TransactionError(ErrorKind.INTERNAL, "cannot store the committed message: "
                                               f"{res.status.value} {res.reason or op_res.reason}".rstrip())
                    self._committed_ids[half.msg_id] = None
                    while len(self._committed_ids) > COMMITTED_IDS_KEPT:
                        del self._committed_ids[next(iter(self._committed_ids))]
            finally:
                lock, users = self._committing[half.msg_id]
                if users > 1:
                    self._committing[half.msg_id] = (lock, users - 1)
                else:
                    del self._committing[half.msg_id]
            self.broker.on_transaction_committed(real)
            self.committed_total += 1
            kind = "COMMIT_MESSAGE"
        else:
            kind = "ROLLBACK_MESSAGE"
            await self._write_op(half.offset, kind)
            self.rolled_back_total += 1
        self._resolved.add(half.offset)
        self.pending.pop(tx_id, None)
        self.broker.on_transaction_resolved(half.topic, kind == "COMMIT_MESSAGE",
                                            max(0.0, time.time() - half.stored_ms / 1000))
        half_msg = self.store.message_at(HALF_TOPIC, 0, half.offset)
        if half_msg is not None:
            self.broker.trace_hooks.on_transaction_end(half_msg, state=kind, transaction_id=tx_id,
                                                       from_check=from_check)
        log.info("transaction %s of message %s: %s%s", tx_id, half.msg_id, kind,
                 " (answer to a check-back)" if from_check else "")
        return kind

    async def _catch_up(self) -> None:
        """Wait (up to CATCH_UP_WAIT_S) until this writer confirms the log it took over, reading what it resolves.

        A new leader confirms its predecessors' tail only when its own first entry commits; an EndTransaction
        arriving before that waits for it (the half it names, or the op record resolving it, may be in that
        tail), rather than being refused or acting on what it sees so far.
        """
        self.refresh()
        deadline = time.monotonic() + CATCH_UP_WAIT_S
        while not self.writer_caught_up() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            self.refresh()

    def _already_committed(self, real: StoredMessage, half: StoredMessage) -> bool:
        """Whether the real topic already holds this message's commit: the same message ID, from this half
        or from another half of the same message (a producer's send retried across a failover stores the
        half twice, under two transaction IDs; the client commits one and the check-back the other:
        tests/test_failover_tx_retry.py)."""
        return any(m.prepared_tx_offset == half.physical_offset or m.msg_id == half.msg_id
                   for m in self.store.lookup(real.topic, half.msg_id, limit=8))

    @staticmethod
    def _op(offset: int, kind: str) -> StoredMessage:
        return StoredMessage(topic=OP_TOPIC, queue_id=0, body=kind.encode(), properties={OP_OF: str(offset),
                                                                                           OP_KIND: kind})

    async def _write_op(self, offset: int, kind: str) -> None:
        """The op record that resolves a half; a write not known to be stored leaves the half pending."""
        (res,) = await self.store.put([self._op(offset, kind)])
        if not res.stored:
            raise TransactionError(ErrorKind.INTERNAL, f"cannot store the {kind} record: {res.status.value} "
                                                       f"{res.reason}".rstrip())

    def _unwrap(self, msg: StoredMessage) -> StoredMessage:
        drop = (REAL_TOPIC, REAL_QID, PRODUCER_CLIENT, "TRAN_MSG")
        props = {k: v for k, v in msg.properties.items() if k not in drop}
        return StoredMessage(topic=msg.properties[REAL_TOPIC], queue_id=int(msg.properties.get(REAL_QID, "0")),
                             body=msg.body, properties=props, flag=msg.flag,
                             sys_flag=(msg.sys_flag & ~TRANSACTION_PREPARED) | TRANSACTION_COMMIT,
                             born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                             prepared_tx_offset=msg.physical_offset)

    # ------------------------------------------------------------- check-back
    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            try:
                await self.check_due()
            except Exception:
                log.exception("transaction check pass failed; will retry")

    async def check_due(self) -> int:
        if not self.may_check_back():
            return 0
        self.refresh()
        s = self.broker.settings
        now = int(time.time() * 1000)
        sent = 0
        for tx_id, half in list(self.pending.items()):
            if now - half.stored_ms < s.transactionTimeOut or now - half.last_check_ms < s.transactionCheckInterval:
                continue
            if tx_id in self._resolving:
                continue  # its answer is being stored: asking again would get a second answer
            if half.checks >= s.transactionCheckMax:
                log.warning("transaction %s of message %s discarded after %d check-backs", tx_id, half.msg_id,
                            half.checks)
                await self._write_op(half.offset, "ROLLBACK_MESSAGE")
                self.rolled_back_total += 1
                self._resolved.add(half.offset)
                self.pending.pop(tx_id, None)
                self.broker.on_transaction_resolved(half.topic, False, max(0.0, (now - half.stored_ms) / 1000))
                continue
            client = self._producer_for(half)
            half.last_check_ms = now
            if client is None:
                continue  # nobody to ask now; try again next interval (does not count as a check)
            msg = self.store.message_at(HALF_TOPIC, 0, half.offset)
            if msg is None:
                self.pending.pop(tx_id, None)
                continue
            half.checks += 1
            await client.outbox.put(CheckBack(tx_id, msg, half.topic))  # type: ignore[union-attr]
            log.info("transaction %s of message %s checked back with client %s (check %d)", tx_id, half.msg_id,
                     client.client_id, half.checks)
            sent += 1
        return sent

    def _producer_for(self, half: Half):
        clients = self.broker.clients
        own = clients.clients.get(half.client_id)
        if own is not None and own.outbox is not None:
            return own
        candidates = [c for c in clients.producers() if c.outbox is not None]
        for c in candidates:
            if half.topic in c.topics:
                return c
        return candidates[0] if candidates else None
