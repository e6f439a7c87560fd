"""A DLedger follower's dispatch from record bytes gives what the dispatch of decoded records gives (issue 20).

A follower hands the bytes of the entries it appends to its store (``MessageStore.add_pending_records``);
the store builds consume-queue entries and index keys from them (broker/raftpath.c ``dispatch_records``),
decoding a record only for a topic with a topic listener, LMQ offsets, or bytes the C does not take.
Ground truth: the same records decoded by ``record.decode`` and queued with ``add_pending``, the path every
follower took before (and a leader still takes), dispatched by the Python loop (``_C`` None).  Generated
batches (hypothesis) with several topics and queues, tags, keys with empty items, UNIQ_KEY, gaps and
replays below a queue's end, LMQ offsets whole and malformed, a topic with a listener, cut into entries
and confirmed at bounds that fall between entries, inside an entry and inside a record, must leave the same
consume-queue files, index files, ``queue_next``, ``dispatched`` and listener calls, compiled and pure
(``_R``/``_C`` None, what ``ROCKETSCOPE_PURE_PYTHON=1`` gives).  Damaged bytes: ``check_records``
accepts exactly what ``record.decode`` decodes, and the store handed them anyway reads them back from the
commit log the same way on either path.  No process is started.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from store_support import close_store

from rocketscope.broker import speedups
from rocketscope.broker.dledger import raft_codec as rc
from rocketscope.broker.store import message_store, record
from rocketscope.broker.store.message_store import MessageStore, StoreConfig
from rocketscope.broker.store.multi_dispatch import MULTI_DISPATCH, MULTI_QUEUE_OFFSET
from rocketscope.broker.store.record import RecordError, StoredMessage

R = speedups.records
needs_c = pytest.mark.skipif(R is None, reason=f"{speedups.PURE_ENV} is set: the compiled module is not loaded")
LISTENED = "L"


@contextlib.contextmanager
def store_modules(c: Any, r: Any) -> Iterator[None]:
    saved = (message_store._C, message_store._R)
    message_store._C, message_store._R = c, r
    try:
        yield
    finally:
        message_store._C, message_store._R = saved


def encode(specs: list[tuple[Any, ...]], start: int) -> list[bytes]:
    """The records of ``specs`` as a follower's log holds them from ``start`` on, one bytes per record."""
    out = []
    pos = start
    for topic, qid, qoff, ts, props, body in specs:
        m = StoredMessage(topic=topic, queue_id=qid, body=body, properties=dict(props), queue_offset=qoff,
                          physical_offset=pos, store_timestamp=ts, born_timestamp=ts, born_host="10.0.0.1:5000",
                          store_host="10.0.0.2:10911")
        data = record.encode(m)
        out.append(data)
        pos += len(data)
    return out



def run_follower(entries: list[bytes], bounds: list[list[int]], way: str, listen: bool) -> tuple[Any, ...]:
    """A store fed ``entries`` (bytes at consecutive offsets from 0) as a follower's appends, the confirm offset
    moved to ``bounds[i]`` after entry i; ``way``: "decoded" (record.decode then ``add_pending``, the
    reference) or "bytes" (``add_pending_records``).  Returns everything a reader can see."""
    calls: list[tuple[Any, ...]] = []
    with tempfile.TemporaryDirectory() as d:
        store = MessageStore(StoreConfig(root=Path(d), cq_entries_per_segment=8, index_slot_num=7, index_num=300,
                                         commitlog_segment_size=1 << 22))
        store.set_confirm_offset(0)
        if listen:
            store.add_topic_listener(LISTENED, lambda m: calls.append(
                ("topic", m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.size, m.body, m.properties)))
        store.add_queue_listener(lambda qs: calls.append(("queues", tuple(qs))))
        pos = 0
        try:
            for data, bs in zip(entries, bounds, strict=True):
                store.commit_log.append_raw(pos, data)
                if way == "bytes":
                    store.add_pending_records(pos, data)
                else:
                    store.add_pending(rc.py_decode_records(data))
                pos += len(data)
                for b in bs:
                    store.set_confirm_offset(b)
            queues = {k: (cq.min_offset, cq.max_offset, cq.get(0, 1000)) for k, cq in sorted(store.cqs.items())}
            idx = [(f.count, f.slots_used, f.begin_ts, f.end_ts, f.begin_phy, f.end_phy, bytes(f.mm))
                   for f in store.index.files]
            lookups = {(t, k): store.index.query(t, k, 100)
                       for t in ("*", "T", "Tópico", LISTENED) for k in ("ID1", "ID2", "k1", "k2", "é", "a#b")}
        finally:
            close_store(store)
    return queues, idx, lookups, dict(store.queue_next), store.dispatched, calls, len(store._pending)


names = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02")
text = st.text(names, max_size=8)
lmq_props = st.fixed_dictionaries({MULTI_DISPATCH: st.just("%LMQ%$T$a,%LMQ%$T$b"),
                                   MULTI_QUEUE_OFFSET: st.sampled_from(["0,0", "1,3", "2", "x,1", "5,5"])})
props = st.dictionaries(st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "X", "INNER_MULTI_DISPATCH"]),
                        st.sampled_from(["", "ID1", "ID2", "k1 k2", " k1  k2 ", "é", "t", "a#b"]) | text,
                        max_size=4) | lmq_props
specs = st.lists(st.tuples(st.sampled_from(["T", "Tópico", "%RETRY%G", LISTENED]), st.integers(0, 2),
                           st.integers(-1, 9), st.integers(1_700_000_000_000, 1_700_000_100_000) | st.just(0),
                           props, st.binary(max_size=40)),
                 min_size=1, max_size=30)


@st.composite
def follower_feed(draw: st.DrawFn) -> tuple[list[bytes], list[list[int]], bool]:
    """Records cut into entries, and after each entry the confirm offsets it moves to (an entry end, a record
    end inside a later entry, a position inside a record, or none), ending at the last entry's end."""
    recs = encode(draw(specs), 0)
    ends = []
    pos = 0
    for r in recs:
        pos += len(r)
        ends.append(pos)
    cuts = sorted(set(draw(st.lists(st.integers(1, len(recs) - 1), max_size=6)))) if len(recs) > 1 else []
    entries = [b"".join(recs[a:b]) for a, b in zip([0, *cuts], [*cuts, len(recs)], strict=True)]
    bounds: list[list[int]] = []
    written = 0
    confirmed = 0
    for e in entries:
        written += len(e)
        bs = []
        for _ in range(draw(st.integers(0, 2))):
            b = draw(st.sampled_from([x for x in ends if x <= written] + [written - 1, confirmed + 1]))
            b = max(confirmed, min(b, written))
            bs.append(b)
            confirmed = b
        bounds.append(bs)
    bounds[-1].append(written)
    return entries, bounds, draw(st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(follower_feed())
def test_dispatch_from_bytes_equals_dispatch_of_decoded_records(
        feed: tuple[list[bytes], list[list[int]], bool]) -> None:
    entries, bounds, listen = feed
    with store_modules(None, None):
        reference = run_follower(entries, bounds, "decoded", listen)
        pure = run_follower(entries, bounds, "bytes", listen)
    assert pure == reference
    if R is not None:
        with store_modules(speedups.compiled, R):
            compiled = run_follower(entries, bounds, "bytes", listen)
        assert compiled == reference
    assert reference[-1] == 0  # everything was confirmed and dispatched


def damage(data: bytes, how: str, at: int, junk: bytes) -> bytes:
    at %= max(len(data), 1)
    if how == "flip":
        return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
    if how == "cut":
        return data[:at]
    return data[:at] + junk + data[at:]


damaged = st.tuples(specs, st.sampled_from(["flip", "cut", "insert"]), st.integers(0, 1 << 16),
                    st.binary(min_size=1, max_size=4) | st.sampled_from([b"\x01", b"\x02", b"\xff", b"\xed\xa0\x80"]))


def python_decodes(data: bytes) -> bool:
    """Whether Python's decoder (the reference) takes every record of ``data``."""
    try:
        rc.py_decode_records(data)
    except RecordError:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(damaged)
def test_check_records_accepts_exactly_what_record_decode_decodes(case: tuple[Any, ...]) -> None:
    recs, how, at, junk = case
    data = damage(b"".join(encode(recs, 0)), how, at, junk)
    decodes = python_decodes(data)
    if R is not None:
        assert R.check_records(data) is decodes
    if decodes:
        rc.check_records(data)
    else:
        with pytest.raises(RecordError):
            rc.check_records(data)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(damaged)
def test_damaged_bytes_handed_to_the_store_give_the_same_either_way(case: tuple[Any, ...]) -> None:
    """Bytes the follower's check would refuse, handed to the store anyway: the compiled dispatch stops at the
    damaged record, Python's decode refuses it, the store reads what is left from its commit log; the pure path
    does the same.

    Only bytes that do not decode: damage that still decodes (a flipped byte inside a number) is a record like
    any other for both paths, whose equivalence the test above checks, and a flipped queue offset can ask the
    dispatch for a gap of 10^16 entries: found by this test in session 24, refused since session 25 on either
    path, tests/test_store_wild_offset.py)."""
    recs, how, at, junk = case
    data = damage(b"".join(encode(recs, 0)), how, at, junk)
    assume(data and not python_decodes(data))
    with store_modules(None, None):
        pure = run_follower([data], [[len(data)]], "bytes", True)
    if R is not None:
        with store_modules(speedups.compiled, R):
            compiled = run_follower([data], [[len(data)]], "bytes", True)
        assert compiled == pure


@needs_c
def test_the_compiled_dispatch_takes_plain_records_and_declines_the_others() -> None:
    """dispatch_records takes records with tags, keys and ids, and stops before one with LMQ offsets, one of a
    listened topic and a damaged one (so the equivalence above is not between two runs of the Python code)."""
    assert R is not None
    plain = [("T", i % 2, i // 2, 5, {"UNIQ_KEY": f"ID{i}", "KEYS": "a b", "TAGS": "t"}, b"x") for i in range(6)]
    lmq = ("T", 0, 3, 5, {MULTI_QUEUE_OFFSET: "0", MULTI_DISPATCH: "%LMQ%$T$a"}, b"")
    recs = encode([*plain, lmq, ("L", 0, 0, 5, {}, b""), ("T", 0, 4, 5, {}, b"")], 0)
    data = b"".join(recs)
    starts = [sum(len(r) for r in recs[:i]) for i in range(len(recs))]
    with tempfile.TemporaryDirectory() as d:
        store = MessageStore(StoreConfig(root=Path(d)))
        runs: dict[Any, Any] = {}
        keys: list[Any] = []
        args = (runs, store._run, message_store._tag_hash, keys)
        assert R.dispatch_records(data, 0, *args, {"L": [print]}) == starts[6]
        assert [(k, r.first, r.end, len(r.packed)) for k, r in runs.items()] == [(("T", 0), 0, 3, 60),
                                                                                 (("T", 1), 0, 3, 60)]
        assert keys[:4] == [("*#ID0", 0, 5), ("T#a", 0, 5), ("T#b", 0, 5), ("T#ID0", 0, 5)]
        assert R.dispatch_records(data, starts[7], *args, {"L": [print]}) == starts[7]  # a listened topic
        assert R.dispatch_records(data, starts[7], *args, {}) == len(data)
        bad = data[:starts[8] + 5] + b"\x00" + data[starts[8] + 6:]  # the last record's magic
        assert R.dispatch_records(bad, starts[7], *args, {}) == starts[8]
        close_store(store)
