"""A disk error while a batch's consume-queue entries are written, then the batch dispatched again (issue 20).

Before: the batch's index keys were written even when its queue entries were not, and the batch (not marked
dispatched) was dispatched again from the commit log, indexing the keys a second time.  Ground truth here: the
messages written (their ids and keys, counted in the test) and what one can look up afterwards: every key and
id must be found at its record's offset exactly once, every queue must hold its messages once, in order.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rocketscope.broker.store import consume_queue
from rocketscope.broker.store.consume_queue import ConsumeQueue
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig
from rocketscope.broker.store.record import StoredMessage

QUEUES = [("TA", 0), ("TB", 0)]


def batch(n: int) -> list[StoredMessage]:
    """``n`` messages alternating between two queues, each with an id and two keys of its own."""
    return [StoredMessage(topic=QUEUES[i % 2][0], queue_id=0, body=b"x" * 64,
                          properties={"UNIQ_KEY": f"ID{i:04d}", "KEYS": f"ka{i} kb{i}"},
                          born_timestamp=1_700_000_000_000, born_host="10.0.0.1:5000")
            for i in range(n)]


def open_store(root: Path) -> MessageStore:
    store = MessageStore(StoreConfig(root=root, commitlog_segment_size=1 << 20, cq_entries_per_segment=1024,
                                     index_slot_num=256, index_num=4096, checkpoint_interval_s=3600))
    store.recover()
    return store


def index_hits(store: MessageStore, topic: str, key: str) -> Counter[int]:
    """How many index entries point at each offset for ``topic#key`` (collisions filtered out by the caller)."""
    return Counter(store.index.query(topic, key, 1000))


def check_once(store: MessageStore, msgs: list[StoredMessage]) -> None:
    """Every id and key of ``msgs`` is indexed once at its record's offset; every queue holds its ids once."""
    for m in msgs:
        phy = m.physical_offset
        for topic, key in [("*", m.properties["UNIQ_KEY"]), (m.topic, m.properties["UNIQ_KEY"]),
                           *((m.topic, k) for k in m.properties["KEYS"].split())]:
            assert index_hits(store, topic, key)[phy] == 1, (topic, key)
    for topic, qid in QUEUES:
        want = [m.properties["UNIQ_KEY"] for m in msgs if m.topic == topic]
        got = store.get(topic, qid, 0, 1000)
        assert [g.msg_id for g in got.messages] == want


class FailingWrites:
    """The segment writes of one consume queue fail (an injected disk error) while ``failing`` is set."""

    def __init__(self, cq: ConsumeQueue) -> None:
        self.failing = True
        self.calls = 0
        real = cq.log.append

        def append(data: bytes | bytearray | memoryview) -> int:
            self.calls += 1
            if self.failing:
                raise OSError(28, "No space left on device (injected)")
            return real(data)

        cq.log.append = append  # type: ignore[method-assign]


class FailingAppendPacked:
    """``append_packed`` of one consume queue raises before it takes anything, while ``failing`` is set."""

    def __init__(self, cq: ConsumeQueue) -> None:
        self.failing = True
        self.calls = 0
        real = cq.append_packed

        def append_packed(first: int, packed: bytes | bytearray) -> None:
            self.calls += 1
            if self.failing:
                raise OSError(5, "Input/output error (injected)")
            real(first, packed)

        cq.append_packed = append_packed  # type: ignore[method-assign]


@pytest.mark.parametrize("fault", [FailingWrites, FailingAppendPacked])
@pytest.mark.parametrize("restart", [False, True], ids=["redispatch", "recovery"])
@pytest.mark.parametrize("handed", ["decoded", "bytes"])
def test_failed_queue_write_indexes_each_key_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   fault: type, restart: bool, handed: str) -> None:
    """``handed``: the second batch pending as the decoded records a put queues, or as their bytes, as a DLedger
    follower hands its appended entries over (``add_pending_records``)."""
    monkeypatch.setattr(consume_queue, "_BUFFER_BYTES", 1)  # every entry written at once: the fault is hit
    store = open_store(tmp_path)
    first = batch(10)
    assert all(r.status is PutStatus.PUT_OK for r in store.append_batch(first))
    store.dispatch_confirmed()
    store._save_checkpoint()  # the first batch is safe on disk; the second is past the checkpoint
    injected = fault(store.cqs[QUEUES[1]])  # TB's queue fails; TA's is written (TA comes first in the batch)
    second = batch(30)[10:]
    start = store.commit_log.max_offset
    assert all(r.status is PutStatus.PUT_OK for r in store.append_batch(second))
    if handed == "bytes":
        store.drop_pending()
        store.add_pending_records(start, store.commit_log.read_raw(start, store.commit_log.max_offset - start))
    with pytest.raises(OSError):
        store.dispatch_confirmed()
    assert injected.calls > 0
    injected.failing = False
    if restart:  # a crash: nothing flushed or checkpointed past the first batch; recovery replays the second
        crashed = store
        store = open_store(tmp_path)
        for cq in crashed.cqs.values():
            cq._buf.clear()  # the crashed process's memory: gone
    else:
        store.dispatch_confirmed()  # read back from the log: the batch is dispatched again
    assert store.dispatched == store.commit_log.max_offset
    msgs = store.commit_log.iter_messages(0, store.commit_log.max_offset)
    check_once(store, list(msgs))


def test_failed_write_keeps_entries_for_the_next_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consume-queue write that fails keeps its entries buffered (counted in ``max_offset``) and the next
    flush writes them: what a reader gets after the fault is gone is every entry, once."""
    monkeypatch.setattr(consume_queue, "_BUFFER_BYTES", 1)
    store = open_store(tmp_path)
    msgs = batch(8)
    injected = FailingWrites(store.cqs.get(QUEUES[1]) or store._open_cq(store.cqs, QUEUES[1]))
    store.append_batch(msgs)
    with pytest.raises(OSError):
        store.dispatch_confirmed()
    assert store.cqs[QUEUES[1]].max_offset == 4  # TB's 4 entries are still queued in memory
    injected.failing = False
    store.dispatch_confirmed()
    check_once(store, msgs)
