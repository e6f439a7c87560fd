"""The timer's disk structures (broker/timer_store.py) without a broker: chains, checkpoint, crash, segments."""

from __future__ import annotations

from pathlib import Path

from rocketscope.broker.timer_store import KIND_DELETE, KIND_NORMAL, UNIT_SIZE, TimerIndex


def test_units_of_a_slot_come_back_newest_first_and_other_slots_stay_apart(tmp_path: Path) -> None:
    idx = TimerIndex(tmp_path, 1000)
    for q in range(5):
        idx.add(10_000, 10_100 + q, q, 1000 + q, 50, KIND_NORMAL, "A")
    idx.add(11_000, 11_500, 5, 2000, 50, KIND_NORMAL, "B")
    assert [u.queue_offset for u in idx.units(10_000)] == [4, 3, 2, 1, 0]
    assert [(u.queue_offset, u.deliver_ms, u.phy) for u in idx.units(11_000)] == [(5, 11_500, 2000)]
    assert list(idx.units(12_000)) == []
    assert idx.cp.topic_counts == {"A": 5, "B": 1}
    # the same slot index one wheel round later is another time: empty, and reusable
    later = 10_000 + idx.wheel.span_ms
    assert list(idx.units(later)) == []
    idx.add(later, later + 1, 9, 3000, 50, KIND_NORMAL, "A")
    assert [u.queue_offset for u in idx.units(later)] == [9]


def test_flush_then_reopen_keeps_everything(tmp_path: Path) -> None:
    idx = TimerIndex(tmp_path, 1000)
    for q in range(3):
        idx.add(5_000, 5_000 + q, q, q, 10, KIND_NORMAL, "T")
    idx.add(5_000, 0, 1, 0, 0, KIND_DELETE, "T")
    idx.cp.claim_t, idx.cp.claim_e = 4_000, 2
    idx.flush(enqueue_offset=4)
    idx.close()
    again = TimerIndex(tmp_path, 1000)
    assert not again.fresh
    assert (again.cp.enqueue_offset, again.cp.claim_t, again.cp.claim_e) == (4, 4_000, 2)
    assert [(u.queue_offset, u.kind) for u in again.units(5_000)] == [(1, KIND_DELETE), (2, 0), (1, 0), (0, 0)]
    assert again.topic_name(again.log.read(0).topic_id) == "T"


def test_a_crash_before_the_checkpoint_loses_only_what_is_enqueued_again(tmp_path: Path) -> None:
    """Units added after the last flush are gone after a crash; the checkpoint says where to enqueue from."""
    idx = TimerIndex(tmp_path, 1000)
    idx.add(7_000, 7_001, 0, 0, 10, KIND_NORMAL, "T")
    idx.flush(enqueue_offset=1)
    idx.add(7_000, 7_002, 1, 10, 10, KIND_NORMAL, "T")  # in memory only
    idx.add(8_000, 8_002, 2, 20, 10, KIND_NORMAL, "T")
    idx.log.write_out()  # even written to the file (not synced, no checkpoint): cut at recovery
    # no close(): the process died
    again = TimerIndex(tmp_path, 1000)
    assert again.cp.enqueue_offset == 1
    assert [u.queue_offset for u in again.units(7_000)] == [0]
    assert list(again.units(8_000)) == []
    assert again.log.end == UNIT_SIZE
    # enqueued again from offset 1: the chain continues from the unit on disk
    again.add(7_000, 7_002, 1, 10, 10, KIND_NORMAL, "T")
    assert [u.queue_offset for u in again.units(7_000)] == [1, 0]


