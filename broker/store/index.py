"""Index files: a hash index from ``topic#key`` to commit-log offsets, bounded by time.

The same structure as RocketMQ's IndexFile: a header, a table of hash slots holding the
newest entry of each chain, and entries (key hash, commit-log offset, seconds since the
file began, previous entry).  Files are memory-mapped so a lookup is a few page reads:
this is what makes lookup of a message or of its trace by ID constant-time.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import time
from collections.abc import Sequence
from pathlib import Path

from ..speedups import compiled as _C
from .record import crc32  # zlib's CRC-32 (ISA-L's implementation when installed)

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qqqqii")  # begin_ts, end_ts, begin_phy, end_phy, slot_count(used), index_count
HEADER_SIZE = HEADER.size  # 40
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")  # key hash, phy offset, time diff (s), prev entry
ENTRY_SIZE = ENTRY.size  # 20


SLOT_SIZE = SLOT.size
_SLOT_UNPACK = SLOT.unpack_from
_SLOT_PACK = SLOT.pack_into
_ENTRY_PACK = ENTRY.pack_into


def key_hash(key: str) -> int:
    return crc32(key.encode("utf-8")) & 0x7FFFFFFF


class IndexFile:
    def __init__(self, path: Path, slot_num: int, index_num: int) -> None:
        self.path = path
        self.slot_num = slot_num
        self.index_num = index_num
        size = HEADER_SIZE + slot_num * SLOT.size + index_num * ENTRY_SIZE
        fresh = not path.exists()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self.fd).st_size < size:
            os.ftruncate(self.fd, size)
        self.mm = mmap.mmap(self.fd, size)
        self._entries_at = HEADER_SIZE + slot_num * SLOT.size
        if fresh:
            self.begin_ts = self.end_ts = 0
            self.begin_phy = self.end_phy = 0
            self.slots_used = 0
            self.count = 1  # entry 0 means "none"
        else:
            (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slots_used,
             self.count) = HEADER.unpack_from(self.mm, 0)
            self.count = max(self.count, 1)
            self._rewind_slots()
        self.dirty = fresh

    def _rewind_slots(self) -> None:
        """After a crash, point every slot back at its newest entry below the header's count.

        The header's count is written only at flush, but slot heads and entries reach the file
        through the mmap at any time: a slot may point at an entry past the count, which the next
        put treats as "none", cutting off every older entry of that slot (a kill -9 lost index
        keys of records written long before it).  Entries past the count carry the link to the
        older chain, so following them back to the count restores the slot; recovery then
        indexes the records past the store's checkpoint again.
        """
        count, mm = self.count, self.mm
        for i, (head,) in enumerate(SLOT.iter_unpack(mm[HEADER_SIZE:HEADER_SIZE + self.slot_num * SLOT.size])):
            if head < count:
                continue
            cur, steps = head, 0
            while cur >= count and cur < self.index_num and steps < self.index_num:
                prev = ENTRY.unpack_from(mm, self._entries_at + cur * ENTRY_SIZE)[3]
                cur = prev if prev < cur else 0
                steps += 1
            SLOT.pack_into(mm, HEADER_SIZE + i * SLOT.size, cur if cur < count else 0)

    @property
    def full(self) -> bool:
        return self.count >= self.index_num

    def close(self) -> None:
        self.flush()
        self.mm.close()
        os.close(self.fd)

    def put(self, key: str, phy: int, store_ts_ms: int) -> bool:
        return self.put_many((key,), phy, store_ts_ms) == 1

    def put_many(self, keys: Sequence[str], phy: int, store_ts_ms: int) -> int:
        """Index every key of ``keys`` (in order) at ``phy``; return how many fit before the file filled."""
        return self.put_entries([(key, phy, store_ts_ms) for key in keys])

    def put_entries(self, entries: Sequence[tuple[str, int, int]]) -> int:
        """Index ``(key, phy, store_ts_ms)`` entries in order, as ``put_many`` once per entry would; return how
        many fit before the file filled.  One call for all the keys of a dispatched group (issue 20: the
        per-message call, its setup and its header updates were a quarter of the store's CPU on batches)."""
        count = self.count
        room = self.index_num - count
        if room <= 0 or not entries:
            return 0
        if len(entries) > room:
            entries = entries[:room]
        wanted = len(entries)
        mm = self.mm
        slot_num = self.slot_num
        entries_at = self._entries_at
        if self.begin_ts == 0:
            self.begin_ts = entries[0][2]
            self.begin_phy = entries[0][1]
        begin_ts = self.begin_ts
        used = 0
        end_ts, end_phy = self.end_ts, self.end_phy
        if _C is not None and type(entries) is list:  # the compiled loop (broker/fastpath.c index_put); an entry
            done, count, used, end_ts, end_phy = _C.index_put(mm, entries, count, slot_num, entries_at,  # it stops
                                                              begin_ts, end_ts, end_phy, crc32)  # at: the loop below
            if done:
                entries = entries[done:]
        for key, phy, ts in entries:
            h = crc32(key.encode("utf-8")) & 0x7FFFFFFF  # key_hash, inlined
            slot_pos = HEADER_SIZE + (h % slot_num) * SLOT_SIZE
            (prev,) = _SLOT_UNPACK(mm, slot_pos)
            if prev <= 0 or prev >= count:
                prev = 0
                used += 1
            diff = (ts - begin_ts) // 1000
            _ENTRY_PACK(mm, entries_at + count * ENTRY_SIZE, h, phy, diff if diff > 0 else 0, prev)
            _SLOT_PACK(mm, slot_pos, count)
            count += 1
            if ts > end_ts:
                end_ts = ts
            if phy > end_phy:
                end_phy = phy
        self.count = count
        self.slots_used += used
        self.end_ts, self.end_phy = end_ts, end_phy
        self.dirty = True
        return wanted

    def query(self, key: str, begin_ms: int, end_ms: int, limit: int) -> list[int]:
        if self.count <= 1 or self.end_ts < begin_ms or self.begin_ts > end_ms:
            return []
        h = key_hash(key)
        (cur,) = SLOT.unpack_from(self.mm, HEADER_SIZE + (h % self.slot_num) * SLOT.size)
        out: list[int] = []
        base = HEADER_SIZE + self.slot_num * SLOT.size
        seen = 0
        while 0 < cur < self.count and len(out) < limit and seen < self.index_num:
            eh, phy, diff, prev = ENTRY.unpack_from(self.mm, base + cur * ENTRY_SIZE)
            ts = self.begin_ts + diff * 1000
            if eh == h and begin_ms - 1000 <= ts <= end_ms + 1000:
                out.append(phy)
            if prev >= cur:
                break
            cur = prev
            seen += 1
        return out

    def flush(self) -> None:
        if not self.dirty:
            return
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy,
                         self.slots_used, self.count)
        self.mm.flush()
        self.dirty = False


