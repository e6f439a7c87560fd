"""DLedger's real log files under the Raft simulator, on a simulated disk (tests/sim/dledger.py, disk.py).

Each node runs the production Raft driver (broker/raft/driver.py) over a ``MessageStore`` and
``DLedgerLog`` in a temporary directory; crashes keep, lose or tear what each file got since
its last fsync.  The seeds must keep every Raft invariant plus durability (what the log's
fsync covered survives), and the family must fail when DLedger's log skips an fsync.
``RAFT_SIM_DLEDGER_SEEDS=A-B`` overrides the range; the long run is
``.venv/bin/python tests/sim/run.py --profile dledger --seeds 0-2000``.
"""

from __future__ import annotations

import os

import pytest
from sim.scenario import SimulationFailure, run_seed

from rocketscope.broker.dledger.log_store import DLedgerLog


def _seeds() -> range:
    lo, hi = os.environ.get("RAFT_SIM_DLEDGER_SEEDS", "0-24").split("-", 1)
    return range(int(lo), int(hi))


def test_dledger_log_files_keep_raft_safe_through_crashes_on_a_simulated_disk() -> None:
    stats = [run_seed(seed, profile="dledger") for seed in _seeds()]
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
    """Seed 92: a process crash keeps entries only in the page cache; the restarted member syncs
    the log again, the commit log (which counts what it loads as synced) skips them, and a power
    cut then takes entries it had acked.  ``DLedgerLog`` now fdatasyncs what it recovered."""
    run_seed(92, profile="dledger")
    monkeypatch.setattr(DLedgerLog, "_make_recovered_durable", lambda self: None)
    with pytest.raises(SimulationFailure) as exc:
        run_seed(92, profile="dledger")
    assert "durability" in exc.value.what


def test_recovery_stops_at_an_entry_whose_segment_lost_its_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 278: a power cut tears one commit-log segment's unsynced tail but keeps the next
    segment's records (files are not ordered), so an index entry points into a hole below the
    log end.  ``DLedgerLog`` now ends the log before such an entry (its bytes were never synced)."""
    run_seed(278, profile="dledger")
    monkeypatch.setattr(DLedgerLog, "_stored_whole", staticmethod(lambda seg, offset, size: True))
    with pytest.raises(SimulationFailure) as exc:
        run_seed(278, profile="dledger")
    assert "commit log holds 0 of" in exc.value.what
