"""The one Raft driver: runs a ``RaftNode`` against a durable log, a transport, an fsync runner and a clock.

DLedger mode (broker/dledger/node.py), the controller group (broker/controller/node.py) and
the simulator (tests/sim/node.py) all run this class; they differ only in what they inject:

- ``log``: a ``DurableLog`` — the core's read side (``Storage``) plus append, hard state and sync;
  DLedger's is its commit log and index (broker/dledger/log_store.py), the controller's one
  file (broker/controller/raft_log.py), the simulator's an in-memory log that loses what was
  not synced when it crashes (tests/sim/storage.py);
- ``transport``: where messages go (gRPC peer streams, or the simulated network);
- ``syncer``: runs ``log.sync`` (when the Ready needs it) and then calls back — in a worker
  thread in production (broker/raft/aio.py), whenever the simulator decides (or never, if
  it crashes first: a process may die between any write and the send that follows it);
- ``clock``: ``now``, ``call_later`` (the ticker) and ``call_soon`` (the coalesced Ready pump).

Like the core it has no asyncio and no threads of its own: everything happens in callbacks
the clock and the syncer schedule, so the simulator runs it deterministically from a seed.

The Ready contract (broker/raft/ready.py), in one place: write entries and hard state, send
the Ready's early messages (a leader's appends and heartbeats: its followers write and fsync
while it fsyncs), fsync when the Ready says so, only then send its other messages (votes,
append acknowledgements), apply committed entries, answer proposals and advance (which lets
the leader count its own synced entries toward the commit).  A proposal is answered True only
if the committed entry at its index carries the term it was proposed in; a leader that steps
down answers all its open proposals False at once (a later leader may commit other entries at
those indexes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .core import RaftNode
from .messages import Entry, HardState, Message, Role
from .ready import EventKind, RaftEvent, Ready
from .storage import Storage

log = logging.getLogger(__name__)


class DurableLog(Storage, Protocol):
    """What the driver writes: a ``Storage`` that can also append, keep the hard state and sync.

    ``append`` discards stored entries at or after the first new index and returns a
    log-specific note of what it discarded (handed to ``on_append``).  Nothing written is
    durable before ``sync`` returns.
    """

    @property
    def hard_state(self) -> HardState:
        """The last saved hard state (read-only here: the driver writes it through ``save_hard_state``)."""
        ...

    def append(self, entries: list[Entry]) -> Any: ...

    def save_hard_state(self, hs: HardState, sync: bool) -> None: ...

    def sync(self) -> None: ...


class Transport(Protocol):
    def send(self, m: Message) -> None:
        """Hand ``m`` to the network; loss, delay and duplication are fine (Raft retries)."""
        ...


class Cancellable(Protocol):
    def cancel(self) -> Any: ...


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    def call_later(self, delay: float, fn: Callable[[], None]) -> Cancellable: ...

    def call_soon(self, fn: Callable[[], None]) -> None: ...


# run(fn, done): call ``fn`` (the fsync; None when the Ready needs none) and then ``done``, now or
# later; never ``done`` if ``fn`` raised.  Calling ``done`` before returning is fine.
Syncer = Callable[[Callable[[], None] | None, Callable[[], None]], None]


def sync_now(fn: Callable[[], None] | None, done: Callable[[], None]) -> None:
    """The immediate fsync runner (tests that need no concurrency)."""
    if fn is not None:
        fn()
    done()


class ReadyObserver(Protocol):
    """Test hook (the simulator's checker): sees each Ready before and after it is written."""

    def before_write(self, rd: Ready) -> None: ...

    def written(self, rd: Ready) -> None: ...


Answer = Callable[[int, bool], None]  # (position in the proposed batch, committed with its term?)


@dataclass(slots=True)
class _Waiter:
    term: int
    pos: int
    answer: Answer


class RaftDriver:
    """Owns the Ready loop, the ticker, proposal waiters and role changes of one member.

    Callbacks (all optional; called in this order within a Ready):
    ``on_append(entries, note)`` after entries are written (``note``: what ``log.append``
    returned); ``on_term(old, new)`` when the hard state's term changes; ``on_role(role,
    leader, was_leader)`` on a soft-state change, after the messages were sent;
    ``apply(entries)`` with the committed entries; ``on_event(event)`` per RaftEvent.
    """

    def __init__(self, node: RaftNode, log: DurableLog, transport: Transport, clock: Clock, syncer: Syncer,
                 tick_s: float, *, apply: Callable[[list[Entry]], None] | None = None,
                 on_append: Callable[[list[Entry], Any], None] | None = None,
                 on_term: Callable[[int, int], None] | None = None,
                 on_role: Callable[[Role, str | None, bool], None] | None = None,
                 on_event: Callable[[RaftEvent], None] | None = None,
                 observer: ReadyObserver | None = None) -> None:
        self.node = node
        self.log = log
        self.transport = transport
        self.clock = clock
        self.syncer = syncer
        self.tick_s = tick_s
        self._apply = apply
        self._on_append = on_append
        self._on_term = on_term
        self._on_role = on_role
        self._on_event = on_event
        self.observer = observer
        self._sync_appends = node.config.sync_appends
        hs = log.hard_state
        self.role = Role.FOLLOWER
        self.leader_id: str | None = None
        self.term = hs.term
        self.commit_index = hs.commit
        self.elections = 0
        self.waiters: dict[int, _Waiter] = {}
        self.syncing: Ready | None = None  # written, waiting for its fsync
        self._pump_scheduled = False
        self._pumping = False
        self._timer: Cancellable | None = None
        self.running = False

    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    # -------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.running = True
        self._timer = self.clock.call_later(self.tick_s, self._on_tick)
        self.kick()

    def stop(self, reason: str = "stopped") -> None:
        """Stop ticking and pumping; open proposals are answered False.  A pending fsync may still finish."""
        self.running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.fail_waiters(reason)

    # ------------------------------------------------------------------ input
    def step(self, m: Message) -> None:
        self.node.step(m)
        if not self._pump_scheduled:
            self.kick()

    def tick(self) -> None:
        self.node.tick()
        self.kick()

    def _on_tick(self) -> None:
        if not self.running:
            return
        self._timer = self.clock.call_later(self.tick_s, self._on_tick)
        self.tick()

    def kick(self) -> None:
        """Something changed: process Readys soon (once, however many kicks come first)."""
        if not self._pump_scheduled and self.running:
            self._pump_scheduled = True
            self.clock.call_soon(self._scheduled_pump)

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        self.pump()

    # -------------------------------------------------------------- proposals
    def propose(self, datas: list[bytes], answer: Answer) -> int:
        """Append ``datas`` as entries (leader only; raises ProposalDropped); return the first index.

        ``answer(position, ok)`` is called once per entry: True when it committed with the
        term it was proposed in, False when another leader's entry took its index, the
        leader stepped down or the driver stopped.
        """
        first = self.node.propose_batch(datas)
        term = self.node.term
        for i in range(len(datas)):
            self.waiters[first + i] = _Waiter(term, i, answer)
        self.kick()
        return first

    def fail_waiters(self, reason: str) -> None:
        waiters, self.waiters = self.waiters, {}
        if waiters:
            log.debug("raft %s: %d open proposals failed: %s", self.node.id, len(waiters), reason)
        for w in waiters.values():
            w.answer(w.pos, False)

    # ------------------------------------------------------------------ ready
    def pump(self) -> None:
        """Write every available Ready and send its early messages; stop at one whose fsync is running
        (its ``done`` resumes).  One Ready at a time: the next one's leader appends may carry a
        commit index that counts this one's entries, which only its fsync allows."""
        if self._pumping:
            return
        node = self.node
        self._pumping = True
        try:
            while self.running and self.syncing is None and node.has_ready():
                rd = node.ready()
                try:
                    self._write(rd)
                except Exception:
                    # nothing of this Ready may be sent or applied, and the core cannot go on without it
                    log.exception("raft %s: writing a Ready failed; this member stops", node.id)
                    self.stop("the Raft log could not be written")
                    raise
                if rd.early_messages:
                    send = self.transport.send
                    for m in rd.early_messages:
                        send(m)
                self.syncing = rd
                # the syncer may call back at once (no fsync needed, or a synchronous one): _synced finishes
                # entries need the fsync only when appends are synced (RaftConfig.sync_appends); a new term or
                # vote was fsynced by _write's save_hard_state either way
                need = rd.must_sync and self._sync_appends
                self.syncer(self.log.sync if need else None, lambda rd=rd: self._synced(rd))  # type: ignore[misc]
        finally:
            self._pumping = False

    def _synced(self, rd: Ready) -> None:
        if self.syncing is not rd:
            return
        self.syncing = None
        self._finish(rd)
        self.pump()

    def _write(self, rd: Ready) -> None:
        if self.observer is not None:
            self.observer.before_write(rd)
        lg = self.log
        if rd.entries:
            note = lg.append(rd.entries)
            if self._on_append is not None:
                self._on_append(rd.entries, note)
        if rd.hard_state is not None:
            lg.save_hard_state(rd.hard_state, rd.must_sync)
            old, self.term = self.term, rd.hard_state.term
            if old != self.term and self._on_term is not None:
                self._on_term(old, self.term)
        if self.observer is not None:
            self.observer.written(rd)

    def _finish(self, rd: Ready) -> None:
        """After the fsync: send the rest, publish the role, apply, answer proposals, publish events, advance."""
        try:
            if not self.running:
                return
            send = self.transport.send
            for m in rd.messages:
                send(m)
            if rd.soft_state is not None:
                was_leader = self.is_leader
                self.role, self.leader_id = rd.soft_state.role, rd.soft_state.leader
                if was_leader and self.role != Role.LEADER:
                    self.fail_waiters("leadership lost")
                if self._on_role is not None:
                    self._on_role(self.role, self.leader_id, was_leader)
            if rd.committed_entries:
                self.commit_index = rd.committed_entries[-1].index
                if self._apply is not None:
                    self._apply(rd.committed_entries)
                waiters = self.waiters
                if waiters:
                    for e in rd.committed_entries:
                        w = waiters.pop(e.index, None)
                        if w is not None:
                            w.answer(w.pos, e.term == w.term)
            for ev in rd.events:
                if ev.kind == EventKind.ELECTION_WON:
                    self.elections += 1
                if self._on_event is not None:
                    self._on_event(ev)
        finally:
            self.node.advance(rd)


class DrivenMember:
    """The Raft view a member (DLedger's, the controller's) reads from its driver, or a follower's view
    before the driver exists: one definition for both members and everything that reads them."""

    driver: RaftDriver | None

    @property
    def node(self) -> RaftNode | None:
        return self.driver.node if self.driver is not None else None

    @property
    def role(self) -> Role:
        return self.driver.role if self.driver is not None else Role.FOLLOWER

    @property
    def leader_id(self) -> str | None:
        return self.driver.leader_id if self.driver is not None else None

    @property
    def term(self) -> int:
        return self.driver.term if self.driver is not None else 0

    @property
    def commit_index(self) -> int:
        return self.driver.commit_index if self.driver is not None else 0

    @property
    def elections(self) -> int:
        return self.driver.elections if self.driver is not None else 0
