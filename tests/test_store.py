"""Unit tests of the store: records, segments, queues, index, recovery, retention."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketscope.broker.store import record
from rocketscope.broker.store.checkpoint import Checkpoint
from rocketscope.broker.store.flush import FlushService, compiled_available
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig, StoreHooks
from rocketscope.broker.store.record import RecordError, StoredMessage
from rocketscope.broker.store.retention import RetentionPolicy
from rocketscope.broker.store.segments import SegmentedLog


def make_msg(i: int, topic: str = "T", queue_id: int = 0, body: bytes | None = None, keys: str = "") -> StoredMessage:
    props = {"UNIQ_KEY": f"ID{i:08d}", "TAGS": "tagA" if i % 2 else "tagB"}
    if keys:
        props["KEYS"] = keys
    return StoredMessage(topic=topic, queue_id=queue_id, body=body if body is not None else f"body-{i}".encode(),
                         properties=props, born_timestamp=1_700_000_000_000 + i, born_host="10.0.0.1:5000")


def small_config(root: Path, **kw: object) -> StoreConfig:
    base: dict[str, object] = dict(root=root, commitlog_segment_size=4096, cq_entries_per_segment=16,
                                   index_slot_num=64, index_num=256, checkpoint_interval_s=3600)
    base.update(kw)
    return StoreConfig(**base)  # type: ignore[arg-type]


def run(coro):
    return asyncio.run(coro)


async def fill(store: MessageStore, n: int, **kw: object) -> list[StoredMessage]:
    out = []
    for i in range(n):
        (res,) = await store.put([make_msg(i, **kw)])  # type: ignore[arg-type]
        assert res.status is PutStatus.PUT_OK
        out.append(res.message)
    return out


# ------------------------------------------------------------------ record codec
@given(
    topic=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=60),
    body=st.binary(max_size=2000),
    props=st.dictionaries(st.text(alphabet="abcdefXYZ_", min_size=1, max_size=10),
                          st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=30),
                          max_size=5),
    qid=st.integers(0, 1000), qoff=st.integers(0, 2**40), phys=st.integers(0, 2**50),
)
@settings(max_examples=150, deadline=None)
def test_record_round_trip(topic: str, body: bytes, props: dict[str, str], qid: int, qoff: int, phys: int) -> None:
    msg = StoredMessage(topic=topic, queue_id=qid, body=body, properties=props, queue_offset=qoff,
                        physical_offset=phys, born_host="1.2.3.4:5", store_host="5.6.7.8:9", reconsume_times=3)
    data = record.encode(msg)
    back = record.decode(data)
    assert (back.topic, back.body, back.properties, back.queue_id, back.queue_offset, back.physical_offset) == (
        topic, body, props, qid, qoff, phys)
    assert back.size == len(data) == msg.size


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_record_decode_of_garbage_raises_record_error(data: bytes) -> None:
    try:
        record.decode(data)
    except RecordError:
        pass


def test_record_bit_flip_is_detected() -> None:
    data = bytearray(record.encode(make_msg(1)))
    for pos in range(12, len(data), 7):
        flipped = bytearray(data)
        flipped[pos] ^= 0x40
        with pytest.raises(RecordError):
            record.decode(bytes(flipped))


def test_properties_over_limit_rejected(tmp_path: Path) -> None:
    async def go() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20))
        await store.start()
        msg = make_msg(1)
        msg.properties["big"] = "x" * 40000
        (res,) = await store.put([msg])
        assert res.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
        assert "properties" in res.reason
        await store.shutdown()
    run(go())


def test_a_record_larger_than_a_segment_is_refused_before_it_is_replicated(tmp_path: Path) -> None:
    """A Raft leader's proposal (``prepare``) of a message no segment can hold raised nothing, and every
    replica's append then failed ("append overflows segment"), stopping a DLedger follower."""
    async def go() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=64 * 1024, max_message_size=1 << 20))
        await store.start()
        msg = make_msg(1)
        msg.body = b"x" * (64 * 1024)
        with pytest.raises(RecordError, match="does not fit a commit-log segment"):
            store.prepare(msg, 0)
        small = make_msg(2)
        assert len(store.prepare(small, 0)) < 64 * 1024  # an ordinary message is still prepared
        await store.shutdown()
    run(go())


