"""The broker's epoch file and the truncation a rejoining replica does before it follows a master.

Every master epoch starts at a commit-log offset: the new master's log end when it was
elected.  Each broker keeps the list of ``(epoch, startOffset)`` it holds data of in
``epochFileCheckpoint`` (RocketMQ's CheckpointFile layout: entry count, CRC32 of the
entry lines, then ``epoch-startOffset`` lines; a ``.bak`` copy is written first so a
torn write leaves one good file).  A replica joining a master compares its entries
with the master's: the newest epoch both have with the same start offset is where
their histories last agreed, and everything past ``min(local end, master end)`` of that
epoch is a tail the master never had (an old master's unconfirmed writes): it is cut
before replication starts (AutoSwitchHAClient.doTruncate / EpochFileCache.findConsistentPoint),
by ``MessageStore.truncate_to``.
"""

from __future__ import annotations

import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
MAX_OFFSET = 2**63 - 1


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start: int


class EpochFileError(ValueError):
    """Neither the epoch file nor its backup is readable."""


class EpochFile:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.bak = self.path.with_name(self.path.name + ".bak")
        self.entries: list[EpochEntry] = self._load()

    # ---------------------------------------------------------------- file
    @staticmethod
    def _parse(text: str) -> list[EpochEntry]:
        lines = text.splitlines()
        if len(lines) < 2:
            raise EpochFileError("too short")
        count, crc = int(lines[0]), int(lines[1])
        body = lines[2:2 + count]
        if len(body) != count or zlib.crc32("\n".join(body).encode()) != crc:
            raise EpochFileError("count or CRC32 mismatch")
        out = []
        for line in body:
            epoch, _, start = line.partition("-")
            out.append(EpochEntry(int(epoch), int(start)))
        return out

    def _load(self) -> list[EpochEntry]:
        for p in (self.path, self.bak):
            try:
                return self._parse(p.read_text())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.warning("epoch file %s unreadable (%s); trying the backup", p, exc)
        return []

    def save(self) -> None:
        body = "\n".join(f"{e.epoch}-{e.start}" for e in self.entries)
        text = f"{len(self.entries)}\n{zlib.crc32(body.encode())}\n{body}\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for p in (self.bak, self.path):
            tmp = p.with_name(p.name + ".tmp")
            with open(tmp, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, p)

    # ---------------------------------------------------------------- rules
    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def append(self, epoch: int, start: int) -> bool:
        """Record that ``epoch`` starts at ``start``.

        The epoch must be strictly larger than the last one; the start may equal the last
        one's (that epoch wrote nothing), in which case the empty epoch is replaced.
        """
        if self.entries and (epoch <= self.entries[-1].epoch or start < self.entries[-1].start):
            return False
        if self.entries and start == self.entries[-1].start:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start))
        self.save()
        return True

    def truncate_from(self, offset: int) -> None:
        """Forget epochs that start at or past ``offset`` (their data was cut)."""
        keep = [e for e in self.entries if e.start < offset]
        if keep != self.entries:
            self.entries = keep
            self.save()

    def replace(self, entries: list[EpochEntry]) -> None:
        if entries != self.entries:
            self.entries = list(entries)
            self.save()

    def with_ends(self, max_offset: int) -> list[tuple[int, int, int]]:
        return with_ends(self.entries, max_offset)


def with_ends(entries: list[EpochEntry], max_offset: int) -> list[tuple[int, int, int]]:
    """(epoch, start, end): an epoch ends where the next starts; the last one at the log end."""
    out = []
    for i, e in enumerate(entries):
        end = entries[i + 1].start if i + 1 < len(entries) else max_offset
        out.append((e.epoch, e.start, end))
    return out


def find_consistent_point(local: list[EpochEntry], local_max: int, master: list[EpochEntry],
                          master_max: int) -> int | None:
    """Offset up to which the two logs agree, or None when they share no epoch.

    Walk the local epochs from the newest; the first one the master also has with the
    same start offset gives ``min(local end, master end)`` of that epoch.
    """
    theirs = {(e, s): end for e, s, end in with_ends(master, master_max)}
    for epoch, start, end in reversed(with_ends(local, local_max)):
        other = theirs.get((epoch, start))
        if other is not None:
            return min(end, other)
    return None

