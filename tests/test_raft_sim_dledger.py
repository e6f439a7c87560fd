"""DLedger's real log files under the Raft simulator, on a simulated disk (tests/sim/dledger.py, disk.py).

Each node runs the production Raft driver (broker/raft/driver.py) over a ``MessageStore`` and
``DLedgerLog`` in a temporary directory; crashes keep, lose or tear what each file got since
its last fsync.  The seeds must keep every Raft invariant plus durability (what the log's
fsync covered survives), and the family must fail when DLedger's log skips an fsync.
``RAFT_SIM_DLEDGER_SEEDS=A-B`` overrides the range; the long run is
``.venv/bin/python tests/sim/run.py --profile dledger --seeds 0-2000``.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from sim.disk import SimDisk, intercept
from sim.dledger import SEGMENT, seeds_in_tests, store_config
from sim.scenario import SimulationFailure, run_seed

from rocketscope.broker.dledger.log_store import DLedgerLog
from rocketscope.broker.dledger.node import plan_entries
from rocketscope.broker.raft import Entry, EntryKind, HardState
from rocketscope.broker.raft.hard_state_file import HardStateFile
from rocketscope.broker.store.message_store import MessageStore
from rocketscope.broker.store.record import StoredMessage
from rocketscope.broker.store.segments import SegmentedLog


def test_dledger_log_files_keep_raft_safe_through_crashes_on_a_simulated_disk() -> None:
    stats = [run_seed(seed, profile="dledger") for seed in seeds_in_tests()]
    assert sum(s.crashes for s in stats) > 0, "no seed crashed a node: the disk was never tested"
    assert all(s.committed > 0 for s in stats)


def test_dledger_log_files_keep_raft_safe_with_the_lazy_commit_broadcast_dledger_runs() -> None:
    """The same seeds with ``eager_commit_broadcast`` off, as DLedgerConfig.from_settings configures it: followers
    learn the commit index from the next append or tick, and their consume queues must still end equal to the
    committed log (the family's queue check) with every Raft invariant kept."""
    stats = [run_seed(seed, profile="dledger_lazy") for seed in seeds_in_tests()]
    assert sum(s.crashes for s in stats) > 0, "no seed crashed a node: the disk was never tested"
    assert all(s.committed > 0 for s in stats)


def test_the_dledger_family_finds_an_index_that_is_never_fsynced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberate bug: ``DLedgerLog.sync`` syncs the commit log but not the index file."""
    monkeypatch.setattr(DLedgerLog, "sync", lambda self: self.commit_log.log.sync())
    for seed in range(20):
        try:
            run_seed(seed, profile="dledger")
        except SimulationFailure as exc:
            assert "durability" in exc.what, exc.what
            assert f"--replay {seed} --profile dledger" in exc.replay
            return
    pytest.fail("20 seeds of the dledger family missed an index that is never fsynced")


def test_a_restarted_member_syncs_what_it_recovered_before_acking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by seed 92: a process crash keeps entries only in the page cache; the restarted member
    syncs the log again, the commit log (which counts what it loads as synced) skips them, and a
    power cut then takes entries it had acked.  ``DLedgerLog`` now fdatasyncs what it recovered.
    (Seed 50 shows it with today's schedule, the first of 0-800 since leaders send before their fsync,
    session 18; seeds move when the simulator or the driver changes.)"""
    run_seed(50, profile="dledger")
    monkeypatch.setattr(DLedgerLog, "_make_recovered_durable", lambda self: None)
    with pytest.raises(SimulationFailure) as exc:
        run_seed(50, profile="dledger")
    assert "durability" in exc.value.what


def test_recovery_stops_at_an_entry_whose_segment_lost_its_tail(tmp_path: Path) -> None:
    """Found by seed 278 (before later changes moved the schedules): a power cut kept a later
    commit-log segment's records but tore the tail of the one before (nothing orders writes to
    two files), so an index entry pointed into a hole below the log end and reading it failed.
    Here the tear is made by hand; ``DLedgerLog`` must end the log before that entry."""
    store = MessageStore(store_config(tmp_path))
    store.set_confirm_offset(0)
    store.recover()
    lg = DLedgerLog(store, tmp_path / "dledger")
    n = 0
    while store.commit_log.max_offset < SEGMENT + 600:  # well into the second segment
        n += 1
        msg = StoredMessage(topic="T", queue_id=0, body=b"x" * 150, born_timestamp=1, born_host="10.0.0.2:1",
                            store_timestamp=n)
        plan = plan_entries(store, [msg], store.commit_log.max_offset, 1 << 20)
        lg.append([Entry(n, 1, EntryKind.NORMAL, plan.datas[0])])
    lg.sync()
    last_in_first = max(i for i in range(1, n + 1) if lg.offsets[i - 1] < SEGMENT)
    torn_at = lg.offsets[last_in_first - 1]  # at a record boundary: the segment looks whole, only shorter
    lg.close()
    store.index.close()
    store.commit_log.close()
    os.truncate(tmp_path / "commitlog" / f"{0:020d}", torn_at)  # the next segment's file is untouched

    store = MessageStore(store_config(tmp_path))
    store.set_confirm_offset(0)
    store.recover()
    lg = DLedgerLog(store, tmp_path / "dledger")
    assert lg.last_index() == last_in_first - 1
    assert [e.index for e in lg.entries(1, n + 1, 1 << 30)] == list(range(1, last_in_first))
    assert store.commit_log.max_offset == lg.end_offset(last_in_first - 1)
    lg.close()
    store.index.close()
    store.commit_log.close()


def _save_commit_into_hardstate(self: HardStateFile, hs: HardState, sync: bool) -> None:
    """The writer before seed 330: a commit-only change renamed unsynced bytes over ``hardstate``."""
    old = self.hard_state
    now = self.now()
    if (hs.term, hs.vote) == (old.term, old.vote) and now - self._commit_written < 1.0:
        self.hard_state = hs
        return
    tmp = self.path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        json.dump({"term": hs.term, "vote": hs.vote, "commit": hs.commit}, fh)
        if sync and (hs.term, hs.vote) != (old.term, old.vote):
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, self.path)
    self._commit_written = now
    self.hard_state = hs


