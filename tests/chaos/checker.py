"""The checker: reads the whole history once the run is over and says what went wrong.

Invariants (``violations``; a run passes only when they are all empty):

* ``lost``: a message the producer saw acknowledged (or a transaction committed: ``commit()``
  returned, or the check-back answered COMMIT) that some consumer group never received;
* ``fifo_stalled``: the undelivered tail of a FIFO message group (nothing after it was
  delivered either) when the drain ended: the group stopped moving (a liveness failure;
  a hole before a delivered message counts as ``lost``);
* ``tx_unchecked``: an open transaction (left for the check-back, decided commit) that no
  group received and that the broker never checked back: it is neither committed nor
  rolled back when the drain ended (reported apart from ``lost``, where the commit was
  accepted and the message still never arrived);
* ``phantom``: a delivery of a key that was never sent, or of a transaction decided rollback
  (the check-back answers from the same decision, so no such message may ever appear);
* ``tx_duplicates``: a committed transactional message delivered again to a SimpleConsumer
  group although every earlier delivery to that group had been acknowledged successfully
  (a redelivery after a failed, skipped or late ack is allowed: at-least-once);
* ``fifo``: within one message group, a consumer group received a message for the first
  time after a later message of that group;
* ``early``: a delayed message delivered before its delivery time;
* ``logs``: the replicas' commit logs differ below the committed point (checked by the harness).

With ``store`` (tests/chaos/store_probe.py: what the topics' queues hold at the end and each
group's committed offset), a message a group is missing is classified instead of being called
lost outright (``classify``):

* not in any of the topic's queues: ``lost`` (safety);
* stored below the group's committed offset (the group acknowledged past it without receiving
  it): ``skipped`` (safety: lost for that group);
* stored at or above the committed offset: a *backlog* when the group still received new keys
  in the last ``STALL_S`` of the drain (a liveness figure, reported under ``liveness`` with the
  drain's consumption rate and the time the backlog needs at that rate, not a violation), else
  ``stalled`` (the group stopped consuming stored messages: a liveness failure).
  FIFO tails are classified the same way (``fifo_stalled`` is the verdict without ``store``).

Figures (``faults`` and ``totals``): for each fault, from its start to the next fault's start
(or the end of the load), the longest window with no successful send, client-visible send
failures (a send that raised after the client's own retries), redeliveries (deliveries beyond
the first per group and key) and duplicates (redeliveries not explained by a missing ack; the
PushConsumer acks inside the client, so its repeats count as redeliveries only).  Duplicates are
split by where the copy was stored (the queue position in the receipt handle): ``stored_twice``
when the repeat came from another queue position (the message was stored twice: a send whose
first attempt was committed after all and was retried, at-least-once as RocketMQ's own send
retry), else it was handed out again from the same position.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any

from chaos.harness import GROUPS

PUSH_GROUP = GROUPS[2]
# A group with no new key for this long at the end of the drain has stopped (tests/chaos/workload.py).  Longer
# than a PushConsumer message's way back: its receives are auto-renew, so a message whose ack was refused
# (receipt handle expired across a leader change) is redelivered after the broker's defaultInvisibleTimeMills,
# RocketMQ's 60 s.  At 20 s a FIFO group waiting for that redelivery was called stalled (session 10, DLedger
# schedule: ChaosPush's f-g1-52 delivered at 35.6 s, its ack refused, the drain cut 23 s after the group's
# last delivery); lowering the invisible time instead (10 s) made the loaded client's cached messages expire
# before it processed them (1,719 redeliveries).
STALL_S = 70.0
RATE_S = 30.0  # the drain's consumption rate is measured over its last this-many seconds


def _delay_lateness(deliveries: dict[str, list[dict[str, Any]]],
                    invoked: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Seconds from a delayed message's due time to each group's first delivery of it: p50, p99, max, over
    every group and per group (``delay_late_by_group``).

    Per group because a group's own backlog adds to the timer's lateness: the PushConsumer group works
    through what piled up during a fault at its own pace, so its first deliveries of delayed messages
    came 9 s late where both SimpleConsumer groups' came within a second (DLedger pauses, session 13).
    """
    late: list[float] = []
    by_group: dict[str, dict[str, float]] = {}
    for g, ds in deliveries.items():
        first: dict[str, float] = {}
        for d in ds:
            inv = invoked.get(d["key"])
            if inv is not None and inv["kind"] == "delay":
                first[d["key"]] = min(first.get(d["key"], d["wall"]), d["wall"])
        mine = sorted(wall - invoked[k]["due"] for k, wall in first.items())
        if mine:
            by_group[g] = {"p50": round(_rank(mine, 0.50), 2), "p99": round(_rank(mine, 0.99), 2),
                           "max": round(mine[-1], 2)}
        late.extend(mine)
    if not late:
        return {"delay_late_p50_s": 0.0, "delay_late_p99_s": 0.0, "delay_max_late_s": 0.0, "delay_late_by_group": {}}
    late.sort()
    return {"delay_late_p50_s": round(_rank(late, 0.50), 2), "delay_late_p99_s": round(_rank(late, 0.99), 2),
            "delay_max_late_s": round(late[-1], 2), "delay_late_by_group": by_group}


