"""The Raft state machine: messages and ticks in, a Ready batch out.  No I/O, no clock.

Modelled on etcd's raft library so that the same code drives the DLedger commit log and
the controller group, and so that a deterministic simulator can run thousands of fault
schedules and replay any failure from its seed.  Everything random (the election
timeout) comes from an RNG owned by the node and seeded by the caller.

Rules implemented here, with the reason for each:

- pre-vote: a node that lost contact first asks whether it *could* win, without raising
  its term, so a node rejoining after a partition cannot depose a healthy leader;
- check-quorum: a leader that has not heard from a majority within an election timeout
  steps down, so a partitioned old leader stops accepting proposals; followers that
  heard from a leader within the same timeout ignore vote requests (the leader lease);
- a new leader appends a no-op and only ever commits entries of its own term by counting
  replicas (Raft section 5.4.2: older entries commit indirectly);
- term, vote and entries leave through the Ready and the messages that depend on them
  may only be sent after they are durable (see ready.py); a leader's appends and
  heartbeats depend only on its term, so they leave before its own entries are synced
  (its disk and the followers' sync in parallel), and the leader counts itself toward a
  commit quorum only up to what ``advance`` reports durable (``_self_durable``);
- leadership transfer: the leader stops taking proposals, catches the target up, then
  sends TimeoutNow; the transfer is abandoned after ``transfer_timeout`` ticks.
"""

from __future__ import annotations

import random

from .config import (
    FAULT_COMMIT_OLD_TERM,
    FAULT_COUNT_UNSYNCED,
    FAULT_FORGET_VOTE,
    FAULT_SKIP_LOG_CHECK,
    RaftConfig,
)
from .log import RaftLog, RaftSafetyError
from .messages import Entry, EntryKind, HardState, Message, MsgType, Role, SoftState
from .progress import Progress, ProgressState
from .ready import EventKind, RaftEvent, Ready
from .storage import Storage

__all__ = ["LeaderTransferring", "NotLeader", "ProposalDropped", "RaftNode", "RaftSafetyError"]

_APP = MsgType.APP
_APP_RESP = MsgType.APP_RESP
_HEARTBEAT = MsgType.HEARTBEAT
_HEARTBEAT_RESP = MsgType.HEARTBEAT_RESP
_VOTE = MsgType.VOTE
_VOTE_RESP = MsgType.VOTE_RESP
_PRE_VOTE = MsgType.PRE_VOTE
_PRE_VOTE_RESP = MsgType.PRE_VOTE_RESP
_TIMEOUT_NOW = MsgType.TIMEOUT_NOW

_LEADER = Role.LEADER
_FOLLOWER = Role.FOLLOWER
_CANDIDATE = Role.CANDIDATE
_PRE_CANDIDATE = Role.PRE_CANDIDATE

_REPLICATE = ProgressState.REPLICATE

# What a leader sends that promises nothing about its own log's durability, only about its
# term: these may leave before the fsync of the Ready's entries (ready.py, Ready.early_messages).
_EARLY = frozenset({_APP, _HEARTBEAT, _TIMEOUT_NOW})

# Pending broadcast levels, flushed when the Ready is built so that many proposals
# between two Readies travel in one append per follower.
_BCAST_NONE = 0
_BCAST_ENTRIES = 1  # send new entries where there are any
_BCAST_COMMIT = 2  # also send empty appends, to carry a new commit index


class ProposalDropped(Exception):
    """The node cannot take a proposal now; ``leader_id`` is where to retry (None: unknown)."""

    def __init__(self, message: str, leader_id: str | None) -> None:
        super().__init__(message)
        self.leader_id = leader_id


class NotLeader(ProposalDropped):
    """This node is not the leader (DLedger NOT_LEADER → SERVICE_NOT_AVAILABLE)."""


class LeaderTransferring(ProposalDropped):
    """The leader is handing over leadership and refuses new entries until it is done or aborts."""


