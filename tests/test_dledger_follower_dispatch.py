"""A DLedger follower dispatches committed records from the entries it appended, not from its commit log (issue 20).

In-process, on real stores and Raft indexes with 4 KiB segments (so groups cross segment
boundaries and the follower's hand-over meets the fillers): a follower member
(``DLedgerNode._on_append`` then ``_apply``, as its driver calls them) must end with consume
queues that give back exactly the messages the leader committed, in order, with queue offsets
0..n-1, without reading a single record back from its commit log; and when a newer leader
replaces an uncommitted divergent tail, the records of the replaced entries (handed over when
they were appended) must never reach a consume queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

from rocketscope.broker.dledger.log_store import DLedgerLog
from rocketscope.broker.dledger.node import DLedgerConfig, DLedgerNode, NoEvents, plan_entries
from rocketscope.broker.raft import Message, RaftConfig
from rocketscope.broker.raft.driver import sync_now
from rocketscope.broker.raft.messages import Entry, EntryKind
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig
from rocketscope.broker.store.record import StoredMessage

SEGMENT = 4096
MAX_ENTRY = 2048


def config(root: Path) -> StoreConfig:
    return StoreConfig(root=root, commitlog_segment_size=SEGMENT, cq_entries_per_segment=16, index_slot_num=64,
                       index_num=256, checkpoint_interval_s=3600)


def msg(i: int, tag: str = "m") -> StoredMessage:
    body = (f"{tag}{i:04d}-".encode() * 40)[: 150 + (i * 37) % 250]
    return StoredMessage(topic="T", queue_id=0, body=body, properties={"UNIQ_KEY": f"{tag}{i:08d}"},
                         born_timestamp=1_700_000_000_000 + i, store_timestamp=1_700_000_000_000 + i,
                         born_host="10.0.0.1:5000")


async def open_store(root: Path) -> MessageStore:
    store = MessageStore(config(root))
    store.set_confirm_offset(0)
    await store.start()
    return store


class Leader:
    """What a leader's ``plan``/``submit`` and Ready write produce, without the network."""

    def __init__(self, store: MessageStore, root: Path, term: int) -> None:
        self.store, self.term = store, term
        self.log = DLedgerLog(store, root / "dledger")

    def propose(self, group: list[StoredMessage]) -> list[Entry]:
        plan = plan_entries(self.store, group, self.store.commit_log.max_offset, MAX_ENTRY)
        assert all(r.status is PutStatus.PUT_OK for r in plan.results)
        first = self.log.last_index() + 1
        entries = [Entry(first + i, self.term, EntryKind.NORMAL, d) for i, d in enumerate(plan.datas)]
        assert self.log.append(entries) is None
        return entries


class NoNetwork:
    def send(self, m: Message) -> None:
        pass


async def open_follower(root: Path) -> DLedgerNode:
    store = await open_store(root)
    raft = RaftConfig(node_id="n1", peers=("n0", "n1", "n2"))
    cfg = DLedgerConfig(group="g", peers={"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n2": "127.0.0.1:3"},
                        raft=raft, tick_s=0.05, max_wait_ack_s=1.0)
    node = DLedgerNode(cfg, store, NoEvents(), syncer=sync_now, transport=NoNetwork())
    node.open()
    return node


def append(node: DLedgerNode, entries: list[Entry]) -> None:
    """The follower's Ready write: the log append, then the driver's ``on_append`` callback."""
    assert node.log is not None
    node._on_append(entries, node.log.append(entries))


def count_read_back(store: MessageStore) -> list[int]:
    """Count the records the store reads back from its commit log from now on."""
    seen = [0]
    inner = store.commit_log.iter_messages

    def counting(start: int, end: int) -> Iterator[StoredMessage]:
        for m in inner(start, end):
            seen[0] += 1
            yield m

    store.commit_log.iter_messages = counting  # type: ignore[method-assign]
    return seen


def test_a_follower_dispatches_the_committed_records_it_appended_without_reading_them_back(tmp_path: Path) -> None:
    sent = [msg(i) for i in range(120)]

    async def run() -> None:
        leader = Leader(await open_store(tmp_path / "leader"), tmp_path / "leader", term=3)
        node = await open_follower(tmp_path / "follower")
        store = node.store
        read_back = count_read_back(store)
        entries: list[Entry] = []
        for i in range(0, 120, 10):
            batch = leader.propose(sent[i:i + 10])
            append(node, batch)
            entries += batch
            if i % 30 == 20:  # commit every third group, as a leader's commit index moves
                node._apply(entries)
        node._apply(entries)
        assert node.log is not None and node.log.last_index() == len(entries) < len(sent)
        assert len({off // SEGMENT for off in node.log.offsets}) > 3  # the entries crossed segment ends
        got = store.get("T", 0, 0, 1000)
        assert [m.body for m in got.messages] == [m.body for m in sent]
        assert [m.queue_offset for m in got.messages] == list(range(120))
        assert read_back[0] == 0  # every record came from the appended entries
        await leader.store.shutdown()
        await store.shutdown()

    asyncio.run(run())


def test_records_of_a_replaced_divergent_tail_never_reach_a_consume_queue(tmp_path: Path) -> None:
    common = [msg(i) for i in range(30)]
    stale = [msg(i + 3, "old") for i in range(30, 50)]  # a deposed leader's, never committed (other sizes)
    fresh = [msg(i, "new") for i in range(30, 45)]  # its successor's, at the same indexes

    async def run() -> None:
        old = Leader(await open_store(tmp_path / "old"), tmp_path / "old", term=2)
        new = Leader(await open_store(tmp_path / "new"), tmp_path / "new", term=3)
        node = await open_follower(tmp_path / "follower")
        store = node.store
        shared = old.propose(common)
        assert new.propose(common) == [Entry(e.index, 3, e.kind, e.data) for e in shared]
        append(node, shared)
        node._apply(shared)
        stale_entries = old.propose(stale)
        append(node, stale_entries)
        fresh_entries = [Entry(e.index, 3, e.kind, e.data) for e in new.propose(fresh)]
        assert fresh_entries[0].index == stale_entries[0].index
        append(node, fresh_entries)  # truncates the stale tail
        node._apply(fresh_entries)
        got = store.get("T", 0, 0, 1000)
        assert [m.body for m in got.messages] == [m.body for m in common + fresh]
        assert [m.queue_offset for m in got.messages] == list(range(45))
        assert store.max_offset("T", 0) == 45  # no consume-queue entry for a replaced record
        for s in (old.store, new.store, store):
            await s.shutdown()

    asyncio.run(run())
