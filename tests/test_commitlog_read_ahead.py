"""``CommitLog.iter_messages`` reads ahead in blocks: it must yield exactly what reading record by record yields.

The reference is the walk the method did before (session 27 changed it): ``next_record_offset`` then ``read`` for
every record, both still the log's own single-record readers. Logs with 4 KiB segments (so fillers and zero tails
too short for a filler end segments), records of random sizes (some larger than the read-ahead block), corrupt
ranges to skip, a torn tail, a record with a broken CRC in the middle, and any start at a record or segment
boundary and any end; the read-ahead block is varied from smaller than one record to larger than a segment.
Ground truth besides the reference: the walk over the whole log gives back every appended body in order.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketscope.broker.store import commitlog as commitlog_module
from rocketscope.broker.store import record
from rocketscope.broker.store.commitlog import CommitLog
from rocketscope.broker.store.record import StoredMessage

SEGMENT = 4096


def message(i: int, body_len: int) -> StoredMessage:
    return StoredMessage(topic=f"T{i % 3}", queue_id=i % 4, body=bytes([65 + i % 26]) * body_len,
                         born_timestamp=1_700_000_000_000 + i, born_host="127.0.0.1:1",
                         properties={"UNIQ_KEY": f"{i:032d}"})


def one_by_one(log: CommitLog, start: int, end: int) -> Iterator[StoredMessage]:
    """The walk before read-ahead: a filler check, a header and the record, each read on its own."""
    pos = start
    while pos < end:
        pos = log._skip_corrupt(pos)
        nxt = log.next_record_offset(pos)
        if nxt != pos:
            pos = nxt
            continue
        if pos >= end:
            break
        msg = log.read(pos)
        if msg is None:
            break
        yield msg
        pos += msg.size


def walk(messages: Iterator[StoredMessage]) -> list[tuple[int, str, bytes]]:
    return [(m.physical_offset, m.topic, m.body) for m in messages]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), block=st.sampled_from([16, 300, 4096, 256 * 1024]),
       damage=st.sampled_from(["none", "corrupt_range", "torn_tail", "bad_crc"]))
def test_read_ahead_yields_what_one_by_one_reads_yield(tmp_path_factory: pytest.TempPathFactory, seed: int,
                                                       block: int, damage: str) -> None:
    rng = random.Random(seed)
    log = CommitLog(tmp_path_factory.mktemp("cl"), SEGMENT)
    appended = []
    for i in range(rng.randint(1, 40)):
        m = message(i, rng.choice([0, 1, 50, 400, 1500, 3000, rng.randint(0, 3800)]))
        log.append(m)
        appended.append(m)
    boundaries = sorted({m.physical_offset for m in appended} | {s.start for s in log.log.segments} | {0})
    end_of_log = log.max_offset
    if damage == "corrupt_range" and len(appended) > 2:
        victim = rng.choice(appended[1:-1])
        log.corrupt.append((victim.physical_offset, victim.physical_offset + victim.size))
    elif damage == "torn_tail":
        whole = message(99, 200)
        whole.physical_offset = end_of_log
        data = record.encode(whole)
        log.append_raw(end_of_log, data[: rng.randint(1, len(data) - 1)])
    elif damage == "bad_crc" and len(appended) > 2:
        victim = rng.choice(appended[1:-1])
        seg = log.log.segment_for(victim.physical_offset)
        assert seg is not None
        at = victim.physical_offset - seg.start + victim.size - 1
        old = os.pread(seg.fd, 1, at)
        os.pwrite(seg.fd, bytes([old[0] ^ 0xFF]), at)  # the body's last byte: the CRC no longer matches
    commitlog_module.READ_AHEAD = block
    try:
        for _ in range(8):
            start = rng.choice(boundaries)
            end = rng.randint(start, log.max_offset + 10)
            assert walk(log.iter_messages(start, end)) == walk(one_by_one(log, start, end)), (start, end)
        everything = walk(log.iter_messages(0, log.max_offset))
        assert everything == walk(one_by_one(log, 0, log.max_offset))
        if damage == "none":  # ground truth: every appended record, in order
            assert everything == [(m.physical_offset, m.topic, m.body) for m in appended]
    finally:
        commitlog_module.READ_AHEAD = 256 * 1024
