"""Master/Slave chunking: a slave that copies the master's log chunk by chunk ends with identical bytes.

The case that once stalled replication for good (seen in the controller-mode chaos test): a
segment whose tail is 1-7 zero bytes (too short for a filler) and a caught-up slave whose
next read starts exactly there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketscope.broker.ha.master import read_chunk
from rocketscope.broker.store import record
from rocketscope.broker.store.commitlog import CommitLog
from rocketscope.broker.store.record import StoredMessage

SEGMENT = 4096


def message(body_len: int) -> StoredMessage:
    return StoredMessage(topic="T", queue_id=0, body=b"x" * body_len, born_timestamp=1_700_000_000_000,
                         born_host="127.0.0.1:1", properties={"UNIQ_KEY": "A" * 32})


def record_len(body_len: int) -> int:
    m = message(body_len)
    m.physical_offset = 0
    return len(record.encode(m))


@pytest.mark.parametrize("tail", range(0, 8))
def test_caught_up_slave_crosses_a_short_segment_tail(tmp_path: Path, tail: int) -> None:
    """Records sized so the first segment ends with ``tail`` zero bytes; the slave reads after every append."""
    base = record_len(0)
    master = CommitLog(tmp_path / "master", SEGMENT)
    slave = CommitLog(tmp_path / "slave", SEGMENT)
    # three records filling the segment up to SEGMENT - tail, then more records into the next segments
    first, second = 1000, 1000
    third = SEGMENT - tail - 3 * base - first - second
    sizes = [first, second, third] + [700] * 12
    pos = 0
    for size in sizes:
        master.append(message(size))
        while True:  # a caught-up slave: copy everything after every append
            chunk = read_chunk(master, pos)
            if not chunk:
                break
            slave.append_raw(pos, chunk)
            pos += len(chunk)
    assert pos == master.max_offset, f"slave stuck at {pos}, master at {master.max_offset}"
    assert slave.max_offset == master.max_offset
    assert slave.read_raw(0, SEGMENT) == master.read_raw(0, SEGMENT)
    if tail:
        assert master.read_raw(SEGMENT - tail, SEGMENT) == b"\x00" * tail  # the case under test happened
    total = master.max_offset
    assert [m.body for m in slave.iter_messages(0, total)] == [m.body for m in master.iter_messages(0, total)]


def test_chunk_larger_than_the_read_size_is_sent_whole(tmp_path: Path) -> None:
    master = CommitLog(tmp_path / "master", SEGMENT)
    master.append(message(3000))
    chunk = read_chunk(master, 0, max_bytes=512)
    assert len(chunk) == master.max_offset


@pytest.mark.parametrize("max_bytes", [64, 512, 1000, 1500, 4096])
def test_every_chunk_ends_on_a_record_or_filler_boundary(tmp_path: Path, max_bytes: int) -> None:
    """A filler is sent whole, however small the read: a copy never ends inside one.

    A copy that ended inside a segment's filler, promoted to master, wrote its records after the
    torn filler; every reader took the filler's size and skipped them (acknowledged messages lost
    in the controller chaos test)."""
    master = CommitLog(tmp_path / "master", SEGMENT)
    for size in (1500, 1500, 1700, 900, 2500, 300, 3000, 100):  # fillers of several sizes close segments
        master.append(message(size))
    boundaries = set()
    pos = 0
    while pos < master.max_offset:  # every record start and every segment start is a boundary
        seg = master.log.segment_for(pos)
        boundaries.add(pos)
        if seg.limit - pos < record.MIN_BLANK:
            pos = seg.limit
            continue
        size = int.from_bytes(master.read_raw(pos, 4), "big")
        pos += size
    boundaries.add(master.max_offset)
    fillers = [b for b in boundaries if b < master.max_offset
               and int.from_bytes(master.read_raw(b + 4, 4), "big") == record.BLANK_MAGIC]
    assert fillers, "the case under test (a filler) did not happen"
    slave = CommitLog(tmp_path / "slave", SEGMENT)
    pos = 0
    while True:
        chunk = read_chunk(master, pos, max_bytes=max_bytes)
        if not chunk:
            break
        slave.append_raw(pos, chunk)
        pos += len(chunk)
        assert pos in boundaries, f"a chunk ended at {pos}, inside a record or a filler"
    assert slave.read_raw(0, 1 << 20) == master.read_raw(0, 1 << 20)
