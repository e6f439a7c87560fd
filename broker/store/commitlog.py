"""The commit log: every message of every topic, appended in one sequence of records.

Physical offsets are byte positions in this log and identical on every replica, which
is what makes replication (byte streams, Raft entries) and offset-based joins work.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..speedups import compiled as _C
from . import record
from .record import BLANK_MAGIC, FIXED_SIZE, MESSAGE_MAGIC, MIN_BLANK, RecordError, StoredMessage
from .segments import SegmentedLog

_HEAD = struct.Struct(">II")  # a record's or filler's total size and magic
# bytes ``CommitLog.iter_messages`` reads at once (records are decoded from the block)
READ_AHEAD = 256 * 1024

log = logging.getLogger(__name__)

_SCAN_CHUNK = 4 * 1024 * 1024
_PHYS_OFFSET_AT = 28  # byte position of physical_offset inside a record


def _write_and_roll(seglog: SegmentedLog, view: memoryview, chunk: int, pos: int, room: int) -> tuple[int, int, int]:
    """Write the records laid out in ``view[chunk:pos]``, fill the rest of the segment (``room`` bytes) with a blank
    record and open the next segment; the new (chunk, cursor, room).  One place for the roll, shared by the
    Python and the compiled record loops, so both leave the same bytes at a segment's end."""
    if pos > chunk:
        seglog.append(view[chunk:pos])
        chunk = pos
    if seglog.segments and room > 0:
        seglog.append(record.encode_blank(room))
    seglog.roll()
    return chunk, seglog.max_offset, seglog.remaining()


@dataclass
class ScanResult:
    """What recovery found: where valid data ends, and corrupt ranges to never serve."""

    end: int
    corrupt: list[tuple[int, int]] = field(default_factory=list)
    records: int = 0