# ------------------------------------------------------------------ put / get
def test_put_get_across_segments_and_restart(tmp_path: Path) -> None:
    async def first() -> list[StoredMessage]:
        store = MessageStore(small_config(tmp_path))
        await store.start()
        msgs = await fill(store, 120)
        assert len(store.commit_log.log.segments) > 3  # rolled several times
        got = store.get("T", 0, 0, 1000)
        assert [m.body for m in got.messages] == [m.body for m in msgs]
        assert got.next_offset == 120 and got.max_offset == 120
        page = store.get("T", 0, 50, 10)
        assert [m.queue_offset for m in page.messages] == list(range(50, 60))
        await store.shutdown()
        return msgs

    msgs = run(first())

    async def second() -> None:
        store = MessageStore(small_config(tmp_path))
        await store.start()
        got = store.get("T", 0, 0, 1000)
        assert [m.body for m in got.messages] == [m.body for m in msgs]
        (res,) = await store.put([make_msg(999)])
        assert res.message.queue_offset == 120
        await store.shutdown()

    run(second())


def test_tag_filter(tmp_path: Path) -> None:
    async def go() -> None:
        store = MessageStore(small_config(tmp_path))
        await store.start()
        await fill(store, 20)
        got = store.get("T", 0, 0, 100, tags={"tagA"})
        assert got.messages and all(m.tags == "tagA" for m in got.messages)
        assert len(got.messages) == 10
        await store.shutdown()
    run(go())


def test_lookup_by_id_and_key_filters_other_topics(tmp_path: Path) -> None:
    async def go() -> None:
        store = MessageStore(small_config(tmp_path, index_slot_num=4))  # tiny: forces hash collisions
        await store.start()
        await fill(store, 30, keys="order-1 shared")
        await fill(store, 5, topic="Other", keys="shared")
        found = store.lookup("T", "ID00000007")
        assert [m.msg_id for m in found] == ["ID00000007"]
        assert len(store.lookup("T", "shared", limit=100)) == 30
        assert len(store.lookup("Other", "shared", limit=100)) == 5
        assert store.lookup("T", "nope") == []
        assert sorted(m.topic for m in store.lookup(None, "ID00000003")) == ["Other", "T"]
        await store.shutdown()
    run(go())


def test_offset_by_time(tmp_path: Path) -> None:
    async def go() -> None:
        store = MessageStore(small_config(tmp_path))
        await store.start()
        for i in range(10):
            m = make_msg(i)
            m.store_timestamp = 1000 * (i + 1)
            await store.put([m])
        assert store.offset_by_time("T", 0, 0) == 0
        assert store.offset_by_time("T", 0, 3500) == 3
        assert store.offset_by_time("T", 0, 10**9) == 10
        await store.shutdown()
    run(go())


# ------------------------------------------------------------------ recovery
def _commitlog_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def test_recovery_truncates_torn_tail(tmp_path: Path) -> None:
    async def write() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20))
        await store.start()
        await fill(store, 10)
        await store.flush.flush()
        # simulate kill -9: no checkpoint save, no clean close
        for t in store._tasks:
            t.cancel()
    run(write())
    last = _commitlog_files(tmp_path)[-1]
    size = last.stat().st_size
    with open(last, "r+b") as fh:  # tear the last record in half
        fh.truncate(size - 10)

    async def check() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20))
        await store.start()
        got = store.get("T", 0, 0, 100)
        assert [m.msg_id for m in got.messages] == [f"ID{i:08d}" for i in range(9)]
        (res,) = await store.put([make_msg(100)])
        assert res.message.queue_offset == 9
        assert store.get("T", 0, 9, 1).messages[0].msg_id == "ID00000100"
        await store.shutdown()
    run(check())


