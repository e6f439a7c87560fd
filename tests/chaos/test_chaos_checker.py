"""The checker and the schedule generator on hand-written histories (no processes: milliseconds)."""

from __future__ import annotations

from typing import Any

from chaos.checker import check
from chaos.nemesis import schedule_from_seed, schedule_json, schedule_load


class H:
    """A tiny history builder: each call appends one event at the next time step."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.t = 0.0

    def add(self, type_: str, f: str, **kw: Any) -> None:
        self.t += 0.1
        self.events.append({"t": round(self.t, 3), "type": type_, "f": f, "proc": "x", **kw})

    def send(self, key: str, kind: str = "normal", ok: bool = True, **kw: Any) -> None:
        self.add("invoke", "send", key=key, kind=kind, **kw)
        self.add("ok" if ok else "info", "send", key=key, kind=kind, **kw)

    def deliver(self, group: str, key: str, ack: bool = True, wall: float = 1e12, pos: str | None = None) -> None:
        self.add("ok", "deliver", group=group, key=key, attempt=1, wall=wall, pos=pos)
        if ack:
            self.add("ok", "ack", group=group, key=key)


GROUPS = ("A", "B")


def verdict(h: H) -> dict[str, Any]:
    return check(h.events, [], h.t + 1, groups=GROUPS)


def test_a_clean_history_is_valid_and_failed_sends_may_or_may_not_arrive() -> None:
    h = H()
    h.send("n-0")
    h.send("n-1", ok=False)  # unknown outcome: stored or not, both are fine
    h.send("n-2", ok=False)
    for g in GROUPS:
        h.deliver(g, "n-0")
        h.deliver(g, "n-1")
    v = verdict(h)
    assert v["valid"], v["violations"]
    assert v["totals"]["send_failures"] == 2


def test_lost_phantom_and_rolled_back_deliveries_are_violations() -> None:
    h = H()
    h.send("n-0")
    h.send("t-0", kind="tx", plan="rollback", decision="rollback")
    h.send("t-1", kind="tx", plan="unknown-commit", decision="commit")  # committed by its check-back
    h.deliver("A", "n-0")
    h.deliver("A", "t-0")
    h.deliver("A", "t-1")
    h.deliver("B", "never-sent")
    h.add("info", "checkback", key="t-1", decision="commit")
    h.send("t-2", kind="tx", plan="unknown-commit", decision="commit")  # never checked back: still open
    v = verdict(h)["violations"]
    assert v["lost"] == {"B": ["n-0", "t-1"]}
    assert v["tx_unchecked"] == {"A": ["t-2"], "B": ["t-2"]}
    assert v["phantom"] == {"A": ["t-0"], "B": ["never-sent"]}


def test_a_redelivery_is_a_duplicate_only_when_every_earlier_delivery_was_acked() -> None:
    h = H()
    h.send("t-0", kind="tx", plan="commit", decision="commit")
    h.add("ok", "commit", key="t-0")
    h.send("t-1", kind="tx", plan="commit", decision="commit")
    h.add("ok", "commit", key="t-1")
    for g in GROUPS:
        h.deliver(g, "t-0")
        h.deliver(g, "t-1", ack=False)  # not acked in time: coming back is at-least-once, not a duplicate
        h.deliver(g, "t-1")
    h.deliver("A", "t-0")  # acked before, delivered again: the committed transaction is duplicated
    v = verdict(h)
    assert v["violations"] == {"tx_duplicates": {"A": ["t-0"]}}
    assert v["totals"]["redeliveries"] == 3 and v["totals"]["duplicates"] == 1


def test_a_duplicate_from_another_queue_position_counts_as_stored_twice() -> None:
    """A normal message whose send was retried across a failover is stored at two offsets: at-least-once."""
    h = H()
    h.send("n-0")
    h.send("n-1")
    h.deliver("A", "n-0", pos="T/0/92")
    h.deliver("A", "n-0", pos="T/0/93")  # the same message, stored again by the retried send
    h.deliver("A", "n-1", pos="T/0/94")
    h.deliver("A", "n-1", pos="T/0/94")  # handed out again from the same position after its ack
    totals = verdict(h)["totals"]
    assert totals["duplicates"] == 2 and totals["stored_twice"] == 1


def test_fifo_order_stalls_and_early_delayed_messages() -> None:
    h = H()
    for i in range(4):
        h.send(f"f-g0-{i}", kind="fifo", group="g0", idx=i)
    h.send("d-0", kind="delay", due=100.0)
    for k in ("f-g0-0", "f-g0-2", "f-g0-1", "f-g0-3"):
        h.deliver("A", k)
    h.deliver("A", "d-0", wall=101.0)
    h.deliver("B", "f-g0-0")  # then the group stops: the rest is a stall, not a loss
    h.deliver("B", "d-0", wall=99.5)
    v = verdict(h)["violations"]
    assert v["fifo"] == {"A": ["f-g0-1 after g0-2"]}
    assert v["fifo_stalled"] == {"B": ["f-g0-1", "f-g0-2", "f-g0-3"]}
    assert v["early"] == {"B": ["d-0 0.50s early"]}
    assert "lost" not in v


def test_per_fault_windows_measure_the_longest_time_without_a_successful_send() -> None:
    h = H()
    h.add("invoke", "nemesis", n=0, fault={"kind": "kill"}, node=0, writer=0)  # t=0.1
    for t, ok in ((0.5, True), (2.5, False), (3.0, True), (3.2, True)):
        h.events.append({"t": t, "type": "invoke", "f": "send", "key": f"n-{t}", "kind": "normal", "proc": "p"})
        h.events.append({"t": t, "type": "ok" if ok else "info", "f": "send", "key": f"n-{t}", "kind": "normal",
                         "proc": "p"})
    v = check(h.events, [{"n": 0, "start": 0.1, "healed": 1.0, "settled": 1.5}], 4.0, groups=())
    f = v["faults"][0]
    assert f["max_no_send_s"] == 2.5  # 0.5 -> 3.0
    assert f["send_failures"] == 1


def test_per_fault_delivery_windows_take_the_group_that_waited_longest() -> None:
    h = H()
    h.add("invoke", "nemesis", n=0, fault={"kind": "pause"}, node=1, writer=0, access=0)  # t=0.1
    for group, times in (("A", (0.5, 1.0, 1.5, 2.0)), ("B", (0.6, 2.4))):  # B waits 0.6 -> 2.4
        for t in times:
            h.events.append({"t": t, "type": "ok", "f": "deliver", "group": group, "key": f"{group}-{t}",
                             "attempt": 1, "wall": 1e12, "proc": "c"})
    v = check(h.events, [{"n": 0, "start": 0.1, "healed": 1.0, "settled": 1.5}], 3.0, groups=("A", "B"))
    f = v["faults"][0]
    assert f["max_no_delivery_s"] == 1.8
    assert f["access_point"] == 0 and f["node"] == 1


def test_the_same_seed_gives_the_same_schedule_and_it_round_trips() -> None:
    a = schedule_from_seed(42, "dledger", 20)
    assert a == schedule_from_seed(42, "dledger", 20)
    assert a != schedule_from_seed(43, "dledger", 20)
    assert schedule_load(schedule_json(a)) == a
    assert {f.kind for f in schedule_from_seed(1, "controller", 200)} == {
        "kill", "restart", "pause", "isolate", "oneway", "slow"}


def _drain(h: H, load_end: float, drained: float) -> None:
    h.events.append({"t": load_end, "type": "info", "f": "load-end", "proc": "runner"})
    h.events.append({"t": drained, "type": "info", "f": "drained", "proc": "runner"})
    h.events.sort(key=lambda e: e["t"])


def _store(stored: dict[str, int], committed: dict[str, int]) -> dict[str, Any]:
    """Every key in one queue "T|b|0" at the given offset; each group's committed offset in that queue."""
    return {"stored": {k: [{"queue": "T|b|0", "offset": o}] for k, o in stored.items()},
            "committed": {g: {"T|b|0": c} for g, c in committed.items()}}


