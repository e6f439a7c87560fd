"""The read side of durable log storage, as the core sees it, and an in-memory implementation.

The core never writes storage: it hands entries to persist out in a ``Ready`` and reads
them back through this interface once the application has stored them (etcd's split).
So the DLedger commit log only has to implement four read methods over its own files,
and the core never holds the whole log in memory.
"""

from __future__ import annotations

from typing import Protocol

from .messages import Entry, EntryKind, HardState, entry_size


class Storage(Protocol):
    """Durable log entries, read by the core.

    Indexes are contiguous from ``first_index()`` to ``last_index()``; ``term(first_index()-1)``
    must also answer (0 for an empty log), because every AppendEntries names its previous entry.
    """

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term(self, index: int) -> int:
        """Term of the entry at ``index``; raise IndexError when it is not stored."""
        ...

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries ``lo <= index < hi``, stopping before ``max_bytes`` but always at least one."""
        ...


class MemoryStorage:
    """A ``Storage`` in a Python list, with the write side the application would implement.

    Used by tests and the simulator; also the reference for what ``save`` must do with a
    Ready: truncate from the first new entry, append, then record the hard state.
    """

    def __init__(self, entries: list[Entry] | None = None, hard_state: HardState | None = None) -> None:
        # Slot 0 is a sentinel for index 0 so that term(0) == 0 and index i lives at slot i.
        self._ents: list[Entry] = [Entry(0, 0, EntryKind.NOOP, b"")]
        if entries:
            self._ents.extend(entries)
        self.hard_state = hard_state or HardState()

    def first_index(self) -> int:
        return 1

    def last_index(self) -> int:
        return len(self._ents) - 1

    def term(self, index: int) -> int:
        if index < 0 or index >= len(self._ents):
            raise IndexError(f"entry {index} is not stored (last index {len(self._ents) - 1})")
        return self._ents[index].term

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        ents = self._ents[lo:hi]
        if len(ents) <= 1:
            return ents
        total = 0
        for n, e in enumerate(ents):
            total += entry_size(e)
            if total > max_bytes and n > 0:
                return ents[:n]
        return ents

    def entry(self, index: int) -> Entry:
        return self._ents[index]

    def all_entries(self) -> list[Entry]:
        return self._ents[1:]

    # ------------------------------------------------------------------ write side
    def append(self, entries: list[Entry]) -> None:
        """Store ``entries``, discarding any stored entry at or after the first new index."""
        if not entries:
            return
        first = entries[0].index
        if first > len(self._ents):
            raise IndexError(f"append at {first} leaves a gap after last index {len(self._ents) - 1}")
        del self._ents[first:]
        self._ents.extend(entries)

    def save(self, hard_state: HardState | None, entries: list[Entry]) -> None:
        """Persist the durable part of a Ready (entries first, then the hard state)."""
        self.append(entries)
        if hard_state is not None:
            self.hard_state = hard_state

    def copy(self) -> MemoryStorage:
        clone = MemoryStorage(hard_state=self.hard_state)
        clone._ents = list(self._ents)
        return clone
