"""The Raft driver (broker/raft/driver.py) with its production adapters (broker/raft/aio.py), in one event loop.

Three drivers with real asyncio timers and worker-thread fsyncs, over in-memory logs and an
in-process network: a leader is elected, proposals are answered True once committed with
their term and applied everywhere, a leader's appends leave while its own entries are still
unsynced but no acknowledgement or vote leaves before its fsync, and a deposed leader's open
proposals are answered False.  The simulator (tests/test_raft_sim.py) runs the same driver under faults.
"""

from __future__ import annotations

import asyncio
import threading

from rocketscope.broker.raft import Entry, HardState, MemoryStorage, Message, MsgType, RaftConfig, RaftNode, Role
from rocketscope.broker.raft.aio import AsyncioClock, ThreadSyncer
from rocketscope.broker.raft.driver import RaftDriver

IDS = ("a", "b", "c")


class MemLog(MemoryStorage):
    """A DurableLog in memory that knows whether entries, or a term or vote, are written but not yet synced."""

    def __init__(self) -> None:
        super().__init__()
        self.dirty_entries = False
        self.dirty_vote = False
        self.syncs = 0
        self.sync_threads: set[str] = set()

    def append(self, entries: list[Entry]) -> None:  # type: ignore[override]
        super().append(entries)
        self.dirty_entries = True

    def save_hard_state(self, hs: HardState, sync: bool) -> None:
        self.hard_state = hs
        self.dirty_vote = self.dirty_vote or sync

    def sync(self) -> None:
        self.syncs += 1
        self.sync_threads.add(threading.current_thread().name)
        self.dirty_entries = self.dirty_vote = False


class Net:
    def __init__(self) -> None:
        self.drivers: dict[str, RaftDriver] = {}
        self.logs: dict[str, MemLog] = {}
        self.violations: list[str] = []
        self.early_appends = 0  # appends with entries that left while their sender's entries were unsynced
        self.cut: set[str] = set()

    def transport(self, node_id: str) -> Net._Port:
        return Net._Port(self, node_id)

    class _Port:
        def __init__(self, net: Net, node_id: str) -> None:
            self.net, self.node_id = net, node_id

        def send(self, m: Message) -> None:
            net = self.net
            log = net.logs[self.node_id]
            if log.dirty_vote:
                net.violations.append(f"{self.node_id} sent {m.type.name} before its term or vote was synced")
            elif log.dirty_entries:
                if m.type not in (MsgType.APP, MsgType.HEARTBEAT, MsgType.TIMEOUT_NOW):
                    net.violations.append(f"{self.node_id} sent {m.type.name} before its entries were synced")
                elif m.entries:
                    net.early_appends += 1
            if m.frm in net.cut or m.to in net.cut:
                return
            asyncio.get_running_loop().call_soon(lambda: net.drivers[m.to].step(m) if m.to in net.drivers else None)


async def _until(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def _applier(out: list[bytes]):  # type: ignore[no-untyped-def]
    return lambda ents: out.extend(e.data for e in ents if e.data)


def _cluster(net: Net, applied: dict[str, list[bytes]]) -> None:
    for i, nid in enumerate(IDS):
        log = MemLog()
        cfg = RaftConfig(node_id=nid, peers=IDS, heartbeat_ticks=2, election_ticks_min=6, election_ticks_max=12,
                         check_quorum=True, pre_vote=True)
        apply = _applier(applied[nid])
        net.logs[nid] = log
        net.drivers[nid] = RaftDriver(RaftNode(cfg, log, log.hard_state, rng_seed=i), log, net.transport(nid),
                                      AsyncioClock(), ThreadSyncer(f"test-{nid}"), 0.01, apply=apply)


def _leader(net: Net) -> RaftDriver | None:
    leaders = [d for d in net.drivers.values() if d.role == Role.LEADER and d.node.id not in net.cut]
    return leaders[0] if len(leaders) == 1 else None


def test_three_drivers_elect_commit_and_answer_by_term() -> None:
    async def run() -> None:
        net = Net()
        applied: dict[str, list[bytes]] = {nid: [] for nid in IDS}
        _cluster(net, applied)
        for d in net.drivers.values():
            d.start()
        await _until(lambda: _leader(net) is not None)
        leader = _leader(net)
        assert leader is not None
        answers: list[tuple[int, bool]] = []
        datas = [f"m{i}".encode() for i in range(5)]
        leader.propose(datas, lambda pos, ok: answers.append((pos, ok)))
        await _until(lambda: len(answers) == 5 and all(len(v) >= 5 for v in applied.values()))
        assert sorted(answers) == [(i, True) for i in range(5)]
        assert all(v == datas for v in applied.values())
        assert not net.violations, net.violations[:5]
        assert net.early_appends > 0  # the leader's appends left while its own fsync was pending
        assert all(log.syncs > 0 for log in net.logs.values())
        assert all(t != threading.main_thread().name for log in net.logs.values() for t in log.sync_threads)

        # a leader cut off from the others: its open proposal is answered False once it steps down
        lost: list[bool] = []
        net.cut.add(leader.node.id)
        leader.propose([b"never"], lambda pos, ok: lost.append(ok))
        await _until(lambda: lost == [False] and leader.role != Role.LEADER)
        net.cut.clear()
        await _until(lambda: _leader(net) is not None)
        for d in net.drivers.values():
            d.stop()
            await d.syncer.drain()  # type: ignore[attr-defined]
        assert not any(b"never" in v for v in applied.values())

    asyncio.run(run())
