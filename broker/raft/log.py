"""The core's view of the log: durable entries in ``Storage`` plus an unstable tail in memory.

Entries the core has appended (leader proposals, follower appends) but the application
has not yet confirmed durable live in ``unstable``, starting at ``offset``.  Any index
``>= offset`` is answered from the tail, anything below from storage, so a divergent
stored tail that has been replaced in memory is never read again.  Every lookup is O(1)
(a list index), which keeps the per-message cost independent of the log length.
"""

from __future__ import annotations

from .messages import Entry, entry_size
from .storage import Storage


class RaftSafetyError(AssertionError):
    """The core was asked to do something that would break a Raft invariant.

    Seeing it means a bug (in the core, in the storage, or a lost write that had been
    acknowledged); the node must stop rather than continue with a corrupt log.
    """


class RaftLog:
    __slots__ = ("applied", "applying", "committed", "offset", "storage", "unstable")

    def __init__(self, storage: Storage, committed: int, applied: int) -> None:
        self.storage = storage
        self.offset = storage.last_index() + 1
        self.unstable: list[Entry] = []
        last = self.offset - 1
        if committed > last:
            raise RaftSafetyError(f"hard state commit {committed} is beyond the stored last index {last}")
        if applied > committed:
            raise RaftSafetyError(f"applied index {applied} is beyond the commit index {committed}")
        self.committed = committed
        self.applied = applied
        self.applying = applied  # last index handed out in a Ready, applied or not

    # ------------------------------------------------------------------ reads
    def last_index(self) -> int:
        return self.offset + len(self.unstable) - 1

    def last_term(self) -> int:
        if self.unstable:
            return self.unstable[-1].term
        return self.storage.term(self.offset - 1)

    def term(self, index: int) -> int | None:
        """Term at ``index``, or None when the log does not reach it."""
        if index >= self.offset:
            pos = index - self.offset
            return self.unstable[pos].term if pos < len(self.unstable) else None
        if index < 0:
            return None
        return self.storage.term(index)

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft's vote rule: the candidate's last entry is at least as recent as ours."""
        mine = self.last_term()
        return last_term > mine or (last_term == mine and last_index >= self.last_index())

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries ``lo <= index < hi`` within ``max_bytes`` (at least one when any exist)."""
        hi = min(hi, self.last_index() + 1)
        if lo >= hi:
            return []
        out: list[Entry] = []
        if lo < self.offset:
            out = self.storage.entries(lo, min(hi, self.offset), max_bytes)
            if hi <= self.offset or len(out) < min(hi, self.offset) - lo:
                return out
            lo = self.offset
        tail = self.unstable[lo - self.offset : hi - self.offset]
        if not out and len(tail) <= 1:
            return tail
        total = sum(entry_size(e) for e in out)
        for n, e in enumerate(tail):
            total += entry_size(e)
            if total > max_bytes and (out or n > 0):
                return out + tail[:n]
        return out + tail if out else tail

    def find_conflict(self, entries: list[Entry] | tuple[Entry, ...]) -> int:
        """Index of the first entry whose term differs from ours (new entries count), else 0."""
        for e in entries:
            if self.term(e.index) != e.term:
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """Largest ``i <= index`` whose term is ``<= term``, and that term.

        The fast back-off of etcd: a leader probing at a term our log does not have can
        skip every entry of newer terms in one round trip.
        """
        index = min(index, self.last_index())
        while index > 0:
            t = self.term(index)
            if t is None or t <= term:
                break
            index -= 1
        t = self.term(index)
        return index, (t if t is not None else 0)

    def next_committed(self, max_bytes: int) -> list[Entry]:
        """Committed entries not yet handed to the application."""
        if self.committed <= self.applying:
            return []
        return self.entries(self.applying + 1, self.committed + 1, max_bytes)

    # ------------------------------------------------------------------ writes
    def append(self, entries: list[Entry] | tuple[Entry, ...]) -> tuple[int, int] | None:
        """Append ``entries`` (contiguous), replacing any tail from the first one's index.

        Returns the (from, to) index range of entries that were discarded, if any.
        """
        first = entries[0].index
        last = self.last_index()
        if first <= self.committed:
            raise RaftSafetyError(f"refusing to overwrite committed entry {first} (commit {self.committed})")
        if first > last + 1:
            raise RaftSafetyError(f"append at {first} would leave a gap after last index {last}")
        truncated = (first, last) if first <= last else None
        if first == self.offset + len(self.unstable):
            self.unstable.extend(entries)
        elif first <= self.offset:
            self.offset = first
            self.unstable = list(entries)
        else:
            del self.unstable[first - self.offset :]
            self.unstable.extend(entries)
        return truncated

    def commit_to(self, index: int) -> bool:
        if index <= self.committed:
            return False
        if index > self.last_index():
            raise RaftSafetyError(f"commit {index} is beyond the last index {self.last_index()}")
        self.committed = index
        return True

    def stable_entries(self, entries: list[Entry]) -> None:
        """The application made ``entries`` (one Ready's worth) durable.

        If part of the tail was replaced meanwhile, the longest prefix of ``entries`` still
        in the log is stable (by log matching, an unchanged entry means an unchanged
        prefix), so the next Ready rewrites only what really changed.
        """
        for e in reversed(entries):
            if e.index < self.offset:
                return
            if self.term(e.index) == e.term:
                self.stable_to(e.index, e.term)
                return

    def stable_to(self, index: int, term: int) -> None:
        """The application made entries up to ``index`` durable; drop them from the tail.

        Ignored when the tail was replaced meanwhile (the entry there has another term),
        in which case the new tail is handed out again in the next Ready.
        """
        if index < self.offset or self.term(index) != term:
            return
        del self.unstable[: index - self.offset + 1]
        self.offset = index + 1
