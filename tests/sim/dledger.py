"""The DLedger family: DLedger's real log files under the simulator, on a simulated disk.

Each node is DLedger's production member (``DLedgerNode``, broker/dledger/node.py: the Raft
driver of broker/raft/driver.py plus DLedger's cursor, role, apply and pending records) over a
real ``MessageStore`` and ``DLedgerLog`` (broker/dledger/log_store.py) in a temporary directory,
given the same simulated clock, network, fsync runner and checker as the in-memory family
(tests/sim/node.py) through its constructor.  A proposal is a real commit-log record the member
plans at its cursor and submits (``DLedgerNode.plan``, ``submit``).  A crash closes the files and hands the
directory to ``SimDisk`` (tests/sim/disk.py), which keeps, loses or tears what each file
got since its last fsync; the restarted node recovers from what is left with the production
recovery code (``MessageStore.recover``, ``DLedgerLog``'s loading).

On top of the Raft invariants, a restart checks durability: every entry the log had when
its last fsync completed is still there with the same term and bytes (a vote or an ack
promised it).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketscope.broker.dledger.log_store import DLedgerLog
from rocketscope.broker.dledger.node import DLedgerConfig, DLedgerNode, NoEvents
from rocketscope.broker.raft import RaftConfig, RaftNode, Ready
from rocketscope.broker.raft.driver import RaftDriver, ReadyObserver, Transport
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig
from rocketscope.broker.store.record import StoredMessage, decode

from .checker import InvariantViolation
from .disk import SimDisk
from .node import DeferredSync, SimClock

TICK_S = 0.05  # one simulated tick in seconds, for the log's lazy commit writes (DLedger's default tick)
SEGMENT = 4096  # small segments: records roll over and entries end at segment boundaries


def seeds_in_tests() -> range:
    """The seeds the dledger family's tests run: 0-24, or ``RAFT_SIM_DLEDGER_SEEDS=A-B`` (A <= seed < B)."""
    lo, hi = os.environ.get("RAFT_SIM_DLEDGER_SEEDS", "0-24").split("-", 1)
    return range(int(lo), int(hi))


def store_config(root: Path) -> StoreConfig:
    return StoreConfig(root=root, commitlog_segment_size=SEGMENT, cq_entries_per_segment=16, index_slot_num=64,
                       index_num=256, checkpoint_interval_s=3600, store_host="10.0.0.1:10911")


class _WriteTracker:
    """Wraps the scenario's Ready observer: notes what each Ready wrote since the last fsync, for ``check_durable``."""

    __slots__ = ("inner", "node")

    def __init__(self, node: DLedgerSimNode, inner: ReadyObserver | None) -> None:
        self.node = node
        self.inner = inner

    def before_write(self, rd: Ready) -> None:
        if self.inner is not None:
            self.inner.before_write(rd)

    def written(self, rd: Ready) -> None:
        if rd.entries:
            self.node.dirty = True
            self.node.floor = min(self.node.floor, rd.entries[0].index)
        if self.inner is not None:
            self.inner.written(rd)


