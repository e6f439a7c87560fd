"""The timer's disk-backed indexes: timer log, timer wheel and checkpoint (RocketMQ 5's layout, our own code).

Delayed messages themselves live in the commit log under ``rmq_sys_wheel_timer``
(broker/timer.py), so they are replicated like every message.  These files are only
*derived* indexes over that topic, so any node can rebuild them from its own log, and the
memory they cost does not grow with the number of pending messages:

* **timer log** — append-only units of 48 bytes, one per delayed message (or recall)
  enqueued: previous unit of the same slot, delivery time, timer-queue offset, commit-log
  offset and size of the timer message, kind, topic id.  Units of one slot form a chain
  through ``prev``.  Segments of ``UNITS_PER_SEGMENT`` units; a segment is deleted once
  every unit in it lies in a slot below the checkpoint's delivered time.
* **timer wheel** — ``SLOTS_TOTAL`` slots of 32 bytes, slot ``(t // precision) % SLOTS_TOTAL``:
  the slot's time, its first and last unit, its unit count.  A slot whose time is not the
  one asked for belongs to an earlier round and counts as empty.
* **checkpoint** — JSON: how far the timer topic has been enqueued, and the delivery
  claim (T, E): every timer message below queue offset E whose slot is below T was
  delivered or recalled.

Crash consistency without a write-ahead log: units are appended to memory and written
with the wheel's changed slots only at ``flush()``, in the order log (fsync), wheel
(fsync), checkpoint (atomic rename).  The on-disk wheel therefore never points past the
synced log; a crash between the wheel and the checkpoint only makes recovery enqueue a
few messages twice, which the dequeue drops by timer-queue offset.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

UNIT = struct.Struct("<qqqqiiii")  # prev, deliver_ms, queue offset, commit-log offset, size, kind, topic id, spare
UNIT_SIZE = UNIT.size  # 48
SLOT = struct.Struct("<qqqii")  # slot time, first unit, last unit, count, spare
SLOT_SIZE = SLOT.size  # 32
SLOTS_TOTAL = 7 * 24 * 3600  # as RocketMQ's TimerWheel: seven days of slots at the default 1 s precision
UNITS_PER_SEGMENT = 1 << 20  # 48 MiB segments

KIND_NORMAL = 0  # deliver to the real topic
KIND_DELETE = 1  # a recall: the unit of this queue offset in the same slot is skipped
KIND_ROLL = 2  # due beyond the roll window: written again into the timer topic when its slot comes


@dataclass(slots=True)
class Unit:
    pos: int
    prev: int
    deliver_ms: int
    queue_offset: int
    phy: int
    size: int
    kind: int
    topic_id: int


@dataclass
class Checkpoint:
    """What the indexes on disk cover, and how far delivery is known to be complete."""

    enqueue_offset: int = 0  # next timer-queue offset to enqueue
    claim_t: int = 0  # slots below this time: delivered or recalled ...
    claim_e: int = 0  # ... for every timer message below this queue offset
    log_end: int = 0  # bytes of the timer log synced
    precision_ms: int = 1000
    topic_counts: dict[str, int] = field(default_factory=dict)  # messages waiting in the wheel, by real topic
    seg_max_slot: dict[str, int] = field(default_factory=dict)  # segment start -> latest slot time of its units

    @classmethod
    def load(cls, path: Path) -> Checkpoint | None:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        cp = cls()
        for k in ("enqueue_offset", "claim_t", "claim_e", "log_end", "precision_ms"):
            setattr(cp, k, int(raw.get(k, 0)))
        cp.topic_counts = {str(k): int(v) for k, v in raw.get("topic_counts", {}).items()}
        cp.seg_max_slot = {str(k): int(v) for k, v in raw.get("seg_max_slot", {}).items()}
        return cp

    def text(self) -> str:
        return json.dumps(self.__dict__)

    def save(self, path: Path, text: str | None = None) -> None:
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(self.text() if text is None else text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


class TimerLog:
    """Append-only units in segments; the unwritten tail is kept in memory until ``sync``."""

    def __init__(self, directory: Path, units_per_segment: int = UNITS_PER_SEGMENT) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.seg_bytes = units_per_segment * UNIT_SIZE
        self._fds: dict[int, int] = {}
        starts = sorted(int(p.name) for p in self.dir.iterdir() if p.name.isdigit())
        self.min_pos = starts[0] if starts else 0
        end = 0
        if starts:
            last = starts[-1]
            size = (self.dir / f"{last:020d}").stat().st_size
            end = last + size - size % UNIT_SIZE
        self.written = end  # bytes on disk (maybe not synced)
        self.synced = end
        self._buf = bytearray()

    @property
    def end(self) -> int:
        return self.written + len(self._buf)

    def _fd(self, start: int) -> int:
        fd = self._fds.get(start)
        if fd is None:
            fd = os.open(self.dir / f"{start:020d}", os.O_RDWR | os.O_CREAT, 0o644)
            self._fds[start] = fd
        return fd

    def truncate(self, pos: int) -> None:
        """Cut the log to ``pos`` (recovery: units past the checkpoint are enqueued again)."""
        self.write_out()
        pos = max(pos - pos % UNIT_SIZE, self.min_pos)
        for start in sorted(self._seg_starts(), reverse=True):
            if start >= pos and start > self.min_pos:
                self._drop(start)
            elif start < pos:
                os.ftruncate(self._fd(start), min(pos - start, self.seg_bytes))
                break
        if pos == self.min_pos and (self.dir / f"{pos:020d}").exists():
            os.ftruncate(self._fd(pos), 0)
        self.written = self.synced = pos

    def _seg_starts(self) -> list[int]:
        return sorted(int(p.name) for p in self.dir.iterdir() if p.name.isdigit())

    def append(self, prev: int, deliver_ms: int, queue_offset: int, phy: int, size: int, kind: int,
               topic_id: int) -> int:
        pos = self.end
        self._buf += UNIT.pack(prev, deliver_ms, queue_offset, phy, size, kind, topic_id, 0)
        if len(self._buf) >= 1 << 20:
            self.write_out()
        return pos

    def write_out(self) -> None:
        """Write the memory tail to its segment files (no fsync)."""
        buf, pos = self._buf, self.written
        i = 0
        while i < len(buf):
            start = pos - pos % self.seg_bytes
            n = min(len(buf) - i, start + self.seg_bytes - pos)
            os.pwrite(self._fd(start), bytes(buf[i:i + n]), pos - start)
            pos += n
            i += n
        self.written = pos
        self._buf = bytearray()

    @property
    def clean(self) -> bool:
        """Every unit appended is written and synced."""
        return self.end == self.synced

    def sync(self) -> int:
        self.write_out()
        for fd in self._fds.values():
            os.fsync(fd)
        self.synced = self.written
        return self.synced

    def read(self, pos: int) -> Unit | None:
        if pos < self.min_pos or pos >= self.end or pos < 0:
            return None
        if pos >= self.written:
            vals = UNIT.unpack_from(self._buf, pos - self.written)
        else:
            start = pos - pos % self.seg_bytes
            data = os.pread(self._fd(start), UNIT_SIZE, pos - start)
            if len(data) < UNIT_SIZE:
                return None
            vals = UNIT.unpack(data)
        return Unit(pos, vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6])

    def segment_of(self, pos: int) -> int:
        return pos - pos % self.seg_bytes

    def delete_segment(self, start: int) -> bool:
        """Delete a whole segment below the one being written; True if it existed."""
        if start >= self.segment_of(self.end) or not (self.dir / f"{start:020d}").exists():
            return False
        self._drop(start)
        starts = self._seg_starts()
        self.min_pos = starts[0] if starts else self.segment_of(self.end)
        return True

    def _drop(self, start: int) -> None:
        fd = self._fds.pop(start, None)
        if fd is not None:
            os.close(fd)
        try:
            (self.dir / f"{start:020d}").unlink()
        except FileNotFoundError:
            pass

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.dir.iterdir() if p.name.isdigit())

    def close(self) -> None:
        self.write_out()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class TimerWheel:
    """A fixed file of slots read through mmap; changed slots wait in memory until ``sync``."""

    def __init__(self, path: Path, precision_ms: int, slots_total: int = SLOTS_TOTAL) -> None:
        self.path = path
        self.precision_ms = precision_ms
        self.slots_total = slots_total
        size = slots_total * SLOT_SIZE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)  # sparse: costs disk and memory only for slots used
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._dirty: dict[int, tuple[int, int, int, int, int]] = {}

    @property
    def span_ms(self) -> int:
        return self.slots_total * self.precision_ms

    def slot_time(self, t_ms: int) -> int:
        return t_ms - t_ms % self.precision_ms

    def _index(self, slot_ms: int) -> int:
        return (slot_ms // self.precision_ms) % self.slots_total

    def get(self, slot_ms: int) -> tuple[int, int, int]:
        """(first unit, last unit, count) of the slot at ``slot_ms``; (-1, -1, 0) when empty."""
        i = self._index(slot_ms)
        vals = self._dirty.get(i)
        if vals is None:
            vals = SLOT.unpack_from(self._mm, i * SLOT_SIZE)
        if vals[0] != slot_ms or vals[3] <= 0:
            return -1, -1, 0
        return vals[1], vals[2], vals[3]

    def counts(self, start_ms: int, n: int) -> list[int]:
        """Units in each of ``n`` slots from ``start_ms`` (0 where a slot holds another revolution), read in bulk:
        the distribution gauge (rocketmq_timer_message_snapshot) scans a day of slots, 86 400 at 1 s precision,
        which ``get`` per slot would make a noticeable pause of the event loop."""
        p = self.precision_ms
        start = self.slot_time(start_ms)
        n = max(0, min(n, self.slots_total))
        out = [0] * n
        i0 = self._index(start)
        done = 0
        while done < n:
            i = (i0 + done) % self.slots_total
            run = min(n - done, self.slots_total - i)
            raw = memoryview(self._mm[i * SLOT_SIZE:(i + run) * SLOT_SIZE])  # a copy: no export pins the mmap
            times, nums = raw.cast("q")[0::4].tolist(), raw.cast("i")[6::8].tolist()  # SLOT: time (q), count (i @24)
            first = start + done * p
            for k, c in enumerate(nums):
                if c > 0 and times[k] == first + k * p:
                    out[done + k] = c
            done += run
        for i, vals in self._dirty.items():  # changed since the last sync: the file is stale there
            k = (i - i0) % self.slots_total
            if k < n:
                out[k] = vals[3] if vals[0] == start + k * p and vals[3] > 0 else 0
        return out

    def put(self, slot_ms: int, pos: int) -> int:
        """Link unit ``pos`` as the slot's last; return the previous last unit (-1 if none)."""
        first, last, num = self.get(slot_ms)
        self._dirty[self._index(slot_ms)] = (slot_ms, first if num else pos, pos, num + 1, 0)
        return last if num else -1

    @property
    def clean(self) -> bool:
        """No slot changed since the last ``sync``."""
        return not self._dirty

    def sync(self) -> None:
        mm = self._mm
        for i, vals in self._dirty.items():
            SLOT.pack_into(mm, i * SLOT_SIZE, *vals)
        self._dirty.clear()
        mm.flush()

    def close(self) -> None:
        self._mm.close()