def test_recovery_skips_corrupted_record_in_the_middle(tmp_path: Path) -> None:
    positions: list[int] = []

    async def write() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20))
        await store.start()
        msgs = await fill(store, 10)
        positions.extend(m.physical_offset for m in msgs)
        await store.shutdown()
    run(write())
    (tmp_path / "checkpoint").unlink()  # force a full re-dispatch
    for cq in (tmp_path / "consumequeue").rglob("*"):
        if cq.is_file():
            cq.unlink()
    seg = _commitlog_files(tmp_path)[0]
    with open(seg, "r+b") as fh:  # corrupt the body of message 4
        fh.seek(positions[4] + 90)
        fh.write(b"\xff\xfe\xfd")

    async def check() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20))
        await store.start()
        ids = [m.msg_id for m in store.get("T", 0, 0, 100).messages]
        assert ids == [f"ID{i:08d}" for i in range(10) if i != 4]
        assert store.commit_log.corrupt == [(positions[4], positions[5])]
        assert store.commit_log.read(positions[4]) is None  # never served
        await store.shutdown()
    run(check())


def test_recovery_with_garbage_size_field_in_the_middle(tmp_path: Path) -> None:
    positions: list[int] = []

    async def write() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20))
        await store.start()
        positions.extend(m.physical_offset for m in await fill(store, 6))
        await store.shutdown()
    run(write())
    (tmp_path / "checkpoint").unlink()
    seg = _commitlog_files(tmp_path)[0]
    with open(seg, "r+b") as fh:
        fh.seek(positions[2])
        fh.write(struct.pack(">I", 0x7FFFFFF0))

    async def check() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20))
        await store.start()
        ids = [m.msg_id for m in store.get("T", 0, 0, 100).messages]
        assert ids == [f"ID{i:08d}" for i in (0, 1, 3, 4, 5)]
        await store.shutdown()
    run(check())


def test_consume_queue_rebuilt_past_checkpoint(tmp_path: Path) -> None:
    async def write() -> None:
        store = MessageStore(small_config(tmp_path))
        await store.start()
        await fill(store, 30)
        await store.shutdown()
    run(write())
    for f in (tmp_path / "consumequeue").rglob("*"):
        if f.is_file():
            f.unlink()
    (tmp_path / "checkpoint").write_text('{"dispatched": 0}')

    async def check() -> None:
        store = MessageStore(small_config(tmp_path))
        await store.start()
        assert store.max_offset("T", 0) == 30
        assert len(store.get("T", 0, 0, 100).messages) == 30
        assert [m.msg_id for m in store.lookup("T", "ID00000011")] == ["ID00000011"]
        await store.shutdown()
    run(check())