class CommitLog:
    def __init__(self, directory: Path, segment_size: int) -> None:
        self.log = SegmentedLog(directory, segment_size)
        self.corrupt: list[tuple[int, int]] = []

    @property
    def min_offset(self) -> int:
        return self.log.min_offset

    @property
    def max_offset(self) -> int:
        return self.log.max_offset

    def close(self) -> None:
        self.log.close()

    # ------------------------------------------------------------------ writes
    @property
    def max_record_size(self) -> int:
        """The largest record a segment takes (records never span two segment files)."""
        return self.log.segment_size - MIN_BLANK

    def append(self, msg: StoredMessage) -> bytes:
        """Encode ``msg`` at the end of the log, rolling segments as needed; return its bytes."""
        head = record.prepare(msg)
        size = msg.size
        if size > self.log.segment_size - MIN_BLANK:
            raise RecordError(f"record of {size} bytes is larger than a commit-log segment")
        seglog = self.log
        remaining = seglog.remaining()
        if size > remaining:
            if seglog.segments and remaining > 0:
                seglog.append(record.encode_blank(remaining))
            seglog.roll()
        msg.physical_offset = seglog.max_offset
        buf = bytearray(size)
        record.encode_into(buf, 0, msg, head)
        seglog.append(buf)
        return bytes(buf)

    def append_batch(self, msgs: list[StoredMessage], heads: list[bytes]) -> None:
        """Append prepared messages (``record.prepare``, each within ``max_record_size``) in order.

        The records are laid out in one buffer and written with one ``pwrite`` per segment
        they land in; offsets, fillers and segment rolls are exactly those of ``append``
        called once per message.  On an OSError nothing of the batch stays in the log.
        """
        buf = bytearray(sum(m.size for m in msgs))
        start = self.log.max_offset
        try:
            self._write_records(buf, msgs, heads)
        except OSError:
            try:
                self.log.truncate(max(start, self.log.min_offset))
            except OSError as exc:
                log.error("could not take back a failed batch append at %d: %s", start, exc)
            raise

    def _write_records(self, buf: bytearray, msgs: list[StoredMessage], heads: list[bytes]) -> None:
        view = memoryview(buf)
        if _C is not None and type(msgs) is list and type(heads) is list and len(msgs) == len(heads):
            self._write_records_compiled(buf, msgs, heads, view)
            return
        seglog = self.log
        room = seglog.remaining()
        cursor = seglog.max_offset
        chunk = pos = 0
        encode_into = record.encode_into
        for msg, head in zip(msgs, heads, strict=True):
            size = msg.size
            if size > room:  # the record does not fit: write what we have, fill the segment end, roll
                chunk, cursor, room = _write_and_roll(seglog, view, chunk, pos, room)
            msg.physical_offset = cursor
            encode_into(buf, pos, msg, head)
            pos += size
            cursor += size
            room -= size
        if pos > chunk:
            seglog.append(view[chunk:pos])

    def _write_records_compiled(self, buf: bytearray, msgs: list[StoredMessage], heads: list[bytes],
                                view: memoryview) -> None:
        """``_write_records`` with the records laid out by the compiled loop (broker/fastpath.c ``encode_run``):
        the same bytes, offsets, fillers and rolls; a record it does not take is encoded here."""
        assert _C is not None
        seglog = self.log
        room = seglog.remaining()
        cursor = seglog.max_offset
        chunk = pos = i = 0
        n = len(msgs)
        crc32 = record.crc32
        while i < n:
            i, pos, cursor, room = _C.encode_run(buf, pos, msgs, heads, i, room, cursor, crc32)
            if i >= n:
                break
            msg = msgs[i]
            size = msg.size
            if size > room:  # the record does not fit: write what we have, fill the segment end, roll
                chunk, cursor, room = _write_and_roll(seglog, view, chunk, pos, room)
                continue
            msg.physical_offset = cursor  # one the compiled loop does not lay out: record.encode_into raises
            record.encode_into(buf, pos, msg, heads[i])  # for it as it always did, or lays it out
            pos += size
            cursor += size
            room -= size
            i += 1
        if pos > chunk:
            seglog.append(view[chunk:pos])

    def append_raw(self, offset: int, data: bytes) -> None:
        """Append bytes copied from a master at the same offset (replication)."""
        if not self.log.segments and offset:
            self.log.set_start(offset)
        if offset != self.log.max_offset:
            raise ValueError(f"replicated bytes start at {offset}, local log ends at {self.log.max_offset}")
        view = memoryview(data)
        while view:
            room = self.log.remaining()
            if room == 0:
                self.log.roll()
                continue
            chunk = view[:room]
            self.log.append(bytes(chunk))
            view = view[len(chunk):]

    def planned_offset(self, cursor: int, size: int) -> int:
        """Where a record of ``size`` bytes lands if the log ends at ``cursor`` (``append``'s rule)."""
        seg = self.log.segment_size
        remaining = seg - cursor % seg  # a full segment (cursor on a boundary) rolls: a whole new one
        return cursor if size <= remaining else cursor - cursor % seg + seg

    def append_record_at(self, offset: int, data: bytes) -> None:
        """Write a record encoded elsewhere (a Raft leader) at ``offset``, filling a segment end first."""
        end = self.log.max_offset
        if offset < end:
            raise ValueError(f"record at {offset} is below the log end {end}")
        if not self.log.segments:
            if offset % self.log.segment_size:
                raise ValueError(f"first record at {offset} is not at a segment start")
            self.log.set_start(offset)
            end = offset
        if offset > end:
            room = self.log.remaining()
            if end + room != offset:
                raise ValueError(f"gap from {end} to {offset} is not the end of a segment")
            self.log.append(record.encode_blank(room))
        if self.log.remaining() == 0:
            self.log.roll()
        self.log.append(data)

    def truncate(self, offset: int) -> None:
        self.log.truncate(offset)
        self.corrupt = [(s, e) for s, e in self.corrupt if s < offset]

    # ------------------------------------------------------------------- reads
    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        return self.log.read(offset, max_bytes)

    def read(self, offset: int, size: int | None = None) -> StoredMessage | None:
        """The message at ``offset``, or None when there is none or it fails its CRC."""
        if size is None:
            head = self.log.read(offset, 8)
            if len(head) < 8:
                return None
            size, magic = struct.unpack(">II", head)
            if magic != MESSAGE_MAGIC:
                return None
        data = self.log.read(offset, size)
        if len(data) != size:
            return None
        try:
            msg = record.decode(data)
        except RecordError as exc:
            log.error("refusing to serve the record at %d: %s", offset, exc)
            return None
        return msg

    def next_record_offset(self, offset: int) -> int:
        """Skip a segment-end filler: the offset where the record at/after ``offset`` starts."""
        seg = self.log.segment_for(offset)
        if seg is None:
            return offset
        if seg.limit - offset < MIN_BLANK:
            return seg.limit
        head = self.log.read(offset, 8)
        if len(head) == 8 and struct.unpack(">II", head)[1] == BLANK_MAGIC:
            return seg.limit
        return offset

    def whole_records_end(self, start: int) -> int:
        """Where the last *whole* record or segment-end filler at or after ``start`` ends.

        ``start`` must be a record boundary.  A replica copies the master's log in chunks
        that can end anywhere: inside a message or inside the blank filler that closes a
        segment.  A replica that becomes the writer must not append after such a torn
        piece (a reader would take the torn filler's size and skip the new records that
        follow it), so it cuts its log back to the offset returned here first.
        """
        pos, end = max(start, self.log.min_offset), self.log.max_offset
        while pos < end:
            seg = self.log.segment_for(pos)
            if seg is None:
                break
            if seg.limit - pos < MIN_BLANK:  # zero padding too short for a filler header
                if seg.limit > end:
                    break
                pos = seg.limit
                continue
            head = self.log.read(pos, 8)
            if len(head) < 8:
                break
            size, magic = struct.unpack(">II", head)
            if magic not in (MESSAGE_MAGIC, BLANK_MAGIC) or size < MIN_BLANK or pos + size > end:
                break
            pos += size
        return pos

    def iter_messages(self, start: int, end: int) -> Iterator[StoredMessage]:
        """Every valid message in [start, end), skipping fillers and corrupt ranges.

        Reads ahead in blocks of ``READ_AHEAD`` bytes within a segment and decodes the records from the block, as
        ``next_record_offset`` and ``read`` would one by one (a filler or too short a tail ends the segment; a
        record with a bad magic, cut short or failing its checks ends the walk).  Why: a Master/Slave replica
        dispatches what it copied by reading it back (``MessageStore.append_replicated``), and three ``pread``s per
        record (a filler check, a header, the record) were a third of a slave's CPU under single sends
        (docs/BENCHMARKS.md, session 27).  The log's bytes below its end never change while it is read, except by
        a truncation, which no caller runs while iterating.
        """
        pos = start
        buf, buf_at = b"", 0  # log bytes [buf_at, buf_at + len(buf)) of one segment
        head = _HEAD
        while pos < end:
            pos = self._skip_corrupt(pos)
            if pos >= end:
                break
            seg = self.log.segment_for(pos)
            if seg is None:
                break
            if seg.limit - pos < MIN_BLANK:  # zero padding too short for a filler: the segment ends here
                pos = seg.limit
                continue
            at = pos - buf_at
            if at < 0 or at + 8 > len(buf):
                buf, buf_at, at = self.log.read(pos, READ_AHEAD), pos, 0
                if len(buf) < 8:
                    break
            size, magic = head.unpack_from(buf, at)
            if magic == BLANK_MAGIC:
                pos = seg.limit
                continue
            if magic != MESSAGE_MAGIC:
                break
            if at + size > len(buf):
                buf, buf_at, at = self.log.read(pos, max(size, READ_AHEAD)), pos, 0
                if len(buf) < size:
                    break
            try:
                msg = record.decode(buf[at:at + size])
            except RecordError as exc:
                log.error("refusing to serve the record at %d: %s", pos, exc)
                break
            yield msg
            pos += msg.size

    def _skip_corrupt(self, pos: int) -> int:
        for s, e in self.corrupt:
            if s <= pos < e:
                return e
        return pos

    # ---------------------------------------------------------------- recovery
    def recover(self, start: int) -> ScanResult:
        """Verify every record from ``start``; truncate a torn tail; remember corrupt ranges.

        A record that fails its checks is *corrupt in the middle* when a valid record
        (right magic, right CRC, physical_offset equal to its own position) follows it in
        the same segment: we keep everything and never serve the bad range.  Otherwise it
        is a torn tail: the log is truncated there.
        """
        start = max(start, self.log.min_offset)
        result = ScanResult(end=start)
        pos = start
        for seg in list(self.log.segments):
            if seg.end <= pos:
                continue
            pos = max(pos, seg.start)
            pos = self._scan_segment(seg.start, seg.end, seg.limit, pos, result)
            if pos < seg.end:
                break  # torn tail inside this segment
        result.end = pos
        if pos < self.log.max_offset:
            log.warning("recovery truncates the commit log at %d (was %d)", pos, self.log.max_offset)
            self.log.truncate(pos)
        self.corrupt = result.corrupt
        for s, e in result.corrupt:
            log.error("commit log range [%d, %d) is corrupt; it will never be served", s, e)
        return result

    def _scan_segment(self, seg_start: int, seg_end: int, seg_limit: int, pos: int, result: ScanResult) -> int:
        buf = b""
        buf_at = pos
        while pos < seg_end:
            if seg_limit - pos < MIN_BLANK:
                return seg_end if seg_end == seg_limit else pos
            if pos + MIN_BLANK > buf_at + len(buf):
                buf, buf_at = self.log.read(pos, _SCAN_CHUNK), pos
            rel = pos - buf_at
            size, magic = record.peek_header(buf, rel)
            if magic == BLANK_MAGIC and size == seg_limit - pos:
                return pos + min(size, seg_end - pos) if pos + size <= seg_end else pos
            if magic == MESSAGE_MAGIC and FIXED_SIZE <= size <= seg_end - pos:
                if rel + size > len(buf):
                    buf, buf_at = self.log.read(pos, max(size, _SCAN_CHUNK)), pos
                    rel = 0
                if self._valid_at(buf, rel, size, pos):
                    pos += size
                    result.records += 1
                    continue
            # invalid here: corruption in the middle, or the torn tail?
            resync = self._find_next_valid(pos + 1, seg_end)
            if resync is None:
                return pos
            result.corrupt.append((pos, resync))
            pos = resync
            buf, buf_at = b"", pos
        return pos

    @staticmethod
    def _valid_at(buf: bytes, rel: int, size: int, pos: int) -> bool:
        if not record.crc_ok(buf, rel, size):
            return False
        (phys,) = struct.unpack_from(">q", buf, rel + _PHYS_OFFSET_AT)
        return phys == pos

    def _find_next_valid(self, start: int, seg_end: int) -> int | None:
        magic = struct.pack(">I", MESSAGE_MAGIC)
        pos = start
        while pos < seg_end:
            chunk = self.log.read(pos, _SCAN_CHUNK + 8)
            if len(chunk) < 8:
                return None
            idx = chunk.find(magic, 0)
            while idx != -1:
                cand = pos + idx - 4
                if cand >= start:
                    head = self.log.read(cand, 8)
                    if len(head) == 8:
                        size, _ = struct.unpack(">II", head)
                        if FIXED_SIZE <= size <= seg_end - cand:
                            data = self.log.read(cand, size)
                            if len(data) == size and self._valid_at(data, 0, size, cand):
                                return cand
                idx = chunk.find(magic, idx + 1)
            pos += _SCAN_CHUNK
        return None