def test_missing_messages_are_lost_skipped_or_a_backlog_by_what_the_store_holds() -> None:
    h = H()
    for i in range(6):
        h.send(f"n-{i}")  # offsets 0..5 in the one queue, except n-5: never stored
    h.t = 100.0  # the drain: both groups still receive new keys until its end
    for g in GROUPS:
        for i, t in ((0, 100.0), (1, 130.0), (2, 195.0)):
            h.events.append({"t": t, "type": "ok", "f": "deliver", "proc": g, "group": g, "key": f"n-{i}",
                             "attempt": 1, "wall": 1e12})
    _drain(h, 99.0, 200.0)
    # A committed up to offset 4 (n-3 acknowledged without ever reaching A: skipped), B up to 3
    store = _store({f"n-{i}": i for i in range(5)}, {"A": 4, "B": 3})
    v = check(h.events, [], 99.0, groups=GROUPS, store=store)
    assert v["violations"]["lost"] == {"A": ["n-5"], "B": ["n-5"]}  # acknowledged, in no queue
    assert v["violations"]["skipped"] == {"A": ["n-3"]}  # stored below A's committed offset, never received
    assert "stalled" not in v["violations"]
    assert v["liveness"]["A"]["stored_unconsumed"] == 1  # n-4
    assert v["liveness"]["B"]["stored_unconsumed"] == 2  # n-3, n-4
    assert v["liveness"]["B"]["progressing"] and v["liveness"]["B"]["rate_per_s"] == round(1 / 30, 2)
    assert v["verdict"] == "INVALID" and "lost" in v["reason"]
    assert v["totals"]["must_found_in_store"] == 5