class TimerIndex:
    """Timer log + wheel + checkpoint in one directory, with the chain walk the dequeue needs."""

    def __init__(self, directory: Path, precision_ms: int, units_per_segment: int = UNITS_PER_SEGMENT) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        cp = Checkpoint.load(directory / "checkpoint")
        if cp is not None and cp.precision_ms != precision_ms:
            # slots of another width: the wheel cannot be read; rebuild everything from the timer topic
            for p in directory.iterdir():
                if p.is_file():
                    p.unlink()
            for p in (directory / "timerlog").glob("*"):
                p.unlink()
            cp = None
        self.fresh = cp is None
        self.cp = cp or Checkpoint(precision_ms=precision_ms)
        self.log = TimerLog(directory / "timerlog", units_per_segment)
        self.log.truncate(self.cp.log_end if cp is not None else 0)
        self.wheel = TimerWheel(directory / "timerwheel", precision_ms)
        topics_path = directory / "topics.json"
        try:
            self.topic_names: list[str] = json.loads(topics_path.read_text())
        except (OSError, ValueError):
            self.topic_names = []
        self.topic_ids = {t: i for i, t in enumerate(self.topic_names)}
        self._topics_dirty = False
        self._saved = ""  # the checkpoint's text as last saved by this process ("" : save at the first flush)
        self._saved_claim_t = self.cp.claim_t

    def topic_id(self, topic: str) -> int:
        tid = self.topic_ids.get(topic)
        if tid is None:
            tid = len(self.topic_names)
            self.topic_names.append(topic)
            self.topic_ids[topic] = tid
            self._topics_dirty = True
        return tid

    def topic_name(self, tid: int) -> str:
        return self.topic_names[tid] if 0 <= tid < len(self.topic_names) else ""

    def add(self, slot_ms: int, deliver_ms: int, queue_offset: int, phy: int, size: int, kind: int,
            topic: str) -> None:
        pos = self.log.end
        prev = self.wheel.put(slot_ms, pos)
        self.log.append(prev, deliver_ms, queue_offset, phy, size, kind, self.topic_id(topic))
        seg = str(self.log.segment_of(pos))
        if self.cp.seg_max_slot.get(seg, -1) < slot_ms:
            self.cp.seg_max_slot[seg] = slot_ms
        if kind != KIND_DELETE:
            self.cp.topic_counts[topic] = self.cp.topic_counts.get(topic, 0) + 1

    def units(self, slot_ms: int) -> Iterator[Unit]:
        """The units of one slot, newest first (the chain runs backwards)."""
        _first, pos, num = self.wheel.get(slot_ms)
        seen = 0
        while pos >= 0 and seen < num:
            u = self.log.read(pos)
            if u is None:
                return
            yield u
            seen += 1
            pos = u.prev

    def count_down(self, topic: str, n: int = 1) -> None:
        left = self.cp.topic_counts.get(topic, 0) - n
        if left > 0:
            self.cp.topic_counts[topic] = left
        else:
            self.cp.topic_counts.pop(topic, None)

    def count_down_passed(self, first_ms: int, end_ms: int) -> int:
        """Count the units of the slots in [first_ms, end_ms) as delivered (a replica following the writer's
        claim), a deleted message once; returns how many were counted down.

        Only slots holding units are walked, found in one bulk read of the wheel: a replica far behind
        passes the whole wheel (604 800 slots at 1 s precision), and reading each slot in turn stalled a new
        replica's event loop for 1-2 s, long enough for its Raft leader to miss its answers and step down
        (check-quorum) while the group was starting (tests/test_dledger_first_leader.py).
        """
        if not self.pending or end_ms <= first_ms:
            return 0
        p = self.wheel.precision_ms
        counted = 0
        for k, n in enumerate(self.wheel.counts(first_ms, -(-(end_ms - first_ms) // p))):
            if not n:
                continue
            deleted: set[int] = set()
            for u in self.units(first_ms + k * p):
                if u.kind == KIND_DELETE:
                    deleted.add(u.queue_offset)
                elif u.queue_offset not in deleted:
                    self.count_down(self.topic_name(u.topic_id))
                    counted += 1
        return counted

    @property
    def pending(self) -> int:
        return sum(self.cp.topic_counts.values())

    def flush(self, enqueue_offset: int | None = None, claim_slack_ms: int = 0) -> bool:
        """Log, wheel, then checkpoint (see the module's note on crash consistency); False when nothing changed.

        An idle timer flushes every ``timerFlushIntervalMs``: with nothing appended, no slot changed and
        the checkpoint's text as last saved, the fsyncs, the wheel's msync and the rename are skipped
        (issue 20: they were most of an idle broker's CPU).  An idle writer's claim time moves with the
        clock over empty slots: when that is the only change and it moved less than ``claim_slack_ms``
        since the last save, the save waits too (the claim on disk stays a lower bound; a restart walks
        those empty slots again)."""
        if enqueue_offset is not None:
            self.cp.enqueue_offset = enqueue_offset
        if self.log.clean and self.wheel.clean and not self._topics_dirty:
            text = self.cp.text()
            if text == self._saved:
                return False
            claim_t = self.cp.claim_t
            if 0 <= claim_t - self._saved_claim_t < claim_slack_ms:
                self.cp.claim_t = self._saved_claim_t
                only_time = self.cp.text() == self._saved
                self.cp.claim_t = claim_t
                if only_time:
                    return False
        self.cp.log_end = self.log.sync()
        self.wheel.sync()
        if self._topics_dirty:
            tmp = self.dir / "topics.json.tmp"
            tmp.write_text(json.dumps(self.topic_names))
            os.replace(tmp, self.dir / "topics.json")
            self._topics_dirty = False
        text = self.cp.text()
        self.cp.save(self.dir / "checkpoint", text)
        self._saved, self._saved_claim_t = text, self.cp.claim_t
        return True

    def delete_expired_segments(self) -> int:
        """Segments whose every unit lies in a slot below the claimed delivered time."""
        deleted = 0
        for seg, max_slot in sorted(self.cp.seg_max_slot.items(), key=lambda kv: int(kv[0])):
            if max_slot >= self.cp.claim_t:
                break
            if self.log.delete_segment(int(seg)) or int(seg) < self.log.segment_of(self.log.end):
                del self.cp.seg_max_slot[seg]
                deleted += 1
        return deleted

    def close(self) -> None:
        self.log.close()
        self.wheel.close()
