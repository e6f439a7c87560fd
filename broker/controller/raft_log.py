"""The controller's persistent Raft log: one append-only file of small entries, plus the hard state.

Controller events are a few hundred bytes and arrive at heartbeat-scale rates (an id, an
address change, an election, a SyncStateSet change), so the whole log lives in memory
and in one file; a restarted controller rebuilds its state by replaying the committed
prefix, as DLedger's controller replays its log.  The file layout is ``>qqBI`` (index,
term, kind, length) + data per entry; a torn tail after a crash is cut at the last whole
entry.  Term and vote are kept and fsynced exactly as DLedger mode does (``hardstate``).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
from pathlib import Path

from rocketscope.broker.raft.messages import Entry, EntryKind, HardState, entry_size

log = logging.getLogger(__name__)
HEADER = struct.Struct(">qqBI")


class ControllerLog:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "raftlog"
        self.hard_state_path = self.directory / "hardstate"
        self.ents: list[Entry] = []
        self.positions: list[int] = []  # file position of each entry
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._load()
        self.hard_state = self._load_hard_state()
        self._commit_written = 0.0

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

    def _load_hard_state(self) -> HardState:
        try:
            d = json.loads(self.hard_state_path.read_text())
            return HardState(int(d["term"]), d.get("vote"), min(int(d.get("commit", 0)), self.last_index()))
        except (OSError, ValueError, KeyError):
            return HardState()

    def save_hard_state(self, hs: HardState, sync: bool) -> None:
        """Term and vote durably before answering; a commit-only change at most once a second (re-learnt)."""
        old = self.hard_state
        now = time.monotonic()
        if (hs.term, hs.vote) == (old.term, old.vote) and now - self._commit_written < 1.0:
            self.hard_state = hs
            return
        tmp = self.hard_state_path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump({"term": hs.term, "vote": hs.vote, "commit": hs.commit}, fh)
            if sync and (hs.term, hs.vote) != (old.term, old.vote):
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, self.hard_state_path)
        self._commit_written = now
        self.hard_state = hs

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