def test_a_lazy_commit_write_never_replaces_term_and_vote(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 330: a power cut after the lazy commit-only write (unsynced bytes renamed over
    ``hardstate``) left no term and vote, and the member voted again in a term it had voted in:
    two leaders of term 1.  The commit hint now lives in ``hardstate.commit``.  (Seed 1847 shows it
    since leaders send before their fsync, session 18: the first of 0-4000 to break election safety.)"""
    run_seed(1847, profile="dledger")
    monkeypatch.setattr(HardStateFile, "save", _save_commit_into_hardstate)
    with pytest.raises(SimulationFailure) as exc:
        run_seed(1847, profile="dledger")
    assert "election safety" in exc.value.what


def test_a_truncation_is_durable_after_the_next_sync_even_when_nothing_is_written_after_it(tmp_path: Path) -> None:
    """Seed 1744 of 0-2000 (session 18): a follower truncated a divergent tail, wrote a no-op (no bytes) and
    synced, but the sync skipped the segment (no bytes past the synced offset), so the truncation was not
    durable; the next entry's record at the same offset was lost in a power cut, the cut-off record (same
    size, other data) came back, and the torn index's new entry pointed at it: one index, two committed
    payloads.  ``SegmentedLog.sync`` now fdatasyncs every segment shortened since the last sync."""
    disk = SimDisk(tmp_path, random.Random(1))
    with intercept([disk]):
        seg_log = SegmentedLog(tmp_path / "log", 1024)
        seg_log.append(b"a" * 100)
        seg_log.sync()
        seg_log.truncate(40)
        seg_log.sync()
        seg_log.close()
        disk.crash("lose")  # each file as of its last fsync
    path = tmp_path / "log" / f"{0:020d}"
    assert path.read_bytes() == b"a" * 40


def test_a_new_leader_forgets_the_queue_offsets_of_its_truncated_proposals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the consume-queue check (seeds 207 and 601 of 0-1000, session 19): a leader's uncommitted
    records of a queue that had no consume queue yet were truncated by the next leader; when it led again,
    ``MessageStore.rebuild_queue_offsets`` left that queue's planned offsets as they were, and its next
    committed records took queue offsets 5.. instead of 0.. (a gap consumers would see); it now forgets
    every planned offset first."""
    run_seed(601, profile="dledger")
    run_seed(207, profile="dledger")
    rebuild = MessageStore.rebuild_queue_offsets

    def keeping_what_it_planned(store: MessageStore) -> None:  # the old behaviour: planned offsets survive
        planned = dict(store.queue_next)
        rebuild(store)
        for key, offset in planned.items():
            store.queue_next.setdefault(key, offset)

    monkeypatch.setattr(MessageStore, "rebuild_queue_offsets", keeping_what_it_planned)
    with pytest.raises(SimulationFailure) as exc:
        run_seed(601, profile="dledger")
    assert "consume queue" in exc.value.what and "queue offsets [5" in exc.value.what
