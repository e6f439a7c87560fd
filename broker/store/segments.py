"""Append-only storage split into fixed-capacity segment files named by start offset.

Both the commit log and the consume queues are such logs; only the commit log needs
filler records at segment ends (records never span two files, so a reader can always
find a record within one file).  Writes are positional (``os.pwrite``) into the page
cache; durability comes from ``sync()``, which the flush service calls in a worker
thread so the event loop keeps accepting writes while the disk works (group commit).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

NAME_DIGITS = 20


@dataclass
class Segment:
    start: int
    capacity: int
    path: Path
    fd: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length

    @property
    def limit(self) -> int:
        return self.start + self.capacity


class SegmentedLog:
    """A log addressed by absolute byte offsets across many segment files."""

    def __init__(self, directory: Path, segment_size: int, quiet: bool = False) -> None:
        if segment_size <= 0:
            raise ValueError(f"segment size must be positive, got {segment_size}")
        self.directory = Path(directory)
        self.segment_size = segment_size
        self.segments: list[Segment] = []
        self._synced = 0
        # segments shortened since the last sync: their new length is not durable until fdatasync'ed, and
        # until then a power cut may bring back the bytes cut off (which a later write may not cover)
        self._shrunk: list[Segment] = []
        self._cut: int | None = None  # the lowest truncation since the last sync_plan (see mark_synced)
        self._log_level = logging.DEBUG if quiet else logging.INFO
        self.directory.mkdir(parents=True, exist_ok=True)
        self._load()

    # ----------------------------------------------------------------- opening
    def _load(self) -> None:
        names = sorted(p for p in self.directory.iterdir() if p.name.isdigit() and p.is_file())
        for path in names:
            start = int(path.name)
            fd = os.open(path, os.O_RDWR)
            length = os.fstat(fd).st_size
            if length > self.segment_size:
                log.warning("segment %s is longer (%d) than the segment size %d", path, length, self.segment_size)
            self.segments.append(Segment(start, max(self.segment_size, length), path, fd, length))
        # a hole between segments (a file deleted by hand) would make offsets lie: drop what follows it
        for i in range(1, len(self.segments)):
            if self.segments[i].start != self.segments[i - 1].limit:
                log.error("segment %s does not follow %s; ignoring it and later ones",
                          self.segments[i].path, self.segments[i - 1].path)
                for seg in self.segments[i:]:
                    os.close(seg.fd)
                self.segments = self.segments[:i]
                break
        self._synced = self.max_offset

    def close(self) -> None:
        for seg in self.segments:
            os.close(seg.fd)
        self.segments = []

    # -------------------------------------------------------------- properties
    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    @property
    def max_offset(self) -> int:
        return self.segments[-1].end if self.segments else 0

    @property
    def synced_offset(self) -> int:
        return self._synced

    def remaining(self) -> int:
        """Bytes left in the segment the next append goes to."""
        if not self.segments:
            return self.segment_size
        last = self.segments[-1]
        return last.capacity - last.length

    def disk_bytes(self) -> int:
        return sum(seg.length for seg in self.segments)

    # ------------------------------------------------------------------ writes
    def set_start(self, offset: int) -> None:
        """Position an empty log at ``offset`` (a replica starting from its master's offset)."""
        if self.segments:
            raise ValueError("set_start on a non-empty log")
        aligned = offset - offset % self.segment_size
        seg = self._new_segment(aligned)
        if offset > aligned:
            os.ftruncate(seg.fd, offset - aligned)
            seg.length = offset - aligned
        self._synced = offset

    def _new_segment(self, start: int) -> Segment:
        path = self.directory / f"{start:0{NAME_DIGITS}d}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        seg = Segment(start, self.segment_size, path, fd, 0)
        self.segments.append(seg)
        log.log(self._log_level, "created segment %s", path)
        return seg

    def roll(self) -> None:
        """Start a new segment at the limit of the current one."""
        start = self.segments[-1].limit if self.segments else 0
        self._new_segment(start)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` (which must fit the current segment); return its offset."""
        if not self.segments:
            self._new_segment(0)
        seg = self.segments[-1]
        if seg.length + len(data) > seg.capacity:
            raise ValueError(f"append of {len(data)} bytes overflows segment {seg.path}")
        pos = seg.length
        os.pwrite(seg.fd, data, pos)
        seg.length += len(data)
        return seg.start + pos

    def truncate(self, offset: int) -> None:
        """Drop everything at and after ``offset``."""
        while self.segments and self.segments[-1].start > offset:
            seg = self.segments.pop()
            os.close(seg.fd)
            seg.path.unlink(missing_ok=True)
            log.info("removed segment %s while truncating to %d", seg.path, offset)
        self._cut = offset if self._cut is None else min(self._cut, offset)
        if not self.segments:
            return
        seg = self.segments[-1]
        keep = offset - seg.start
        if keep < seg.length:
            os.ftruncate(seg.fd, keep)
            seg.length = keep
            if not any(s is seg for s in self._shrunk):
                self._shrunk.append(seg)
        self._synced = min(self._synced, self.max_offset)

    def sync(self) -> int:
        """fdatasync every segment holding unsynced bytes or a truncation; return the synced offset.

        Safe to call from a worker thread while the event loop appends: the returned
        offset is the end of the log as it was when the sync started.
        """
        target, fds = self.sync_plan()
        for fd in fds:
            os.fdatasync(fd)
        self.mark_synced(target)
        return target

    def sync_plan(self) -> tuple[int, list[int]]:
        """A sync in two halves, for a flusher that runs the fdatasyncs in another thread (broker/store/flush.py):
        the offset the sync will cover (the end of the log now) and the descriptors to fdatasync for it, in
        order; then ``mark_synced(offset)`` once they all succeeded (nothing after a failure: the next plan
        covers the same segments again)."""
        self._cut = None
        target = self.max_offset
        shrunk, synced = self._shrunk, self._synced
        return target, [seg.fd for seg in self.segments
                        if (seg.end > synced and seg.start < target) or any(s is seg for s in shrunk)]

    def mark_synced(self, offset: int) -> None:
        """Every byte below ``offset`` (a ``sync_plan``'s) is on disk.  A truncation since the plan caps that at
        the cut (the bytes written past it since are not synced) and leaves its segment for the next sync."""
        cut = self._cut
        if cut is None:
            self._shrunk = []
        else:
            offset = min(offset, cut)
        self._synced = max(self._synced, min(offset, self.max_offset))

    def delete_segment(self, seg: Segment) -> None:
        self.segments.remove(seg)
        os.close(seg.fd)
        seg.path.unlink(missing_ok=True)
        log.info("deleted segment %s", seg.path)

    # ------------------------------------------------------------------- reads
    def segment_for(self, offset: int) -> Segment | None:
        lo, hi = 0, len(self.segments) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            seg = self.segments[mid]
            if offset < seg.start:
                hi = mid - 1
            elif offset >= seg.limit:
                lo = mid + 1
            else:
                return seg
        return None

    def overwrite(self, offset: int, data: bytes) -> None:
        """Write ``data`` over bytes already in the log at ``offset`` (within one segment): a consume queue's
        entries blanked in place (ConsumeQueue.blank)."""
        seg = self.segment_for(offset)
        if seg is None or offset + len(data) > seg.end:
            raise ValueError(f"overwrite of {len(data)} bytes at {offset} is outside the written log")
        os.pwrite(seg.fd, data, offset - seg.start)

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``, never crossing a segment end."""
        seg = self.segment_for(offset)
        if seg is None:
            return b""
        size = min(size, seg.end - offset)
        if size <= 0:
            return b""
        return os.pread(seg.fd, size, offset - seg.start)