class DLedgerSimNode(DeferredSync):
    """Same interface as ``SimNode``; the member is ``DLedgerNode``, its storage DLedger's files on a ``SimDisk``."""

    def __init__(self, config: RaftConfig, root: Path, rng: random.Random) -> None:
        self.id = config.node_id
        self.config = DLedgerConfig(group="sim", peers={pid: "" for pid in config.peers}, raft=config, tick_s=TICK_S,
                                    max_wait_ack_s=3.0)
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.rng = rng
        self.disk = SimDisk(self.root, rng)
        self.store: MessageStore | None = None
        self.member: DLedgerNode | None = None
        self.clock: SimClock | None = None
        self.pending_sync: tuple[Callable[[], None] | None, Callable[[], None]] | None = None
        self._applied = 0  # what the member had applied when it crashed
        self.up = False
        self.starts = 0
        self.paused_until = 0
        self.written: list[Ready] = []
        self.lost_unsynced = False
        self.dirty = False  # written since the last fsync
        self.floor = 1 << 62  # the lowest index written since the last fsync (may be truncated, legally)
        self.synced_terms: list[int] = []  # terms of entries 1..n when the last fsync completed
        self.synced_data: dict[int, bytes] = {}
        self.proposals = 0

    @property
    def driver(self) -> RaftDriver | None:
        return self.member.driver if self.member is not None else None

    @property
    def raft(self) -> RaftNode | None:
        return self.member.node if self.member is not None else None

    @property
    def log(self) -> DLedgerLog | None:
        return self.member.log if self.member is not None else None

    @property
    def live(self) -> Any:
        return self.log

    @property
    def applied(self) -> int:
        return self.member.commit_index if self.member is not None else self._applied

    @property
    def has_unsynced(self) -> bool:
        return self.dirty

    # ------------------------------------------------------------------ lifecycle
    def start(self, rng_seed: int, transport: Transport, now: Callable[[], int],
              observer: ReadyObserver | None = None) -> None:
        store = MessageStore(store_config(self.root))
        store.set_confirm_offset(0)  # as broker/broker.py does in DLedger mode
        store.recover()
        self.clock = SimClock(now, unit=TICK_S)
        self.pending_sync = None
        member = DLedgerNode(self.config, store, NoEvents(), clock=self.clock, syncer=self._defer_sync,
                             transport=transport, rng_seed=rng_seed, observer=_WriteTracker(self, observer))
        self.store, self.member = store, member
        member.open()
        assert member.log is not None
        self.check_durable(member.log)
        member.start()
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
        self.store = None
        if self.member is not None:
            self._applied = self.member.commit_index
        self.member = None

    def crash(self, lose_unsynced: bool) -> bool:
        self.up = False
        self.paused_until = 0
        if self.driver is not None:
            self.driver.stop("crash")
        self.clock = None
        self.pending_sync = None
        self.early_unsynced = False
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

    def check_queues(self) -> None:
        """The consume queue holds exactly the committed records of the log, in order, with offsets 0..n-1.

        A follower hands the records of the entries it appends to the store's pending dispatch
        (``DLedgerNode._pend_appended``, session 19) instead of reading them back when committed; a
        record of a replaced tail, a record handed over twice or one missed would show here.
        """
        member, store = self.member, self.store
        if member is None or store is None or member.log is None or not self.up:
            return
        lg = member.log
        want: list[bytes] = []
        for i in range(lg.first_index(), member.commit_index + 1):
            data = lg.entry(i).data
            pos = 0
            while pos < len(data):
                m = decode(data, pos)
                want.append(m.body)
                pos += m.size
        got: list[bytes] = []
        offsets: list[int] = []
        at = 0
        while True:
            res = store.get("SimTopic", 0, at, 1000)
            if not res.messages:
                break
            got += [m.body for m in res.messages]
            offsets += [m.queue_offset for m in res.messages]
            at = res.next_offset

        if got != want or offsets != list(range(len(got))):
            same = (k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b)
            first = next(same, min(len(got), len(want)))
            raise InvariantViolation(f"consume queue of {self.id}: {len(got)} records, the committed log holds "
                                     f"{len(want)}; first difference at record {first}; queue offsets "
                                     f"{offsets[:3]}..{offsets[-3:]} (want 0..{len(want) - 1})")

    # ------------------------------------------------------------------ clients
    def propose(self, data: bytes, answer: Callable[[int, bool], None]) -> tuple[int, bytes]:
        """Plan ``data`` as one commit-log record at the member's cursor and submit it (as ``DLedgerNode.propose``)."""
        member = self.member
        assert member is not None
        msg = StoredMessage(topic="SimTopic", queue_id=0, body=data, born_timestamp=1_700_000_000_000,
                            born_host="10.0.0.2:5000", store_timestamp=1_700_000_000_001 + self.proposals)
        plan = member.plan([msg])  # NotLeader until the driver has published leadership
        self.proposals += 1
        assert plan.results[0].status is PutStatus.PUT_OK and len(plan.datas) == 1, plan.results
        return member.submit(plan, answer), plan.datas[0]
