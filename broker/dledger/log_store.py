"""The Raft log of DLedger mode *is* the commit log.

A normal Raft entry is one or more consecutive commit-log records of one segment (a
leader proposes each ``put_messages`` group as one entry, broker/dledger/node.py), encoded
by the leader with the physical offsets they will have on every member (the leader plans
offsets ahead of the Raft log end, see ``MessageStore.prepare``); a no-op entry has no
bytes.  An entry is written with one ``pwrite`` and lost or kept whole by recovery (an
entry whose bytes the commit log does not hold in full is dropped with every later one),
so a group is committed, and survives a crash, all or nothing.  Next to the
commit log a small index file keeps, per entry, its term, commit-log offset, size and
kind (24 bytes, like DLedger's index file), so the Raft core's ``term(i)`` and
``entries(lo, hi)`` are one array lookup and one positional read.  Truncating a
divergent tail truncates both files.  Consumers never see an uncommitted record: the
store dispatches only up to the end of the last committed entry.

Retention (broker/dledger/retention.py) deletes commit-log segments only below the point
every member has applied, and ``compact_below`` then drops the matching prefix of the index:
the index file becomes ``index.v2``, whose header names the base entry (index, term and end
offset of the last dropped entry), so ``term(base)`` still answers for the AppendEntries that
follows it.  The new file is written aside and renamed over, so a crash leaves either the old
or the new index, both consistent with the commit log.  There are no snapshots: a member
that lost its store cannot catch up from the others once the prefix is gone (docs/STORAGE.md).

The newest entries written stay in memory too (``RECENT_MAX_BYTES``), as the same ``Entry``
objects: the core asks for every committed entry again to apply it, and a leader for the entries
it sends a follower that fell behind its in-memory tail; reading them back cost a ``pread`` (and a
copy of the entry's bytes) per entry and Ready, 2-5 % of a follower's busy samples (session 21,
docs/BENCHMARKS.md).  Truncation and compaction drop what they drop from memory as well.

This class is DLedger's ``DurableLog`` for the Raft driver (broker/raft/driver.py); its
``hardstate`` file is written by broker/raft/hard_state_file.py, shared with the controller.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketscope.broker.raft.hard_state_file import HardStateFile
from rocketscope.broker.raft.messages import Entry, EntryKind, HardState, entry_size
from rocketscope.broker.store.message_store import MessageStore

log = logging.getLogger(__name__)
INDEX = struct.Struct(">qqiI")  # term, commit-log offset, size (0 for a no-op), kind
HEADER = struct.Struct(">qqqqqq")  # index.v2: magic, base index, base term, base end offset, 0, 0 (two slots)
MAGIC = 0x524B5344_4C494458  # "RKSDLIDX"
_PHYS_AT = 28  # the physical_offset field inside a record
RECENT_MAX_BYTES = 8 << 20  # the newest entries' bytes kept in memory (``DLedgerLog.recent``), at least one entry


class DLedgerLog:
    def __init__(self, store: MessageStore, directory: Path, now: Callable[[], float] = time.monotonic) -> None:
        """``now``: the clock of the lazy commit writes (the simulator's, tests/sim/dledger.py)."""
        self.store = store
        self.commit_log = store.commit_log
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.index_path = self.directory / "index"
        self.compacted_path = self.directory / "index.v2"
        self.hard_state_file = HardStateFile(self.directory / "hardstate", now)
        self.terms = array("q")
        self.offsets = array("q")
        self.sizes = array("i")
        self.kinds = array("B")
        # entries 1..base were dropped by compact_below; the arrays hold base+1..last_index()
        self.base = 0
        self.base_term = 0
        self.base_end = 0
        self.header_size = 0
        # the newest entries written, by index (ascending), as ``entry`` would read them back; see the module doc
        self.recent: dict[int, Entry] = {}
        self._recent_bytes = 0
        if self.compacted_path.exists():
            self.fd = os.open(self.compacted_path, os.O_RDWR, 0o644)
            if self.index_path.exists():  # a crash between the rename and the unlink in compact_below
                self.index_path.unlink()
        else:
            self.fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._load()
        self._make_recovered_durable()
        stored = self.hard_state_file.load()
        if stored is not None:
            term, vote, commit = stored
            # the commit index is written lazily: it may predate a compaction, but the base was committed
            self.hard_state_file.hard_state = HardState(term, vote, max(min(commit, self.last_index()), self.base))

    # ---------------------------------------------------------------- loading
    def _load(self) -> None:
        data = os.pread(self.fd, os.fstat(self.fd).st_size, 0)
        if self.compacted_path.exists():
            magic, self.base, self.base_term, self.base_end, _, _ = HEADER.unpack_from(data)
            if magic != MAGIC:
                raise ValueError(f"{self.compacted_path} is not a DLedger index (bad magic)")
            self.header_size = HEADER.size
            data = data[HEADER.size:]
        usable = len(data) - len(data) % INDEX.size
        log_end = self.commit_log.max_offset
        n = 0
        segments = self.commit_log.log
        for term, offset, size, kind in INDEX.iter_unpack(data[:usable]):
            if offset + size > log_end:  # the commit log lost this record in a crash
                break
            if size and not self._stored_whole(segments.segment_for(offset), offset, size):
                # a power cut can keep a later segment and lose this one's tail (no order between files)
                log.warning("dledger: entry %d's bytes at %d are not all in the commit log; the log ends before it",
                            self.base + n + 1, offset)
                break
            self.terms.append(term)
            self.offsets.append(offset)
            self.sizes.append(size)
            self.kinds.append(kind)
            n += 1
        if n * INDEX.size != len(data):
            os.ftruncate(self.fd, self.header_size + n * INDEX.size)
            log.warning("dledger index truncated to %d entries after recovery", n)
        end = self.end_offset(self.last_index())
        if self.commit_log.max_offset > end:  # records written after the last indexed entry
            log.warning("dledger: commit log truncated from %d to %d (records not in the Raft index)",
                        self.commit_log.max_offset, end)
            self.commit_log.truncate(end)

    @staticmethod
    def _stored_whole(seg: Any, offset: int, size: int) -> bool:
        """The segment holding ``offset`` has all ``size`` bytes (an entry never spans segments)."""
        return seg is not None and offset - seg.start + size <= seg.length

    def _make_recovered_durable(self) -> None:
        """fdatasync what this member recovered before it acknowledges anything on top of it.

        After a process crash the log's tail may still be only in the page cache, and the
        commit log counts whatever it loads as synced, so its next sync would skip those
        bytes; a power cut later would then take entries this member had already acked.
        The simulator's durability check (tests/sim/dledger.py) found this.  Clean segments
        cost nothing to sync.
        """
        for seg in self.commit_log.log.segments:
            os.fdatasync(seg.fd)
        os.fdatasync(self.fd)

    @property
    def hard_state(self) -> HardState:
        return self.hard_state_file.hard_state

    def save_hard_state(self, hs: HardState, sync: bool) -> None:
        """Persist term and vote (and, lazily, commit): broker/raft/hard_state_file.py."""
        self.hard_state_file.save(hs, sync)

    def close(self) -> None:
        os.close(self.fd)

    # ---------------------------------------------------- Storage (read side)
    def first_index(self) -> int:
        return self.base + 1

    def last_index(self) -> int:
        return self.base + len(self.terms)

    def term(self, index: int) -> int:
        if index == self.base:
            return self.base_term  # 0 for an uncompacted log
        if index < self.base or index > self.last_index():
            raise IndexError(f"entry {index} is not stored (entries {self.base + 1}..{self.last_index()})")
        return self.terms[index - self.base - 1]

    def entry(self, index: int) -> Entry:
        cached = self.recent.get(index)
        if cached is not None:
            return cached
        i = index - self.base - 1
        if i < 0:
            raise IndexError(f"entry {index} was compacted away (first stored entry {self.base + 1})")
        if self.kinds[i] == EntryKind.NOOP:
            return Entry(index, self.terms[i], EntryKind.NOOP, b"")
        data = self.commit_log.read_raw(self.offsets[i], self.sizes[i])
        if len(data) != self.sizes[i]:
            raise IndexError(f"entry {index}: commit log holds {len(data)} of {self.sizes[i]} bytes")
        return Entry(index, self.terms[i], EntryKind.NORMAL, data)

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        out: list[Entry] = []
        total = 0
        for index in range(lo, min(hi, self.last_index() + 1)):
            e = self.entry(index)
            total += entry_size(e)
            if out and total > max_bytes:
                break
            out.append(e)
        return out

    # ------------------------------------------------------------ write side
    def end_offset(self, index: int) -> int:
        """Commit-log offset just past entry ``index`` (0 for index 0)."""
        if index <= self.base:
            if index < self.base:
                raise IndexError(f"entry {index} was compacted away (first stored entry {self.base + 1})")
            return self.base_end
        i = index - self.base - 1
        return self.offsets[i] + self.sizes[i]

    def truncate_from(self, index: int) -> tuple[int, int]:
        """Drop entries >= ``index``; return the commit-log range removed."""
        if index > self.last_index():
            return self.commit_log.max_offset, self.commit_log.max_offset
        if index <= self.base:
            raise ValueError(f"cannot truncate from entry {index}: entries up to {self.base} are committed and "
                             "compacted")
        keep = index - 1 - self.base
        start = self.offsets[keep]
        old_end = self.commit_log.max_offset
        self._forget_recent_from(index)
        self.commit_log.truncate(start)
        del self.terms[keep:], self.offsets[keep:], self.sizes[keep:], self.kinds[keep:]
        os.ftruncate(self.fd, self.header_size + keep * INDEX.size)
        return start, old_end

    def append(self, entries: list[Entry]) -> tuple[int, int] | None:
        """Store entries (replacing a divergent tail); return the truncated range, if any."""
        truncated = None
        if entries and entries[0].index <= self.last_index():
            truncated = self.truncate_from(entries[0].index)
        buf = bytearray()
        for e in entries:
            if e.index != self.last_index() + 1:
                raise ValueError(f"entry {e.index} does not follow the log end {self.last_index()}")
            if e.kind == EntryKind.NOOP or not e.data:
                offset, size, kind = self.commit_log.max_offset, 0, EntryKind.NOOP
                self._remember(Entry(e.index, e.term, EntryKind.NOOP, b""))
            else:
                (offset,) = struct.unpack_from(">q", e.data, _PHYS_AT)
                self.commit_log.append_record_at(offset, e.data)
                size, kind = len(e.data), EntryKind.NORMAL
                data = e.data if type(e.data) is bytes else bytes(e.data)  # kept: must not change under us
                self._remember(e if e.kind is EntryKind.NORMAL and data is e.data
                               else Entry(e.index, e.term, EntryKind.NORMAL, data))
            self.terms.append(e.term)
            self.offsets.append(offset)
            self.sizes.append(size)
            self.kinds.append(int(kind))
            buf += INDEX.pack(e.term, offset, size, int(kind))
        if buf:
            os.pwrite(self.fd, bytes(buf), self.header_size + (len(self.terms) - len(entries)) * INDEX.size)
        return truncated

    def _remember(self, e: Entry) -> None:
        """Keep ``e`` (just written, the newest) in ``recent``; the oldest go beyond ``RECENT_MAX_BYTES``."""
        recent = self.recent
        recent[e.index] = e
        self._recent_bytes += len(e.data)
        while self._recent_bytes > RECENT_MAX_BYTES and len(recent) > 1:
            self._recent_bytes -= len(recent.pop(next(iter(recent))).data)

    def _forget_recent_from(self, index: int) -> None:
        """Drop the remembered entries at or after ``index`` (a truncated tail)."""
        recent = self.recent
        while recent:
            last = next(reversed(recent))
            if last < index:
                break
            self._recent_bytes -= len(recent.pop(last).data)

    def _forget_recent_upto(self, index: int) -> None:
        """Drop the remembered entries at or before ``index`` (a compacted prefix)."""
        recent = self.recent
        while recent:
            first = next(iter(recent))
            if first > index:
                break
            self._recent_bytes -= len(recent.pop(first).data)

    def sync(self) -> None:
        self.commit_log.log.sync()
        os.fdatasync(self.fd)

    # ------------------------------------------------------------- compaction
    def compact_below(self, min_offset: int, max_index: int) -> int:
        """Drop the index entries whose records lie below ``min_offset`` (retention deleted them).

        Never beyond ``max_index`` (the committed point every member has applied).  Returns the
        new base index.  The compacted index is written to a temporary file, fsynced and renamed
        over ``index.v2`` in one step.
        """
        keep_from = bisect.bisect_left(self.offsets, min_offset)  # first entry at or past min_offset
        new_base = min(self.base + keep_from, max_index)
        if new_base <= self.base:
            return self.base
        drop = new_base - self.base
        base_term, base_end = self.terms[drop - 1], self.offsets[drop - 1] + self.sizes[drop - 1]
        body = bytearray()
        for i in range(drop, len(self.terms)):
            body += INDEX.pack(self.terms[i], self.offsets[i], self.sizes[i], self.kinds[i])
        tmp = self.compacted_path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(HEADER.pack(MAGIC, new_base, base_term, base_end, 0, 0))
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.compacted_path)
        fd = os.open(self.compacted_path, os.O_RDWR, 0o644)
        os.close(self.fd)
        self.fd = fd
        if self.index_path.exists():
            self.index_path.unlink()
        del self.terms[:drop], self.offsets[:drop], self.sizes[:drop], self.kinds[:drop]
        self._forget_recent_upto(new_base)
        self.base, self.base_term, self.base_end, self.header_size = new_base, base_term, base_end, HEADER.size
        log.info("dledger index compacted: entries up to %d dropped (commit log now starts at %d)", new_base,
                 min_offset)
        return new_base
