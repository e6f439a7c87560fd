"""Raft's safety properties, checked incrementally at every Ready of every node.

- election safety: at most one leader per term (from election_won events);
- log matching: an entry (index, term) has the same predecessor term and payload on
  every node that ever stores it; by induction two logs that share an entry share the
  whole prefix before it, so checking each write is enough;
- leader completeness: a node that wins term T holds every entry committed in a term before T;
- state-machine safety: an index reported committed by any node never changes (a global
  map of committed entries) and a stored committed entry is never truncated; a node that
  crashes reports what its core had decided committed, handed out or not (``crashing``);
- acknowledged writes: a proposal the driver answers as committed is the entry the cluster
  committed at its index (broker/raft/driver.py answers by term; the data must match).

Each check costs O(new entries) except leader completeness, O(committed) per election.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketscope.broker.raft import Entry, EventKind, MemoryStorage, Ready

if TYPE_CHECKING:
    from .node import SimNode


class InvariantViolation(AssertionError):
    """A Raft safety property does not hold; the message says which and where."""


class Checker:
    def __init__(self) -> None:
        self.leaders: dict[int, str] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}
        self.max_committed = 0
        # An upper bound of the term in which each index was committed: the smallest current
        # term of a node reporting it.  Leader completeness only binds leaders of later terms
        # (a candidate may legitimately win an older term after a newer term committed).
        self.commit_term: dict[int, int] = {}
        self._entry_shape: dict[tuple[int, int], tuple[int, int, bytes]] = {}
        self.elections = 0
        self.acked = 0

    def before_write(self, node: SimNode, rd: Ready) -> None:
        """Checks that need the node's storage as it was before ``rd`` is written."""
        live: MemoryStorage = node.live
        if rd.truncate_from is not None:
            committed = self.committed
            rewritten = {e.index: e.term for e in rd.entries}  # an identical rewrite is no loss
            for i in range(rd.truncate_from, min(live.last_index(), self.max_committed) + 1):
                c = committed.get(i)
                if c is not None and live.term(i) == c[0] and rewritten.get(i) != c[0]:
                    raise InvariantViolation(
                        f"state-machine safety: {node.id} truncates committed entry {i} (term {c[0]})")
        if rd.entries:
            shape = self._entry_shape
            prev_term = live.term(rd.entries[0].index - 1)
            for e in rd.entries:
                key = (e.index, e.term)
                seen = shape.get(key)
                mine = (prev_term, int(e.kind), e.data)
                if seen is None:
                    shape[key] = mine
                elif seen != mine:
                    raise InvariantViolation(
                        f"log matching: {node.id} stores entry {key} with (prev term, kind, data) {mine}, "
                        f"another node stored {seen}")
                prev_term = e.term

    def after_ready(self, node: SimNode, rd: Ready) -> None:
        self._committed(node, rd.committed_entries)
        for ev in rd.events:
            if ev.kind is EventKind.ELECTION_WON:
                self.elections += 1
                other = self.leaders.get(ev.term)
                if other is not None and other != node.id:
                    raise InvariantViolation(f"election safety: {node.id} and {other} both won term {ev.term}")
                self.leaders[ev.term] = node.id
                self.check_complete(node, f"leader completeness: new leader {node.id} of term {ev.term}",
                                    before_term=ev.term)

    def crashing(self, node: SimNode) -> None:
        """``node`` dies: what its core had decided committed but not yet handed out counts as committed too.

        A commit decision is Raft's, not the driver's: the driver only delays when the node tells
        anyone.  So a leader that counted entries a crash erases (its own unsynced ones) is caught
        here, however the driver orders its sends.
        """
        raft = node.raft
        if raft is None or raft.log.committed <= raft.log.applying:
            return
        log = raft.log
        self._committed(node, log.entries(log.applying + 1, log.committed + 1, 1 << 62))

    def _committed(self, node: SimNode, entries: list[Entry]) -> None:
        committed = self.committed
        commit_term = self.commit_term
        term = node.raft.term if node.raft is not None else 0
        for e in entries:
            c = committed.get(e.index)
            if c is None:
                committed[e.index] = (e.term, e.data)
                commit_term[e.index] = term
                if e.index > self.max_committed:
                    self.max_committed = e.index
            elif c == (e.term, e.data):
                if term < commit_term[e.index]:
                    commit_term[e.index] = term
            else:
                raise InvariantViolation(
                    f"state-machine safety: {node.id} reports entry {e.index} committed as (term {e.term}, "
                    f"{e.data!r}) but it was committed as (term {c[0]}, {c[1]!r})")

    def acknowledged(self, node_id: str, index: int, data: bytes) -> None:
        """A driver answered a proposal as committed: the cluster must have committed exactly it there."""
        c = self.committed.get(index)
        if c is None or c[1] != data:
            raise InvariantViolation(f"acknowledged write: {node_id} answered {data!r} as committed at {index}, "
                                     f"but the committed entry there is {c!r}")
        self.acked += 1

    def check_complete(self, node: SimNode, what: str, upto: int | None = None,
                       before_term: int | None = None) -> None:
        """``node``'s log holds every entry known committed (up to ``upto``, in a term before ``before_term``)."""
        assert node.raft is not None
        log = node.raft.log
        upto = self.max_committed if upto is None else upto
        commit_term = self.commit_term
        for i, (term, _) in self.committed.items():
            if i > upto or (before_term is not None and commit_term[i] >= before_term):
                continue
            mine = log.term(i)
            if mine is None:
                raise InvariantViolation(f"{what} lacks entry {i} (last index {log.last_index()}), committed")
            if mine != term:
                raise InvariantViolation(f"{what} has term {mine} at {i}, committed with term {term}")
