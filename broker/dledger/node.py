"""The DLedger member: the Raft driver (broker/raft/driver.py) over the commit log, plus what is DLedger's.

The driver owns the Ready loop, ticks, proposal waiters and role changes; this class injects
the commit log and index (broker/dledger/log_store.py) as its durable log, the peer links
(length-prefixed frames over TCP, broker/dledger/peer_link.py) as its transport, the asyncio
clock and a worker-thread fsync (broker/raft/aio.py), and keeps what is DLedger's own:
applying a committed entry moves the store's confirm offset (consumers see exactly the
committed prefix), proposals are planned as commit-log records (``plan_entries``) and enter
the store's pending dispatch, a new leader rebuilds the queue offsets, a deposed one drops
its pending records, and every Raft event becomes an HA event.  A send succeeds only if the
committed entry at its index still carries the term it was proposed in (the driver's rule);
otherwise the client gets an error, never SEND_OK.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rocketscope import ha_events as ev
from rocketscope.broker.protocol import dledger_pb2
from rocketscope.broker.raft import (
    Entry,
    EventKind,
    HardState,
    Message,
    NotLeader,
    ProposalDropped,
    RaftConfig,
    RaftEvent,
    RaftNode,
    Role,
)
from rocketscope.broker.raft.aio import AsyncioClock, ThreadSyncer
from rocketscope.broker.raft.driver import Clock, DrivenMember, RaftDriver, ReadyObserver, Syncer, Transport
from rocketscope.broker.store import record
from rocketscope.broker.store.message_store import MessageStore, PutResult, PutStatus
from rocketscope.broker.store.record import RecordError, StoredMessage
from rocketscope.config import ConfigError, Settings
from rocketscope.tls import TlsClientConfig

from .log_store import DLedgerLog
from .peer_link import PeerLink
from .raft_codec import Batch, check_records

log = logging.getLogger(__name__)


def parse_peers(text: str) -> dict[str, str]:
    """``n0-host:port;n1-host:port`` (RocketMQ's dLegerPeers) → {id: address}."""
    peers: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        pid, sep, addr = item.partition("-")
        if not sep or ":" not in addr:
            raise ConfigError(f"config key dLegerPeers has bad item {item!r}: expected id-host:port")
        peers[pid] = addr
    return peers


@dataclass
class EntryPlan:
    """One proposal's Raft entries: what ``plan_entries`` made of a group of messages."""

    results: list[PutResult]  # one per message, in order (MESSAGE_ILLEGAL ones take no entry)
    datas: list[bytes]  # the entries' bytes: consecutive records, one segment each
    accepted: list[StoredMessage]  # the messages in the entries, in log order
    entry_of: list[int]  # per accepted message, its entry's position in ``datas``
    cursor: int  # the log end once the entries are written
    queue_next_before: dict[tuple[str, int], int] = field(default_factory=dict)  # queue offsets before planning


def plan_entries(store: MessageStore, messages: list[StoredMessage], cursor: int, max_bytes: int) -> EntryPlan:
    """Encode ``messages`` at the log end ``cursor`` into as few Raft entries as the log allows.

    An entry is one or more consecutive records of one commit-log segment: a new entry starts
    where a record rolls to the next segment (``MessageStore.prepare`` moved it past the
    segment's end) or where the entry would pass ``max_bytes`` (one record larger than that
    is an entry of its own).  A record is never split.

    The common case is compiled (``MessageStore.prepare_run``: the same entries, laid out in C); the loop below
    is its reference and takes every group it declines (a message to refuse, LMQ dispatch, no compiled module).
    """
    fast = store.prepare_run(messages, cursor, max_bytes)
    if fast is not None:
        datas, entry_of, end = fast
        ok = PutStatus.PUT_OK
        return EntryPlan([PutResult(ok, m) for m in messages], datas, list(messages), entry_of, end)
    plan = EntryPlan([], [], [], [], cursor)
    chunk: list[bytes] = []
    size = 0
    for m in messages:
        try:
            data = store.prepare(m, cursor)
        except RecordError as exc:
            plan.results.append(PutResult(PutStatus.MESSAGE_ILLEGAL, reason=str(exc)))
            continue
        if chunk and (m.physical_offset != cursor or size + len(data) > max_bytes):
            plan.datas.append(chunk[0] if len(chunk) == 1 else b"".join(chunk))
            chunk, size = [], 0
        chunk.append(data)
        size += len(data)
        plan.entry_of.append(len(plan.datas))
        plan.accepted.append(m)
        plan.results.append(PutResult(PutStatus.PUT_OK, m))
        cursor = m.physical_offset + len(data)
    if chunk:
        plan.datas.append(chunk[0] if len(chunk) == 1 else b"".join(chunk))
    plan.cursor = cursor
    return plan


class EventSink(Protocol):
    """Where the member's Raft events go (the broker's ``HaEventLog``, broker/ha/event_log.py)."""

    def emit(self, type_: str, **fields: Any) -> Any: ...

    def advance(self, type_: str, offset: int, term: int, replica: str = "") -> Any:
        """``emit(type_, term=term, replica=replica, offset=offset)`` of a throttled type, cheaper."""
        ...


class DLedgerMetrics(Protocol):
    """The member's metric hooks (``BrokerMetrics``, broker/metrics.py)."""

    def on_dledger_commit(self, latency_ms: float) -> None: ...

    def on_dledger_proposed(self, first: int, count: int, started: float) -> None: ...

    def on_dledger_replica_ack(self, peer: str, index: int) -> None: ...

    def on_dledger_election(self, result: str) -> None: ...


class NoMetrics:
    """Metric hooks that record nothing (the simulator, tests)."""

    def on_dledger_commit(self, latency_ms: float) -> None:
        pass

    def on_dledger_proposed(self, first: int, count: int, started: float) -> None:
        pass

    def on_dledger_replica_ack(self, peer: str, index: int) -> None:
        pass

    def on_dledger_election(self, result: str) -> None:
        pass


class NoEvents:
    """An event sink that drops everything (the simulator, tests)."""

    def emit(self, type_: str, **fields: Any) -> None:
        return None

    def advance(self, type_: str, offset: int, term: int, replica: str = "") -> None:
        return None


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class DLedgerConfig:
    """The member's configuration: the Raft core's plus what DLedger adds (from RocketMQ's dLeger* keys)."""

    group: str
    peers: dict[str, str]  # id -> Raft peer address (dLegerPeers)
    raft: RaftConfig
    tick_s: float  # one Raft tick in the clock's seconds
    max_wait_ack_s: float  # how long a proposal waits for its commit (maxWaitAckTimeMs)
    # between background fsyncs of the log when appends are not synced (raft.sync_appends false;
    # dLegerFlushIntervalMillis, DLedger's flushFileInterval)
    flush_interval_s: float = 0.01

    @property
    def self_id(self) -> str:
        return self.raft.node_id

    @classmethod
    def from_settings(cls, s: Settings) -> DLedgerConfig:
        peers = parse_peers(s.dLegerPeers)
        self_id = s.dLegerSelfId
        if self_id not in peers:
            raise ConfigError(f"config key dLegerSelfId has bad value {self_id!r}: not one of dLegerPeers "
                              f"({', '.join(peers)})")
        raft = RaftConfig(node_id=self_id, peers=tuple(peers), heartbeat_ticks=s.dLegerHeartbeatTicks,
                          election_ticks_min=s.dLegerElectionTicksMin, election_ticks_max=s.dLegerElectionTicksMax,
                          preferred_leader=s.preferredLeaderId or None,
                          # the commit rides on the next entries: half the messages per entry (docs/RAFT.md)
                          eager_commit_broadcast=False, sync_appends=s.dLegerSyncAppends)
        return cls(group=s.dLegerGroup or s.brokerName, peers=peers, raft=raft, tick_s=s.dLegerTickMillis / 1000,
                   max_wait_ack_s=s.maxWaitAckTimeMs / 1000, flush_interval_s=s.dLegerFlushIntervalMillis / 1000)


class DLedgerNode(DrivenMember):
    """One DLedger member over a ``MessageStore``, given only what it uses (issue 17: no Broker handle).

    ``events`` receives the HA events, ``on_role_change`` is called after every role or leader
    change the driver publishes, ``metrics`` returns the current metric hooks (a getter: the
    broker replaces its metrics object when telemetry starts), ``addresses`` are this broker's
    (gRPC, internal) addresses sent to peers, ``tls`` the client TLS settings and ``internalPeerSecret``
    of the outbound peer links.
    ``clock``, ``syncer`` and ``transport`` default to asyncio, a worker-thread fsync and TCP
    peer links; the simulator (tests/sim/dledger.py) passes its own, plus ``rng_seed`` and a
    Ready ``observer``, and so runs this class itself.
    """

    def __init__(self, config: DLedgerConfig, store: MessageStore, events: EventSink, *,
                 on_role_change: Callable[[], None] = _nothing,
                 metrics: Callable[[], DLedgerMetrics] = NoMetrics,
                 addresses: tuple[str, str] = ("", ""),
                 tls: TlsClientConfig | None = None,
                 clock: Clock | None = None, syncer: Syncer | None = None, transport: Transport | None = None,
                 rng_seed: int | None = None, observer: ReadyObserver | None = None) -> None:
        self.store = store
        self.events = events
        self.on_role_change = on_role_change
        self.metrics = metrics
        self.grpc_addr, self.internal_addr = addresses
        self.tls = tls
        self.group = config.group
        self.self_id = config.self_id
        self.peers = config.peers
        self.self_index = list(self.peers).index(self.self_id)
        self.tick_s = config.tick_s
        self.max_wait_ack_s = config.max_wait_ack_s
        self.flush_interval_s = config.flush_interval_s
        self.config = config.raft
        self.clock: Clock = clock if clock is not None else AsyncioClock()
        self.thread_syncer: ThreadSyncer | None = None  # the default fsync runner, drained by ``stop``
        if syncer is None:
            syncer = self.thread_syncer = ThreadSyncer(f"dledger {self.group}/{self.self_id}")
        self.syncer: Syncer = syncer
        self.transport: Transport = transport if transport is not None else self
        self.rng_seed = rng_seed
        self.observer = observer
        self.log: DLedgerLog | None = None
        self.driver: RaftDriver | None = None
        self.links: dict[str, PeerLink] = {}
        self.peer_addrs: dict[str, tuple[str, str]] = {}  # id -> (grpc addr, admin addr)
        self._cursor: int | None = None
        # end of the last record handed to the store's pending dispatch (``add_pending``) since it was last
        # emptied by ``drop_pending``; None: nothing handed over since (see ``_pend_appended``)
        self._pending_end: int | None = None
        self.append_latencies: list[float] = []
        self._heard: dict[str, float] = {}  # peer id -> clock time of its last batch
        self._background_flush: asyncio.Task[None] | None = None  # when appends are not synced: _flush_in_background
        self._flush_round: asyncio.Future[None] | None = None  # its fsync in flight (or the last one)
        self.background_flushed_index = 0  # the last index a background fsync covered (status: haStatus)

    # the driver's view, for status pages, metrics and retention
    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    @property
    def broker_id(self) -> int:
        return 0 if self.is_leader else self.self_index + 1

    def lease_valid(self) -> bool:
        """Leader with a majority heard within the shortest election timeout, by the clock.

        The Raft core counts ticks, and a paused process (SIGSTOP) loses no ticks: resumed,
        it still believes it leads until the first message from its peers deposes it.  Side
        effects that a deposed leader must not have (transaction check-backs) wait for this
        lease, which a pause longer than an election timeout voids at once.

        Only messages of this leader's own term count as heard (see on_batch), and the live Raft core must
        still lead in the term the driver published: the published role lags the core by a Ready (its
        writes and fsync), and a resumed leader deposed by the first batch of its successor kept serving
        POP hand-outs from its stale state for that long — an acknowledged message handed out again
        (chaos DLedger, pause of the leader at load 12, session 14).
        """
        if not self.is_leader:
            return False
        node = self.node
        if node is None or not node.is_leader or node.term != self.term:
            return False
        window = self.config.election_ticks_min * self.tick_s
        now = self.clock.now()
        heard = sum(1 for pid in self.peers if pid != self.self_id and now - self._heard.get(pid, -1e9) <= window)
        return heard + 1 >= self.config.quorum

    def leader_grpc_addr(self) -> str | None:
        if self.leader_id is None:
            return None
        if self.leader_id == self.self_id:
            return self.grpc_addr
        return self.peer_addrs.get(self.leader_id, ("", ""))[0] or None

    def leader_admin_addr(self) -> str | None:
        if self.leader_id is None or self.leader_id == self.self_id:
            return None
        return self.peer_addrs.get(self.leader_id, ("", ""))[1] or None

    # -------------------------------------------------------------- lifecycle
    def open(self, directory: Path | None = None) -> None:
        """After the store recovered: load the Raft log (``<store root>/dledger``) and expose its committed prefix."""
        store = self.store
        self.log = DLedgerLog(store, directory or store.root / "dledger", now=self.clock.now)
        hs = self.log.hard_state
        seed = self.rng_seed if self.rng_seed is not None else random.randrange(2**63)
        node = RaftNode(self.config, self.log, hs, rng_seed=seed, applied=hs.commit)
        self.driver = RaftDriver(node, self.log, self.transport, self.clock, self.syncer, self.tick_s,
                                 apply=self._apply, on_append=self._on_append, on_term=self._on_term,
                                 on_role=self._on_role, on_event=self._emit, observer=self.observer)
        store.set_confirm_offset(self.log.end_offset(hs.commit))
        log.info("dledger %s/%s: log has %d entries, commit %d, term %d; peers %s", self.group, self.self_id,
                 self.log.last_index(), hs.commit, hs.term, self.peers)

    def header(self) -> dledger_pb2.RaftBatch:
        return dledger_pb2.RaftBatch(group=self.group, sender=self.self_id, sender_grpc_addr=self.grpc_addr,
                                     sender_admin_addr=self.internal_addr)

    def start(self) -> None:
        """Start the driver, and the peer links when this member is its own transport."""
        if self.transport is self:
            for pid, addr in self.peers.items():
                if pid != self.self_id:
                    link = PeerLink(pid, addr, self.header, tls=self.tls)
                    self.links[pid] = link
                    link.start()
        assert self.driver is not None
        self.driver.start()
        if not self.config.sync_appends and self.thread_syncer is not None:
            # only with the production fsync runner: the simulator's disk decides itself what a crash keeps
            log.info("dledger %s/%s: appends count once written; the log is fsynced every %.0f ms in the background "
                     "(dLegerSyncAppends false)", self.group, self.self_id, self.flush_interval_s * 1000)
            self._background_flush = asyncio.get_running_loop().create_task(self._flush_in_background())

    async def _flush_in_background(self) -> None:
        """fsync the log every ``flush_interval_s`` while it grows (DLedger's FlushDataService, flushFileInterval).

        Why a task with the loop's executor and not the driver's fsync runner: at 100 rounds a second its cost
        does not matter, and a failed round must be logged and retried, where the runner's failure stops the
        member (a Ready's fsync that failed must never be acknowledged).  ``stop`` cancels the task and waits for
        the round in flight (shielded: its thread cannot be cancelled) before it closes the files.
        """
        flushed: tuple[int, int] | None = None
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.flush_interval_s)
            lg = self.log
            if lg is None:
                return
            last = lg.last_index()
            end = (last, lg.term(last))  # with the term: a follower's truncated and rewritten tail is new
            if end == flushed:
                continue
            self._flush_round = loop.run_in_executor(None, lg.sync)
            try:
                await asyncio.shield(self._flush_round)
            except OSError:
                log.exception("dledger %s/%s: a background fsync of the log failed; retried in %.0f ms", self.group,
                              self.self_id, self.flush_interval_s * 1000)
                continue
            flushed = end
            self.background_flushed_index = last

    async def hand_off(self, timeout_s: float = 1.0) -> str | None:
        """A leader about to stop first hands leadership to its most caught-up live follower (Raft's
        leadership transfer: it campaigns at once, without pre-vote or lease), and waits until it leads or
        ``timeout_s`` passed; returns the new leader's id, None when this node did not lead or nobody took over.

        Why: a graceful stop used to leave the group leaderless until the followers' election timeout after
        the last heartbeat, 1.4 s without a successful send in the chaos harness's restarts (session 13),
        where a kill -9 cost 0.5 s; etcd transfers leadership on stop for the same reason.
        """
        driver = self.driver
        node = driver.node if driver is not None else None
        if driver is None or node is None or not driver.is_leader:
            return None
        target = node.most_caught_up_peer()
        if target is None:
            return None
        log.info("dledger %s/%s: stopping: handing leadership to %s", self.group, self.self_id, target)
        node.transfer_leadership(target)
        driver.kick()
        deadline = self.clock.now() + timeout_s
        while driver.is_leader and self.clock.now() < deadline:
            await asyncio.sleep(0.01)
        if driver.is_leader:
            log.info("dledger %s/%s: %s did not take leadership within %.1f s; stopping as leader", self.group,
                     self.self_id, target, timeout_s)
            return None
        return self.leader_id

    async def stop(self) -> None:
        if self.driver is not None:
            self.driver.stop("the broker is shutting down")
        if self._background_flush is not None:
            self._background_flush.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._background_flush
            if self._flush_round is not None:
                with contextlib.suppress(OSError):
                    await self._flush_round  # the thread's fdatasync ends before the files close
        if self.thread_syncer is not None:
            await self.thread_syncer.drain()
        for link in self.links.values():
            await link.stop()
        if self.log:
            self.log.sync()
            self.log.close()

    # ------------------------------------------------------------------ input
    def on_batch(self, batch: Batch) -> None:
        node = self.node
        if node is not None and any(m.term == node.term for m in batch.messages):
            # a peer answering in this node's term; a successor's batch (a higher term) is no evidence of a lease
            self._heard[batch.sender] = self.clock.now()
        if batch.sender_grpc_addr:
            self.peer_addrs[batch.sender] = (batch.sender_grpc_addr, batch.sender_admin_addr)
        driver = self.driver
        assert driver is not None
        for why in batch.bad:
            log.warning("dledger: a message from %s left out: %s", batch.sender, why)
        for m in batch.messages:
            try:
                driver.step(m)
            except Exception:
                log.exception("dledger: bad message from %s", batch.sender)

    def send(self, m: Message) -> None:
        """The driver's transport: the peer's link (dropped when the peer is unknown)."""
        link = self.links.get(m.to)
        if link is not None:
            link.send(m)

    # -------------------------------------------------------------- proposals
    def plan(self, messages: list[StoredMessage]) -> EntryPlan:
        """Encode ``messages`` as entries at this leader's log end (``plan_entries``); raises ``NotLeader``."""
        if not self.is_leader:
            raise NotLeader(f"{self.self_id} is not the leader of {self.group} "
                            f"(leader: {self.leader_id or 'none yet'})", self.leader_id)
        store = self.store
        saved = dict(store.queue_next)
        cursor = self._cursor if self._cursor is not None else store.commit_log.max_offset
        plan = plan_entries(store, messages, cursor, self.config.max_append_bytes)
        plan.queue_next_before = saved
        return plan

    def submit(self, plan: EntryPlan, answer: Callable[[int, bool], None]) -> int:
        """Hand a plan's entries to the driver; returns the first index.

        ``answer(pos, ok)`` is called once per entry of ``plan.datas``, later.  Raises
        ``ProposalDropped`` and puts the store's queue offsets back as they were before ``plan``.
        The simulator (tests/sim/dledger.py) proposes through ``plan`` and ``submit`` too.
        """
        driver, store = self.driver, self.store
        assert driver is not None
        try:
            first = driver.propose(plan.datas, answer)
        except ProposalDropped:
            store.queue_next.clear()
            store.queue_next.update(plan.queue_next_before)
            raise
        self._cursor = plan.cursor
        store.add_pending(plan.accepted)
        self._pending_end = plan.cursor
        return first

    async def propose(self, messages: list[StoredMessage]) -> list[PutResult]:
        """Replicate one group of messages (one ``put_messages`` call) as few Raft entries as possible.

        The records of the group are concatenated into one entry (broker/dledger/log_store.py: an
        entry is one or more consecutive commit-log records), cut only where a record rolls to a
        new commit-log segment or the entry would pass ``max_append_bytes``; so a batch of 32
        messages is one entry, one index slot, one ``pwrite`` per member and one waiter (one per
        entry: a message succeeds only if the committed entry holding it still carries the term
        it was proposed in, so an entry is answered all or nothing).  The records enter the
        store's pending dispatch here (``MessageStore.add_pending``), so the leader never decodes
        its own records back from the commit log; they become visible once committed, like every
        other record.
        """
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[list[PutResult]] = loop.create_future()

        def done(results: list[PutResult]) -> None:
            if not answered.done():  # the awaiting task may have been cancelled
                answered.set_result(results)

        self.propose_then(messages, done)
        return await answered

    def propose_then(self, messages: list[StoredMessage], done: Callable[[list[PutResult]], None]) -> None:
        """``propose`` with its results handed to ``done`` (once: when every entry is answered, at once when none
        was proposed, or after maxWaitAckTimeMs), not awaited: a run of plain single sends answered from the read's
        callback (broker/remoting/broker_handlers.py ``send_group_now``) writes its answers from ``done``."""
        if not self.is_leader:
            done([PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=f"{self.self_id} is not the leader of "
                            f"{self.group} (leader: {self.leader_id or 'none yet'})") for _ in messages])
            return
        plan = self.plan(messages)
        results, datas = plan.results, plan.datas
        if not datas:
            done(results)
            return
        loop = asyncio.get_running_loop()
        # one callback for the whole proposal and one timer: this runs for every group of sends, and a future per
        # entry plus ``asyncio.wait``'s waiter and callbacks showed in the profile
        oks: list[bool | None] = [None] * len(datas)
        left = [len(datas)]
        started = time.perf_counter()
        metrics = self.metrics()
        timer: list[asyncio.TimerHandle] = []
        finished = [False]

        def finish() -> None:
            if finished[0]:
                return
            finished[0] = True
            if timer:
                timer[0].cancel()
            committed = [ok is True for ok in oks]
            if not all(committed):
                positions = iter(plan.entry_of)
                for r in results:
                    if r.message is not None and not committed[next(positions)]:
                        r.status = PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
                        r.reason = "not committed at a majority within maxWaitAckTimeMs (the leader may have changed)"
            done(results)

        def answer(pos: int, ok: bool) -> None:
            if oks[pos] is not None:
                return
            oks[pos] = ok
            if ok:
                ms = (time.perf_counter() - started) * 1000
                self.append_latencies.append(ms)
                del self.append_latencies[:-2000]
                metrics.on_dledger_commit(ms)
            left[0] -= 1
            if not left[0]:
                finish()

        try:
            first = self.submit(plan, answer)
        except ProposalDropped as exc:
            reason = "not the leader" if isinstance(exc, NotLeader) else str(exc)
            done([PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=reason) if r.message else r for r in results])
            return
        metrics.on_dledger_proposed(first, len(datas), started)
        if left[0] and not finished[0]:  # the driver may answer at once (a group of one member)
            timer.append(loop.call_later(self.max_wait_ack_s, finish))

    # ------------------------------------------------------- driver callbacks
    def _on_append(self, entries: list[Entry], truncated: tuple[int, int] | None) -> None:
        if truncated is not None and truncated[1] > truncated[0]:
            self._cursor = None
            self._drop_pending()  # records past the cut may be in it; what the log still holds is read back
            self.events.emit(ev.TRUNCATION, term=self.term, from_offset=truncated[0],
                                       to_offset=truncated[1])
        self._pend_appended(entries)

    def _pend_appended(self, entries: list[Entry]) -> None:
        """Hand the records of entries just written to the store's pending dispatch, as the entries' bytes
        in memory (``MessageStore.add_pending_records``).

        Why: a follower used to dispatch committed records by reading them back from the commit log
        (``CommitLog.iter_messages``: three reads and a decode per record), 46 % of a follower's
        busy samples in session 19's profile (docs/BENCHMARKS.md); then by decoding each into a
        ``StoredMessage`` here (sessions 20-23), which with the dispatch's reading of it back was still a
        follower's largest item.  The store now builds queue entries and index keys from the bytes.
        The pending dispatch needs its
        records in log order with nothing missing between them, so an entry is added only right after
        the last record handed over, or at the next segment when its first record did not fit the
        last one (the filler between is stepped over, as for a leader's own records).  Entries below
        it are already there (a leader's own proposals, ``submit``).  Any other gap empties the
        pending dispatch first, which is always safe (``MessageStore.drop_pending``: whatever is below
        the first pending record is read back from the log when confirmed).  An entry whose records do not
        all decode (``check_records``) stops the hand-over for this batch; the log read-back then meets it
        as before.  The CRC is not checked here: it guards the disk, and these bytes are the ones just
        written (a read of the log still checks it).
        """
        lg = self.log
        assert lg is not None
        store = self.store
        planned = store.commit_log.planned_offset
        for e in entries:
            data = e.data
            if not data:
                continue
            start = lg.offsets[e.index - lg.base - 1]
            end = self._pending_end
            if end is not None and start < end:
                continue  # this member's own proposal: ``submit`` handed it over
            if end is not None and start != end and planned(end, record.peek_header(data)[0]) != start:
                self._drop_pending()  # not merely the filler of a segment roll, which the dispatch steps over
            try:
                check_records(data)  # compiled (raft_codec.py): the records are not decoded here
            except RecordError as exc:
                log.warning("dledger %s/%s: entry %d does not decode (%s); it is read back from the log",
                            self.group, self.self_id, e.index, exc)
                self._drop_pending()
                return
            store.add_pending_records(start, data)
            self._pending_end = start + len(data)

    def _drop_pending(self) -> None:
        self.store.drop_pending()
        self._pending_end = None

    def _on_term(self, old: int, new: int) -> None:
        self._drop_pending()  # only a new term's leader can replace this node's proposals

    def _apply(self, entries: list[Entry]) -> None:
        assert self.log is not None
        self.store.set_confirm_offset(self.log.end_offset(entries[-1].index))

    def _on_role(self, role: Role, leader: str | None, was_leader: bool) -> None:
        if role == Role.LEADER and not was_leader:
            store = self.store
            self._cursor = store.commit_log.max_offset
            store.rebuild_queue_offsets()
            log.info("dledger %s/%s: leader of term %d", self.group, self.self_id, self.term)
            self.on_role_change()
        elif was_leader and role != Role.LEADER:
            self._cursor = None
            self._drop_pending()
            log.info("dledger %s/%s: no longer leader (now %s, leader %s)", self.group, self.self_id, role, leader)
            self.on_role_change()
        elif role != Role.LEADER:
            self.on_role_change()

    def _emit(self, e: RaftEvent) -> None:
        lg = self.log
        assert lg is not None
        kind = e.kind
        ha = self.events
        if kind == EventKind.REPLICA_ACK:
            self.metrics().on_dledger_replica_ack(e.peer, e.index)
            ha.advance(ev.REPLICA_ACK, lg.end_offset(e.index), self.term, e.peer)
        elif kind == EventKind.COMMIT_ADVANCED:
            ha.advance(ev.COMMIT_ADVANCED, lg.end_offset(e.index), self.term)
        elif kind == EventKind.ROLE_CHANGE:
            ha.emit(ev.ROLE_CHANGE, term=e.term, role=str(e.role).upper())
        elif kind == EventKind.ELECTION_STARTED and not e.pre_vote:
            ha.emit(ev.ELECTION_STARTED, term=e.term)
        elif kind == EventKind.ELECTION_WON:
            self.metrics().on_dledger_election("won")
            ha.emit(ev.ELECTION_WON, term=e.term)
        elif kind == EventKind.ELECTION_LOST and not e.pre_vote:
            self.metrics().on_dledger_election("lost")
            ha.emit(ev.ELECTION_LOST, term=e.term)
        elif kind == EventKind.LEADER_ELECTED:
            ha.emit(ev.LEADER_ELECTED, term=e.term, leader=e.leader)

    # ----------------------------------------------------------------- status
    def status(self) -> dict[str, object]:
        node = self.node
        progress = node.progress() if node is not None and self.is_leader else {}
        lg = self.log
        return {
            "mode": "dledger", "group": self.group, "selfId": self.self_id, "role": str(self.role).upper(),
            "leader": self.leader_id, "term": self.term, "commitIndex": self.commit_index,
            "lastIndex": lg.last_index() if lg else 0,
            "commitOffset": lg.end_offset(self.commit_index) if lg else 0,
            "peers": {pid: {"address": addr, "connected": self.links[pid].connected if pid in self.links else True,
                            **({"match": progress[pid][0]} if pid in progress else {})}
                      for pid, addr in self.peers.items()},
            "hardState": HardState(self.term, None, self.commit_index)._asdict(),
            # dLegerSyncAppends false: how far the background fsync has covered the log (a power cut may lose the
            # entries above it; a killed process loses nothing)
            "syncAppends": self.config.sync_appends,
            **({} if self.config.sync_appends else {"backgroundFlushedIndex": self.background_flushed_index}),
        }
