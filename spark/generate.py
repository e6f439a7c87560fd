"""Deterministic synthetic trace messages and replication events, written as Parquet rows.

Why synthetic: the jobs must be checked on the awkward cases before a live cluster can
produce them on demand, and the benchmark needs 1M and 10M messages.  Everything
derives from one seed, so a failing test reproduces exactly.

The simulation runs messages in born order through three broker groups:

* ``bg-a``: DLedger, 3 nodes (term).  Its leader stalls and crashes: the stalled sends
  time out (failed Pub records, then retried on another group); the rejoining old leader
  truncates its unreplicated tail;
* ``bg-b``: controller mode, 3 nodes (epoch), asynchronous master.  Its master stalls
  and crashes after *acknowledging* messages the slaves never got; a slave is elected,
  the old master truncates those messages when it rejoins, and the producer sends most
  of them again with the same msgId (the rest are lost);
* ``bg-c``: master/slave (no term, no epoch).

Consumers retry failed deliveries (``retry_times`` + 1); poison messages fail 17 times
and go to the DLQ, some of them then consumed from ``%DLQ%<group>``.  Trace records are
dropped and duplicated at small rates, some SubAfter records use the CLOUD layout (no
timestamp, no group), HA events arrive out of order and some twice.  Data is produced
and written in chunks so memory stays bounded at any size.
"""

from __future__ import annotations

import json
import random
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pyarrow as pa
import pyarrow.parquet as pq

from rocketscope.names import DLQ_PREFIX, HA_EVENTS_TOPIC, TRACE_TOPIC
from rocketscope.spark.schema import MAX_RECONSUME_TIMES, ROW_ARROW_SCHEMA
from rocketscope.trace.batching import build_batches
from rocketscope.trace.codec import PubRecord, SubAfterRecord, SubBeforeRecord, TraceRecord
from rocketscope.trace.ids import make_offset_msg_id

DEFAULT_START_MS = 1740873420000  # 2025-03-01T23:57:00Z: small data sets cross midnight (two date partitions)

TOPICS: dict[str, list[str]] = {
    "orders": ["billing", "shipping"],
    "payments": ["billing"],
    "clicks": ["analytics"],
    "audit": ["archive"],
}
TOPIC_WEIGHTS = [0.35, 0.2, 0.3, 0.15]


@dataclass
class GenConfig:
    """What to generate; the defaults make a small, awkward, midnight-crossing data set."""

    messages: int = 10_000
    seed: int = 7
    start_ms: int = DEFAULT_START_MS
    rate: float = 20.0
    """Messages per second (born times); sets the time span and hence the minute buckets."""
    chunk: int = 50_000
    drop_rate: float = 0.004
    dup_rate: float = 0.004
    event_dup_rate: float = 0.01
    consume_fail_rate: float = 0.02
    poison_rate: float = 0.0004
    cloud_subafter_rate: float = 0.02
    failover_b_at: float = 0.4
    failover_a_at: float = 0.7
    ack_every: int = 16
    ack_window_ms: int = 20


@dataclass
class Node:
    name: str
    address: str

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.address.rpartition(":")
        return host, int(port)


@dataclass
class Group:
    """Simulation state of one broker group."""

    name: str
    mode: str  # dledger | controller | master_slave
    nodes: list[Node]
    gen: int = 1
    leader: int = 0
    end_offset: int = 0
    down: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Node index -> (rejoin ms, caught-up ms) after a crash; absent = never crashed."""
    stale_address: str = ""
    """The crashed leader's address, which producers keep using until the route refreshes."""
    stalled: bool = False
    unavailable_until: int = 0
    pending: list[tuple[int, int, int]] = field(default_factory=list)
    """(offset end, stored ms, message index) not yet acknowledged by the followers."""
    last_ack: dict[int, tuple[int, int]] = field(default_factory=dict)
    last_commit_ts: int = 0
    lag_mean: dict[int, float] = field(default_factory=dict)

    def gen_fields(self) -> dict[str, int]:
        if self.mode == "dledger":
            return {"term": self.gen}
        if self.mode == "controller":
            return {"epoch": self.gen}
        return {}

    def followers(self) -> list[int]:
        return [i for i in range(len(self.nodes)) if i != self.leader]


