"""The store's dispatch per batch (issue 20) against the one-by-one path and against the messages themselves.

Ground truth: which messages went to which queue in which order (counted here from the messages written),
their keys and ids, and the same records dispatched one at a time (``ConsumeQueue.append`` per entry, one
``_dispatch_many`` call per record), which is the behaviour the batched dispatch must keep byte for byte.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketscope.broker.store import message_store
from rocketscope.broker.store.consume_queue import ConsumeQueue, tag_hash
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig
from rocketscope.broker.store.multi_dispatch import MULTI_DISPATCH
from rocketscope.broker.store.record import StoredMessage

LMQS = ["%LMQ%$LT$a", "%LMQ%$LT$b"]


def config(root: Path, **kw: object) -> StoreConfig:
    base: dict[str, object] = dict(root=root, commitlog_segment_size=8192, cq_entries_per_segment=16,
                                   index_slot_num=64, index_num=4096, checkpoint_interval_s=3600,
                                   multi_dispatch=True)
    base.update(kw)
    return StoreConfig(**base)  # type: ignore[arg-type]


def messages() -> list[StoredMessage]:
    """150 messages over 2 topics x 3 queues, with keys (several, some empty), tags and LMQ queues."""
    out = []
    for i in range(150):
        props = {"UNIQ_KEY": f"ID{i:05d}", "TAGS": f"tag{i % 3}"}
        if i % 4 == 0:
            props["KEYS"] = f"k{i}  shared{i % 5}"  # an empty key between the two: skipped
        if i % 5 == 0:
            props[MULTI_DISPATCH] = ",".join(LMQS[: 1 + i % 2])
        out.append(StoredMessage(topic=f"T{i % 2}", queue_id=i % 3, body=bytes(40 + i * 37 % 500), properties=props,
                                 born_timestamp=1_700_000_000_000 + i, born_host="10.0.0.1:5000",
                                 store_timestamp=1_700_000_000_000 + i))
    return out


def expected_queues(msgs: list[StoredMessage]) -> dict[tuple[str, int], list[str]]:
    """Message ids per queue in write order: what the consume queues must hold, counted from the messages."""
    out: dict[tuple[str, int], list[str]] = {}
    for m in msgs:
        out.setdefault((m.topic, m.queue_id), []).append(m.properties["UNIQ_KEY"])
        for q in filter(None, m.properties.get(MULTI_DISPATCH, "").split(",")):
            out.setdefault((q, 0), []).append(m.properties["UNIQ_KEY"])
    return out


def check_against_messages(store: MessageStore, msgs: list[StoredMessage]) -> None:
    """Queues, offsets, tag hashes and index lookups as the messages written say they must be."""
    want = expected_queues(msgs)
    assert sorted(store.topics_and_queues()) == sorted(want)
    for (topic, qid), ids in want.items():
        got = store.get(topic, qid, 0, 1000)
        assert [m.msg_id for m in got.messages] == ids, (topic, qid)
        assert [m.queue_offset for m in got.messages] == list(range(len(ids)))
        assert store.max_offset(topic, qid) == store.next_queue_offset(topic, qid) == len(ids)
        entries = store.cqs[(topic, qid)].get(0, 1000)
        assert [e.tag_hash for e in entries] == [tag_hash(m.tags) for m in got.messages]
    for m in msgs:
        (hit,) = store.lookup(m.topic, m.msg_id)
        assert hit.body == m.body
        assert [x.msg_id for x in store.lookup(None, m.msg_id)] == [m.msg_id]
        for k in m.keys:
            assert m.msg_id in {x.msg_id for x in store.lookup(m.topic, k, limit=100)}
    shared = {m.msg_id for m in msgs if m.topic == "T0" and "shared0" in m.keys}
    assert shared and {x.msg_id for x in store.lookup("T0", "shared0", limit=100)} == shared


def _cq_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "consumequeue").rglob("*"))
            if p.is_file()}


async def _write(root: Path, per_put: int) -> MessageStore:
    store = MessageStore(config(root))
    await store.start()
    msgs = messages()
    for i in range(0, len(msgs), per_put):
        res = await store.put(msgs[i:i + per_put])
        assert all(r.status is PutStatus.PUT_OK for r in res)
    return store


def test_batches_read_back_as_the_same_messages_written_one_by_one(tmp_path: Path) -> None:
    async def go() -> None:
        one = await _write(tmp_path / "one", 1)
        batch = await _write(tmp_path / "batch", 13)  # runs of several queues, LMQ entries, segment rolls
        msgs = messages()
        for store in (one, batch):
            check_against_messages(store, msgs)
        assert batch.dispatched == one.dispatched == one.commit_log.max_offset
        await one.shutdown()
        await batch.shutdown()
        assert _cq_files(tmp_path / "one") == _cq_files(tmp_path / "batch")

    asyncio.run(go())


def test_batches_after_a_crash_and_a_rebuild_from_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill -9 (no checkpoint past the start, entries still in the queues' buffers) recovers to the same
    queues and index, replayed in batches smaller than the log (so a batch boundary falls mid-queue); so does a
    store whose consume queues and checkpoint are gone (rebuilt from the commit log alone)."""
    monkeypatch.setattr(message_store, "_DISPATCH_CHUNK", 7)
    msgs = messages()

    async def crash() -> None:
        store = await _write(tmp_path, 13)
        await store.flush.flush()
        for t in store._tasks:  # kill -9: no checkpoint, no clean close
            t.cancel()

    async def reopen() -> None:
        store = MessageStore(config(tmp_path))
        await store.start()
        check_against_messages(store, msgs)
        res = await store.put([StoredMessage(topic="T1", queue_id=2, body=b"after", properties={"UNIQ_KEY": "NEW"})])
        assert res[0].message is not None and res[0].message.queue_offset == len(expected_queues(msgs)[("T1", 2)])
        await store.shutdown()

    asyncio.run(crash())
    asyncio.run(reopen())
    before = _cq_files(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    (tmp_path / "checkpoint").unlink()
    asyncio.run(_rebuilt(tmp_path, msgs))
    assert _cq_files(tmp_path) == before


async def _rebuilt(root: Path, msgs: list[StoredMessage]) -> None:
    store = MessageStore(config(root))
    await store.start()
    want = expected_queues(msgs)
    want[("T1", 2)].append("NEW")  # the message put after the crash
    for (topic, qid), ids in want.items():
        assert [m.msg_id for m in store.get(topic, qid, 0, 1000).messages] == ids
    for m in msgs:
        assert [x.body for x in store.lookup(m.topic, m.msg_id)] == [m.body]
    (hit,) = store.lookup("T1", "NEW")
    assert hit.body == b"after"
    await store.shutdown()


def test_replica_dispatches_copied_bytes_like_the_master(tmp_path: Path) -> None:
    """append_replicated (Master/Slave) reads the records back from copied bytes and dispatches them in
    batches; cut at arbitrary points, the replica's queues are the master's."""
    async def go() -> None:
        master = await _write(tmp_path / "m", 13)
        replica = MessageStore(config(tmp_path / "r", multi_dispatch=False))  # LMQ offsets travel in the records
        await replica.start()
        end = master.commit_log.max_offset
        pos = 0
        while pos < end:
            data = master.commit_log.read_raw(pos, 3001)  # chunks that cut records and fillers
            replica.append_replicated(pos, data)
            pos += len(data)
        check_against_messages(replica, messages())
        await master.shutdown()
        await replica.shutdown()
        assert _cq_files(tmp_path / "m") == _cq_files(tmp_path / "r")

    asyncio.run(go())


# ------------------------------------------------------------ the batch against one record at a time
def _fake(topic: str, qid: int, qoff: int, phy: int, keys: str) -> StoredMessage:
    return StoredMessage(topic=topic, queue_id=qid, body=b"", size=100, queue_offset=qoff, physical_offset=phy,
                         store_timestamp=1_700_000_000_000 + phy, properties={"UNIQ_KEY": f"U{phy}", "KEYS": keys,
                                                                               "TAGS": f"t{qoff % 3}"})


@given(st.lists(st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 1), st.integers(0, 3)), min_size=1,
                max_size=40),
       st.integers(1, 12))
