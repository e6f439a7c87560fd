"""A DLedger leader's proposal encoded in C (``MessageStore.prepare_run``) gives the entries the Python loop gives.

``plan_entries`` (broker/dledger/node.py) turns a group of sends into Raft entries: each message's queue offset,
store time and host, physical offset and record bytes (``MessageStore.prepare``, one message at a time), cut
into entries where a record rolls to the next commit-log segment or an entry would pass ``max_bytes``.  Session
25 compiled its common case (``fastpath.plan_run`` for the heads, ``fastpath.encode_run`` for the layout).

Ground truth: the same group planned by the Python loop (``message_store._C`` None, what
``ROCKETSCOPE_PURE_PYTHON=1`` gives) on a store in the same state: the entries' bytes, which entry each message
is in, the log end, every message's fields, each result's status and reason, ``queue_next`` and what
``on_data`` was told.  Generated groups (hypothesis) with several topics and queues, the replication-event topic,
properties, bodies over ``maxMessageSize``, preset store times and hosts, small segments and entry bounds so
that records roll and entries are cut, starting anywhere in a segment.  No process is started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketscope.broker import speedups
from rocketscope.broker.dledger.node import plan_entries
from rocketscope.broker.store import message_store, record
from rocketscope.broker.store.message_store import MessageStore, StoreConfig
from rocketscope.broker.store.record import StoredMessage
from rocketscope.names import HA_EVENTS_TOPIC

C = speedups.compiled
needs_c = pytest.mark.skipif(C is None, reason=f"{speedups.PURE_ENV} is set: the compiled module is not loaded")
SEGMENT = 4096
MAX_BODY = 1500
NOW_S = 1_700_000_123.456
TAKEN: list[bool] = []  # per plan_entries call: whether the compiled prepare_run took the group


@contextlib.contextmanager
def compiled(on: bool) -> Iterator[None]:
    saved = message_store._C
    message_store._C = saved if on else None
    try:
        yield
    finally:
        message_store._C = saved


def make(specs: list[tuple[Any, ...]]) -> list[StoredMessage]:
    return [StoredMessage(topic=topic, queue_id=qid, body=body, properties=dict(props), store_timestamp=st,
                          store_host=sh, born_host="10.0.0.1:5000", born_timestamp=1_700_000_000_000, flag=3,
                          sys_flag=sf)
            for topic, qid, body, props, st, sh, sf in specs]


def plan(specs: list[tuple[Any, ...]], cursor: int, max_bytes: int, queue_next: dict[Any, int], use_c: bool,
         monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """Everything plan_entries leaves for this group, on a fresh store whose queues are at ``queue_next``."""
    msgs = make(specs)
    told: list[int] = []
    monkeypatch.setattr(message_store.time, "time", lambda: NOW_S)
    with tempfile.TemporaryDirectory() as d, compiled(use_c):
        store = MessageStore(StoreConfig(root=Path(d), commitlog_segment_size=SEGMENT, max_message_size=MAX_BODY))
        try:
            store.queue_next.update(queue_next)
            store.on_data = told.append
            real = store.prepare_run

            def prepare_run(*args: Any) -> Any:
                got = real(*args)
                TAKEN.append(got is not None)
                return got
            store.prepare_run = prepare_run  # type: ignore[method-assign]
            p = plan_entries(store, msgs, cursor, max_bytes)
            fields = [dataclasses.astuple(m) for m in msgs]
            results = [(r.status, r.reason, None if r.message is None else msgs.index(r.message)) for r in p.results]
            return (p.datas, p.entry_of, p.cursor, [msgs.index(m) for m in p.accepted], results, fields,
                    dict(store.queue_next), max(told) if told else None)
        finally:
            store.commit_log.close()


props = st.dictionaries(st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "X"]),
                        st.sampled_from(["", "ID1", "k1 k2", "é", "t"]) | st.text(max_size=6), max_size=3)
XL = [b"x" * 1000, b"y" * MAX_BODY, b"z" * (MAX_BODY + 1)]
groups = st.lists(st.tuples(st.sampled_from(["T", "Tópico", HA_EVENTS_TOPIC]), st.integers(0, 2),
                            st.binary(max_size=40) | st.sampled_from(XL),
                            props, st.sampled_from([0, 1_700_000_000_999]), st.sampled_from(["", "10.0.0.2:10911"]),
                            st.sampled_from([0, 4])),
                  min_size=1, max_size=24)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=groups, cursor=st.integers(0, 3 * SEGMENT) | st.sampled_from([SEGMENT - 1, SEGMENT - 100, 2 * SEGMENT]),
       max_bytes=st.sampled_from([1, 300, 1200, 5000, 1 << 20]),
       queue_next=st.dictionaries(st.tuples(st.just("T"), st.integers(0, 2)), st.integers(0, 10**9), max_size=2))
def test_compiled_proposal_equals_the_python_loop(specs: list[tuple[Any, ...]], cursor: int, max_bytes: int,
                                                   queue_next: dict[Any, int], monkeypatch: pytest.MonkeyPatch) -> None:
    reference = plan(specs, cursor, max_bytes, queue_next, False, monkeypatch)
    if C is not None:
        assert plan(specs, cursor, max_bytes, queue_next, True, monkeypatch) == reference
        # a second time: the record prefixes are cached now, so the compiled path takes every group it can
        assert plan(specs, cursor, max_bytes, queue_next, True, monkeypatch) == reference
        assert TAKEN[-1] is all(len(s[2]) <= MAX_BODY for s in specs)


@needs_c
def test_the_compiled_proposal_takes_a_plain_group_and_declines_one_to_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_run takes a group of plain sends (so the equivalence above is not between two runs of the Python
    loop) and cuts it where the loop does; a group with a body over maxMessageSize is left to the loop."""
    plain = [("T", i % 2, b"b" * 900, {"UNIQ_KEY": f"ID{i}"}, 0, "", 0) for i in range(6)]
    monkeypatch.setattr(message_store.time, "time", lambda: NOW_S)
    with tempfile.TemporaryDirectory() as d:
        store = MessageStore(StoreConfig(root=Path(d), commitlog_segment_size=SEGMENT, max_message_size=MAX_BODY))
        try:
            msgs = make(plain)
            for m in msgs:
                record.prepare(m)  # the prefix cache, as a first group fills it
            got = store.prepare_run(msgs, SEGMENT - 2100, 1 << 20)
            assert got is not None
            datas, entry_of, end = got
            sizes = [m.size for m in msgs]
            # two fit the 2,100 bytes left in the first segment, four the next one
            assert all(1000 < s <= 1024 for s in sizes)
            assert entry_of == [0, 0, 1, 1, 1, 1]
            assert [len(x) for x in datas] == [sum(sizes[:2]), sum(sizes[2:])]
            assert msgs[2].physical_offset == SEGMENT and end == SEGMENT + sum(sizes[2:])
            assert [m.queue_offset for m in msgs] == [0, 0, 1, 1, 2, 2]
            assert all(record.decode(datas[e], p).body == b"b" * 900
                       for e, p in [(0, 0), (1, 0)])
            assert store.prepare_run(make([*plain[:2], ("T", 0, b"z" * (MAX_BODY + 1), {}, 0, "", 0)]), 0,
                                     1 << 20) is None
        finally:
            store.commit_log.close()
