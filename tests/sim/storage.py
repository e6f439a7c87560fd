"""Simulated storage for the Raft driver: an in-memory ``DurableLog`` that loses unsynced writes in a crash.

``live`` is what the running process sees (the page cache): every write lands there at
once.  Writes since the last ``sync`` are kept aside; ``sync`` makes them durable.  A crash
either loses them (``lose``) or keeps them all (a lucky OS flush): both are legal, since no
message promising them has left (the driver sends only after ``sync`` returns).
"""

from __future__ import annotations

from rocketscope.broker.raft import Entry, HardState, MemoryStorage


class SimLog:
    """The driver's ``DurableLog`` (broker/raft/driver.py) over two ``MemoryStorage`` copies.

    ``lazy_commit``: a hard state written without ``sync`` (a commit-only change, which
    production writes lazily, broker/raft/hard_state_file.py) does not become durable at
    the next sync either; only a crash with a lucky flush keeps it.
    """

    def __init__(self, lazy_commit: bool) -> None:
        self.lazy_commit = lazy_commit
        self.durable = MemoryStorage()
        self.live = self.durable
        self.unsynced: list[tuple[HardState | None, list[Entry]]] = []
        self.syncs = 0

    # ------------------------------------------------------------------ Storage (read side: the page cache)
    # open() binds these four to ``live``'s methods (the core calls term() for nearly every message)
    def first_index(self) -> int:
        return self.live.first_index()

    def last_index(self) -> int:
        return self.live.last_index()

    def term(self, index: int) -> int:
        return self.live.term(index)

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        return self.live.entries(lo, hi, max_bytes)

    def _bind(self) -> None:
        live = self.live
        self.first_index = live.first_index  # type: ignore[method-assign]
        self.last_index = live.last_index  # type: ignore[method-assign]
        self.term = live.term  # type: ignore[method-assign]
        self.entries = live.entries  # type: ignore[method-assign]

    @property
    def hard_state(self) -> HardState:
        return self.live.hard_state

    # ------------------------------------------------------------------ write side
    def append(self, entries: list[Entry]) -> None:
        self.live.append(entries)
        self.unsynced.append((None, entries))

    def save_hard_state(self, hs: HardState, sync: bool) -> None:
        self.live.hard_state = hs
        self.unsynced.append((hs if (sync or not self.lazy_commit) else None, []))

    def sync(self) -> None:
        durable = self.durable
        for hs, entries in self.unsynced:
            durable.save(hs, entries)
        self.unsynced.clear()
        self.syncs += 1

    # ------------------------------------------------------------------ process lifecycle
    def open(self) -> None:
        """A (re)started process reads what is on disk."""
        self.live = self.durable.copy()
        self.unsynced = []
        self._bind()

    def crash(self, lose: bool) -> bool:
        """The process dies; returns True when unsynced writes were lost."""
        had = bool(self.unsynced)
        if lose:
            self.unsynced = []
            return had
        self.durable = self.live  # everything written reached the disk anyway
        self.unsynced = []
        return False