def _groups() -> list[Group]:
    def nodes(prefix: str, octet: int, count: int) -> list[Node]:
        return [Node(f"{prefix}-n{i}", f"10.0.{octet}.{10 + i}:10911") for i in range(count)]

    groups = [
        Group("bg-a", "dledger", nodes("bg-a", 1, 3)),
        Group("bg-b", "controller", nodes("bg-b", 2, 3)),
        Group("bg-c", "master_slave", nodes("bg-c", 3, 2), gen=-1),
    ]
    for g in groups:
        for i in range(len(g.nodes)):
            g.lag_mean[i] = 2.0 + 4.0 * i
    return groups


def msg_id_of(seed: int, index: int) -> str:
    """A 32-hex-character client msgId (UNIQ_KEY), unique per (seed, index)."""
    return f"AC140001{seed % 65536:04X}{index:020X}"


class Generator:
    """Produces chunks of trace rows and HA rows; call :meth:`run` to write them."""

    def __init__(self, config: GenConfig) -> None:
        self.cfg = config
        self.groups = _groups()
        self.by_name = {g.name: g for g in self.groups}
        self.events: list[dict] = []
        self.records: list[tuple[int, str, TraceRecord]] = []  # (ts for ordering, origin topic, record)
        self.rng = random.Random(config.seed)
        n = config.messages
        self.fail_b_index = int(n * config.failover_b_at)
        self.fail_a_index = int(n * config.failover_a_at)
        self.fail_b_ms: int | None = None
        self.fail_a_ms: int | None = None
        self.resend_queue: list[tuple[int, int, str, str]] = []  # (due ms, index, topic, group)
        self.truncated_acked: list[tuple[int, str]] = []
        self.scheduled: list[tuple[int, str, object]] = []  # (ts, what, arg) future cluster actions
        self.trace_queue_offsets = [0, 0, 0, 0]
        self.trace_commitlog = 0
        self.ha_queue_offset = 0
        self.ha_commitlog = 0
        self.trace_batch_no = 0
        self._requests = 0
        self._forced_poison = {n // 5, n // 5 + 1, n // 2}
        self._dlq_hidden = n // 2 if (n // 2) % 2 == 0 else -1
        self._initial_events()

    # ----------------------------------------------------------------- events
    def _event(self, g: Group, etype: str, node_index: int, ts: int, **extra: object) -> None:
        ev: dict[str, object] = {
            "type": etype,
            "cluster": "DefaultCluster",
            "group": g.name,
            "node": g.nodes[node_index].name,
            "ts": int(ts),
            "address": g.nodes[node_index].address,
            "term": -1,
            "epoch": -1,
            "replica": "",
            "offset": -1,
            "from_offset": -1,
            "to_offset": -1,
            "role": "",
            "leader": "",
            "members": [],
        }
        ev.update(g.gen_fields())
        ev.update(extra)
        self.events.append(ev)

    def _initial_events(self) -> None:
        t0 = self.cfg.start_ms - 60_000
        for g in self.groups:
            leader = g.nodes[g.leader].name
            if g.mode == "dledger":
                self._event(g, "election_started", 0, t0)
                self._event(g, "election_won", 0, t0 + 40)
                self._event(g, "leader_elected", 0, t0 + 41, leader=leader)
                self._event(g, "role_change", 0, t0 + 41, role="leader", leader=leader)
                for f in g.followers():
                    self._event(g, "role_change", f, t0 + 60, role="follower", leader=leader)
            elif g.mode == "controller":
                self._event(g, "master_elected", 0, t0 + 10, leader=leader)
                self._event(g, "role_change", 0, t0 + 10, role="master", leader=leader)
                for f in g.followers():
                    self._event(g, "role_change", f, t0 + 30, role="slave", leader=leader)
                self._event(g, "sync_state_set_changed", 0, t0 + 50, members=[n.name for n in g.nodes])
            else:
                self._event(g, "role_change", 0, t0 + 5, role="SYNC_MASTER", leader=leader)
                self._event(g, "role_change", 1, t0 + 20, role="SLAVE", leader=leader)

    # ------------------------------------------------------------ replication
    def _hold_ts(self, g: Group, replica: int, stored: int) -> int:
        lag = int(self.rng.expovariate(1.0 / g.lag_mean[replica])) + 1
        if self.rng.random() < 0.01:
            lag += int(self.rng.randrange(50, 400))  # an occasional slow ack (GC pause, disk)
        return max(stored + lag, g.down.get(replica, (0, 0))[1])

    def _flush(self, g: Group, now: int) -> None:
        """Acknowledge the pending messages: one replica_ack per live follower, then commit_advanced."""
        if not g.pending or g.stalled:
            return
        end = g.pending[-1][0]
        last_stored = max(p[1] for p in g.pending)
        acks: list[int] = []
        for r in g.followers():
            rejoin, caught_up = g.down.get(r, (0, 0))
            if now < rejoin:
                continue  # still down: acks nothing
            hold = max(self._hold_ts(g, r, s) for _, s, _ in g.pending[-3:])
            hold = max(hold, last_stored + 1, caught_up)
            prev = g.last_ack.get(r, (0, 0))
            ts = max(hold, prev[1] + 1)
            g.last_ack[r] = (end, ts)
            acks.append(ts)
            self._event(g, "replica_ack", g.leader, ts, replica=g.nodes[r].name, offset=end)
            if self.rng.random() < self.cfg.event_dup_rate:
                self._event(g, "replica_ack", g.leader, ts, replica=g.nodes[r].name, offset=end)
        commit = (min(acks) if g.mode == "dledger" else max(acks)) if acks else last_stored
        commit = max(commit, g.last_commit_ts + 1)
        g.last_commit_ts = commit
        self._event(g, "commit_advanced", g.leader, commit, offset=end)
        g.pending.clear()

    def _append(self, g: Group, index: int, stored: int, size: int) -> int:
        """Store a message in the group's log; returns its physical offset."""
        if g.pending and (len(g.pending) >= self.cfg.ack_every or stored - g.pending[0][1] >= self.cfg.ack_window_ms):
            self._flush(g, stored)
        offset = g.end_offset
        g.end_offset += size
        g.pending.append((g.end_offset, stored, index))
        return offset

    # --------------------------------------------------------------- failover
    def _crash(self, g: Group, now: int, detect_ms: int) -> None:
        """Stall the followers, crash the leader, elect the most advanced follower, schedule the rejoin."""
        old = g.leader
        old_end = g.end_offset
        # Messages stored during the stall were never acknowledged by any follower.
        g.pending.clear()
        g.stalled = False
        candidates = g.followers()
        best = max(candidates, key=lambda r: (g.last_ack.get(r, (0, 0))[0], -r))
        consistent = g.last_ack.get(best, (0, 0))[0]
        start = now + detect_ms
        new_gen = g.gen + 1
        if g.mode == "dledger":
            ev_node = best
            self._event(g, "election_started", ev_node, start, term=new_gen)
            self._event(g, "election_won", ev_node, start + 45, term=new_gen)
            self._event(g, "leader_elected", ev_node, start + 46, term=new_gen, leader=g.nodes[best].name)
            self._event(g, "role_change", ev_node, start + 46, term=new_gen, role="leader", leader=g.nodes[best].name)
            elected = start + 46
        else:
            # The controller notices and elects; the new master announces itself.
            self._event(g, "election_started", best, start, epoch=new_gen, address="", node="controller-0")
            self._event(g, "master_elected", best, start + 150, epoch=new_gen, leader=g.nodes[best].name)
            self._event(g, "role_change", best, start + 150, epoch=new_gen, role="master", leader=g.nodes[best].name)
            self._event(g, "sync_state_set_changed", best, start + 151, epoch=new_gen, members=[g.nodes[best].name])
            elected = start + 150
        g.gen = new_gen
        g.leader = best
        g.end_offset = consistent
        g.last_ack = {r: (consistent, elected) for r in g.followers()}
        g.last_commit_ts = elected
        rejoin = now + 15_000
        g.down[old] = (rejoin, rejoin + 2_000)
        g.stale_address = g.nodes[old].address
        g.unavailable_until = elected + 400
        self.scheduled.append((rejoin, "rejoin", (g.name, old, consistent, old_end)))
        if g.mode == "controller":
            others = [n.name for i, n in enumerate(g.nodes) if i != old]
            self.scheduled.append((elected + 100, "expand", (g.name, others)))

    def _run_scheduled(self, now: int) -> None:
        due = [s for s in self.scheduled if s[0] <= now]
        self.scheduled = [s for s in self.scheduled if s[0] > now]
        for ts, what, arg in sorted(due, key=lambda s: s[0]):
            if what == "rejoin":
                name, node, consistent, old_end = cast(tuple[str, int, int, int], arg)
                g = self.by_name[name]
                if old_end > consistent:
                    self._event(g, "truncation", node, ts, from_offset=consistent, to_offset=old_end)
                role = "follower" if g.mode == "dledger" else "slave"
                self._event(g, "role_change", node, ts + 1, role=role, leader=g.nodes[g.leader].name)
                if g.mode == "controller":
                    self.scheduled.append((ts + 2_500, "expand", (name, [n.name for n in g.nodes])))
                # The producer's outbox reconciliation sends most truncated, acknowledged messages again.
                # (every third, and the last, are lost).
                count = len(self.truncated_acked)
                for j, (index, topic) in enumerate(self.truncated_acked):
                    if j % 3 != 2 and not (j == count - 1 and count > 1):
                        self.resend_queue.append((ts + 1_000, index, topic, name))
                self.truncated_acked = []
            elif what == "expand":
                name, members = cast(tuple[str, list[str]], arg)
                g = self.by_name[name]
                self._event(g, "sync_state_set_changed", g.leader, ts, members=list(members))

    # ---------------------------------------------------------------- traffic
    def _send(self, index: int, topic: str, born: int, prefer: str | None = None) -> None:
        """One producer send with RocketMQ's retry on another broker group; records every attempt."""
        rng = self.rng
        msg_id = msg_id_of(self.cfg.seed, index)
        keys = f"k{index}"
        body_length = int(rng.randrange(200, 2000))
        size = body_length + 180
        order = [g.name for g in self.groups]
        first = prefer or order[int(rng.randrange(0, 3))]
        tries = [first] + [n for n in order if n != first]
        attempt_ts = born
        for name in tries:
            g = self.by_name[name]
            leader = g.nodes[g.leader]
            cost = int(rng.randrange(1, 12))
            if attempt_ts < g.unavailable_until or (g.mode == "dledger" and g.stalled):
                # Unavailable (or, in DLedger, appended but never committed): a failed send, then retry.
                host_address = leader.address
                if g.stalled:
                    self._append_unacked(g, size)
                    cost = 3000
                else:
                    host_address = g.stale_address
                self._pub(attempt_ts, topic, msg_id, keys, host_address, body_length, cost, "", False)
                attempt_ts += cost + 1
                continue
            stored = attempt_ts + cost
            offset = self._append(g, index, stored, size) if not g.stalled else self._append_unacked(g, size)
            host, port = leader.host_port
            self._pub(attempt_ts, topic, msg_id, keys, leader.address, body_length, cost,
                      make_offset_msg_id(host, port, offset), True)
            if g.stalled and g.mode == "controller":
                self.truncated_acked.append((index, topic))
            self._consume(index, topic, msg_id, keys, stored)
            return

    def _append_unacked(self, g: Group, size: int) -> int:
        offset = g.end_offset
        g.end_offset += size
        return offset

    def _pub(self, ts: int, topic: str, msg_id: str, keys: str, host: str, body_length: int, cost: int,
             offset_msg_id: str, success: bool) -> None:
        rec = PubRecord(ts, "DefaultRegion", f"P_{topic}", topic, msg_id, "TagA", keys, host, body_length, cost, 0,
                        offset_msg_id, success)
        self.records.append((ts + cost, topic, rec))

    def _consume(self, index: int, topic: str, msg_id: str, keys: str, stored: int) -> None:
        rng = self.rng
        poison = rng.random() < self.cfg.poison_rate or index in self._forced_poison
        for group in TOPICS[topic]:
            begin = stored + int(rng.randrange(5, 120))
            retry = 0
            while True:
                cost = int(rng.randrange(1, 40))
                ok = (not poison) and rng.random() >= self.cfg.consume_fail_rate
                self._requests += 1
                request_id = f"{index:016X}{retry:02X}{zlib.crc32(group.encode()) & 0xFFFF:04X}{self._requests:010X}"
                end = begin + cost
                before = SubBeforeRecord(begin, "DefaultRegion", group, request_id, msg_id, retry, keys)
                if rng.random() < self.cfg.cloud_subafter_rate:
                    after = SubAfterRecord(request_id, msg_id, cost, ok, keys, 0 if ok else 4, 0, "")
                else:
                    after = SubAfterRecord(request_id, msg_id, cost, ok, keys, 0 if ok else 4, end, group)
                if not (index == self._dlq_hidden and retry == MAX_RECONSUME_TIMES):
                    # (the hidden one's last failure is lost: only its DLQ delivery shows the move)
                    self.records.append((begin, topic, before))
                    self.records.append((end, topic, after))
                if ok:
                    break
                if retry >= MAX_RECONSUME_TIMES:
                    if index % 2 == 0:
                        # An operator's group reads the dead-letter queue.
                        dlq_topic = f"{DLQ_PREFIX}{group}"
                        t = end + int(rng.randrange(1000, 5000))
                        self._requests += 1
                        rid = f"{index:016X}FF{zlib.crc32(group.encode()) & 0xFFFF:04X}{self._requests:010X}"
                        audit = f"{group}-dlq-audit"
                        self.records.append((t, dlq_topic, SubBeforeRecord(t, "DefaultRegion", audit, rid, msg_id,
                                                                             0, keys)))
                        self.records.append((t + 3, dlq_topic, SubAfterRecord(rid, msg_id, 3, True, keys, 0, t + 3,
                                                                               audit)))
                    break
                retry += 1
                begin = end + 1000 * retry

    # -------------------------------------------------------------- the loop
    def chunks(self) -> Iterator[tuple[pa.Table, pa.Table]]:
        """Yield (trace rows, HA rows) per chunk of messages, in born order."""
        cfg, rng = self.cfg, self.rng
        step = 1000.0 / cfg.rate
        stall_b = stall_a = None
        topics = list(TOPICS)
        for chunk_start in range(0, cfg.messages, cfg.chunk):
            for index in range(chunk_start, min(cfg.messages, chunk_start + cfg.chunk)):
                born = cfg.start_ms + int(index * step + rng.random() * step)
                self._run_scheduled(born)
                # Resends due now go first (the outbox), with their original msgId.
                while self.resend_queue and self.resend_queue[0][0] <= born:
                    _, rindex, rtopic, rgroup = self.resend_queue.pop(0)
                    self._send(rindex, rtopic, born, prefer=rgroup)
                if index == self.fail_b_index - max(10, cfg.messages // 500):
                    stall_b = born
                    self._flush(self.by_name["bg-b"], born)
                    self.by_name["bg-b"].stalled = True
                if index == self.fail_b_index and stall_b is not None:
                    self.fail_b_ms = born
                    self._crash(self.by_name["bg-b"], born, 2000)
                if index == self.fail_a_index - max(10, cfg.messages // 500):
                    stall_a = born
                    self._flush(self.by_name["bg-a"], born)
                    self.by_name["bg-a"].stalled = True
                if index == self.fail_a_index and stall_a is not None:
                    self.fail_a_ms = born
                    self._crash(self.by_name["bg-a"], born, 800)
                topic = rng.choices(topics, TOPIC_WEIGHTS)[0]
                self._send(index, topic, born)
            last = cfg.messages - 1 < chunk_start + cfg.chunk
            if last:
                end = cfg.start_ms + int(cfg.messages * step) + 60_000
                self._run_scheduled(end)
                while self.resend_queue:
                    _, rindex, rtopic, rgroup = self.resend_queue.pop(0)
                    self._send(rindex, rtopic, end - 50_000, prefer=rgroup)
                for g in self.groups:
                    self._flush(g, end)
            yield self._trace_table(), self._ha_table()

    def _trace_table(self) -> pa.Table:
        rng, cfg = self.rng, self.cfg
        items: list[tuple[str, TraceRecord]] = []
        order_ts: list[int] = []
        self.records.sort(key=lambda r: r[0])
        for ts, topic, rec in self.records:
            u = rng.random()
            if u < cfg.drop_rate:
                continue  # a dropped trace record
            items.append((topic, rec))
            order_ts.append(ts)
            if u > 1 - cfg.dup_rate:
                items.append((topic, rec))  # the trace message was sent twice
                order_ts.append(ts + 2000)
        self.records = []
        plan = build_batches(items, max_body_bytes=1_400)
        # Each batch ends with the record that completed it; use the max ts of its records.
        ts_of = {id(rec): ts for (_, rec), ts in zip(items, order_ts, strict=True)}
        cols: dict[str, list] = {name: [] for name in ROW_ARROW_SCHEMA.names}
        for batch in plan.batches:
            store = max(ts_of.get(id(r), 0) for r in batch.records) + int(rng.randrange(5, 600))
            queue = self.trace_batch_no % 4
            self.trace_batch_no += 1
            body = batch.body.encode("utf-8")
            cols["topic"].append(TRACE_TOPIC)
            cols["queue_id"].append(queue)
            cols["queue_offset"].append(self.trace_queue_offsets[queue])
            self.trace_queue_offsets[queue] += 1
            cols["commitlog_offset"].append(self.trace_commitlog)
            self.trace_commitlog += len(body) + 200
            cols["store_timestamp"].append(store * 1000)
            cols["born_timestamp"].append((store - 2) * 1000)
            cols["keys"].append(batch.keys_text)
            cols["tags"].append(batch.topic)
            cols["properties"].append([("MSG_REGION", "DefaultRegion"), ("TRACE_ON", "true")])
            cols["body"].append(body)
        return pa.table(cols, schema=ROW_ARROW_SCHEMA)

    def _ha_table(self) -> pa.Table:
        rng = self.rng
        events = self.events
        self.events = []
        # Out of order: the emitters' clocks and flush delays do not follow event time.
        perm = list(range(len(events)))
        for i in range(len(perm) - 1):
            if rng.random() < 0.05:
                perm[i], perm[i + 1] = perm[i + 1], perm[i]
        cols: dict[str, list] = {name: [] for name in ROW_ARROW_SCHEMA.names}
        for i in perm:
            ev = events[i]
            body = json.dumps(ev, separators=(",", ":"), sort_keys=True).encode("utf-8")
            store = int(ev["ts"]) + int(rng.randrange(1, 50))
            cols["topic"].append(HA_EVENTS_TOPIC)
            cols["queue_id"].append(0)
            cols["queue_offset"].append(self.ha_queue_offset)
            self.ha_queue_offset += 1
            cols["commitlog_offset"].append(self.ha_commitlog)
            self.ha_commitlog += len(body) + 200
            cols["store_timestamp"].append(store * 1000)
            cols["born_timestamp"].append(int(ev["ts"]) * 1000)
            cols["keys"].append(f"{ev['group']} {ev['group']}#{ev['type']}")
            cols["tags"].append(str(ev["type"]))
            cols["properties"].append([])
            cols["body"].append(body)
        return pa.table(cols, schema=ROW_ARROW_SCHEMA)


def generate(out_dir: str | Path, config: GenConfig | None = None, *, progress: bool = True) -> dict[str, object]:
    """Write ``<out>/trace/part-*.parquet`` and ``<out>/ha/part-*.parquet``; returns counts.

    Existing part files in those folders are replaced, so a re-run yields the same data.
    """
    config = config or GenConfig()
    out = Path(out_dir)
    for sub in ("trace", "ha"):
        (out / sub).mkdir(parents=True, exist_ok=True)
        for old in (out / sub).glob("part-*.parquet"):
            old.unlink()
    gen = Generator(config)
    started = time.monotonic()
    trace_rows = ha_rows = 0
    for n, (trace, ha) in enumerate(gen.chunks()):
        pq.write_table(trace, out / "trace" / f"part-{n:05d}.parquet")
        pq.write_table(ha, out / "ha" / f"part-{n:05d}.parquet")
        trace_rows += trace.num_rows
        ha_rows += ha.num_rows
        if progress:
            done = min(config.messages, (n + 1) * config.chunk)
            rate = done / max(time.monotonic() - started, 1e-9)
            print(f"generate: {done:,}/{config.messages:,} messages, {trace_rows:,} trace rows, "
                  f"{ha_rows:,} HA rows ({rate:,.0f} msg/s)", file=sys.stderr, flush=True)
    return {
        "messages": config.messages,
        "trace_rows": trace_rows,
        "ha_rows": ha_rows,
        "failover_b_ms": gen.fail_b_ms,
        "failover_a_ms": gen.fail_a_ms,
        "seconds": round(time.monotonic() - started, 2),
    }
