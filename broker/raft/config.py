"""Raft node configuration: membership, timing in ticks, flow-control limits.

All timing is in ticks because the core has no clock: the embedding code calls
``RaftNode.tick()`` every ``tick`` milliseconds.  Recommended for sub-second failover on
a healthy LAN (see docs/RAFT.md): a 50 ms tick, heartbeat every 2 ticks (100 ms) and an
election timeout drawn from 6..12 ticks (300..600 ms).  DLedger's defaults detect a dead
leader only after 6 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketscope.config import ConfigError

# Names accepted in ``RaftConfig.testing_faults``.  Each one re-introduces a classic Raft
# bug so the simulator can prove it detects it; never set them outside tests.
FAULT_COMMIT_OLD_TERM = "commit_old_term"  # commit by counting replicas, ignoring the term rule
FAULT_FORGET_VOTE = "forget_vote"  # hard state written without the vote
FAULT_SKIP_LOG_CHECK = "skip_log_check"  # grant votes without the up-to-date log check
# a leader counts its own entries toward the commit quorum when written, before its fsync (its
# appends leave before that fsync: ready.py's early_messages)
FAULT_COUNT_UNSYNCED = "count_unsynced"
TESTING_FAULTS = frozenset({FAULT_COMMIT_OLD_TERM, FAULT_COUNT_UNSYNCED, FAULT_FORGET_VOTE, FAULT_SKIP_LOG_CHECK})


class RaftConfigError(ConfigError):
    """A configuration value that cannot work; the message names the key and the fix."""


@dataclass(frozen=True)
class RaftConfig:
    """Configuration of one Raft node.

    ``peers`` lists every voting member, this node included; all members must use the
    same list.  ``preferred_leader`` mirrors DLedger's ``preferredLeaderIds``: a leader
    hands leadership to that node whenever it is live and caught up.
    """

    node_id: str
    peers: tuple[str, ...]
    heartbeat_ticks: int = 2
    election_ticks_min: int = 6
    election_ticks_max: int = 12
    # Replication batching and pipelining.
    max_append_entries: int = 256
    max_append_bytes: int = 1 << 20
    max_inflight: int = 16
    # Committed entries handed to the application per Ready (at least one is always given).
    max_committed_bytes: int = 8 << 20
    # Proposals beyond this many uncommitted entries are refused (DLedger LEADER_PENDING_FULL).
    max_uncommitted_entries: int = 10000
    pre_vote: bool = True
    check_quorum: bool = True
    preferred_leader: str | None = None
    # How often the leader looks at the preferred leader (DLedger: every 1000 ms).
    preferred_check_ticks: int = 20
    # The preferred leader must be within this many entries to start a transfer (DLedger: 1000).
    preferred_max_lag: int = 1000
    # A transfer that has not completed after this many ticks is abandoned (0: election_ticks_min).
    transfer_timeout_ticks: int = 0
    # When a leader's commit index moves, tell followers at once with empty appends (etcd's way), or
    # only with the next append that carries entries, and at the next tick if none left by then.
    # Lazy halves the messages per entry under steady load (an empty append and its answer per
    # follower per commit); a follower then learns the commit one entry or one tick later, which
    # Raft allows (the commit index is never needed for safety, only to apply).  DLedger: lazy.
    eager_commit_broadcast: bool = True
    # Whether the driver fsyncs a Ready's entries before its acknowledgements leave and before the
    # leader counts them (Raft as written).  False: a written entry counts at once and the embedding
    # code fsyncs the log in the background (DLedger's flushFileInterval, JetStream's default): a
    # killed process loses nothing, a power cut of a majority at once can lose committed entries.
    # Term and vote are fsynced before any message that depends on them either way (hard_state_file.py).
    sync_appends: bool = True
    testing_faults: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.node_id not in self.peers:
            raise RaftConfigError(f"node_id {self.node_id!r} must be one of peers {list(self.peers)}")
        if len(set(self.peers)) != len(self.peers):
            raise RaftConfigError(f"peers contain a duplicate id: {list(self.peers)}")
        if self.heartbeat_ticks < 1:
            raise RaftConfigError("heartbeat_ticks must be >= 1")
        if self.election_ticks_min <= self.heartbeat_ticks:
            raise RaftConfigError(
                f"election_ticks_min ({self.election_ticks_min}) must exceed heartbeat_ticks "
                f"({self.heartbeat_ticks}); use at least 3x so one lost heartbeat does not start an election"
            )
        if self.election_ticks_max < self.election_ticks_min:
            raise RaftConfigError("election_ticks_max must be >= election_ticks_min")
        for name in ("max_append_entries", "max_append_bytes", "max_inflight", "max_committed_bytes",
                     "max_uncommitted_entries", "preferred_check_ticks"):
            if getattr(self, name) < 1:
                raise RaftConfigError(f"{name} must be >= 1")
        if self.preferred_leader is not None and self.preferred_leader not in self.peers:
            raise RaftConfigError(f"preferred_leader {self.preferred_leader!r} is not one of peers")
        unknown = set(self.testing_faults) - TESTING_FAULTS
        if unknown:
            raise RaftConfigError(f"unknown testing_faults {sorted(unknown)}; known: {sorted(TESTING_FAULTS)}")

    @property
    def transfer_timeout(self) -> int:
        return self.transfer_timeout_ticks or self.election_ticks_min

    @property
    def quorum(self) -> int:
        return len(self.peers) // 2 + 1
