"""The Ready batch: everything the application must do after feeding the core, in order.

Contract, per Ready, in this order:

1. persist ``entries`` (first discarding stored entries at or after ``entries[0].index``;
   ``truncate_from`` is set when that discards anything) and ``hard_state`` if not None,
   and make them durable (fsync) when ``must_sync`` says so;
2. send ``early_messages`` once step 1's writes are issued, without waiting for the fsync:
   a leader's appends, heartbeats and TimeoutNow, which promise only the leader's term
   (durable since the Ready that changed it; ``early_messages`` is empty when this Ready
   changes term or vote).  The leader's disk and its followers' disks then sync in parallel.
   Safe because a commit needs a quorum of *durable* copies: the leader counts its own
   entries only from ``advance`` on (core.py ``_self_durable``), so an entry it loses in a
   crash before its fsync is committed only if a quorum of followers synced it;
3. after the fsync, send ``messages``: a vote or an append acknowledgement promises that
   the state behind it survives a crash;
4. apply ``committed_entries`` in order (they may include entries of step 1);
5. call ``RaftNode.advance(ready)`` before asking for the next Ready: it tells the core
   that step 1 is durable.

``events`` and ``soft_state`` are observations only (role, leader, elections, commit,
truncation, per-follower progress); they can be published at any time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from .messages import Entry, HardState, Message, Role, SoftState


class EventKind(StrEnum):
    """Event names; the ones shared with rocketscope/ha_events.py use the same strings."""

    ROLE_CHANGE = "role_change"
    ELECTION_STARTED = "election_started"
    ELECTION_WON = "election_won"
    ELECTION_LOST = "election_lost"
    LEADER_ELECTED = "leader_elected"
    COMMIT_ADVANCED = "commit_advanced"
    TRUNCATION = "truncation"
    REPLICA_ACK = "replica_ack"
    TRANSFER_STARTED = "leader_transfer_started"
    TRANSFER_ABORTED = "leader_transfer_aborted"


@dataclass(frozen=True, slots=True)
class RaftEvent:
    """One structured observation.  Fields that do not apply keep their defaults.

    role_change: ``role`` (new), ``reason``; election_*: ``term`` is the term contested,
    ``pre_vote`` tells a pre-vote round; leader_elected: ``leader``; commit_advanced:
    ``index``; truncation: ``from_index``..``to_index`` discarded; replica_ack: ``peer``
    and its match ``index`` (coalesced: the latest per peer per Ready);
    leader_transfer_*: ``peer`` (the target) and ``reason``.
    """

    kind: EventKind
    term: int
    index: int = -1
    from_index: int = -1
    to_index: int = -1
    peer: str = ""
    role: Role | None = None
    leader: str = ""
    pre_vote: bool = False
    reason: str = ""


@dataclass(slots=True)
class Ready:
    hard_state: HardState | None = None
    entries: list[Entry] = field(default_factory=list)
    truncate_from: int | None = None
    messages: list[Message] = field(default_factory=list)
    # A leader's messages that may leave before step 1's fsync (see the contract above).
    early_messages: list[Message] = field(default_factory=list)
    committed_entries: list[Entry] = field(default_factory=list)
    soft_state: SoftState | None = None
    events: list[RaftEvent] = field(default_factory=list)
    # True when step 1 needs an fsync: entries, or a new term or vote.  A hard state whose
    # only change is the commit index may be written lazily (commit is re-learnt from the leader).
    must_sync: bool = False
