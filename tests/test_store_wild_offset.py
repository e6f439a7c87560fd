"""A record whose queue offset is wild (far past its queue's end) is refused by the dispatch, the same way on every
path, and the store goes on serving its other queues and records.

Before session 25 such a record (damaged bytes that still decode, a hostile replica's entry) made the dispatch fill
a gap of that many 20-byte GAP entries: a MemoryError in Python (``_dispatch_one``), NoMemory in C
(fastpath.c ``dispatch_run``, raftpath.c ``dispatch_records``), which stopped the whole batch and so every queue
behind it.  Now ``MessageStore._dispatch_one`` refuses a record more than ``MAX_QUEUE_GAP`` past its queue's end
(no entry, no index keys, no LMQ entries, one WARNING naming topic, queue and offsets); the compiled loops stop at
it and leave it to ``_dispatch_one`` (the same bound in broker/store_dispatch.h).

Ground truth: the queues, offsets and index lookups a reader sees are those written out by hand below (the
records that are not wild, at the offsets they were given), checked on each path: decoded records through
``_dispatch_many`` (a leader's or a standalone store's dispatch: fastpath ``dispatch_run`` when compiled), record
bytes through ``add_pending_records`` (a DLedger follower's: raftpath ``dispatch_records``), and records read back
from the commit log at recovery; each compiled and pure (``_C``/``_R`` None, what ``ROCKETSCOPE_PURE_PYTHON=1``
gives).  The bound itself: a gap of exactly ``MAX_QUEUE_GAP`` is filled, one more is refused, on every path.
No process is started.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from store_support import close_store

from rocketscope.broker import speedups
from rocketscope.broker.store import message_store, record
from rocketscope.broker.store.message_store import MAX_QUEUE_GAP, MessageStore, StoreConfig
from rocketscope.broker.store.record import StoredMessage

WILD = 10**16
MODES = ["pure", "compiled"] if speedups.records is not None and speedups.compiled is not None else ["pure"]
WAYS = ["decoded", "bytes", "recovery"]


@contextlib.contextmanager
def store_modules(mode: str) -> Iterator[None]:
    saved = (message_store._C, message_store._R)
    if mode == "pure":
        message_store._C, message_store._R = None, None
    try:
        yield
    finally:
        message_store._C, message_store._R = saved


def encode(specs: list[tuple[str, int, int, str]]) -> list[bytes]:
    """(topic, queue id, queue offset, UNIQ_KEY) -> the records' bytes at consecutive commit-log offsets from 0."""
    out = []
    pos = 0
    for topic, qid, qoff, uid in specs:
        m = StoredMessage(topic=topic, queue_id=qid, body=uid.encode(), queue_offset=qoff, physical_offset=pos,
                          properties={"UNIQ_KEY": uid, "KEYS": f"k-{uid}", "TAGS": "t"},
                          store_timestamp=1_700_000_000_000, born_timestamp=1_700_000_000_000,
                          born_host="10.0.0.1:5000", store_host="10.0.0.2:10911")
        data = record.encode(m)
        out.append(data)
        pos += len(data)
    return out



def feed(batches: list[list[bytes]], way: str, mode: str) -> dict[str, Any]:
    """A store given ``batches`` of records (consecutive in the commit log) one batch after the other, ``way``:
    decoded records dispatched as a batch, record bytes confirmed as a follower's entry, or all read back from
    the commit log at once (a recovery).  Returns what a reader sees."""
    with store_modules(mode), tempfile.TemporaryDirectory() as d:
        store = MessageStore(StoreConfig(root=Path(d), cq_entries_per_segment=1 << 16,
                                         commitlog_segment_size=1 << 22))
        try:
            pos = 0
            if way == "bytes":
                store.set_confirm_offset(0)
            for batch in batches:
                data = b"".join(batch)
                store.commit_log.append_raw(pos, data)
                if way == "decoded":
                    store._dispatch_many(record.decode_run(data, 0))  # type: ignore[arg-type]
                elif way == "bytes":
                    store.add_pending_records(pos, data)
                    store.set_confirm_offset(pos + len(data))
                pos += len(data)
            if way == "recovery":
                store._dispatch_many(store.commit_log.iter_messages(0, pos))
            queues = {}
            for key, cq in sorted(store.cqs.items()):
                got = store.get(key[0], key[1], 0, 10)
                queues[key] = (cq.min_offset, cq.max_offset,
                               [(m.queue_offset, m.body.decode()) for m in got.messages])
            # each record's three index keys (*#id, T#key, T#id): how many records each finds
            ids = {uid: (len(store.index.query("*", uid, 10)), len(store.index.query("T", f"k-{uid}", 10)),
                         len(store.index.query("T", uid, 10)))
                   for uid in ("a0", "a1", "wild", "b0", "a2")}
            return {"queues": queues, "ids": ids, "dispatched": store.dispatched, "end": pos}
        finally:
            close_store(store)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == message_store.__name__ and r.levelno == logging.WARNING and "refused" in r.getMessage()]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("way", WAYS)
