"""A plain-Python computation of every job, for checking the Spark jobs on small data.

It follows the definitions in :mod:`rocketscope.spark.model` and the job modules with
loops, dicts and ``bisect`` (no Spark, no shared code beyond the trace codec and the
HaEvent parser), so a mistake in a join, a window or a null rule shows up as a
difference.  Percentiles here are exact nearest-rank; tests compare Spark's
``percentile_approx`` to them within one rank.  Timestamps are epoch ms throughout.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from rocketscope.ha_events import HaEvent, HaEventError
from rocketscope.names import DLQ_PREFIX, HA_EVENTS_TOPIC
from rocketscope.spark.schema import MAX_RECONSUME_TIMES, QUORUM
from rocketscope.trace.codec import PubRecord, SubAfterRecord, SubBeforeRecord, TraceDecodeError, decode
from rocketscope.trace.ids import parse_offset_msg_id

NEG_INF = -(2**62)
POS_INF = 2**62
DAY_MS = 86_400_000


def utc_date_ordinal(ms: int) -> int:
    """Days since 1970-01-01 (what ``date_from_unix_date`` takes)."""
    return ms // DAY_MS


def minute_of(ms: int) -> int:
    return ms - ms % 60_000


def nearest_rank(values: list[int], p: float) -> int:
    """The smallest value with at least ``p`` of the values at or below it."""
    ordered = sorted(values)
    k = max(1, math.ceil(p * len(ordered)))
    return ordered[k - 1]


def read_rows(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        for f in sorted(Path(path).rglob("*.parquet")):
            rows.extend(pq.read_table(f).to_pylist())
    return rows


@dataclass
class Reference:
    """All four tables computed from input rows; build with :meth:`from_rows`."""

    pubs: list[dict] = field(default_factory=list)
    befores: dict[tuple[str, str], dict] = field(default_factory=dict)
    afters: dict[tuple[str, str], dict] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]]) -> Reference:
        ref = cls()
        seen_pub: set[tuple] = set()
        seen_ev: set[tuple] = set()
        for row in rows:
            if row["topic"] == HA_EVENTS_TOPIC:
                try:
                    folded = HaEvent.from_json(row["body"])
                except HaEventError:
                    continue
                for ev in folded.expand():  # a throttled event: one per advance it folds in (its steps)
                    gen = ev.term if ev.term >= 0 else ev.epoch if ev.epoch >= 0 else -1
                    mode = "dledger" if ev.term >= 0 else "controller" if ev.epoch >= 0 else "master_slave"
                    key = (ev.type, ev.group, ev.node, ev.ts, ev.address, gen, mode, ev.replica, ev.offset,
                           ev.from_offset, ev.to_offset, ev.role, ev.leader)
                    if key not in seen_ev:
                        seen_ev.add(key)
                        ref.events.append(dict(zip(
                            ("type", "group", "node", "ts", "address", "gen", "mode", "replica", "offset",
                             "from_offset", "to_offset", "role", "leader"), key, strict=True)))
                continue
            try:
                records = decode(row["body"], skip_unknown=True)
            except TraceDecodeError:
                continue
            origin = row["tags"]
            for r in records:
                if isinstance(r, PubRecord):
                    try:
                        phys = parse_offset_msg_id(r.offset_msg_id)[2] if r.offset_msg_id else None
                    except ValueError:
                        phys = None
                    pub_key = (r.msg_id, r.timestamp, r.group, r.topic, r.keys, r.store_host, r.cost_time,
                               r.success, phys, origin)
                    if pub_key in seen_pub:
                        continue
                    seen_pub.add(pub_key)
                    ref.pubs.append({"msg_id": r.msg_id, "born_ts": r.timestamp, "producer_group": r.group,
                                     "topic": r.topic, "keys": r.keys, "store_host": r.store_host,
                                     "stored_ts": r.timestamp + r.cost_time, "success": r.success, "phys": phys})
                elif isinstance(r, SubBeforeRecord):
                    ref.befores.setdefault((r.msg_id, r.request_id), {
                        "grp": r.group, "ts": r.timestamp, "retry": r.retry_times, "origin": origin})
                elif isinstance(r, SubAfterRecord):
                    ref.afters.setdefault((r.msg_id, r.request_id), {
                        "grp": r.group or None, "ts": r.timestamp or None, "cost": r.cost_time,
                        "success": r.success, "origin": origin})
        ref._derive()
        return ref

    # ---------------------------------------------------------------- model
    def _derive(self) -> None:
        lead: dict[tuple, dict] = {}
        for e in self.events:
            role = e["role"].lower()
            is_leader = (e["type"] in ("leader_elected", "master_elected") and e["leader"] in ("", e["node"])) or (
                e["type"] == "role_change" and (role == "leader" or role.endswith("master")))
            if not is_leader or not e["address"]:
                continue
            k = (e["group"], e["gen"], e["address"])
            cur = lead.get(k)
            if cur is None:
                lead[k] = {"group": e["group"], "gen": e["gen"], "address": e["address"], "start": e["ts"],
                           "mode": e["mode"], "node": e["node"]}
            else:
                cur["start"] = min(cur["start"], e["ts"])
                cur["node"] = min(cur["node"], e["node"])
        self.leaderships = list(lead.values())
        by_addr: dict[str, list[dict]] = defaultdict(list)
        for ld in self.leaderships:
            by_addr[ld["address"]].append(ld)
        self.intervals: dict[str, list[tuple[int, int, dict]]] = {}
        for addr, lds in by_addr.items():
            lds.sort(key=lambda x: (x["start"], x["gen"]))
            spans = []
            for i, ld in enumerate(lds):
                lo = NEG_INF if i == 0 else ld["start"]
                hi = lds[i + 1]["start"] if i + 1 < len(lds) else POS_INF
                spans.append((lo, hi, ld))
            self.intervals[addr] = spans

        # acks and commits per (group, gen, replica): sorted offsets with suffix-minimum times
        ack_min: dict[tuple, dict[int, int]] = defaultdict(dict)
        for e in self.events:
            if e["type"] == "replica_ack" and e["replica"] and e["offset"] >= 0:
                k = (e["group"], e["gen"], e["replica"])
            elif e["type"] == "commit_advanced" and e["offset"] >= 0:
                k = (e["group"], e["gen"], QUORUM)
            else:
                continue
            d = ack_min[k]
            d[e["offset"]] = min(d.get(e["offset"], POS_INF), e["ts"])
        self.ack_index: dict[tuple, tuple[list[int], list[int]]] = {}
        self.replicas_of: dict[tuple, set[str]] = defaultdict(set)
        for k, d in ack_min.items():
            offs = sorted(d)
            suffix = [0] * len(offs)
            best = POS_INF
            for i in range(len(offs) - 1, -1, -1):
                best = min(best, d[offs[i]])
                suffix[i] = best
            self.ack_index[k] = (offs, suffix)
            self.replicas_of[(k[0], k[1])].add(k[2])

        truncs = [e for e in self.events if e["type"] == "truncation"]
        for c in self.pubs:
            leader_span = self._leadership(c["store_host"], c["stored_ts"])
            c["broker_group"] = leader_span["group"] if leader_span else None
            c["gen"] = leader_span["gen"] if leader_span else None
            c["ha_mode"] = leader_span["mode"] if leader_span else None
            c["stored_copy"] = c["success"] and c["phys"] is not None and leader_span is not None
            c["truncated"] = c["stored_copy"] and any(
                t["group"] == c["broker_group"] and t["gen"] > c["gen"] and t["ts"] >= c["stored_ts"]
                and t["from_offset"] <= c["phys"] < t["to_offset"] for t in truncs)
            c["acks"] = {}
            if c["stored_copy"]:
                for rep in self.replicas_of.get((c["broker_group"], c["gen"]), ()):
                    c["acks"][rep] = self.first_ack((c["broker_group"], c["gen"], rep), c["phys"])
            c["committed_ts"] = c["acks"].get(QUORUM)

    def _leadership(self, address: str, t: int) -> dict | None:
        for lo, hi, ld in self.intervals.get(address, []):
            if lo <= t < hi:
                return ld
        return None

    def first_ack(self, key: tuple, p: int) -> int | None:
        """Earliest ack time among acks of ``key`` with offset > p."""
        if key not in self.ack_index:
            return None
        offs, suffix = self.ack_index[key]
        i = bisect.bisect_right(offs, p)
        return suffix[i] if i < len(offs) else None

    # ----------------------------------------------------------- consumption
    def attempts(self) -> list[dict]:
        out = []
        for k in set(self.befores) | set(self.afters):
            b, a = self.befores.get(k), self.afters.get(k)
            grp = (b["grp"] if b else None) or (a["grp"] if a else None)
            if grp is None:
                continue
            end = a["ts"] if a and a["ts"] is not None else (b["ts"] + a["cost"] if a and b else None)
            out.append({"msg_id": k[0], "request_id": k[1], "grp": grp, "begin": b["ts"] if b else None, "end": end,
                        "success": a["success"] if a else None, "retry": b["retry"] if b else None,
                        "origin": b["origin"] if b else a["origin"] if a else None})
        return out

    def consumers(self) -> dict[tuple[str, str], dict]:
        stats: dict[tuple[str, str], dict] = {}
        for at in self.attempts():
            s = stats.setdefault((at["msg_id"], at["grp"]), {"req": set(), "begin": [], "ack": [], "retry": [],
                                                              "failures": 0, "dlq_retry": [], "dlq_topic": []})
            s["req"].add(at["request_id"])
            if at["begin"] is not None:
                s["begin"].append(at["begin"])
            if at["success"] is True and at["end"] is not None:
                s["ack"].append(at["end"])
            if at["retry"] is not None:
                s["retry"].append(at["retry"])
            if at["success"] is False:
                s["failures"] += 1
                if at["retry"] is not None and at["retry"] >= MAX_RECONSUME_TIMES:
                    t = at["end"] if at["end"] is not None else at["begin"]
                    if t is not None:
                        s["dlq_retry"].append(t)
        for at in self.attempts():
            if at["origin"] and at["origin"].startswith(DLQ_PREFIX):
                target = at["origin"][len(DLQ_PREFIX):]
                s = stats.setdefault((at["msg_id"], target), {"req": set(), "begin": [], "ack": [], "retry": [],
                                                              "failures": 0, "dlq_retry": [], "dlq_topic": []})
                t = at["begin"] if at["begin"] is not None else at["end"]
                if t is not None:
                    s["dlq_topic"].append(t)
        for c in self.pubs:  # the broker's record of the move itself (spark/model.py says why)
            if c["topic"].startswith(DLQ_PREFIX) and c["success"] is not False:
                target = c["topic"][len(DLQ_PREFIX):]
                s = stats.setdefault((c["msg_id"], target), {"req": set(), "begin": [], "ack": [], "retry": [],
                                                             "failures": 0, "dlq_retry": [], "dlq_topic": []})
                s["dlq_topic"].append(c["born_ts"])
        out = {}
        for k, s in stats.items():
            dlq_times = ([min(s["dlq_retry"])] if s["dlq_retry"] else []) + (
                [min(s["dlq_topic"])] if s["dlq_topic"] else [])
            out[k] = {"group": k[1], "first_delivery_ts": min(s["begin"], default=None),
                      "first_ack_ts": min(s["ack"], default=None), "deliveries": len(s["req"]),
                      "max_retry_times": max(s["retry"], default=None), "failures": s["failures"],
                      "dlq": bool(dlq_times), "dlq_ts": min(dlq_times, default=None)}
        return out

    # ------------------------------------------------------------------ jobs
    def messages(self) -> dict[str, dict]:
        by_msg: dict[str, list[dict]] = defaultdict(list)
        for c in self.pubs:
            by_msg[c["msg_id"]].append(c)
        out = {}
        for msg_id, cs in by_msg.items():
            live = [c for c in cs if c["success"] and not c["truncated"]]
            trunc = [c for c in cs if c["truncated"]]
            eff = sorted(cs, key=lambda c: (not (c["success"] and not c["truncated"]), not c["success"],
                                            c["stored_ts"], c["store_host"]))[0]
            last_live = max((c["stored_ts"] for c in live), default=None)
            first_trunc = min((c["stored_ts"] for c in trunc), default=None)
            out[msg_id] = {
                "msg_id": msg_id, "topic": eff["topic"], "producer_group": eff["producer_group"], "keys": eff["keys"],
                "born_ts": min(c["born_ts"] for c in cs),
                "stored_ts": eff["stored_ts"] if eff["success"] else None,
                "store_host": eff["store_host"], "broker_group": eff["broker_group"], "ha_mode": eff["ha_mode"],
                "gen": eff["gen"], "phys_offset": eff["phys"], "committed_ts": eff["committed_ts"],
                "send_attempts": len(cs), "failed_sends": sum(1 for c in cs if not c["success"]),
                "truncated_copies": len(trunc),
                "resent": bool(trunc) and last_live is not None and last_live > first_trunc,
                "lost": bool(trunc) and last_live is None,
                "replicas": sorted((r, t, None if t is None else t - eff["born_ts"])
                                   for r, t in eff["acks"].items() if r != QUORUM),
            }
        return out

    def message_timeline(self) -> dict[str, dict]:
        msgs = self.messages()
        cons = self.consumers()
        by_msg: dict[str, list[dict]] = defaultdict(list)
        for (msg_id, _), c in cons.items():
            by_msg[msg_id].append(c)
        out = {}
        for msg_id in set(msgs) | set(by_msg):
            m = dict(msgs.get(msg_id) or {"msg_id": msg_id, "born_ts": None, "send_attempts": 0, "failed_sends": 0,
                                          "truncated_copies": 0, "resent": False, "lost": False, "replicas": []})
            cs = sorted(by_msg.get(msg_id, []), key=lambda c: c["group"])
            m["consumers"] = [tuple(c[k] for k in ("group", "first_delivery_ts", "first_ack_ts", "deliveries",
                                                   "max_retry_times", "failures", "dlq", "dlq_ts")) for c in cs]
            first = min((c["first_delivery_ts"] for c in cs if c["first_delivery_ts"] is not None), default=None)
            if first is None:
                first = min((c["first_ack_ts"] for c in cs if c["first_ack_ts"] is not None), default=None)
            when = m["born_ts"] if m["born_ts"] is not None else first
            m["date"] = None if when is None else utc_date_ordinal(when)
            out[msg_id] = m
        return out

    def replication_latency(self) -> dict[tuple, dict]:
        groups: dict[tuple, list] = defaultdict(list)
        for c in self.pubs:
            if not c["stored_copy"]:
                continue
            for rep, t in c["acks"].items():
                k = (utc_date_ordinal(c["born_ts"]), minute_of(c["born_ts"]), c["topic"], c["broker_group"], rep)
                groups[k].append(None if t is None else t - c["born_ts"])
        return {k: _stats(v) for k, v in groups.items()}

    def e2e_latency(self) -> dict[tuple, dict]:
        msgs = self.messages()
        groups: dict[tuple, list] = defaultdict(list)
        dlq: dict[tuple, int] = defaultdict(int)
        for (msg_id, grp), c in self.consumers().items():
            m = msgs.get(msg_id)
            if m is None:
                continue
            k = (utc_date_ordinal(m["born_ts"]), minute_of(m["born_ts"]), m["topic"], grp)
            groups[k].append(None if c["first_ack_ts"] is None else c["first_ack_ts"] - m["born_ts"])
            dlq[k] += int(c["dlq"])
        out = {}
        for k, v in groups.items():
            out[k] = _stats(v)
            out[k]["dlq"] = dlq[k]
        return out

    def failover_impact(self, window_ms: int = 5_000) -> dict[tuple, dict]:
        msgs = self.messages()
        by_group: dict[str, list[dict]] = defaultdict(list)
        for ld in self.leaderships:
            by_group[ld["group"]].append(ld)
        out = {}
        for group, lds in by_group.items():
            lds.sort(key=lambda x: (x["gen"], x["start"]))
            for prev, cur in itertools.pairwise(lds):
                if cur["gen"] <= prev["gen"]:
                    continue
                og, ng = prev["gen"], cur["gen"]
                starts = [e["ts"] for e in self.events if e["type"] == "election_started" and e["group"] == group
                          and e["gen"] == ng]
                start = min(starts) if starts else cur["start"]
                tb = sum(e["to_offset"] - e["from_offset"] for e in self.events
                         if e["type"] == "truncation" and e["group"] == group and e["gen"] == ng)
                seen = [e["ts"] for e in self.events if e["group"] == group and e["address"] == prev["address"]
                        and e["gen"] == og and e["ts"] < start]
                cs = [c for c in self.pubs if c["broker_group"] == group]
                ok = [c for c in cs if c["success"]]
                old = [c for c in ok if c["gen"] == og]
                seen += [c["stored_ts"] for c in old if c["store_host"] == prev["address"] and c["stored_ts"] < start]
                w_start = max((c["stored_ts"] for c in ok if c["stored_ts"] < start), default=None)
                w_end = min((c["stored_ts"] for c in ok if c["gen"] == ng), default=None)
                last_seen = max(seen, default=None)
                trunc = [c for c in old if c["truncated"]]
                failed = [c for c in cs if not c["success"] and w_start is not None and w_end is not None
                          and w_start <= c["born_ts"] <= w_end]
                out[(group, ng)] = {
                    "date": utc_date_ordinal(cur["start"]), "mode": cur["mode"], "old_gen": og,
                    "old_leader": prev["node"], "new_leader": cur["node"], "last_seen_ts": last_seen,
                    "election_started_ts": start, "elected_ts": cur["start"],
                    "detection_gap_ms": None if last_seen is None else start - last_seen,
                    "election_ms": cur["start"] - start,
                    "unavailability_ms": None if w_start is None or w_end is None else w_end - w_start,
                    "sent_before": sum(1 for c in old if start - window_ms <= c["stored_ts"] < start),
                    "at_risk": sum(1 for c in old if c["committed_ts"] is None),
                    "truncated": len(trunc),
                    "resent": sum(1 for c in trunc if msgs[c["msg_id"]]["resent"]),
                    "lost": sum(1 for c in trunc if msgs[c["msg_id"]]["lost"]),
                    "truncated_bytes": tb, "failed_sends": len(failed),
                }
        return out


def _stats(values: list[int | None]) -> dict:
    present = [v for v in values if v is not None]
    return {
        "messages": len(values),
        "samples": len(present),
        "values": sorted(present),
        "max_ms": max(present, default=None),
    }
