"""A run of plain single sends stored in one call (``MessageStore.append_plain_run``, issue 20) writes what ``put``
writes for the same messages, byte for byte, or declines the run and changes nothing.

Two stores get the same messages (several topics and queues, tags, keys, a properties text of every length class,
a segment roll on the way), one through ``put`` and one through ``append_plain_run``, with the compiled module and
without it (``ROCKETSCOPE_PURE_PYTHON``'s path: the modules' ``_C`` set to None); the commit-log files, the consume
queues, the queue offsets, the index lookups and the messages read back must be the same.  A run holding a message
``put`` would refuse (a body over ``maxMessageSize``, a property that is not UTF-8, a record larger than a
segment) is declined whole: nothing is written or assigned.  A store that waits (SYNC_FLUSH) declines every run.
No process is started (about 1 s).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from test_fastpath_equivalence import pure_python

from rocketscope.broker import speedups
from rocketscope.broker.store import message_store, record
from rocketscope.broker.store.message_store import MessageStore, StoreConfig
from rocketscope.broker.store.record import StoredMessage


def _pure_python(on: bool) -> contextlib.AbstractContextManager[None]:
    """The Python reference of every store module (test_fastpath_equivalence's switch) when ``on``."""
    return pure_python() if on else contextlib.nullcontext()


def _messages(n: int, start: int = 0) -> list[StoredMessage]:
    """Singles as the remoting front door builds them: fixed times, so two stores can write the same bytes."""
    out = []
    for i in range(start, start + n):
        props = {"UNIQ_KEY": f"U{i:031d}", "WAIT": "true", "MSG_REGION": "DefaultRegion", "TRACE_ON": "false"}
        if i % 3 == 0:
            props["TAGS"] = f"tag{i % 5}"
        if i % 4 == 1:
            props["KEYS"] = f"k{i} shared"
        if i % 7 == 2:
            props["x" * (i % 40 + 1)] = "é" * (i % 13)
        out.append(StoredMessage(topic=("T1", "T2", "%RETRY%g")[i % 3], queue_id=i % 4,
                                 body=bytes([i % 256]) * (i % 300),
                                 properties=props, flag=i % 3, born_timestamp=1_700_000_000_000 + i,
                                 born_host="10.0.0.9:51000", store_timestamp=1_700_000_001_000 + i,
                                 reconsume_times=i % 2))
    return out


def _store(root: Path, **kw: object) -> MessageStore:
    store = MessageStore(StoreConfig(root=root, commitlog_segment_size=16 * 1024, cq_entries_per_segment=64,
                                     store_host="10.0.0.1:10911", **kw))  # type: ignore[arg-type]
    store.recover()
    return store


def _files(root: Path, sub: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / sub).rglob("*")) if p.is_file()}


def _state(store: MessageStore, root: Path) -> tuple[object, ...]:
    for cq in store.cqs.values():
        cq.flush()
    keys = [store.lookup(t, k) for t in ("T1", "T2") for k in ("shared", "k1", f"U{5:031d}")]
    read = [(m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.body, m.properties)
            for key in sorted(store.cqs) for m in store.get(key[0], key[1], 0, 1000).messages]
    return (_files(root, "commitlog"), _files(root, "consumequeue"), dict(store.queue_next), store.dispatched,
            keys, read)


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure-python"])
def test_a_plain_run_writes_what_put_writes(tmp_path: Path, pure: bool) -> None:
    with _pure_python(pure):
        ref = _store(tmp_path / "put")
        run = _store(tmp_path / "run")
        try:
            assert run.takes_plain_runs
            for start, n in ((0, 1), (1, 40), (41, 64), (105, 7)):  # 16 KiB segments: the log rolls on the way
                results = asyncio.run(ref.put(_messages(n, start)))
                assert [r.status.value for r in results] == ["PUT_OK"] * n
                msgs = _messages(n, start)
                assert run.append_plain_run(msgs)
                assert [(m.queue_offset, m.physical_offset, m.size) for m in msgs] == \
                       [(r.message.queue_offset, r.message.physical_offset, r.message.size)  # type: ignore[union-attr]
                        for r in results]
            assert len(_files(tmp_path / "run", "commitlog")) > 1  # the roll was exercised
            assert _state(run, tmp_path / "run") == _state(ref, tmp_path / "put")
        finally:
            ref.commit_log.close()
            run.commit_log.close()


@pytest.mark.parametrize("odd", ["body over maxMessageSize", "a property not UTF-8", "record over a segment"])
def test_a_run_holding_a_message_put_refuses_is_declined_whole(tmp_path: Path, odd: str) -> None:
    store = _store(tmp_path, max_message_size=20_000)
    try:
        assert store.append_plain_run(_messages(5))
        before = (store.commit_log.max_offset, dict(store.queue_next), store.dispatched, dict(store.cqs))
        msgs = _messages(6, 5)
        victim = msgs[4]
        if odd == "body over maxMessageSize":
            victim.body = b"x" * 20_001
        elif odd == "a property not UTF-8":
            victim.properties["lone"] = "\ud800"
        else:
            victim.body = b"x" * 19_000
            victim.properties["pad"] = "p" * 30_000  # under the 32 KiB properties limit, over a 16 KiB segment
        assert not store.append_plain_run(msgs)
        assert (store.commit_log.max_offset, dict(store.queue_next), store.dispatched, dict(store.cqs)) == before
        results = asyncio.run(store.put(msgs))  # put stores the others and names the one it refuses
        assert [r.status.value == "PUT_OK" for r in results] == [True] * 4 + [False, True]
    finally:
        store.commit_log.close()


