"""A DLedger leader proposes each ``put_messages`` group as few Raft entries as the log allows (issue 20).

In-process, on a real store and Raft index (broker/dledger/log_store.py) with 4 KiB segments:
``plan_entries`` (broker/dledger/node.py) packs the records of a group into entries that never
span a commit-log segment nor pass the byte cap; the entries written and committed give back
exactly the messages sent, in order, with queue offsets 0..n-1; an entry torn by a crash before
it was committed is lost whole (none of its records survive, not even the whole ones) and the
next proposal after restart continues the queue offsets and the log where the last whole entry
ended.  The three-process path (batches over remoting, a restart of the group) is in
tests/test_e2e_dledger_batches.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rocketscope.broker.dledger.log_store import DLedgerLog
from rocketscope.broker.dledger.node import plan_entries
from rocketscope.broker.raft.messages import Entry, EntryKind, HardState
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig
from rocketscope.broker.store.record import StoredMessage, peek_header

SEGMENT = 4096
MAX_ENTRY = 2048
TERM = 3


def config(root: Path) -> StoreConfig:
    return StoreConfig(root=root, commitlog_segment_size=SEGMENT, cq_entries_per_segment=16, index_slot_num=64,
                       index_num=256, checkpoint_interval_s=3600)


def msg(i: int) -> StoredMessage:
    body = (f"m{i:04d}-".encode() * 40)[: 150 + (i * 37) % 250]  # 150..399 bytes: groups cross segments
    return StoredMessage(topic="T", queue_id=0, body=body, properties={"UNIQ_KEY": f"ID{i:08d}"},
                         born_timestamp=1_700_000_000_000 + i, born_host="10.0.0.1:5000")


async def open_store(root: Path) -> tuple[MessageStore, DLedgerLog]:
    store = MessageStore(config(root))
    store.set_confirm_offset(0)  # as broker/broker.py does in DLedger mode: nothing visible before Raft says so
    await store.start()
    lg = DLedgerLog(store, root / "dledger")
    store.set_confirm_offset(lg.end_offset(lg.hard_state.commit))
    return store, lg


def propose(store: MessageStore, lg: DLedgerLog, group: list[StoredMessage]) -> tuple[list[Entry], list[int]]:
    """What DLedgerNode.propose and its Ready handling do on a leader, without the network."""
    plan = plan_entries(store, group, store.commit_log.max_offset, MAX_ENTRY)
    assert all(r.status is PutStatus.PUT_OK for r in plan.results)
    first = lg.last_index() + 1
    entries = [Entry(first + i, TERM, EntryKind.NORMAL, d) for i, d in enumerate(plan.datas)]
    assert lg.append(entries) is None
    store.add_pending(plan.accepted)
    return entries, plan.entry_of


def commit(store: MessageStore, lg: DLedgerLog) -> None:
    lg.sync()
    lg.save_hard_state(HardState(TERM, None, lg.last_index()), True)
    store.set_confirm_offset(lg.end_offset(lg.last_index()))


def test_groups_become_whole_entries_and_a_torn_entry_is_lost_whole(tmp_path: Path) -> None:
    sent = [msg(i) for i in range(120)]
    groups = [sent[i:i + 10] for i in range(0, 120, 10)]

    extra = [msg(1000 + i) for i in range(6)]
    survivors: list[StoredMessage] = []  # the extra group's messages in its entries before the torn one

    async def write() -> tuple[int, int, int]:
        store, lg = await open_store(tmp_path)
        n_entries = 0
        for g in groups:
            n_entries += len(propose(store, lg, g)[0])
        assert lg.last_index() == n_entries < len(sent)  # fewer entries than messages
        for i in range(1, lg.last_index() + 1):
            off, size = lg.offsets[i - 1], lg.sizes[i - 1]
            assert off // SEGMENT == (off + size - 1) // SEGMENT, f"entry {i} spans a segment boundary"
            e = lg.entry(i)
            assert len(e.data) == size
            assert size <= MAX_ENTRY or peek_header(e.data)[0] == size  # over the cap only as a single record
        assert len({off // SEGMENT for off in lg.offsets}) > 3  # the groups crossed several segments
        assert store.max_offset("T", 0) == 0  # nothing visible before the commit
        commit(store, lg)
        got = store.get("T", 0, 0, 1000)
        assert [m.body for m in got.messages] == [m.body for m in sent]
        assert [m.queue_offset for m in got.messages] == list(range(120))
        # one more group, written but not committed, and torn by a crash inside its last entry
        entries, entry_of = propose(store, lg, extra)
        torn = entries[-1]
        survivors.extend(m for m, e in zip(extra, entry_of, strict=True) if e < len(entries) - 1)
        torn_off, torn_size = lg.offsets[torn.index - 1], lg.sizes[torn.index - 1]
        await store.shutdown()
        lg.close()
        return torn_off, torn_size, torn.index

    torn_off, torn_size, torn_index = asyncio.run(write())
    assert torn_size > 300  # more than one record, so a whole record precedes the tear
    seg_path = next(p for p in (tmp_path / "commitlog").iterdir() if int(p.name) == torn_off // SEGMENT * SEGMENT)
    with open(seg_path, "r+b") as fh:  # the pages after the first 300 bytes of the entry never reached the disk
        rel = torn_off % SEGMENT
        fh.seek(rel + 300)
        fh.write(b"\x00" * (torn_size - 300))

    async def reopen() -> None:
        store, lg = await open_store(tmp_path)
        assert lg.offsets[-1] + lg.sizes[-1] <= torn_off  # the torn entry is gone from the index
        assert store.commit_log.max_offset == lg.end_offset(lg.last_index())  # ... and all its records
        assert store.max_offset("T", 0) == 120  # the survivors are in the log, not committed yet
        assert lg.last_index() == torn_index - 1
        store.rebuild_queue_offsets()
        end = store.commit_log.max_offset  # the end of the last whole entry
        after = [msg(2000 + i) for i in range(5)]
        first = propose(store, lg, after)[0][0]
        commit(store, lg)
        assert lg.offsets[first.index - 1] in (end, end - end % SEGMENT + SEGMENT)  # there, or the next segment
        got = store.get("T", 0, 0, 1000)
        assert [m.body for m in got.messages] == [m.body for m in sent + survivors + after]
        assert [m.queue_offset for m in got.messages] == list(range(125 + len(survivors)))
        await store.shutdown()
        lg.close()

    asyncio.run(reopen())
