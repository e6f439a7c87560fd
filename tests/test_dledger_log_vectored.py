"""A Ready's entries written together (broker/dledger/log_store.py ``DLedgerLog.append``: consecutive records
in one vectored write, ``CommitLog.append_records_at``) leave the same files as the entries written one by one.

Ground truth: a second store and log given the same entries one per ``append`` call, each record then written
by ``CommitLog.append_record_at`` alone, as every entry was before the vectored write.  Random Readies of
several proposals' entries (each planned by ``plan_entries`` into records that roll across small commit-log
segments, leaving blank fillers), no-op entries between them, divergent tails replaced at a lower index: after
every Ready the commit-log segment files, the index file and the in-memory arrays of both logs are compared
byte for byte, and both logs are read back after a restart.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from rocketscope.broker.dledger.log_store import DLedgerLog
from rocketscope.broker.dledger.node import plan_entries
from rocketscope.broker.raft.messages import Entry, EntryKind
from rocketscope.broker.store.message_store import MessageStore, StoreConfig
from rocketscope.broker.store.record import StoredMessage

SEGMENT = 8192
MAX_ENTRY = 2048


def config(root: Path) -> StoreConfig:
    return StoreConfig(root=root, commitlog_segment_size=SEGMENT, cq_entries_per_segment=16, index_slot_num=64,
                       index_num=256, checkpoint_interval_s=3600)


def msg(rng: random.Random, i: int) -> StoredMessage:
    body = bytes(rng.randrange(256) for _ in range(rng.randint(50, 900)))
    return StoredMessage(topic="T", queue_id=rng.randrange(2), body=body, properties={"UNIQ_KEY": f"ID{i:08d}"},
                         born_timestamp=1_700_000_000_000 + i, born_host="10.0.0.1:5000")


def files(root: Path) -> dict[str, bytes]:
    """Every file of the commit log and the Raft log directory, by name relative to ``root``."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and (p.parent.name in ("commitlog", "dledger") or "commitlog" in p.parts)}


def same(a: DLedgerLog, b: DLedgerLog, root_a: Path, root_b: Path) -> None:
    assert (a.terms, a.offsets, a.sizes, a.kinds) == (b.terms, b.offsets, b.sizes, b.kinds)
    assert a.commit_log.max_offset == b.commit_log.max_offset
    fa, fb = files(root_a), files(root_b)
    fa.pop("dledger/hardstate", None)
    fb.pop("dledger/hardstate", None)
    assert fa.keys() == fb.keys()
    for name in fa:
        assert fa[name] == fb[name], name


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_readys_entries_written_together_leave_the_same_files(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root_a, root_b = tmp_path / "a", tmp_path / "b"

    async def run() -> None:
        store, other = MessageStore(config(root_a)), MessageStore(config(root_b))
        for s in (store, other):
            s.set_confirm_offset(0)
            await s.start()
        lg, ref = DLedgerLog(store, root_a / "dledger"), DLedgerLog(other, root_b / "dledger")
        n, term, grouped = 0, 1, 0
        for _ in range(50):
            if rng.random() < 0.15 and lg.last_index() >= 2:  # a new leader's entries replace a divergent tail
                at = rng.randint(max(lg.first_index(), lg.last_index() - 4), lg.last_index())
                cursor = lg.end_offset(at - 1)
                term += 1
            else:
                at, cursor = lg.last_index() + 1, store.commit_log.max_offset
            ready: list[Entry] = []
            for _ in range(rng.randint(1, 4)):  # a Ready holds several proposals' entries, now and then a no-op
                if rng.random() < 0.15:
                    ready.append(Entry(at + len(ready), term, EntryKind.NOOP, b""))
                    continue
                group = [msg(rng, n + i) for i in range(rng.randint(1, 6))]
                n += len(group)
                plan = plan_entries(store, group, cursor, MAX_ENTRY)
                ready += [Entry(at + len(ready) + i, term, EntryKind.NORMAL, d) for i, d in enumerate(plan.datas)]
                cursor = plan.cursor
            grouped += sum(1 for x, y in zip(ready, ready[1:], strict=False) if x.data and y.data)
            lg.append(ready)
            for e in ready:  # the reference: one entry, hence one record write, per call
                ref.append([e])
            same(lg, ref, root_a, root_b)
        assert grouped > 20  # consecutive records were written together often
        assert sum(k.startswith("commitlog") for k in files(root_a)) > 3  # records rolled across segments
        lg.close()
        ref.close()
        for root, s in ((root_a, store), (root_b, other)):
            again = DLedgerLog(s, root / "dledger")
            try:
                assert again.last_index() == lg.last_index()
                for i in range(again.first_index(), again.last_index() + 1):
                    again.recent.clear()
                    assert again.entry(i) == lg.entry(i)
            finally:
                again.close()
        await store.shutdown()
        await other.shutdown()

    asyncio.run(run())
