"""The DLedger family: DLedger's real log files under the simulator, on a simulated disk.

Each node is the production Raft driver (broker/raft/driver.py) over a real ``MessageStore``
and ``DLedgerLog`` (broker/dledger/log_store.py) in a temporary directory, with the same
simulated clock, network, fsync runner and checker as the in-memory family (tests/sim/node.py).
A proposal is a real commit-log record planned at the leader's cursor, as DLedger's member
plans it (``plan_entries``, broker/dledger/node.py).  A crash closes the files and hands the
directory to ``SimDisk`` (tests/sim/disk.py), which keeps, loses or tears what each file
got since its last fsync; the restarted node recovers from what is left with the production
recovery code (``MessageStore.recover``, ``DLedgerLog``'s loading).

On top of the Raft invariants, a restart checks durability: every entry the log had when
its last fsync completed is still there with the same term and bytes (a vote or an ack
promised it).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketscope.broker.dledger.log_store import DLedgerLog
from rocketscope.broker.dledger.node import plan_entries
from rocketscope.broker.raft import Entry, NotLeader, RaftConfig, RaftNode, Ready, Role
from rocketscope.broker.raft.driver import RaftDriver, ReadyObserver, Transport
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig
from rocketscope.broker.store.record import StoredMessage

from .checker import InvariantViolation
from .disk import SimDisk
from .node import DeferredSync, SimClock

TICK_S = 0.05  # one simulated tick in seconds, for the log's lazy commit writes (DLedger's default tick)
SEGMENT = 4096  # small segments: records roll over and entries end at segment boundaries


def store_config(root: Path) -> StoreConfig:
    return StoreConfig(root=root, commitlog_segment_size=SEGMENT, cq_entries_per_segment=16, index_slot_num=64,
                       index_num=256, checkpoint_interval_s=3600, store_host="10.0.0.1:10911")


class DLedgerSimNode(DeferredSync):
    """Same interface as ``SimNode``; the storage is DLedger's files on a ``SimDisk``."""

    def __init__(self, config: RaftConfig, root: Path, rng: random.Random) -> None:
        self.id = config.node_id
        self.config = config
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.rng = rng
        self.disk = SimDisk(self.root, rng)
        self.store: MessageStore | None = None
        self.log: DLedgerLog | None = None
        self.driver: RaftDriver | None = None
        self.clock: SimClock | None = None
        self.pending_sync: tuple[Callable[[], None] | None, Callable[[], None]] | None = None
        self.applied = 0
        self.up = False
        self.starts = 0
        self.paused_until = 0
        self.written: list[Ready] = []
        self.lost_unsynced = False
        self.dirty = False  # written since the last fsync
        self.floor = 1 << 62  # the lowest index written since the last fsync (may be truncated, legally)
        self.synced_terms: list[int] = []  # terms of entries 1..n when the last fsync completed
        self.synced_data: dict[int, bytes] = {}
        self._cursor: int | None = None
        self.proposals = 0

    @property
    def raft(self) -> RaftNode | None:
        return self.driver.node if self.driver is not None else None

    @property
    def live(self) -> Any:
        return self.log

    @property
    def has_unsynced(self) -> bool:
        return self.dirty

    # ------------------------------------------------------------------ lifecycle
    def start(self, rng_seed: int, transport: Transport, now: Callable[[], int],
              observer: ReadyObserver | None = None) -> None:
        store = MessageStore(store_config(self.root))
        store.set_confirm_offset(0)  # as broker/broker.py does in DLedger mode
        store.recover()
        lg = DLedgerLog(store, self.root / "dledger", now=lambda: now() * TICK_S)
        self.check_durable(lg)
        hs = lg.hard_state
        store.set_confirm_offset(lg.end_offset(hs.commit))
        self.store, self.log = store, lg
        raft = RaftNode(self.config, lg, hs, rng_seed, applied=hs.commit)
        self.clock = SimClock(now)
        self.pending_sync = None
        self.applied = hs.commit
        self._cursor = None
        self.driver = RaftDriver(raft, lg, transport, self.clock, self._defer_sync, 1.0, apply=self._apply,
                                 on_append=self._on_append, on_role=self._on_role, observer=observer)
        self.driver.start()
        self.up = True
        self.starts += 1

    def check_durable(self, lg: DLedgerLog) -> None:
        """Everything the last completed fsync covered survived the crash."""
        n = min(len(self.synced_terms), self.floor - 1)
        if lg.last_index() < n:
            raise InvariantViolation(f"durability: {self.id} recovered {lg.last_index()} entries, "
                                     f"{n} were synced")
        for i in range(max(1, lg.first_index()), n + 1):
            if lg.term(i) != self.synced_terms[i - 1]:
                raise InvariantViolation(f"durability: {self.id} recovered entry {i} with term {lg.term(i)}, "
                                         f"synced with term {self.synced_terms[i - 1]}")
            want = self.synced_data.get(i) if i < self.floor else None
            if want is not None and lg.entry(i).data != want:
                raise InvariantViolation(f"durability: {self.id} recovered entry {i} with other bytes than synced")

    def _close(self) -> None:
        store, lg = self.store, self.log
        if lg is not None:
            lg.close()
        if store is not None:  # a dying process: no flush, no checkpoint (MessageStore.shutdown would)
            for cq in store.cqs.values():
                cq.log.close()
            store.index.close()
            store.commit_log.close()
        self.store = self.log = None

    def crash(self, lose_unsynced: bool) -> bool:
        self.up = False
        self.paused_until = 0
        if self.driver is not None:
            self.driver.stop("crash")
        self.driver = None
        self.clock = None
        self.pending_sync = None
        self.written = []
        self._close()
        mode = ("torn" if self.rng.random() < 0.5 else "lose") if lose_unsynced else "keep"
        changed = self.disk.crash(mode)
        self.lost_unsynced = changed > 0
        self.dirty = False
        return self.lost_unsynced

    def close(self) -> None:
        """End of the run."""
        if self.up:
            self._close()
            self.up = False

    # ------------------------------------------------------------------ fsync
    def _synced(self) -> None:
        """The log's fsync returned (SimDisk saw its fsyncs): remember what it promised."""
        lg = self.log
        assert lg is not None
        self.dirty = False
        self.floor = 1 << 62
        last = lg.last_index()
        self.synced_terms = [lg.term(i) if i >= lg.first_index() else 0 for i in range(1, last + 1)]
        # the bytes of the newest few entries (the ones a crash could tear)
        self.synced_data = {i: lg.entry(i).data for i in range(max(lg.first_index(), last - 3), last + 1)}

    # ------------------------------------------------------------------ driver callbacks (as broker/dledger/node.py)
    def _apply(self, entries: list[Entry]) -> None:
        assert self.store is not None and self.log is not None
        self.store.set_confirm_offset(self.log.end_offset(entries[-1].index))
        self.applied = entries[-1].index

    def _on_append(self, entries: list[Entry], truncated: tuple[int, int] | None) -> None:
        self.dirty = True
        self.floor = min(self.floor, entries[0].index)
        if truncated is not None and truncated[1] > truncated[0]:
            self._cursor = None

    def _on_role(self, role: Role, leader: str | None, was_leader: bool) -> None:
        store = self.store
        assert store is not None
        if role == Role.LEADER and not was_leader:
            self._cursor = store.commit_log.max_offset
            store.rebuild_queue_offsets()
        elif was_leader and role != Role.LEADER:
            self._cursor = None
            store.drop_pending()

    # ------------------------------------------------------------------ clients
    def propose(self, data: bytes, answer: Callable[[int, bool], None]) -> tuple[int, bytes]:
        """Plan ``data`` as one commit-log record at the leader's cursor and propose it."""
        driver, store = self.driver, self.store
        assert driver is not None and store is not None
        if not driver.is_leader:  # as DLedgerNode.propose: only once the driver has published the role
            raise NotLeader(f"{self.id} has not taken leadership yet", driver.leader_id)
        self.proposals += 1
        msg = StoredMessage(topic="SimTopic", queue_id=0, body=data, born_timestamp=1_700_000_000_000,
                            born_host="10.0.0.2:5000", store_timestamp=1_700_000_000_000 + self.proposals)
        saved = dict(store.queue_next)
        cursor = self._cursor if self._cursor is not None else store.commit_log.max_offset
        plan = plan_entries(store, [msg], cursor, self.config.max_append_bytes)
        assert plan.results[0].status is PutStatus.PUT_OK and len(plan.datas) == 1, plan.results
        try:
            index = driver.propose(plan.datas, answer)
        except Exception:
            store.queue_next.clear()
            store.queue_next.update(saved)
            raise
        self._cursor = plan.cursor
        store.add_pending(plan.accepted)
        return index, plan.datas[0]