@settings(max_examples=60, deadline=None)
def test_dispatch_batch_equals_one_by_one_with_replays_and_gaps(tmp_path_factory: pytest.TempPathFactory,
                                                                 steps: list[tuple[str, int, int]], cut: int) -> None:
    """Queue offsets that repeat (a replay), jump (a gap) or start past 0 on an empty queue: the batched
    dispatch keeps exactly the entries, gaps and index keys of ``ConsumeQueue.append`` record by record."""
    msgs: list[StoredMessage] = []
    nxt: dict[tuple[str, int], int] = {}
    for i, (topic, qid, move) in enumerate(steps):
        key = (topic, qid)
        base = nxt.get(key, 2 if topic == "B" else 0)  # queue B starts past 0
        qoff = max(0, base - 1) if move == 0 else base + (move - 1)  # 0: a replay; 1: next; 2, 3: a gap
        nxt[key] = max(base, qoff + 1)
        msgs.append(_fake(topic, qid, qoff, (i + 1) * 100, f"key{i % 4}"))
    roots = [tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("batch")]
    stores = [MessageStore(config(r)) for r in roots]
    for m in msgs:
        stores[0]._dispatch_many([m])
    for i in range(0, len(msgs), cut):
        stores[1]._dispatch_many(msgs[i:i + cut])
    one, batch = stores
    assert batch.queue_next == one.queue_next
    assert batch.dispatched == one.dispatched == msgs[-1].physical_offset + 100
    for key in one.cqs:
        a, b = one.cqs[key], batch.cqs[key]
        assert (b.min_offset, b.max_offset) == (a.min_offset, a.max_offset)
        assert b.get(0, 100) == a.get(0, 100)
    for k in ("key0", "key1", "key2", "key3"):
        for topic in ("A", "B"):
            assert batch.index.query(topic, k, 100) == one.index.query(topic, k, 100)
    # and the reference itself against the steps: one entry per new queue offset, none for a replay
    for (topic, qid), end in nxt.items():
        got = one.cqs[(topic, qid)].get(0, 100)
        new = {m.queue_offset: m.physical_offset for m in reversed(msgs) if (m.topic, m.queue_id) == (topic, qid)}
        assert [e.queue_offset for e in got] == sorted(new) and one.max_offset(topic, qid) == end
    for s in stores:
        for cq in s.cqs.values():
            cq.close()
        s.index.close()
        s.commit_log.close()


def test_append_packed_rejects_entries_below_the_end(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, "T", 0, 16)
    assert cq.append(0, 0, 10, 0)
    with pytest.raises(ValueError, match="overlap"):
        cq.append_packed(0, b"\0" * 20)
    cq.close()
