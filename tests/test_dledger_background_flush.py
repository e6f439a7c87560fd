"""DLedger with ``dLegerSyncAppends`` false: appends count once written, the log is fsynced in the background.

Ground truth is the system call itself: ``os.fdatasync`` is wrapped (it still syncs) and every call
on the member's Raft index or commit-log segments is recorded with the log's end at that moment.
In-process, a one-member group (it commits alone, so every answer waits only for its own disk
policy) on a real store, Raft index and the production fsync runner (a worker thread):

- appends synced (the default): no send is answered before an fdatasync of the log that covers it;
- appends not synced, background flush every hour: every send answered with no fdatasync of the log
  at all (what a power cut could lose), and ``stop`` still syncs the whole log;
- appends not synced, flush every 20 ms: within a bounded wait an fdatasync of both the index and the
  segment holding the last record happens after the last send, and no further rounds run while the log
  does not grow (a flush only for what is new).

The simulator's side of the same switch (safety under process crashes, and the loss a power cut can
cause) is tests/test_raft_sim_background_flush.py.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketscope.broker.dledger.node import DLedgerConfig, DLedgerNode, NoEvents
from rocketscope.broker.raft import RaftConfig
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig
from rocketscope.broker.store.record import StoredMessage

SENDS = 40


class SyncCalls:
    """Every ``os.fdatasync`` of the process, with the thread's view of the time (the wrapped call still syncs)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []  # (fd, monotonic time after it returned)
        self._lock = threading.Lock()
        self._real = os.fdatasync

    def __call__(self, fd: int) -> None:
        self._real(fd)
        with self._lock:
            self.calls.append((fd, time.monotonic()))

    def of(self, fds: set[int], after: float = 0.0) -> list[tuple[int, float]]:
        with self._lock:
            return [(fd, t) for fd, t in self.calls if fd in fds and t >= after]


@pytest.fixture
def fdatasyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[SyncCalls]:
    calls = SyncCalls()
    monkeypatch.setattr(os, "fdatasync", calls)
    yield calls


def message(i: int) -> StoredMessage:
    return StoredMessage(topic="T", queue_id=0, body=b"x" * 300, properties={"UNIQ_KEY": f"m{i:08d}"},
                         born_timestamp=1_700_000_000_000 + i, born_host="10.0.0.1:5000")


async def one_member(root: Path, sync_appends: bool, flush_interval_s: float) -> DLedgerNode:
    # the store's own flush and checkpoint kept out of the window (an hour), so every fdatasync seen is the member's
    store = MessageStore(StoreConfig(root=root, checkpoint_interval_s=3600, flush_interval_s=3600))
    store.set_confirm_offset(0)
    await store.start()
    raft = RaftConfig(node_id="n0", peers=("n0",), sync_appends=sync_appends)
    cfg = DLedgerConfig(group="g", peers={"n0": "127.0.0.1:1"}, raft=raft, tick_s=0.02, max_wait_ack_s=5.0,
                        flush_interval_s=flush_interval_s)
    node = DLedgerNode(cfg, store, NoEvents())
    node.open()
    node.start()
    deadline = time.monotonic() + 10
    while not node.is_leader:
        assert time.monotonic() < deadline, "a one-member group elected no leader within 10 s"
        await asyncio.sleep(0.01)
    return node


def log_fds(node: DLedgerNode) -> set[int]:
    assert node.log is not None
    return {node.log.fd} | {seg.fd for seg in node.store.commit_log.log.segments}


async def send_all(node: DLedgerNode, calls: SyncCalls) -> list[int]:
    """Send one message at a time; return how many fdatasyncs of the log each send's answer came after."""
    seen = []
    for i in range(SENDS):
        started = time.monotonic()
        (result,) = await node.propose([message(i)])
        assert result.status is PutStatus.PUT_OK, result
        seen.append(len(calls.of(log_fds(node), after=started)))
    return seen


async def stop(node: DLedgerNode) -> None:
    await node.stop()
    await node.store.shutdown()


def test_synced_appends_are_answered_after_their_fdatasync(tmp_path: Path, fdatasyncs: SyncCalls) -> None:
    async def main() -> None:
        node = await one_member(tmp_path, sync_appends=True, flush_interval_s=3600)
        try:
            seen = await send_all(node, fdatasyncs)
            assert node.status()["syncAppends"] is True and "backgroundFlushedIndex" not in node.status()
        finally:
            await stop(node)
        assert min(seen) >= 1, f"a send answered without an fdatasync of the log since it was sent: {seen}"

    asyncio.run(main())


def test_unsynced_appends_are_answered_without_fdatasync_and_stop_syncs(tmp_path: Path,
                                                                        fdatasyncs: SyncCalls) -> None:
    async def main() -> None:
        node = await one_member(tmp_path, sync_appends=False, flush_interval_s=3600)
        start = time.monotonic()
        try:
            seen = await send_all(node, fdatasyncs)
            assert seen == [0] * SENDS, f"fdatasyncs of the log during sends with appends not synced: {seen}"
            fds = log_fds(node)  # the first segment exists once the first record is written
            assert len(fds) >= 2
        finally:
            await stop(node)
        synced = {fd for fd, _ in fdatasyncs.of(fds, after=start)}
        assert node.log is not None
        assert synced >= {node.log.fd}, "stop did not fsync the Raft index"
        assert synced & (fds - {node.log.fd}), "stop did not fsync the commit log"

    asyncio.run(main())


def test_background_flush_covers_the_last_append_then_rests(tmp_path: Path, fdatasyncs: SyncCalls) -> None:
    async def main() -> None:
        node = await one_member(tmp_path, sync_appends=False, flush_interval_s=0.02)
        try:
            await send_all(node, fdatasyncs)
            last_sent = time.monotonic()
            assert node.log is not None
            index_fd = node.log.fd
            last_segment_fd = node.store.commit_log.log.segments[-1].fd
            deadline = last_sent + 5.0
            while True:
                done = {fd for fd, _ in fdatasyncs.of({index_fd, last_segment_fd}, after=last_sent)}
                if done == {index_fd, last_segment_fd}:
                    break
                assert time.monotonic() < deadline, f"no background fsync of the log within 5 s (synced: {done})"
                await asyncio.sleep(0.01)
            # what an operator reads (haStatus): the mode, and how far the background fsync covered the log
            status = node.status()
            assert status["syncAppends"] is False
            wait_until = time.monotonic() + 5.0
            while node.status()["backgroundFlushedIndex"] != node.log.last_index():
                assert time.monotonic() < wait_until, node.status()
                await asyncio.sleep(0.01)
            # the log no longer grows: once the round that covered it ended, no more rounds (each would be
            # a wasted fdatasync 50 times a second on an idle member)
            await asyncio.sleep(0.1)
            quiet_from = time.monotonic()
            await asyncio.sleep(0.2)  # ten intervals
            assert fdatasyncs.of(log_fds(node), after=quiet_from) == []
        finally:
            await stop(node)

    asyncio.run(main())
