"""The values that cross the Raft core's boundary: entries, messages, persisted and soft state.

They are plain, cheap objects because the core creates one per proposal and per RPC at
thousands per second: ``Entry`` is a NamedTuple (immutable, fast to build), ``Message``
a slotted dataclass.  Nothing here knows about sockets or files; the transport and the
storage layer encode them as they like.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import NamedTuple

# Fixed per-entry overhead counted against byte budgets (DLedger's entry header is 48 bytes),
# so that a batch of empty no-op entries still has a size.
ENTRY_OVERHEAD = 48


class EntryKind(IntEnum):
    """NORMAL carries application data; NOOP is appended by every new leader (see core)."""

    NORMAL = 0
    NOOP = 1


class Entry(NamedTuple):
    """One log entry.  ``index`` starts at 1; ``term`` is the leader's term when it was created."""

    index: int  # type: ignore[assignment]  # the Raft name on purpose; NamedTuple fields shadow tuple.index
    term: int
    kind: EntryKind
    data: bytes


def entry_size(entry: Entry) -> int:
    """Bytes an entry costs in a batch: its payload plus the fixed header overhead."""
    return len(entry.data) + ENTRY_OVERHEAD


class MsgType(IntEnum):
    """Raft RPCs.  Requests and responses are separate one-way messages, as in etcd."""

    APP = 1  # AppendEntries: prev (index, log_term), entries, leader commit
    APP_RESP = 2  # success: index = last matching index; reject: index = rejected prev index + hint
    HEARTBEAT = 3  # commit = min(follower match, leader commit)
    HEARTBEAT_RESP = 4
    VOTE = 5  # index/log_term = candidate's last entry; force = leadership transfer
    VOTE_RESP = 6
    PRE_VOTE = 7  # term = the term the sender *would* use; nobody changes term for it
    PRE_VOTE_RESP = 8
    TIMEOUT_NOW = 9  # leader → transfer target: campaign now, skipping pre-vote and leases


@dataclass(slots=True)
class Message:
    """One RPC between two nodes.  Fields that do not apply to ``type`` keep their defaults.

    ``reject_hint`` and ``log_term`` on a rejected APP_RESP implement the fast back-off of
    etcd: the follower names the last index whose term is <= the leader's probe term, so
    the leader skips a whole divergent term per round trip instead of one entry.
    """

    type: MsgType
    frm: str
    to: str
    term: int
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] | list[Entry] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    force: bool = False


class HardState(NamedTuple):
    """What must be durable before any message of the same Ready leaves the node.

    ``vote`` is the candidate this node voted for in ``term`` (None: not voted).  Losing
    it after a crash lets the node vote twice in one term, which breaks election safety.
    """

    term: int = 0
    vote: str | None = None
    commit: int = 0


class Role(StrEnum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class SoftState(NamedTuple):
    """Volatile state the application wants to observe (never persisted)."""

    leader: str | None
    role: Role
