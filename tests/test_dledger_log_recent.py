"""The DLedger log's in-memory newest entries (broker/dledger/log_store.py ``DLedgerLog.recent``) answer
exactly what the disk does.

The ground truth is the log read back from the disk: the same ``DLedgerLog`` with its memory emptied,
and a second ``DLedgerLog`` opened on the same directory (a restart).  A random run of appends (records
and no-op entries), divergent tails replaced at a lower index, truncations and a small memory bound
checks, after every step, every stored entry against both, and that the memory never holds more
than its bound (one entry at least) nor an entry the log no longer stores.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from rocketscope.broker.dledger import log_store
from rocketscope.broker.dledger.log_store import DLedgerLog
from rocketscope.broker.dledger.node import plan_entries
from rocketscope.broker.raft.messages import Entry, EntryKind
from rocketscope.broker.store.message_store import MessageStore, StoreConfig
from rocketscope.broker.store.record import StoredMessage

SEGMENT = 8192
MAX_ENTRY = 2048
BOUND = 3000  # bytes of entries kept in memory: a handful of entries, so eviction happens often


def config(root: Path) -> StoreConfig:
    return StoreConfig(root=root, commitlog_segment_size=SEGMENT, cq_entries_per_segment=16, index_slot_num=64,
                       index_num=256, checkpoint_interval_s=3600)


def msg(rng: random.Random, i: int) -> StoredMessage:
    body = bytes(rng.randrange(256) for _ in range(rng.randint(50, 700)))
    return StoredMessage(topic="T", queue_id=0, body=body, properties={"UNIQ_KEY": f"ID{i:08d}"},
                         born_timestamp=1_700_000_000_000 + i, born_host="10.0.0.1:5000")


def from_disk(lg: DLedgerLog, index: int) -> Entry:
    saved, lg.recent = lg.recent, {}
    try:
        return lg.entry(index)
    finally:
        lg.recent = saved


def check(lg: DLedgerLog, root: Path) -> None:
    assert sum(len(e.data) for e in lg.recent.values()) <= max(BOUND, max((len(e.data) for e in lg.recent.values()),
                                                                      default=0))
    assert all(lg.first_index() <= i <= lg.last_index() for i in lg.recent)
    assert lg.recent or lg.last_index() < lg.first_index()  # the newest entry at least
    reopened = DLedgerLog(lg.store, root / "dledger")
    try:
        assert reopened.last_index() == lg.last_index()
        for i in range(lg.first_index(), lg.last_index() + 1):
            e = lg.entry(i)
            assert e == from_disk(lg, i) == reopened.entry(i), i
            assert type(e.kind) is EntryKind and type(e.data) is bytes
    finally:
        reopened.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_newest_entries_in_memory_are_what_the_disk_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              seed: int) -> None:
    monkeypatch.setattr(log_store, "RECENT_MAX_BYTES", BOUND)
    rng = random.Random(seed)

    async def run() -> None:
        store = MessageStore(config(tmp_path))
        store.set_confirm_offset(0)  # as in DLedger mode: the Raft log decides what is visible
        await store.start()
        lg = DLedgerLog(store, tmp_path / "dledger")
        n = 0
        term = 1
        remembered = 0
        for _ in range(60):
            action = rng.random()
            if action < 0.2 and lg.last_index() >= 2:  # a new leader's entries replace a divergent tail
                at = rng.randint(max(lg.first_index(), lg.last_index() - 4), lg.last_index())
                cursor = lg.end_offset(at - 1)
                term += 1
            else:
                at, cursor = lg.last_index() + 1, store.commit_log.max_offset
            if action < 0.3:  # a no-op entry (every new leader's first)
                entries = [Entry(at, term, EntryKind.NOOP, b"")]
            else:
                group = [msg(rng, n + i) for i in range(rng.randint(1, 6))]
                n += len(group)
                plan = plan_entries(store, group, cursor, MAX_ENTRY)
                entries = [Entry(at + i, term, EntryKind.NORMAL, d) for i, d in enumerate(plan.datas)]
            lg.append(entries)
            remembered += len(entries)
            if rng.random() < 0.3:
                lg.sync()
            check(lg, tmp_path)
        assert remembered > len(lg.recent)  # the bound evicted entries
        lg.close()
        await store.shutdown()

    asyncio.run(run())