def _rank(ordered: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of a sorted list."""
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def _max_gap(oks: list[float], start: float, end: float) -> float:
    points = [start, *(t for t in oks if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(points)) if end > start else 0.0


def _fifo_tails(missing: set[str], got: set[str], invoked: dict[str, dict[str, Any]]) -> set[str]:
    """The missing FIFO keys that come after every delivered key of their message group.

    A message group whose head is blocked delivers nothing more until it is unblocked: its
    undelivered tail is a stall (liveness) as long as the drain lasted, not a hole (safety).
    """
    last: dict[str, int] = {}
    for k in got:
        inv = invoked.get(k)
        if inv is not None and inv["kind"] == "fifo":
            last[inv["group"]] = max(last.get(inv["group"], -1), inv["idx"])
    return {k for k in missing
            if invoked[k]["kind"] == "fifo" and invoked[k]["idx"] > last.get(invoked[k]["group"], -1)}


def must_keys(events: list[dict[str, Any]]) -> tuple[set[str], set[str], dict[str, dict[str, Any]]]:
    """(keys every group must receive, keys no group may receive, the invoke of each key)."""
    invoked = {e["key"]: e for e in events if e["f"] == "send" and e["type"] == "invoke"}
    acked = {e["key"] for e in events if e["f"] == "send" and e["type"] == "ok"}
    committed = {e["key"] for e in events if e["f"] == "commit" and e["type"] == "ok"}
    must, forbidden = set(), set()
    for key, inv in invoked.items():
        if inv["kind"] != "tx":
            if key in acked:
                must.add(key)
        elif inv["decision"] == "rollback":
            forbidden.add(key)
        elif key in acked and (inv["plan"] == "unknown-commit" or key in committed):
            must.add(key)
    return must, forbidden, invoked


def drain_window(events: list[dict[str, Any]], load_end: float) -> tuple[float, float]:
    """(start, end) of the drain: the runner's ``load-end`` and ``drained`` events, else load_end .. last event."""
    start = next((e["t"] for e in events if e["f"] == "load-end"), load_end)
    end = next((e["t"] for e in events if e["f"] == "drained"), max((e["t"] for e in events), default=start))
    return start, max(start, end)


def classify(missing: set[str], group: str, first_seen: dict[str, float], store: dict[str, Any],
             drain: tuple[float, float]) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """Sort one group's missing keys into lost / skipped / stalled / backlog (see the module's docstring).

    ``first_seen``: the time each must-key first reached the group.  Returns (violations by kind,
    the group's liveness figures).
    """
    stored: dict[str, list[dict[str, Any]]] = store["stored"]
    committed: dict[str, int] = store["committed"].get(group, {})
    lost, skipped, pending = [], [], []
    for key in sorted(missing):
        copies = stored.get(key, [])
        if not copies:
            lost.append(key)
        elif all(c["offset"] < committed.get(c["queue"], 0) for c in copies):
            skipped.append(key)
        else:
            pending.append(key)
    start, end = drain
    last_new = max((t for t in first_seen.values() if t <= end), default=None)
    idle = end - last_new if last_new is not None else end - start
    recent = sum(1 for t in first_seen.values() if end - RATE_S <= t <= end)
    window = min(RATE_S, end - start) or RATE_S
    rate = recent / window
    out: dict[str, list[str]] = {}
    if lost:
        out["lost"] = lost
    if skipped:
        out["skipped"] = skipped
    figures: dict[str, Any] = {}
    if pending:
        progressing = idle <= STALL_S
        if not progressing:
            out["stalled"] = pending
        kinds: dict[str, int] = defaultdict(int)
        for k in pending:
            kinds[k.split("-", 1)[0]] += 1
        figures = {"stored_unconsumed": len(pending), "by_kind": dict(kinds), "progressing": progressing,
                   "rate_per_s": round(rate, 2), "seconds_since_new_key": round(idle, 1),
                   "eta_s": round(len(pending) / rate, 1) if rate > 0 else None,
                   "drain_s": round(end - start, 1)}
    return out, figures


def check(events: list[dict[str, Any]], windows: list[dict[str, Any]], load_end: float,
          logs: tuple[bool, str] | None = None, groups: tuple[str, ...] = GROUPS,
          store: dict[str, Any] | None = None) -> dict[str, Any]:
    """The verdict over ``events`` (History.events); ``windows`` are the nemesis' runs (Nemesis.run).

    ``store`` (tests/chaos/store_probe.py ``probe``) separates a backlog from a stall from a loss;
    without it (or when it holds ``error``) every missing key is ``lost`` as before.
    """
    classified = store is not None and "error" not in store
    drain = drain_window(events, load_end)
    liveness: dict[str, Any] = {}
    must, forbidden, invoked = must_keys(events)
    checked = {e["key"] for e in events if e["f"] == "checkback"}
    deliveries: dict[str, list[dict[str, Any]]] = defaultdict(list)
    acks: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in events:
        if e["f"] == "deliver":
            deliveries[e["group"]].append(e)
        elif e["f"] == "ack" and e["type"] == "ok":
            acks[(e["group"], e["key"])].append(e["t"])
    violations: dict[str, Any] = {name: {} for name in ("lost", "skipped", "stalled", "fifo_stalled",
                                                         "tx_unchecked", "phantom", "tx_duplicates", "fifo",
                                                         "early")}
    redelivered: list[tuple[float, str]] = []
    duplicated: list[tuple[float, str]] = []
    stored_twice: list[tuple[float, str]] = []
    for g in groups:
        ds = sorted(deliveries.get(g, []), key=lambda e: e["t"])
        got = {d["key"] for d in ds}
        missing = must - got
        stalled = _fifo_tails(missing, got, invoked)
        unchecked = {k for k in missing if invoked[k]["kind"] == "tx" and invoked[k]["plan"] == "unknown-commit"
                     and k not in checked}
        if unchecked:
            violations["tx_unchecked"][g] = sorted(unchecked)
        if classified:
            assert store is not None
            first_seen: dict[str, float] = {}
            for d in ds:
                if d["key"] in must:
                    first_seen.setdefault(d["key"], d["t"])
            kinds, figures = classify(missing - unchecked, g, first_seen, store, drain)
            for name, keys in kinds.items():
                violations[name][g] = keys
            if figures:
                liveness[g] = figures
        else:
            if lost := sorted(missing - stalled - unchecked):
                violations["lost"][g] = lost
            if stalled:
                violations["fifo_stalled"][g] = sorted(stalled)
        if phantom := sorted(k for k in got if k not in invoked or k in forbidden):
            violations["phantom"][g] = phantom
        count: dict[str, int] = defaultdict(int)
        positions: dict[str, set[str]] = defaultdict(set)
        fifo_max: dict[str, int] = {}
        fifo_bad: list[str] = []
        early: list[str] = []
        for d in ds:
            key = d["key"]
            count[key] += 1
            inv = invoked.get(key)
            pos = d.get("pos")
            new_position = pos is not None and bool(positions[key]) and pos not in positions[key]
            if pos is not None:
                positions[key].add(pos)
            if count[key] > 1:
                redelivered.append((d["t"], g))
                acked_before = sum(1 for t in acks.get((g, key), ()) if t < d["t"])
                if g != PUSH_GROUP and acked_before >= count[key] - 1:  # every earlier delivery was acked
                    duplicated.append((d["t"], g))
                    if new_position:
                        stored_twice.append((d["t"], g))
                    if inv is not None and inv["kind"] == "tx":
                        violations["tx_duplicates"].setdefault(g, []).append(key)
                continue
            if inv is None:
                continue
            if inv["kind"] == "fifo":
                mg, idx = inv["group"], inv["idx"]
                if idx < fifo_max.get(mg, -1):
                    fifo_bad.append(f"{key} after {mg}-{fifo_max[mg]}")
                fifo_max[mg] = max(idx, fifo_max.get(mg, -1))
            elif inv["kind"] == "delay" and d["wall"] < inv["due"]:
                early.append(f"{key} {inv['due'] - d['wall']:.2f}s early")
        if fifo_bad:
            violations["fifo"][g] = fifo_bad
        if early:
            violations["early"][g] = early
    if logs is not None and not logs[0]:
        violations["logs"] = logs[1]
    violations = {k: v for k, v in violations.items() if v}

    send_ok = sorted(e["t"] for e in events if e["f"] == "send" and e["type"] == "ok")
    send_fail = sorted(e["t"] for e in events if e["f"] == "send" and e["type"] == "info")
    # each group's deliveries: a consumer waits on the cluster too (a confirm offset held back by a silent
    # in-sync replica stops deliveries while sends still succeed), so its longest wait is a figure of its own
    got_at = {g: sorted(d["t"] for d in deliveries.get(g, [])) for g in groups}
    faults = []
    starts = [w["start"] for w in windows] + [load_end]
    for w, end in zip(windows, starts[1:], strict=False):
        inv = next(e for e in events if e["f"] == "nemesis" and e["type"] == "invoke" and e["n"] == w["n"])
        fail_in = [t for t in send_fail if w["start"] <= t < end]
        faults.append({
            "n": w["n"], "fault": inv["fault"], "node": inv["node"], "writer_before": inv["writer"],
            "access_point": inv.get("access"), "load": inv.get("load"),
            "start": w["start"], "healed": w["healed"], "settled": w["settled"], "end": end,
            "max_no_send_s": round(_max_gap(send_ok, w["start"], end), 3),
            "max_no_delivery_s": round(max((_max_gap(ts, w["start"], end) for ts in got_at.values()),
                                           default=0.0), 3),
            "send_failures": len(fail_in),
            "redeliveries": sum(1 for t, _ in redelivered if w["start"] <= t < end),
            "duplicates": sum(1 for t, _ in duplicated if w["start"] <= t < end),
            "stored_twice": sum(1 for t, _ in stored_twice if w["start"] <= t < end)})
    first = windows[0]["start"] if windows else load_end
    totals = {
        "sends_invoked": len(invoked), "sends_acked": len(send_ok), "send_failures": len(send_fail),
        "must_deliver": len(must), "rolled_back": len(forbidden),
        "deliveries": {g: len(deliveries.get(g, [])) for g in groups},
        "redeliveries": len(redelivered), "duplicates": len(duplicated), "stored_twice": len(stored_twice),
        "checkbacks": sum(1 for e in events if e["f"] == "checkback"),
        # lateness of each group's *first* delivery of a delayed message (a redelivery after a
        # deliberately skipped ack comes an invisible time later and says nothing about the timer)
        **_delay_lateness(deliveries, invoked),
        "deliberately_unacked": sum(1 for e in events if e["f"] == "noack"),
        # ground truth of the classification: how many must-keys the store reading found (all, when it works)
        "must_found_in_store": sum(1 for k in must if k in store["stored"]) if classified and store else None,
        "baseline_max_no_send_s": round(_max_gap(send_ok, min(send_ok, default=0.0), first), 3) if send_ok else None,
        "baseline_max_no_delivery_s": round(max((_max_gap(ts, ts[0], first) for ts in got_at.values() if ts),
                                                default=0.0), 3),
    }
    valid = not violations
    if not valid:
        reason = summarize(violations)
    else:
        backlog = {g: f["stored_unconsumed"] for g, f in liveness.items()}
        reason = ("nothing lost" + (" (each missing message looked up in the store)" if classified else "")
                  + ("; backlog still being consumed when the drain ended: " + ", ".join(
                      f"{g} {n} at {liveness[g]['rate_per_s']}/s" for g, n in backlog.items()) if backlog else ""))
    if store is not None and "error" in store:
        reason += f" (store not read: {store['error']}; missing messages counted as lost)"
    return {"valid": valid, "verdict": "VALID" if valid else "INVALID", "reason": reason,
            "classified": classified, "liveness": liveness, "violations": violations, "faults": faults,
            "totals": totals}


def summarize(violations: dict[str, Any], limit: int = 5) -> str:
    """A short text of the violations (the first ``limit`` keys of each)."""
    parts = []
    for name, v in violations.items():
        if isinstance(v, dict):
            for g, keys in v.items():
                parts.append(f"{name}[{g}]: {len(keys)} e.g. {keys[:limit]}")
        else:
            parts.append(f"{name}: {v}")
    return "; ".join(parts) or "none"