def test_a_wild_queue_offset_is_refused_and_the_other_queues_go_on(
        way: str, mode: str, caplog: pytest.LogCaptureFixture) -> None:
    # T/0 gets 0, 1, then a record at 10**16 in the same batch, then (next batch) 2; T/1 gets 0, 1 around them;
    # a second wild record opens the next batch's run of T/0 (its run starts at the queue's end, 2 entries).
    recs = encode([("T", 0, 0, "a0"), ("T", 1, 0, "b0"), ("T", 0, 1, "a1"), ("T", 0, WILD, "wild"),
                   ("T", 1, 1, "b1"), ("T", 0, WILD + 5, "wild2"), ("T", 0, 2, "a2")])
    caplog.set_level(logging.WARNING, logger=message_store.__name__)
    seen = feed([recs[:5], recs[5:]], way, mode)
    assert seen["queues"] == {
        ("T", 0): (0, 3, [(0, "a0"), (1, "a1"), (2, "a2")]),
        ("T", 1): (0, 2, [(0, "b0"), (1, "b1")]),
    }
    one = (1, 1, 1)
    assert seen["ids"] == {"a0": one, "a1": one, "wild": (0, 0, 0), "b0": one, "a2": one}  # the refused: nothing
    assert seen["dispatched"] == seen["end"]  # the store moved past it
    warned = _warnings(caplog)
    assert len(warned) == 2, warned
    assert "T queue 0" in warned[0] and str(WILD) in warned[0] and "ends at 2" in warned[0]
    assert str(WILD + 5) in warned[1] and "ends at 2" in warned[1]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("way", ["decoded", "bytes"])
def test_the_gap_bound_fills_up_to_it_and_refuses_past_it(
        way: str, mode: str, caplog: pytest.LogCaptureFixture) -> None:
    """A gap of MAX_QUEUE_GAP entries after the queue's end is filled (the record lands at its offset, readers skip
    the gaps); one of MAX_QUEUE_GAP + 1 is refused.  Same batch (the run has entries) and next batch (the run
    starts at the queue's end)."""
    g = MAX_QUEUE_GAP
    recs = encode([("T", 0, 0, "a0"), ("T", 0, 1 + g, "a1"),          # gap g after end 1: filled
                   ("T", 0, 2 + g + g + 1, "wild"),                     # gap g + 1 after end 2 + g: refused
                   ("T", 1, 0, "b0"), ("T", 1, 1 + g + 1, "wild2")])    # next batch, gap g + 1: refused
    caplog.set_level(logging.WARNING, logger=message_store.__name__)
    seen = feed([recs[:3], recs[3:4], recs[4:]], way, mode)
    assert seen["queues"] == {
        ("T", 0): (0, 2 + g, [(0, "a0"), (1 + g, "a1")]),
        ("T", 1): (0, 1, [(0, "b0")]),
    }
    assert seen["dispatched"] == seen["end"]
    assert len(_warnings(caplog)) == 2


@pytest.mark.parametrize("mode", MODES)
def test_an_empty_queue_starts_at_its_first_record_however_far(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    """A queue with no entries yet (a store whose commit log starts past reclaimed segments rebuilds its queues from
    high offsets) takes its first record at its offset with no gap and no warning, as ConsumeQueue.append_packed
    starts an empty queue."""
    recs = encode([("T", 0, WILD, "a0"), ("T", 0, WILD + 1, "a1")])
    caplog.set_level(logging.WARNING, logger=message_store.__name__)
    for way in ("decoded", "bytes"):
        seen = feed([recs], way, mode)
        assert seen["queues"] == {("T", 0): (WILD, WILD + 2, [(WILD, "a0"), (WILD + 1, "a1")])}
    assert _warnings(caplog) == []