class RaftNode:
    """One member of a Raft group.

    ``storage`` holds the durable log; ``hard_state`` is the last durable hard state;
    ``applied`` is the last index the application has applied (committed entries after
    it are handed out again).  Call ``tick()`` at a fixed interval, ``step()`` for every
    received message, then drain ``ready()``/``advance()`` as described in ready.py.
    """

    def __init__(
        self,
        config: RaftConfig,
        storage: Storage,
        hard_state: HardState,
        rng_seed: int,
        applied: int = 0,
    ) -> None:
        self.config = config
        self.id = config.node_id
        self.peers: tuple[str, ...] = tuple(p for p in config.peers if p != self.id)
        self._members = frozenset(config.peers)
        self._quorum = config.quorum
        self._rng = random.Random(rng_seed)
        self.log = RaftLog(storage, hard_state.commit, applied)
        self.term = hard_state.term
        self.vote: str | None = hard_state.vote
        self.lead: str | None = None
        self.role = _FOLLOWER
        self.lead_transferee: str | None = None
        self._prs: dict[str, Progress] = {}
        self._votes: dict[str, bool] = {}
        self._msgs: list[Message] = []
        self._events: list[RaftEvent] = []
        self._acks: dict[str, int] = {}
        self._commit_reported = hard_state.commit
        self._bcast = _BCAST_NONE
        self._commit_unsent = False  # lazy commit broadcast: the commit moved, no append carried it yet
        self._prev_hs = hard_state
        self._prev_ss = SoftState(None, _FOLLOWER)
        self._outstanding = False
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._transfer_elapsed = 0
        self._preferred_elapsed = 0
        self._randomized_timeout = 0
        faults = config.testing_faults
        self._fault_commit_old_term = FAULT_COMMIT_OLD_TERM in faults
        self._fault_forget_vote = FAULT_FORGET_VOTE in faults
        self._fault_skip_log_check = FAULT_SKIP_LOG_CHECK in faults
        self._fault_count_unsynced = FAULT_COUNT_UNSYNCED in faults
        self._reset(self.term)

    def __repr__(self) -> str:
        return (f"RaftNode({self.id} {self.role.value} term={self.term} lead={self.lead} "
                f"last={self.log.last_index()} commit={self.log.committed})")

    # ================================================================== public API
    @property
    def leader_id(self) -> str | None:
        return self.lead

    @property
    def is_leader(self) -> bool:
        return self.role is _LEADER

    @property
    def commit_index(self) -> int:
        return self.log.committed

    def tick(self) -> None:
        """Advance logical time by one tick (heartbeats, election and check-quorum timers)."""
        if self.role is _LEADER:
            self._tick_leader()
        else:
            self._election_elapsed += 1
            if self._election_elapsed >= self._randomized_timeout:
                self._election_elapsed = 0
                self._hup(transfer=False)

    def campaign(self) -> None:
        """Start an election now (as if the election timer fired); a no-op on the leader."""
        self._hup(transfer=False)

    def propose(self, data: bytes) -> int:
        """Append ``data`` as a new entry on the leader; return its index.

        Raises NotLeader (with the known leader id), LeaderTransferring, or ProposalDropped
        when too many entries are uncommitted.  The entry is created with the current
        ``term``; it succeeded when the committed entry at that index has that term.  If
        leadership changes first, a new leader may overwrite the index with another entry,
        so a client waiting on (index, term) must fail when it sees a different term there.
        """
        return self.propose_batch((data,))

    def propose_batch(self, datas: tuple[bytes, ...] | list[bytes]) -> int:
        """Append several entries at once; return the index of the first."""
        if not datas:
            raise ValueError("propose_batch needs at least one entry")
        if self.role is not _LEADER:
            raise NotLeader(f"node {self.id} is not the leader (leader: {self.lead})", self.lead)
        if self.lead_transferee is not None:
            raise LeaderTransferring(
                f"leader {self.id} is transferring leadership to {self.lead_transferee}", self.lead_transferee)
        log = self.log
        first = log.last_index() + 1
        if first - 1 - log.committed + len(datas) > self.config.max_uncommitted_entries:
            raise ProposalDropped(
                f"leader {self.id} has {first - 1 - log.committed} uncommitted entries "
                f"(max_uncommitted_entries={self.config.max_uncommitted_entries})", self.id)
        term = self.term
        normal = EntryKind.NORMAL
        log.append([Entry(first + i, term, normal, d) for i, d in enumerate(datas)])
        if self._fault_count_unsynced:
            self._prs[self.id].match = log.last_index()
            if self._quorum == 1:
                self._maybe_commit()
        if self._bcast < _BCAST_ENTRIES:
            self._bcast = _BCAST_ENTRIES
        return first

    def most_caught_up_peer(self) -> str | None:
        """The recently active follower holding the most of the log (None when no follower is heard from):
        where a leader about to stop hands its leadership, so the group need not wait out an election timeout."""
        if self.role is not _LEADER:
            return None
        live = [(pr.match, p) for p in self.peers if (pr := self._prs[p]).recent_active]
        return max(live)[1] if live else None

    def transfer_leadership(self, target: str) -> None:
        """Hand leadership to ``target`` once its log is caught up (abort after a timeout)."""
        if self.role is not _LEADER:
            raise NotLeader(f"node {self.id} is not the leader (leader: {self.lead})", self.lead)
        if target not in self._members or target == self.id:
            raise ValueError(f"cannot transfer leadership to {target!r}: not another member of {sorted(self._members)}")
        if self.lead_transferee == target:
            return
        if self.lead_transferee is not None:
            self._abort_transfer("superseded")
        self.lead_transferee = target
        self._transfer_elapsed = 0
        self._event(EventKind.TRANSFER_STARTED, peer=target)
        if self._prs[target].match == self.log.last_index():
            self._send(Message(_TIMEOUT_NOW, self.id, target, self.term))
        else:
            self._send_append(target, True)

    def step(self, m: Message) -> None:
        """Feed one message received from a peer."""
        if m.to != self.id or m.frm not in self._members or m.frm == self.id:
            return
        t = m.type
        if m.term > self.term:
            if ((t is _VOTE or t is _PRE_VOTE) and not m.force and self.config.check_quorum
                    and self.lead is not None and self._election_elapsed < self.config.election_ticks_min):
                return  # leader lease: we heard from a live leader recently
            if t is _PRE_VOTE or (t is _PRE_VOTE_RESP and not m.reject):
                pass  # never change term for a pre-vote, nor for a granted pre-vote answer
            elif t is _APP or t is _HEARTBEAT:
                self._become_follower(m.term, m.frm, "higher term from leader")
            else:
                self._become_follower(m.term, None, f"higher term in {t.name}")
        elif m.term < self.term:
            if (self.config.check_quorum or self.config.pre_vote) and (t is _APP or t is _HEARTBEAT):
                # Tell a stale leader about our term, or with pre-vote it could keep a
                # partitioned-and-returned group from electing anyone (etcd issue 5451).
                self._send(Message(_APP_RESP, self.id, m.frm, self.term))
            elif t is _PRE_VOTE:
                self._send(Message(_PRE_VOTE_RESP, self.id, m.frm, self.term, reject=True))
            return

        if t is _VOTE or t is _PRE_VOTE:
            self._handle_vote(m)
        elif self.role is _LEADER:
            self._step_leader(m)
        elif self.role is _FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    def has_ready(self) -> bool:
        """True when ``ready()`` would return something to do."""
        log = self.log
        return bool(
            self._msgs or self._events or self._acks or self._bcast
            or log.unstable or log.committed > log.applying
            or log.committed != self._commit_reported
            or self.term != self._prev_hs.term or self._durable_vote() != self._prev_hs.vote
            or log.committed != self._prev_hs.commit
            or self.lead != self._prev_ss.leader or self.role is not self._prev_ss.role
        )

    def ready(self) -> Ready:
        """Collect the next batch of work; see ready.py for what to do with it, in order."""
        if self._outstanding:
            raise RuntimeError("call advance() with the previous Ready before asking for the next one")
        if self._bcast:
            self._flush_broadcast()
        log = self.log
        rd = Ready()
        vote = self._durable_vote()
        prev = self._prev_hs
        if self.term != prev.term or vote != prev.vote or log.committed != prev.commit:
            rd.hard_state = HardState(self.term, vote, log.committed)
            rd.must_sync = self.term != prev.term or vote != prev.vote
        if log.unstable:
            rd.entries = list(log.unstable)
            rd.must_sync = True
            if log.offset <= log.storage.last_index():
                rd.truncate_from = log.offset
        if log.committed > log.applying:
            rd.committed_entries = log.next_committed(self.config.max_committed_bytes)
            if rd.committed_entries:
                log.applying = rd.committed_entries[-1].index
        if self.lead != self._prev_ss.leader or self.role is not self._prev_ss.role:
            rd.soft_state = SoftState(self.lead, self.role)
        if self._msgs:
            msgs, self._msgs = self._msgs, []
            if rd.must_sync and not (self.term != prev.term or vote != prev.vote):
                # Only the entries need the fsync: what depends on the term alone may leave first.
                rd.early_messages = [m for m in msgs if m.type in _EARLY]
                rd.messages = [m for m in msgs if m.type not in _EARLY] if rd.early_messages else msgs
            else:
                rd.messages = msgs
        if self._acks:
            for peer, match in self._acks.items():
                self._events.append(RaftEvent(EventKind.REPLICA_ACK, self.term, index=match, peer=peer))
            self._acks = {}
        if log.committed != self._commit_reported:
            self._events.append(RaftEvent(EventKind.COMMIT_ADVANCED, self.term, index=log.committed))
            self._commit_reported = log.committed
        if self._events:
            rd.events = self._events
            self._events = []
        self._outstanding = True
        return rd

    def advance(self, rd: Ready) -> None:
        """The application has done everything ``rd`` asked (persisted, sent, applied)."""
        if rd.hard_state is not None:
            self._prev_hs = rd.hard_state
        if rd.soft_state is not None:
            self._prev_ss = rd.soft_state
        if rd.entries:
            self.log.stable_entries(rd.entries)
            if self.role is _LEADER:
                self._self_durable()
        if rd.committed_entries:
            self.log.applied = rd.committed_entries[-1].index
        self._outstanding = False

    def progress(self) -> dict[str, tuple[int, int, str]]:
        """Leader only: peer → (match, next, state name), for status pages and tests."""
        return {p: (pr.match, pr.next, pr.state.name) for p, pr in self._prs.items()}

    # ================================================================== roles
    def _reset(self, term: int) -> None:
        if self.term != term:
            self.term = term
            self.vote = None
        self.lead = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = self._rng.randint(self.config.election_ticks_min, self.config.election_ticks_max)
        if self.lead_transferee is not None:
            self._abort_transfer("role change")
        self._votes = {}
        self._acks = {}
        self._bcast = _BCAST_NONE
        self._commit_unsent = False
        self._prs = {}

    def _set_role(self, role: Role, reason: str) -> None:
        if role is not self.role:
            self.role = role
            self._event(EventKind.ROLE_CHANGE, role=role, reason=reason)

    def _become_follower(self, term: int, lead: str | None, reason: str) -> None:
        self._reset(term)
        self.lead = lead
        self._set_role(_FOLLOWER, reason)

    def _become_pre_candidate(self) -> None:
        # Deliberately no _reset(): neither the term nor the vote may change on a pre-vote.
        self._votes = {}
        self.lead = None
        self._set_role(_PRE_CANDIDATE, "election timeout")

    def _become_candidate(self, reason: str) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self._set_role(_CANDIDATE, reason)

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.lead = self.id
        self._set_role(_LEADER, "won election")
        log = self.log
        nxt = log.last_index() + 1
        max_inflight = self.config.max_inflight
        for p in self.config.peers:
            self._prs[p] = Progress(nxt, max_inflight)
        mine = self._prs[self.id]
        mine.recent_active = True
        # The no-op lets this term commit, which commits every earlier entry with it.
        log.append([Entry(nxt, self.term, EntryKind.NOOP, b"")])
        # This member counts toward a quorum only with what it has made durable (advance()).
        mine.match = nxt if self._fault_count_unsynced else log.offset - 1
        mine.next = nxt + 1
        self._preferred_elapsed = 0
        self._event(EventKind.ELECTION_WON)
        self._event(EventKind.LEADER_ELECTED, leader=self.id)
        self._bcast = _BCAST_COMMIT
        if self._quorum == 1:
            self._maybe_commit()

    def _hup(self, transfer: bool) -> None:
        if self.role is _LEADER:
            return
        if self.role is not _FOLLOWER:
            self._event(EventKind.ELECTION_LOST, term=self._contested_term(),
                        pre_vote=self.role is _PRE_CANDIDATE, reason="timeout")
        if self.config.pre_vote and not transfer:
            self._campaign(pre_vote=True, transfer=False)
        else:
            self._campaign(pre_vote=False, transfer=transfer)

    def _contested_term(self) -> int:
        return self.term + 1 if self.role is _PRE_CANDIDATE else self.term

    def _campaign(self, pre_vote: bool, transfer: bool) -> None:
        if pre_vote:
            self._become_pre_candidate()
            vote_term = self.term + 1
            typ = _PRE_VOTE
        else:
            self._become_candidate("leadership transfer" if transfer else "election timeout")
            vote_term = self.term
            typ = _VOTE
        self._event(EventKind.ELECTION_STARTED, term=vote_term, pre_vote=pre_vote)
        self._votes = {self.id: True}
        if self._quorum == 1:
            self._won_poll()
            return
        last_index = self.log.last_index()
        last_term = self.log.last_term()
        for p in self.peers:
            self._send(Message(typ, self.id, p, vote_term, log_term=last_term, index=last_index, force=transfer))

    def _won_poll(self) -> None:
        if self.role is _PRE_CANDIDATE:
            self._campaign(pre_vote=False, transfer=False)
        else:
            self._become_leader()

    # ================================================================== message handlers
    def _handle_vote(self, m: Message) -> None:
        pre = m.type is _PRE_VOTE
        resp = _PRE_VOTE_RESP if pre else _VOTE_RESP
        can_vote = (self.vote == m.frm or (self.vote is None and self.lead is None)
                    or (pre and m.term > self.term))
        if can_vote and (self._fault_skip_log_check or self.log.is_up_to_date(m.index, m.log_term)):
            # Answer with the request's term: a granted pre-vote is for the future term.
            self._send(Message(resp, self.id, m.frm, m.term))
            if not pre:
                self._election_elapsed = 0
                self.vote = m.frm
        else:
            self._send(Message(resp, self.id, m.frm, self.term, reject=True))

    def _step_follower(self, m: Message) -> None:
        t = m.type
        if t is _APP:
            self._election_elapsed = 0
            self.lead = m.frm
            self._handle_append(m)
        elif t is _HEARTBEAT:
            self._election_elapsed = 0
            self.lead = m.frm
            self._handle_heartbeat(m)
        elif t is _TIMEOUT_NOW:
            self._hup(transfer=True)

    def _step_candidate(self, m: Message) -> None:
        t = m.type
        if t is _APP:
            self._become_follower(self.term, m.frm, "leader of this term appeared")
            self._handle_append(m)
        elif t is _HEARTBEAT:
            self._become_follower(self.term, m.frm, "leader of this term appeared")
            self._handle_heartbeat(m)
        elif (t is _VOTE_RESP and self.role is _CANDIDATE) or (t is _PRE_VOTE_RESP and self.role is _PRE_CANDIDATE):
            self._votes.setdefault(m.frm, not m.reject)
            granted = sum(1 for v in self._votes.values() if v)
            rejected = len(self._votes) - granted
            if granted >= self._quorum:
                self._won_poll()
            elif rejected > len(self.config.peers) - self._quorum:
                pre = self.role is _PRE_CANDIDATE
                self._event(EventKind.ELECTION_LOST, term=self._contested_term(), pre_vote=pre, reason="rejected")
                self._become_follower(self.term, None, "lost election")

    def _handle_append(self, m: Message) -> None:
        log = self.log
        if m.index < log.committed:
            self._send(Message(_APP_RESP, self.id, m.frm, self.term, index=log.committed))
            return
        if log.term(m.index) == m.log_term:
            entries = m.entries
            last_new = m.index + len(entries)
            if entries:
                ci = log.find_conflict(entries)
                if ci:
                    truncated = log.append(entries[ci - m.index - 1:])
                    if truncated is not None:
                        self._event(EventKind.TRUNCATION, from_index=truncated[0], to_index=truncated[1])
            log.commit_to(min(m.commit, last_new))
            self._send(Message(_APP_RESP, self.id, m.frm, self.term, index=last_new))
        else:
            hint_index, hint_term = log.find_conflict_by_term(min(m.index, log.last_index()), m.log_term)
            self._send(Message(_APP_RESP, self.id, m.frm, self.term, index=m.index, reject=True,
                               reject_hint=hint_index, log_term=hint_term))

    def _handle_heartbeat(self, m: Message) -> None:
        self.log.commit_to(m.commit)
        self._send(Message(_HEARTBEAT_RESP, self.id, m.frm, self.term))

    def _step_leader(self, m: Message) -> None:
        pr = self._prs.get(m.frm)
        if pr is None:
            return
        t = m.type
        if t is _APP_RESP:
            pr.recent_active = True
            if m.reject:
                probe = m.reject_hint
                if m.log_term > 0:
                    probe = self.log.find_conflict_by_term(m.reject_hint, m.log_term)[0]
                if pr.maybe_decr_to(m.index, probe):
                    if pr.state is _REPLICATE:
                        pr.become_probe()
                    self._send_append(m.frm, True)
                return
            if not pr.maybe_update(m.index):
                return
            self._acks[m.frm] = pr.match
            if pr.state is _REPLICATE:
                pr.free_to(m.index)
            else:
                pr.become_replicate()
            if self._maybe_commit():
                self._commit_moved()
            while self._send_append(m.frm, False):
                pass
            if m.frm == self.lead_transferee and pr.match == self.log.last_index():
                self._send(Message(_TIMEOUT_NOW, self.id, m.frm, self.term))
        elif t is _HEARTBEAT_RESP:
            pr.recent_active = True
            pr.probe_sent = False
            if pr.state is _REPLICATE and pr.is_paused():
                pr.free_first()
            if pr.match < self.log.last_index():
                self._send_append(m.frm, True)

    # ================================================================== leader internals
    def _tick_leader(self) -> None:
        cfg = self.config
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= cfg.election_ticks_min:
            self._election_elapsed = 0
            if cfg.check_quorum:
                active = sum(1 for pr in self._prs.values() if pr.recent_active)
                if active < self._quorum:
                    self._become_follower(self.term, None, "check quorum: lost contact with a majority")
                    return
                for p in self.peers:
                    self._prs[p].recent_active = False
        if self.lead_transferee is not None:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= cfg.transfer_timeout:
                self._abort_transfer("timeout")
        if cfg.preferred_leader is not None and cfg.preferred_leader != self.id:
            self._preferred_elapsed += 1
            if self._preferred_elapsed >= cfg.preferred_check_ticks:
                self._preferred_elapsed = 0
                self._maybe_transfer_to_preferred()
        if self._commit_unsent:  # lazy commit broadcast: what no append carried since, goes now
            self._commit_unsent = False
            self._bcast = _BCAST_COMMIT
        if self._heartbeat_elapsed >= cfg.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            committed = self.log.committed
            for p in self.peers:
                pr = self._prs[p]
                self._send(Message(_HEARTBEAT, self.id, p, self.term, commit=min(pr.match, committed)))

    def _maybe_transfer_to_preferred(self) -> None:
        target = self.config.preferred_leader
        if target is None or self.lead_transferee is not None:
            return
        pr = self._prs[target]
        if pr.recent_active and self.log.last_index() - pr.match <= self.config.preferred_max_lag:
            self.transfer_leadership(target)

    def _abort_transfer(self, reason: str) -> None:
        target = self.lead_transferee
        self.lead_transferee = None
        self._event(EventKind.TRANSFER_ABORTED, peer=target or "", reason=reason)

    def _self_durable(self) -> None:
        """The leader's own entries up to ``log.offset - 1`` are durable: count them toward the quorum now.

        Its appends left before its fsync (ready.py), so followers may have acknowledged these
        entries already; until now the commit needed a quorum of followers alone.  A leader's log
        only grows, so everything below the unstable tail is its own, synced, log.
        """
        mine = self._prs[self.id]
        durable = self.log.offset - 1
        if durable > mine.match:
            mine.match = durable
            if self._maybe_commit():
                self._commit_moved()

    def _commit_moved(self) -> None:
        """The commit index moved: broadcast it now (empty appends where nothing new is due), or, with
        ``eager_commit_broadcast`` off, leave it to the next appends and to the next tick."""
        if self.config.eager_commit_broadcast:
            self._bcast = _BCAST_COMMIT
        else:
            self._commit_unsent = True

    def _maybe_commit(self) -> bool:
        matches = sorted((pr.match for pr in self._prs.values()), reverse=True)
        index = matches[self._quorum - 1]
        log = self.log
        if index <= log.committed:
            return False
        if log.term(index) != self.term and not self._fault_commit_old_term:
            return False  # Raft 5.4.2: count replicas only for entries of the current term
        return log.commit_to(index)

    def _send_append(self, to: str, send_if_empty: bool) -> bool:
        pr = self._prs[to]
        if pr.is_paused():
            return False
        log = self.log
        prev = pr.next - 1
        prev_term = log.term(prev)
        if prev_term is None:  # cannot happen while next <= last + 1; repair rather than crash
            pr.become_probe()
            prev = pr.next - 1
            prev_term = log.term(prev) or 0
        cfg = self.config
        entries = log.entries(pr.next, pr.next + cfg.max_append_entries, cfg.max_append_bytes)
        if not entries and not send_if_empty:
            return False
        self._send(Message(_APP, self.id, to, self.term, log_term=prev_term, index=prev,
                           entries=entries, commit=log.committed))
        pr.sent(entries[-1].index if entries else 0)
        return True

    def _flush_broadcast(self) -> None:
        if self.role is _LEADER:
            with_empty = self._bcast == _BCAST_COMMIT
            for p in self.peers:
                if self._send_append(p, with_empty):
                    while self._send_append(p, False):
                        pass
        self._bcast = _BCAST_NONE

    # ================================================================== output
    def _durable_vote(self) -> str | None:
        return None if self._fault_forget_vote else self.vote

    def _send(self, m: Message) -> None:
        self._msgs.append(m)

    def _event(self, kind: EventKind, term: int | None = None, **fields: object) -> None:
        self._events.append(RaftEvent(kind, self.term if term is None else term, **fields))  # type: ignore[arg-type]
