"""The controller's persistent Raft log: one append-only file of small entries, plus the hard state.

Controller events are a few hundred bytes and arrive at heartbeat-scale rates (an id, an
address change, an election, a SyncStateSet change), so the whole log lives in memory
and in one file; a restarted controller rebuilds its state by replaying the committed
prefix, as DLedger's controller replays its log.  The file layout is ``>qqBI`` (index,
term, kind, length) + data per entry; a torn tail after a crash is cut at the last whole
entry.  Term and vote are kept and fsynced exactly as DLedger mode does: one ``hardstate``
file written by broker/raft/hard_state_file.py.  This class is the controller's ``DurableLog``
for the Raft driver (broker/raft/driver.py).
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

from rocketscope.broker.raft.hard_state_file import HardStateFile
from rocketscope.broker.raft.messages import Entry, EntryKind, HardState, entry_size

log = logging.getLogger(__name__)
HEADER = struct.Struct(">qqBI")


class ControllerLog:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "raftlog"
        self.hard_state_file = HardStateFile(self.directory / "hardstate")
        self.ents: list[Entry] = []
        self.positions: list[int] = []  # file position of each entry
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._load()
        stored = self.hard_state_file.load()
        if stored is not None:
            term, vote, commit = stored
            self.hard_state_file.hard_state = HardState(term, vote, min(commit, self.last_index()))

    def _load(self) -> None:
        data = os.pread(self.fd, os.fstat(self.fd).st_size, 0)
        pos = 0
        while pos + HEADER.size <= len(data):
            index, term, kind, size = HEADER.unpack_from(data, pos)
            end = pos + HEADER.size + size
            if end > len(data) or index != len(self.ents) + 1:
                break
            self.ents.append(Entry(index, term, EntryKind(kind), bytes(data[pos + HEADER.size:end])))
            self.positions.append(pos)
            pos = end
        if pos != len(data):
            log.warning("controller log: torn tail cut at byte %d (%d entries kept)", pos, len(self.ents))
            os.ftruncate(self.fd, pos)
        self.file_end = pos

    @property
    def hard_state(self) -> HardState:
        return self.hard_state_file.hard_state

    def save_hard_state(self, hs: HardState, sync: bool) -> None:
        """Term and vote durably before answering; a commit-only change at most once a second (re-learnt)."""
        self.hard_state_file.save(hs, sync)

    # ------------------------------------------------------------ Storage
    def first_index(self) -> int:
        return 1

    def last_index(self) -> int:
        return len(self.ents)

    def term(self, index: int) -> int:
        if index == 0:
            return 0
        if index < 0 or index > len(self.ents):
            raise IndexError(f"entry {index} is not stored (last index {len(self.ents)})")
        return self.ents[index - 1].term

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        out: list[Entry] = []
        total = 0
        for e in self.ents[lo - 1:min(hi, len(self.ents) + 1) - 1]:
            total += entry_size(e)
            if out and total > max_bytes:
                break
            out.append(e)
        return out

    # --------------------------------------------------------- write side
    def append(self, entries: list[Entry]) -> int:
        """Store entries, replacing a divergent tail; return how many stored entries were discarded."""
        if not entries:
            return 0
        first = entries[0].index
        dropped = 0
        if first <= len(self.ents):
            dropped = len(self.ents) - first + 1
            self.file_end = self.positions[first - 1]
            del self.ents[first - 1:], self.positions[first - 1:]
            os.ftruncate(self.fd, self.file_end)
        buf = bytearray()
        for e in entries:
            if e.index != len(self.ents) + 1:
                raise ValueError(f"entry {e.index} does not follow the log end {len(self.ents)}")
            self.positions.append(self.file_end + len(buf))
            self.ents.append(e)
            buf += HEADER.pack(e.index, e.term, int(e.kind), len(e.data)) + e.data
        os.pwrite(self.fd, bytes(buf), self.file_end)
        self.file_end += len(buf)
        return dropped

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)