def test_a_store_that_waits_declines_every_run(tmp_path: Path) -> None:
    store = _store(tmp_path, sync_flush=True)
    try:
        assert not store.takes_plain_runs
        assert not store.append_plain_run(_messages(3))
        assert store.commit_log.max_offset == 0 and not store.queue_next
    finally:
        store.commit_log.close()


@pytest.mark.parametrize(("role", "flush", "takes"), [("ASYNC_MASTER", "ASYNC_FLUSH", True),
                                                      ("SYNC_MASTER", "ASYNC_FLUSH", False),
                                                      ("ASYNC_MASTER", "SYNC_FLUSH", False)])
def test_a_broker_whose_puts_wait_stores_no_plain_run(tmp_path: Path, role: str, flush: str, takes: bool) -> None:
    """``Broker.put_plain_run`` stores a run only where a put waits for nothing: a SYNC_MASTER's put waits for its
    slave and a SYNC_FLUSH store's for the fsync, so both leave the run to ``put_messages`` (nothing stored)."""
    from rocketscope.broker.broker import Broker
    from rocketscope.broker.broker_config import load_broker_config

    async def run() -> tuple[bool, int, list[int]]:
        b = Broker(load_broker_config({"brokerName": "pr", "namesrvAddr": "", "grpcServerPort": "0",
                                       "listenPort": "0", "storePathRootDir": str(tmp_path), "brokerRole": role,
                                       "flushDiskType": flush}))
        if takes:  # a broker that declines is not started (a SYNC_MASTER's stop waits ~2 s for its HA service)
            await b.start()
        try:
            msgs = [StoredMessage(topic="PR", queue_id=0, body=b"m%d" % i, properties={"UNIQ_KEY": f"u{i}"})
                    for i in range(3)]
            took = b.put_plain_run(msgs)
            read = [m.queue_offset for m in b.store.get("PR", 0, 0, 10).messages]
            return took, b.store.commit_log.max_offset and b.store.max_offset("PR", 0), read
        finally:
            if takes:
                await b.stop()
            else:
                b.store.commit_log.close()

    took, end, read = asyncio.run(run())
    assert (took, end, read) == ((True, 3, [0, 1, 2]) if takes else (False, 0, []))


def test_the_compiled_plan_takes_the_common_case_and_plans_as_python_does(tmp_path: Path) -> None:
    """``fastpath.plan_run`` against ``_plan_plain_run`` on the same run: the same heads, sizes, offsets, store times
    and hosts, and the same queue offsets to come; None (the Python plan then) for a prefix not cached yet, a body
    over the limit and properties the compiled head does not take."""
    C = message_store._C
    if C is None:
        pytest.skip(f"{speedups.PURE_ENV} is set: the compiled module is not loaded")
    store = _store(tmp_path)
    try:
        store.queue_next[("T2", 1)] = 41
        cfg = store.config
        args = (store.queue_next, cfg.store_host, cfg.max_message_size, store.commit_log.max_record_size,
                record.prefix_cache())

        def fields(msgs: list[StoredMessage]) -> list[tuple[object, ...]]:
            return [(m.queue_offset, m.size, m.store_timestamp, m.store_host) for m in msgs]

        ref, ref_nexts = _messages(30), {}
        for m in ref[::5]:
            m.store_timestamp, m.store_host = 0, ""  # given the run's by both
        ref_heads = store._plan_plain_run(ref, ref_nexts, 1_700_000_009_999)  # fills the prefix cache
        got, nexts = _messages(30), {}
        for m in got[::5]:
            m.store_timestamp, m.store_host = 0, ""
        heads = C.plan_run(got, args[0], nexts, 1_700_000_009_999, *args[1:])
        assert heads is not None and heads == ref_heads and nexts == ref_nexts
        assert fields(got) == fields(ref)
        assert nexts[("T2", 1)] > 41
        for odd in ("new prefix", "body over the limit", "a property not UTF-8"):
            msgs = _messages(3)
            if odd == "new prefix":
                msgs[2].born_host = "10.9.9.9:1"
            elif odd == "body over the limit":
                msgs[2].body = b"x" * (cfg.max_message_size + 1)
            else:
                msgs[2].properties["lone"] = "\ud800"
            assert C.plan_run(msgs, args[0], {}, 1, *args[1:]) is None, odd
    finally:
        store.commit_log.close()


_ODD_VALUES = [None, 0, -1, 1 << 70, "", "x", b"", b"x", 1.5, [], {}, {"a": 1}, ("T1", 0)]


@pytest.mark.parametrize("field", ["topic", "queue_id", "body", "properties", "born_host", "store_host",
                                   "store_timestamp"])
def test_the_compiled_plan_hands_back_any_odd_field_without_raising(tmp_path: Path, field: str) -> None:
    """A field of an unexpected type or range: ``plan_run`` gives None (the Python plan decides) or plans as the
    Python plan does; it never raises and never crashes the process."""
    C = message_store._C
    if C is None:
        pytest.skip(f"{speedups.PURE_ENV} is set: the compiled module is not loaded")
    store = _store(tmp_path)
    try:
        cfg = store.config
        store._plan_plain_run(_messages(3), {}, 5)  # the usual prefixes cached
        for value in _ODD_VALUES:
            msgs = _messages(3)
            setattr(msgs[1], field, value)
            got = C.plan_run(msgs, store.queue_next, {}, 5, cfg.store_host, cfg.max_message_size,
                             store.commit_log.max_record_size, record.prefix_cache())
            if got is not None:  # taken: then it is what the Python plan gives for the same run
                ref = _messages(3)
                setattr(ref[1], field, value)
                assert got == store._plan_plain_run(ref, {}, 5), (field, value)
    finally:
        store.commit_log.close()