def test_segments_below_the_claimed_time_are_deleted(tmp_path: Path) -> None:
    idx = TimerIndex(tmp_path, 1000, units_per_segment=4)
    for q in range(10):  # segments of 4 units: [0..3] slot 1000, [4..7] slot 2000, [8..9] slot 3000
        idx.add(1000 * (1 + q // 4), 1000 * (1 + q // 4), q, q, 10, KIND_NORMAL, "T")
    idx.flush(enqueue_offset=10)
    assert len(list((tmp_path / "timerlog").iterdir())) == 3
    idx.cp.claim_t = 2_000  # slot 1000 delivered; slot 2000 not yet
    assert idx.delete_expired_segments() == 1
    assert idx.log.min_pos == 4 * UNIT_SIZE
    assert [u.queue_offset for u in idx.units(2_000)] == [7, 6, 5, 4]
    idx.cp.claim_t = 9_000  # everything claimed: the segment being written stays
    assert idx.delete_expired_segments() == 1
    assert [u.queue_offset for u in idx.units(3_000)] == [9, 8]


def test_a_new_precision_rebuilds_the_index(tmp_path: Path) -> None:
    idx = TimerIndex(tmp_path, 1000)
    idx.add(1000, 1000, 0, 0, 10, KIND_NORMAL, "T")
    idx.flush(enqueue_offset=1)
    idx.close()
    other = TimerIndex(tmp_path, 100)
    assert other.fresh and other.cp.enqueue_offset == 0 and other.log.end == 0


def test_an_index_reopened_after_a_crash_keeps_the_keys_flushed_before_it(tmp_path: Path) -> None:
    """The timer's re-check after a kill -9 asks the store's index; a slot pointing past the flushed count
    used to cut off every older key of that slot (a delayed message delivered twice after a restart)."""
    from rocketscope.broker.store.index import IndexFile

    f = IndexFile(tmp_path / "idx", slot_num=1, index_num=100)  # one slot: every key shares one chain
    f.put("T#old", 100, 1_000_000)
    f.flush()
    f.put("T#new", 200, 1_000_001)  # reaches the file through the mmap, the header's count does not
    f.mm.flush()
    again = IndexFile(tmp_path / "idx", slot_num=1, index_num=100)  # no close(): the process died
    assert again.query("T#old", 0, 2**62, 10) == [100]
    again.put("T#new", 200, 1_000_001)  # recovery indexes the records past the checkpoint again
    assert again.query("T#old", 0, 2**62, 10) == [100] and again.query("T#new", 0, 2**62, 10) == [200]


def test_a_replica_following_the_claim_counts_down_only_what_the_passed_slots_hold(tmp_path: Path) -> None:
    idx = TimerIndex(tmp_path, 1000)
    idx.add(3_000, 3_100, 0, 100, 50, KIND_NORMAL, "A")
    idx.add(3_000, 3_200, 1, 150, 50, KIND_NORMAL, "A")
    idx.add(3_000, 0, 1, 0, 0, KIND_DELETE, "A")  # message 1 recalled ...
    idx.count_down("A")  # ... which the recall itself counts down (broker/timer.py): not again here
    idx.add(9_000, 9_500, 2, 200, 50, KIND_NORMAL, "B")
    # one after the claim (stays pending)
    idx.add(20_000, 20_100, 3, 250, 50, KIND_NORMAL, "B")
    idx.flush()  # half the slots from the file, the rest changed since
    idx.add(2_000, 2_100, 4, 300, 50, KIND_NORMAL, "C")
    assert idx.pending == 4
    assert idx.count_down_passed(10_000 - idx.wheel.span_ms, 10_000) == 3  # 4, 0 and 2; not 1, not 3
    assert idx.cp.topic_counts == {"B": 1}
    assert idx.count_down_passed(10_000, 10_000) == 0


def test_following_with_nothing_pending_reads_no_slot(tmp_path: Path) -> None:
    idx = TimerIndex(tmp_path, 1000)
    reads = []
    idx.wheel.counts = lambda *a: reads.append(a) or []  # type: ignore[method-assign]
    assert idx.count_down_passed(0, idx.wheel.span_ms) == 0
    assert reads == []


def test_an_idle_flush_writes_nothing_and_a_claim_moving_over_empty_slots_is_saved_once_a_slack(
        tmp_path: Path) -> None:
    """Issue 20's idle cost: an unchanged index is not synced again; the claim on disk stays a lower bound."""
    idx = TimerIndex(tmp_path, 1000)
    idx.add(5_000, 5_000, 0, 0, 10, KIND_NORMAL, "T")
    idx.cp.claim_t, idx.cp.claim_e = 4_000, 0
    assert idx.flush(enqueue_offset=1, claim_slack_ms=60_000)
    saved = (tmp_path / "checkpoint").stat().st_mtime_ns
    assert not idx.flush(enqueue_offset=1, claim_slack_ms=60_000)  # nothing changed
    idx.cp.claim_t = 63_000  # 59 s of empty slots passed: not worth a save yet
    assert not idx.flush(enqueue_offset=1, claim_slack_ms=60_000)
    assert (tmp_path / "checkpoint").stat().st_mtime_ns == saved
    assert TimerIndex(tmp_path, 1000).cp.claim_t == 4_000  # what a restart would read: the older, lower claim
    idx.cp.claim_t = 64_000  # a minute: saved
    assert idx.flush(enqueue_offset=1, claim_slack_ms=60_000)
    idx.cp.claim_t = 65_000  # with anything else changed (a unit, counts, an offset) the claim goes with it
    idx.add(70_000, 70_000, 1, 10, 10, KIND_NORMAL, "T")
    assert idx.flush(enqueue_offset=2, claim_slack_ms=60_000)
    idx.close()
    again = TimerIndex(tmp_path, 1000)
    assert (again.cp.claim_t, again.cp.enqueue_offset, again.cp.topic_counts) == (65_000, 2, {"T": 2})
    assert [u.queue_offset for u in again.units(70_000)] == [1]