class IndexService:
    """All index files of a store, newest last; writes go to the newest."""

    def __init__(self, directory: Path, slot_num: int, index_num: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.slot_num = slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = [
            IndexFile(p, slot_num, index_num)
            for p in sorted(self.directory.iterdir(), key=lambda p: p.name)
            if p.name.isdigit()
        ]

    def _writable(self) -> IndexFile:
        if not self.files or self.files[-1].full:
            if self.files:
                self.files[-1].flush()
            name = f"{int(time.time() * 1000):017d}"
            while (self.directory / name).exists():
                name = f"{int(name) + 1:017d}"
            self.files.append(IndexFile(self.directory / name, self.slot_num, self.index_num))
            log.info("created index file %s", self.files[-1].path)
        return self.files[-1]

    def put(self, topic: str, keys: list[str], phy: int, store_ts_ms: int) -> None:
        self.put_keys([f"{topic}#{key}" for key in keys if key], phy, store_ts_ms)

    def put_keys(self, full_keys: list[str], phy: int, store_ts_ms: int) -> None:
        """Index ``topic#key`` strings, in order, moving to a new file when one fills up."""
        while full_keys:
            f = self.files[-1] if self.files else None
            if f is None or f.count >= f.index_num:
                f = self._writable()
            done = f.put_many(full_keys, phy, store_ts_ms)
            full_keys = full_keys[done:]

    def put_entries(self, entries: list[tuple[str, int, int]]) -> None:
        """Index ``(topic#key, phy, store_ts_ms)`` entries, in order, moving to a new file when one fills up."""
        while entries:
            f = self.files[-1] if self.files else None
            if f is None or f.count >= f.index_num:
                f = self._writable()
            done = f.put_entries(entries)
            entries = entries[done:]

    def query(self, topic: str, key: str, limit: int, begin_ms: int = 0, end_ms: int = 2**62) -> list[int]:
        out: list[int] = []
        full_key = f"{topic}#{key}"
        for f in reversed(self.files):
            if len(out) >= limit:
                break
            out.extend(f.query(full_key, begin_ms, end_ms, limit - len(out)))
        return out

    def flush(self) -> None:
        for f in self.files[-2:]:
            f.flush()

    def delete_below(self, min_phy: int) -> None:
        while len(self.files) > 1 and self.files[0].end_phy < min_phy:
            f = self.files.pop(0)
            f.close()
            f.path.unlink(missing_ok=True)
            log.info("deleted index file %s", f.path)

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