def _files(root: Path) -> dict[str, bytes]:
    """Commit-log and consume-queue files by relative path (the index file names hold a clock)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] in ("commitlog", "consumequeue")}


def test_one_put_of_many_writes_what_many_puts_write(tmp_path: Path) -> None:
    def msgs() -> list[StoredMessage]:
        out = [make_msg(i, topic=f"T{i % 2}", queue_id=i % 3, body=bytes(50 + i * 13 % 700), keys=f"k{i}")
               for i in range(90)]
        for m in out:
            m.store_timestamp = 1_700_000_000_000
        return out

    async def single(root: Path) -> None:
        store = MessageStore(small_config(root))
        await store.start()
        for m in msgs():
            (res,) = await store.put([m])
            assert res.status is PutStatus.PUT_OK
        await store.shutdown()

    async def batched(root: Path) -> None:
        store = MessageStore(small_config(root))
        await store.start()
        all_msgs = msgs()
        for i in range(0, len(all_msgs), 7):  # batches that cross segment ends (4 KiB segments)
            res = await store.put(all_msgs[i:i + 7])
            assert all(r.status is PutStatus.PUT_OK for r in res)
        assert [m.msg_id for m in store.lookup("T1", "k11")] == ["ID00000011"]
        await store.shutdown()

    run(single(tmp_path / "a"))
    run(batched(tmp_path / "b"))
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert len([k for k in a if k.startswith("commitlog")]) > 3
    assert a == b


def test_batch_with_a_bad_message_fails_only_that_one(tmp_path: Path) -> None:
    async def go() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20))
        await store.start()
        batch = [make_msg(i) for i in range(5)]
        batch[2].properties["big"] = "x" * 40000
        res = await store.put(batch)
        assert [r.status for r in res] == [PutStatus.PUT_OK] * 2 + [PutStatus.PROPERTIES_SIZE_EXCEEDED] + [
            PutStatus.PUT_OK] * 2
        assert [r.message.queue_offset for r in res if r.message] == [0, 1, 2, 3]
        got = store.get("T", 0, 0, 10).messages
        assert [m.msg_id for m in got] == ["ID00000000", "ID00000001", "ID00000003", "ID00000004"]
        await store.shutdown()
    run(go())


def test_sync_flush_groups_concurrent_puts_in_call_order(tmp_path: Path) -> None:
    async def go() -> None:
        store = MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20, sync_flush=True))
        await store.start()
        syncs = store.flush.syncs
        results = await asyncio.gather(*(store.put([make_msg(3 * i + j) for j in range(3)]) for i in range(40)))
        flat = [r for res in results for r in res]
        assert all(r.status is PutStatus.PUT_OK for r in flat)
        assert [r.message.queue_offset for r in flat] == list(range(120))  # call order
        assert [r.message.msg_id for r in flat] == [f"ID{i:08d}" for i in range(120)]
        end = flat[-1].message.physical_offset + flat[-1].message.size
        assert store.commit_log.log.synced_offset >= end
        assert store.flush.syncs - syncs < 40  # puts share fsyncs
        assert len(store.get("T", 0, 0, 200).messages) == 120
        await store.shutdown()
    run(go())


def test_consume_queue_entries_buffered_are_served_and_survive_restart(tmp_path: Path) -> None:
    async def go() -> None:
        store = MessageStore(small_config(tmp_path))
        await store.start()
        await fill(store, 40)  # 16 entries per consume-queue segment: buffered entries cross segments
        assert [m.queue_offset for m in store.get("T", 0, 0, 100).messages] == list(range(40))
        await fill(store, 5)
        assert store.max_offset("T", 0) == 45
        await store.shutdown()
        store = MessageStore(small_config(tmp_path))
        await store.start()
        assert store.max_offset("T", 0) == 45
        assert len(store.get("T", 0, 0, 100).messages) == 45
        await store.shutdown()
    run(go())


# ------------------------------------------------------------------ flush
RUNNERS = ["executor"] + (["compiled"] if compiled_available() else [])


def with_runner(store: MessageStore, runner: str) -> MessageStore:
    """The store with its fsync rounds in ``runner``'s thread: the compiled one (broker/fastpath.c) or the
    reference worker thread; both must give the same acknowledgements."""
    seglog = store.commit_log.log
    store.flush = FlushService(seglog.sync_plan, seglog.mark_synced, lambda: seglog.synced_offset,
                               store.config.flush_interval_s, runner)
    return store


@pytest.mark.parametrize("runner", RUNNERS)
def test_sync_flush_acknowledges_after_fsync(tmp_path: Path, runner: str) -> None:
    async def go() -> None:
        store = with_runner(MessageStore(small_config(tmp_path, commitlog_segment_size=1 << 20, sync_flush=True)),
                            runner)
        await store.start()
        results = await asyncio.gather(*(store.put([make_msg(i)]) for i in range(50)))
        end = max(r[0].message.physical_offset + r[0].message.size for r in results)
        assert all(r[0].status is PutStatus.PUT_OK for r in results)
        assert store.commit_log.log.synced_offset >= end
        assert store.flush.runner == runner
        assert 1 <= store.flush.syncs < 50  # the 50 concurrent puts shared rounds
        await store.shutdown()
    run(go())


@pytest.mark.parametrize("runner", RUNNERS)
def test_sync_flush_timeout_reported(tmp_path: Path, runner: str) -> None:
    async def go() -> None:
        store = with_runner(MessageStore(small_config(tmp_path, sync_flush=True, sync_flush_timeout_s=0.2)), runner)
        await store.start()

        seglog = store.commit_log.log
        def broken_plan() -> tuple[int, list[int]]:  # a descriptor whose fdatasync fails (EBADF), in either thread
            return seglog.max_offset, [-1]
        store.flush._plan = broken_plan  # type: ignore[method-assign]
        (res,) = await store.put([make_msg(1)])
        assert res.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert seglog.synced_offset < seglog.max_offset  # a failed round marks nothing synced
        assert store.get("T", 0, 0, 10).messages  # stored, as RocketMQ says for this status
        store.flush._plan = seglog.sync_plan  # type: ignore[method-assign]
        (again,) = await store.put([make_msg(2)])  # the disk is back: the next round acknowledges both
        assert again.status is PutStatus.PUT_OK and seglog.synced_offset == seglog.max_offset
        await store.shutdown()
        assert seglog.synced_offset == seglog.max_offset or not seglog.segments
    run(go())


def test_shutdown_waits_for_a_checkpoint_under_way(tmp_path: Path) -> None:
    """Shutdown's checkpoint runs after the checkpoint task's, never beside it: both write checkpoint.tmp and
    rename it, and the second rename failed (FileNotFoundError) when they overlapped (seen in session 20)."""
    async def go() -> None:
        store = MessageStore(small_config(tmp_path, checkpoint_interval_s=0.01))
        await store.start()
        await fill(store, 5)
        in_thread, release = threading.Event(), threading.Event()
        calls: list[str] = []
        save = store._save_checkpoint

        def slow_save(done: int | None = None) -> None:
            if threading.current_thread() is not threading.main_thread():
                in_thread.set()
                release.wait(5)
            calls.append("thread" if done is not None else "shutdown")
            save(done)
        store._save_checkpoint = slow_save  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, in_thread.wait, 5)
        loop.call_later(0.1, release.set)
        await store.shutdown()  # cancels the checkpoint task while its thread still writes
        assert calls == ["thread", "shutdown"]
        assert Checkpoint.load(tmp_path / "checkpoint").dispatched == store.dispatched
    run(go())


# ------------------------------------------------------------------ retention
def test_retention_by_age_and_by_disk_ratio(tmp_path: Path) -> None:
    async def go() -> None:
        now = time.time()
        hour = time.localtime(now).tm_hour
        policy = RetentionPolicy(file_reserved_hours=1, delete_when=f"{hour:02d}", disk_max_used_ratio=0.99)
        store = MessageStore(small_config(tmp_path, retention=policy))
        await store.start()
        await fill(store, 200)
        files = _commitlog_files(tmp_path)
        assert len(files) > 4
        old = now - 2 * 3600
        for f in files[:2]:
            os.utime(f, (old, old))
        assert store.apply_retention(now) == 2
        assert store.min_offset("T", 0) > 0
        got = store.get("T", 0, 0, 1000)
        assert got.messages and got.messages[0].queue_offset == store.min_offset("T", 0)
        store.config.retention.disk_max_used_ratio = 0.0  # pretend the disk is full
        store.apply_retention(now)
        assert len(store.commit_log.log.segments) == 1  # the active segment is never deleted
        await store.shutdown()
    run(go())


# ------------------------------------------------------------- replica becoming the writer
def _record_starts(store: MessageStore) -> list[tuple[int, int, int]]:
    """(offset, size, magic) of every record and filler of the log, in order."""
    out, pos, end = [], 0, store.commit_log.max_offset
    while pos < end:
        seg = store.commit_log.log.segment_for(pos)
        if seg.limit - pos < record.MIN_BLANK:
            pos = seg.limit
            continue
        size, magic = struct.unpack(">II", store.commit_log.read_raw(pos, 8))
        out.append((pos, size, magic))
        pos += size
    return out


def test_replica_cut_inside_a_record_or_filler_writes_after_its_last_whole_record(tmp_path: Path) -> None:
    """A replica promoted while its copy ends inside a record or a segment's filler loses nothing.

    Before ``trim_torn_tail`` a replica whose copy ended inside the filler that closes a segment
    appended after the torn filler; readers took the filler's size and skipped everything the
    new writer put in its range (acknowledged messages no consumer ever received).
    """
    async def scenario() -> None:
        master = MessageStore(small_config(tmp_path / "master"))
        await master.start()
        for i in range(40):  # 300-1100-byte bodies: segments of 4 KiB end with fillers
            (res,) = await master.put([make_msg(i, body=bytes([65 + i % 26]) * (300 + 97 * i % 800))])
            assert res.status is PutStatus.PUT_OK
        layout = _record_starts(master)
        blank = next((o, s) for o, s, m in layout if m == record.BLANK_MAGIC)
        message = next((o, s) for o, s, m in layout if m == record.MESSAGE_MAGIC and o > blank[0])
        raw = b"".join(master.commit_log.read_raw(p, 1 << 20) for p in range(0, master.commit_log.max_offset, 4096))
        cuts = {"inside the filler": blank[0] + blank[1] // 2, "on the filler's header": blank[0] + 4,
                "at the filler": blank[0], "after the filler": blank[0] + blank[1],
                "inside a message": message[0] + message[1] // 3}
        for name, cut in cuts.items():
            replica = MessageStore(small_config(tmp_path / name.replace(" ", "-")))
            await replica.start()
            for pos in range(0, cut, 1000):  # chunks that end anywhere, as the stream's do
                replica.append_replicated(pos, raw[pos:min(cut, pos + 1000)])
            replica.trim_torn_tail()
            whole = [(o, s) for o, s, m in layout if m == record.MESSAGE_MAGIC and o + s <= cut]
            assert replica.commit_log.max_offset <= cut, name
            kept = replica.get("T", 0, 0, 1000).messages
            assert [m.physical_offset for m in kept] == [o for o, _ in whole], name
            for i in range(5):  # now the replica writes
                (res,) = await replica.put([make_msg(1000 + i)])
                assert res.status is PutStatus.PUT_OK, name
            got = replica.get("T", 0, 0, 1000).messages
            assert [m.queue_offset for m in got] == list(range(len(whole) + 5)), name
            assert [m.body for m in got[-5:]] == [f"body-{1000 + i}".encode() for i in range(5)], name
            assert len(list(replica.commit_log.iter_messages(0, replica.commit_log.max_offset))) == len(whole) + 5
            await replica.shutdown()
        await master.shutdown()

    run(scenario())


def test_replica_dispatches_up_to_the_confirm_offset_and_in_log_order_once_promoted(tmp_path: Path) -> None:
    """Controller mode: a replica's queues hold confirmed messages only; once it writes, the copied tail
    past the old confirm offset becomes visible before its own new messages, with contiguous offsets."""
    async def scenario() -> None:
        master = MessageStore(small_config(tmp_path / "master"))
        await master.start()
        await fill(master, 30)
        layout = [(m.physical_offset, m.size) for m in master.commit_log.iter_messages(0, master.commit_log.max_offset)]
        confirm = layout[9][0] + layout[9][1]  # the end of the 10th message
        raw = b"".join(master.commit_log.read_raw(p, 4096) for p in range(0, master.commit_log.max_offset, 4096))
        replica = MessageStore(small_config(tmp_path / "replica"), StoreHooks(confirm_offset=0))  # controller mode
        await replica.start()
        for pos in range(0, len(raw), 700):
            replica.append_replicated(pos, raw[pos:pos + 700])
        assert replica.max_offset("T", 0) == 0  # nothing confirmed yet: nothing visible
        replica.set_confirm_offset(confirm)
        assert [m.body for m in replica.get("T", 0, 0, 100).messages] == [f"body-{i}".encode() for i in range(10)]
        # promoted: it writes while the copied messages 10..29 are still unconfirmed
        replica.rebuild_queue_offsets()
        new = []
        for i in range(3):
            (res,) = await replica.put([make_msg(100 + i)])
            new.append(res.message)
        assert [m.queue_offset for m in new] == [30, 31, 32]
        assert replica.max_offset("T", 0) == 10  # its own messages wait behind the unconfirmed copy
        replica.set_confirm_offset(None)  # the SyncStateSet caught up (or the master is alone)
        got = replica.get("T", 0, 0, 100).messages
        assert [m.queue_offset for m in got] == list(range(33))
        assert [m.body for m in got] == [f"body-{i}".encode() for i in range(30)] + [
            f"body-{100 + i}".encode() for i in range(3)]
        await replica.shutdown()
        await master.shutdown()

    run(scenario())


def test_sync_marks_nothing_past_a_truncation_made_during_it(tmp_path: Path) -> None:
    """A round planned at offset 300 and ended after the log was cut to 100 and written again to 250: the bytes
    from 100 on were never fdatasync'ed by that round, so only [0, 100) may count as synced, and the cut segment
    stays for the next round."""
    seglog = SegmentedLog(tmp_path / "log", 4096, quiet=True)
    seglog.append(b"a" * 300)
    target, fds = seglog.sync_plan()
    assert (target, len(fds)) == (300, 1)
    seglog.truncate(100)
    seglog.append(b"b" * 150)
    for fd in fds:
        os.fdatasync(fd)
    seglog.mark_synced(target)
    assert seglog.synced_offset == 100
    assert seglog.sync() == 250 and seglog.synced_offset == 250
    seglog.close()