def test_a_backlog_still_being_consumed_is_valid_and_a_stopped_one_is_a_stall() -> None:
    def run(last_delivery: float) -> dict[str, Any]:
        h = H()
        for i in range(40):
            h.send(f"n-{i}")
        for g in GROUPS:
            for i in range(30):  # 30 received, the last at ``last_delivery``
                t = last_delivery - (29 - i) * 1.0
                h.events.append({"t": t, "type": "ok", "f": "deliver", "proc": g, "group": g, "key": f"n-{i}",
                                 "attempt": 1, "wall": 1e12})
                h.events.append({"t": t, "type": "ok", "f": "ack", "proc": g, "group": g, "key": f"n-{i}"})
        _drain(h, 50.0, 240.0)
        return check(h.events, [], 50.0, groups=GROUPS,
                     store=_store({f"n-{i}": i for i in range(40)}, {"A": 30, "B": 30}))

    moving = run(last_delivery=239.0)
    assert moving["valid"] and moving["verdict"] == "VALID", moving["violations"]
    f = moving["liveness"]["A"]
    assert f["stored_unconsumed"] == 10 and f["progressing"] and f["rate_per_s"] == 1.0 and f["eta_s"] == 10.0
    assert "backlog" in moving["reason"]

    stopped = run(last_delivery=150.0)  # nothing new for the drain's last 90 s (> STALL_S)
    assert stopped["verdict"] == "INVALID"
    assert stopped["violations"] == {"stalled": {g: [f"n-{i}" for i in sorted(range(30, 40), key=str)]
                                                 for g in GROUPS}}
    assert not stopped["liveness"]["A"]["progressing"]


def test_without_a_store_reading_missing_messages_stay_lost_and_the_reason_says_why() -> None:
    h = H()
    h.send("n-0")
    v = check(h.events, [], h.t + 1, groups=GROUPS, store={"error": "Unreachable: no broker answered"})
    assert v["violations"]["lost"] == {"A": ["n-0"], "B": ["n-0"]}
    assert not v["classified"] and "store not read" in v["reason"]


def test_delay_lateness_counts_each_groups_first_delivery_not_a_redelivery_after_a_skipped_ack() -> None:
    h = H()
    for i, late in enumerate((0.2, 0.4, 0.6)):
        h.send(f"d-{i}", kind="delay", due=1000.0 + i)
        for g in GROUPS:
            h.deliver(g, f"d-{i}", wall=1000.0 + i + late)
    h.deliver("A", "d-2", wall=1060.0)  # redelivered 60 s later after an ack that did not come in time
    t = verdict(h)["totals"]
    assert (t["delay_late_p50_s"], t["delay_max_late_s"]) == (0.4, 0.6)
    assert t["delay_late_by_group"]["A"] == {"p50": 0.4, "p99": 0.6, "max": 0.6}


def test_delay_lateness_is_also_given_per_group() -> None:
    h = H()
    for i in range(3):
        h.send(f"d-{i}", kind="delay", due=1000.0 + i)
        h.deliver("A", f"d-{i}", wall=1000.0 + i + 0.1)  # A polls eagerly
        h.deliver("B", f"d-{i}", wall=1000.0 + i + 9.0)  # B works through a backlog first
    by_group = verdict(h)["totals"]["delay_late_by_group"]
    assert by_group["A"]["max"] == 0.1 and by_group["B"]["p50"] == 9.0
