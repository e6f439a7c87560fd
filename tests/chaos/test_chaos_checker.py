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

    def deliver(self, group: str, key: str, ack: bool = True, wall: float = 1e12) -> None:
        self.add("ok", "deliver", group=group, key=key, attempt=1, wall=wall)
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


def test_the_same_seed_gives_the_same_schedule_and_it_round_trips() -> None:
    a = schedule_from_seed(42, "dledger", 20)
    assert a == schedule_from_seed(42, "dledger", 20)
    assert a != schedule_from_seed(43, "dledger", 20)
    assert schedule_load(schedule_json(a)) == a
    assert {f.kind for f in schedule_from_seed(1, "controller", 200)} == {
        "kill", "restart", "pause", "isolate", "oneway", "slow"}
