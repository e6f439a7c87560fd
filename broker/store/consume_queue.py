"""Consume queues: per topic and queue id, fixed 20-byte entries pointing into the commit log.

Entry: commit-log offset (int64), record size (int32), tag hash (int64).  The logical
queue offset of an entry is its byte position divided by 20, so lookups by queue offset
are one positional read, and filtering by tag needs no commit-log read.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import NamedTuple

from .segments import SegmentedLog

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = ENTRY.size  # 20
GAP = ENTRY.pack(-1, 0, 0)  # an entry that points nowhere: readers skip it
_GAP = GAP
_BUFFER_BYTES = 64 * 1024  # entries buffered at most before a write


def tag_hash(tag: str) -> int:
    return zlib.crc32(tag.encode("utf-8")) if tag else 0


class CqEntry(NamedTuple):
    queue_offset: int
    physical_offset: int
    size: int
    tag_hash: int


class ConsumeQueue:
    def __init__(self, root: Path, topic: str, queue_id: int, entries_per_segment: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.log = SegmentedLog(Path(root) / topic / str(queue_id), entries_per_segment * ENTRY_SIZE, quiet=True)
        self.dirty = False
        self._buf = bytearray()  # entries appended but not yet written (see ``flush``)
        self._min_logical = self.log.min_offset // ENTRY_SIZE

    @property
    def min_offset(self) -> int:
        self.flush()
        return max(self._min_logical, self.log.min_offset // ENTRY_SIZE)

    @property
    def max_offset(self) -> int:
        """The next queue offset to be written (one past the last entry)."""
        return (self.log.max_offset + len(self._buf)) // ENTRY_SIZE

    def close(self) -> None:
        self.flush()
        self.log.close()

    def append(self, queue_offset: int, physical_offset: int, size: int, tag_hash_value: int) -> bool:
        """Queue the entry at ``queue_offset``; an entry already present is left as is.

        Entries are buffered (up to 64 KiB) until ``flush``: every read here flushes first,
        and the store flushes before it checkpoints, so the buffer is invisible except after
        a crash, where recovery rebuilds the entries past the checkpoint from the commit log.
        Many entries cost one write.
        """
        expected = self.max_offset
        if queue_offset < expected:
            return False
        if not self.log.segments and not self._buf and queue_offset > 0:
            self.log.set_start(queue_offset * ENTRY_SIZE)
            self._min_logical = queue_offset
            expected = queue_offset
        while expected < queue_offset:  # a gap (should not happen): fill so offsets stay true
            self._buf += _GAP
            expected += 1
        self._buf += ENTRY.pack(physical_offset, size, tag_hash_value)
        self.dirty = True
        if len(self._buf) >= _BUFFER_BYTES:
            self.flush()
        return True

    def append_packed(self, first_offset: int, packed: bytes | bytearray) -> None:
        """Queue entries already packed (``ENTRY`` each, gaps as ``GAP``) whose first is at ``first_offset``.

        The store's dispatch of a batch (broker/store/message_store.py ``_dispatch_each``) decides which
        entries are new the way ``append`` would, one by one, and packs each queue's run of them into one
        buffer: one call per queue per batch instead of one per record (issue 20).  ``first_offset`` must
        be at or past ``max_offset``; a gap up to it is filled, and an empty queue starts there, as
        ``append`` does.
        """
        expected = self.max_offset
        if first_offset < expected:
            raise ValueError(f"entries at {first_offset} overlap the queue's end {expected}")
        if not self.log.segments and not self._buf and first_offset > 0:
            self.log.set_start(first_offset * ENTRY_SIZE)
            self._min_logical = first_offset
            expected = first_offset
        if expected < first_offset:
            self._buf += _GAP * (first_offset - expected)
        self._buf += packed
        self.dirty = True
        if len(self._buf) >= _BUFFER_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the buffered entries, rolling segments where they fill up.

        A write that fails (a disk error) leaves what it did not write in the buffer, so ``max_offset`` still
        counts those entries and the next flush retries them: the store's dispatch decides from it which
        records of a failed batch are in their queue (``MessageStore._keys_in_queues``)."""
        buf = self._buf
        if not buf:
            return
        written = 0
        try:
            while written < len(buf):
                room = self.log.remaining()
                room -= room % ENTRY_SIZE
                if room <= 0:
                    self.log.roll()
                    continue
                with memoryview(buf)[written:written + room] as chunk:
                    self.log.append(chunk)
                    written += len(chunk)
        finally:
            self._buf = buf[written:] if written < len(buf) else bytearray()

    def get(self, queue_offset: int, max_count: int) -> list[CqEntry]:
        self.flush()
        if queue_offset < self.min_offset:
            queue_offset = self.min_offset
        out: list[CqEntry] = []
        pos = queue_offset * ENTRY_SIZE
        end = self.log.max_offset
        while len(out) < max_count and pos < end:
            data = self.log.read(pos, (max_count - len(out)) * ENTRY_SIZE)
            if not data:
                break
            for i in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
                phys, size, th = ENTRY.unpack_from(data, i)
                if phys >= 0:
                    out.append(CqEntry((pos + i) // ENTRY_SIZE, phys, size, th))
            pos += len(data) - len(data) % ENTRY_SIZE
        return out

    def entry(self, queue_offset: int) -> CqEntry | None:
        got = self.get(queue_offset, 1)
        return got[0] if got and got[0].queue_offset == queue_offset else None

    def last_physical_end(self) -> int:
        """End of the commit-log record the last entry points at (0 when empty)."""
        if self.max_offset <= self.min_offset:
            return 0
        e = self.entry(self.max_offset - 1)
        return e.physical_offset + e.size if e else 0

    def truncate_physical(self, physical_offset: int) -> None:
        """Drop trailing entries that point at or beyond ``physical_offset`` (recovery)."""
        self.flush()
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:  # first entry with phys >= physical_offset; entries are sorted by phys
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e.physical_offset >= physical_offset:
                hi = mid
            else:
                lo = mid + 1
        if lo < self.max_offset:
            self.log.truncate(lo * ENTRY_SIZE)
            self.dirty = True

    def delete_below_physical(self, min_physical: int) -> None:
        """Retention: forget segments whose entries all point below ``min_physical``."""
        self.flush()
        while len(self.log.segments) > 1:
            seg = self.log.segments[0]
            last = seg.end - ENTRY_SIZE
            data = self.log.read(last, ENTRY_SIZE)
            if len(data) == ENTRY_SIZE and ENTRY.unpack(data)[0] + 0 < min_physical:
                self.log.delete_segment(seg)
            else:
                break
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e.physical_offset >= min_physical:
                hi = mid
            else:
                lo = mid + 1
        self._min_logical = lo

    def blank(self) -> int:
        """Turn every entry into a gap (a reader skips it) and keep the offsets: a lite queue emptied by expiry
        (broker/lite_expiry.py).  Its next entry still gets ``max_offset``.  Returns the entries blanked."""
        self.flush()
        lo, hi = self.min_offset, self.max_offset
        pos = lo * ENTRY_SIZE
        while pos < hi * ENTRY_SIZE:
            seg = self.log.segment_for(pos)
            if seg is None:
                break
            n = (min(seg.end, hi * ENTRY_SIZE) - pos) // ENTRY_SIZE
            if n <= 0:
                break
            self.log.overwrite(pos, _GAP * n)
            pos += n * ENTRY_SIZE
        self.dirty = True
        return hi - lo

    def sync(self) -> None:
        """fdatasync what is written; safe in a worker thread (it never touches the entry buffer:
        the owner ``flush``es on the event loop first)."""
        if self.dirty:
            self.dirty = False
            self.log.sync()
