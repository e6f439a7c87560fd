"""Ground truth for replication latency: a DLedger group with one follower's link delayed by a known
amount, a paced workload from the official client, and every place that reports the replication
time of those messages, side by side.

Used by tests/test_truth_trace_latency.py (one delay, asserted) and bench/accuracy_bench.py (5, 50
and 200 ms, written to bench/results/accuracy.json).

The injected truth: every byte the leader sends to the delayed follower waits ``delay_ms`` in a
proxy (tests/netproxy.py) delaying one direction, so that follower's acknowledgements come back ``delay_ms`` later
than the other follower's, whose link goes through an identical proxy with no delay (the control:
same hops, same processes, same machine load).  Reported figures are compared as "delayed minus
control" against the injected delay, and the delayed follower's ack may never come earlier than
``delay_ms`` after the store (it cannot have the bytes before then).

Throttling: the leader emits at most one replica-ack event per replica every haEventAckIntervalMillis
(100 ms by default, broker/ha/event_log.py; commit events likewise), so an ack that comes sooner after
the previous one (another message's, or a trace write's) is not recorded as it happened and the
message's first recorded ack is a later one: per-message replication times are then upper bounds,
up to the interval late.  The group here runs with 1 ms intervals and sends are spaced ``gap_ms``
apart, so that each message's own ack is the recorded one.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster import BrokerNode, LocalCluster, ha_status, wait_until
from conftest import free_port
from netproxy import LinkLoop, LinkProxy
from telemetry_support import samples, scrape

GROUP = "broker-truth"
SIZE = 3
REPLICATE_METRIC = "dledger_replicate_entry_latency"


def tolerance_ms(delay_ms: float) -> float:
    """The accuracy target of issue 16: within 5 ms or 10 %, whichever is larger."""
    return max(5.0, 0.1 * delay_ms)


class DelayedGroup:
    """A three-node DLedger group whose every peer link runs through a delaying proxy (all at 0 at first)."""

    def __init__(self, c: LocalCluster, pl: LinkLoop, **conf: Any) -> None:
        self.c = c
        self.pl = pl
        peer_ports = [free_port() for _ in range(SIZE)]
        self.proxies: dict[tuple[int, int], LinkProxy] = {}
        for i in range(SIZE):
            for j in range(SIZE):
                if i != j:
                    self.proxies[(i, j)] = pl.proxy(peer_ports[j])
        self.prom_ports = [free_port() for _ in range(SIZE)]
        self.nodes: list[BrokerNode] = []
        for i in range(SIZE):
            peers = ";".join(f"n{j}-127.0.0.1:{peer_ports[j] if j == i else self.proxies[(i, j)].port}"
                             for j in range(SIZE))
            # elections slower than the default (300-600 ms): switching a 200 ms delay on leaves a gap in
            # the heartbeats the follower sees, which must not look like a dead leader
            values = {"brokerName": GROUP, "enableDLegerCommitLog": "true", "dLegerGroup": GROUP,
                      "dLegerPeers": peers, "dLegerSelfId": f"n{i}", "dLegerElectionTicksMin": 30,
                      "dLegerElectionTicksMax": 40, "traceTopicEnable": "true", "brokerTraceEnable": "true",
                      "metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1",
                      "metricsPromExporterPort": self.prom_ports[i],
                      # 1 ms (the smallest allowed) instead of 100 ms between replica-ack and commit events:
                      # with the default, an ack that follows another record's ack (a trace write) within
                      # 100 ms is not recorded and the message's recorded ack is a later one (measured:
                      # +21 ms median at 50 ms injected); docs/TRACE.md says so
                      "haEventAckIntervalMillis": 1, "haEventCommitIntervalMillis": 1}
            values.update(conf)
            self.nodes.append(c.start_broker(f"t{i}", **values))

    @property
    def endpoint(self) -> str:
        return ";".join(n.endpoint for n in self.nodes)

    def leader(self) -> int | None:

        for i, n in enumerate(self.nodes):
            try:
                status = ha_status(n.admin_addr)
            except (AssertionError, KeyError, ValueError):
                continue
            if status.get("role") == "LEADER":
                return i
        return None

    def delay(self, leader: int, follower: int, delay_ms: float) -> None:
        self.pl.set(self.proxies[(leader, follower)], delay_up=delay_ms / 1000.0)

    def metrics_text(self, i: int) -> str:
        return scrape(f"http://127.0.0.1:{self.prom_ports[i]}/metrics")


def start_group(root: Path, pl: LinkLoop, **conf: Any) -> tuple[LocalCluster, DelayedGroup, int]:
    """Name server and the group with a leader; returns (cluster, group, leader index).  The caller
    stops the cluster (``c.stop()``), also when this raises after the name server started."""
    c = LocalCluster(root)
    c.start_namesrv()
    g = DelayedGroup(c, pl, **conf)
    found: list[int] = []

    def elected() -> bool:
        index = g.leader()
        if index is not None:
            found.append(index)  # node 0 as leader is falsy: wait_until needs a truthy answer
        return index is not None

    wait_until(elected, timeout=60, what="a DLedger leader")
    return c, g, found[-1]


def create_topic(c: LocalCluster, g: DelayedGroup, leader: int, topic: str) -> None:
    c.admin("updateTopic", "-b", g.nodes[leader].admin_addr, "-t", topic, "-r", "2", "-w", "2")


def replicate_sums(text: str) -> dict[str, tuple[float, float]]:
    """remote_id -> (sum, count) of the leader's dledger_replicate_entry_latency histogram."""
    out: dict[str, list[float]] = {}
    names = {f"{REPLICATE_METRIC}{unit}{part}" for unit in ("", "_milliseconds") for part in ("_sum", "_count")}
    for name, labels, value in samples(text):
        if name in names:  # Prometheus names carry the unit (_milliseconds)
            slot = out.setdefault(labels.get("remote_id", ""), [0.0, 0.0])
            slot[0 if name.endswith("_sum") else 1] += value
    return {k: (v[0], v[1]) for k, v in out.items()}


@dataclass
class Run:
    """What one delay produced: the messages, and each place's per-replica figures (ms)."""

    delay_ms: float
    delayed: str
    control: str
    msg_ids: list[str]
    client_send_ms: list[float]
    timeline_acks: dict[str, list[int]] = field(default_factory=dict)
    timeline_commit: list[int] = field(default_factory=list)
    store_after_send: list[int] = field(default_factory=list)
    metrics_mean: dict[str, float] = field(default_factory=dict)
    spark_p50: dict[str, float] = field(default_factory=dict)
    dashboard_p50: dict[str, float] = field(default_factory=dict)

    def metrics_from(self, before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> None:
        """Each replica's mean replicate latency over the run, from two readings of ``replicate_sums``."""
        for remote, (total, n) in after.items():
            total0, n0 = before.get(remote, (0.0, 0.0))
            if n > n0:
                self.metrics_mean[remote] = (total - total0) / (n - n0)

    def median(self, values: list[int] | list[float]) -> float:
        return float(statistics.median(values)) if values else float("nan")

    def summary(self) -> dict[str, Any]:
        """Per source: delayed replica, control replica and their difference (the measured delay)."""
        tl_d, tl_c = self.median(self.timeline_acks.get(self.delayed, [])), self.median(
            self.timeline_acks.get(self.control, []))
        out: dict[str, Any] = {"injected_ms": self.delay_ms, "messages": len(self.msg_ids),
                               "tolerance_ms": tolerance_ms(self.delay_ms)}
        sources = {"trace": (tl_d, tl_c),
                   "metrics": (self.metrics_mean.get(self.delayed, float("nan")),
                               self.metrics_mean.get(self.control, float("nan"))),
                   "spark": (self.spark_p50.get(self.delayed, float("nan")),
                             self.spark_p50.get(self.control, float("nan"))),
                   "dashboard": (self.dashboard_p50.get(self.delayed, float("nan")),
                                 self.dashboard_p50.get(self.control, float("nan")))}
        for name, (d, c) in sources.items():
            out[name] = {"delayed_ms": round(d, 2), "control_ms": round(c, 2), "measured_delay_ms": round(d - c, 2),
                         "error_ms": round(d - c - self.delay_ms, 2)}
        out["trace"]["commit_median_ms"] = self.median(self.timeline_commit)
        out["trace"]["delayed_min_ms"] = min(self.timeline_acks.get(self.delayed, [0]))
        out["trace"]["store_after_send_median_ms"] = self.median(self.store_after_send)
        out["client_send_median_ms"] = round(self.median(self.client_send_ms), 2)
        return out


def send_paced(endpoint: str, topic: str, count: int, gap_ms: float) -> tuple[list[str], list[float]]:
    """``count`` sends of the official client, one at a time, ``gap_ms`` apart; (msgIds, send times ms)."""
    from rmq import message, producer

    ids: list[str] = []
    costs: list[float] = []
    with producer(endpoint, topic) as p:
        for i in range(count):
            t0 = time.perf_counter()
            ids.append(p.send(message(topic, f"{topic}-{i}".encode(), keys=[f"{topic}-{i}"])).message_id)
            costs.append((time.perf_counter() - t0) * 1000)
            time.sleep(gap_ms / 1000.0)
    return ids, costs


def collect_timelines(run: Run, namesrv: str, timeout_s: float = 60.0) -> None:
    """Each message's timeline (trace lookup): per-replica ack and commit latency from the store."""
    from rocketscope.trace.lookup import TraceLookup, TraceLookupError

    lookup = TraceLookup(namesrv)

    def complete(msg_id: str) -> Any:
        try:
            tl = asyncio.run(lookup.lookup(msg_id))
        except TraceLookupError:
            return None
        rep = tl.replication
        if rep is None or rep.commit_latency_ms is None or {a.replica for a in rep.replicas} != {run.delayed,
                                                                                                run.control}:
            return None
        return tl

    for msg_id in run.msg_ids:
        tl = wait_until(lambda m=msg_id: complete(m), timeout=timeout_s, interval=0.5,
                        what=f"the timeline of {msg_id} with both replicas and the commit")
        for a in tl.replication.replicas:
            run.timeline_acks.setdefault(a.replica, []).append(a.latency_ms)
        run.timeline_commit.append(tl.replication.commit_latency_ms)
        send = tl.producer
        if send is not None and tl.store.store_timestamp is not None:
            run.store_after_send.append(tl.store.store_timestamp - send.begin)


def spark_tables(spark: Any, namesrv: str, out: Path) -> Path:
    """replication_latency and failover_impact of the live cluster, written under ``out``."""
    from rocketscope.spark.datasource import as_rows, read_topics
    from rocketscope.spark.run import run_jobs

    rows = as_rows(read_topics(spark, namesrv, ["RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_HA_EVENTS"]))
    run_jobs(spark, rows, out, ["replication_latency", "failover_impact"], progress=False)
    return out


def table_p50(latency: Any, topic: str) -> dict[str, float]:
    """replica -> p50 of ``topic``'s rows of a replication_latency table (pandas); a run that spans a
    minute boundary has two rows, averaged by their sample counts."""
    rows = latency[latency["topic"] == topic]
    out: dict[str, float] = {}
    for replica, part in rows.groupby("replica"):
        part = part[part["samples"] > 0]
        if len(part):
            out[str(replica)] = float((part["p50_ms"] * part["samples"]).sum() / part["samples"].sum())
    return out


OVERLOADED_CONTROL_MS = 25.0
"""An undelayed follower's ack takes about 6-10 ms on loopback (bench/accuracy_bench.py: 6-8 ms at load
0-2, 12-26 ms at load 15); beyond this the machine is too busy to resolve the 5 ms tolerance and the
tolerance checks are skipped (the physical lower bound and the store-after-send checks still run)."""


def check_replication_truth(run: Run, summary: dict[str, Any]) -> str | None:
    """Assert what every source says about ``run`` against its injected delay; returns why the
    tolerance part was skipped (an overloaded machine), None when everything was checked."""
    delay = run.delay_ms
    tol = tolerance_ms(delay)
    # trace timeline: physics first (no copy before the bytes arrived), then the measured delay
    acks = run.timeline_acks[run.delayed]
    assert len(acks) == len(run.msg_ids)
    assert min(acks) >= delay - 1, f"a delayed ack {min(acks)} ms after the store is earlier than the delay"
    assert 0 <= summary["trace"]["store_after_send_median_ms"] <= 20, summary
    assert min(run.store_after_send) >= 0 and max(run.store_after_send) < 200, run.store_after_send
    for source in ("spark", "dashboard"):
        assert summary[source]["delayed_ms"] >= delay - 1, (source, summary)
    if summary["trace"]["control_ms"] > OVERLOADED_CONTROL_MS:
        # seen at load average 25-35 on 2 cores (seven sessions at once): control 55 ms, sends 146 ms, and
        # the delayed-minus-control difference off by 49 ms; a 5 ms tolerance cannot be resolved there
        return (f"machine overloaded: the undelayed follower's median ack took {summary['trace']['control_ms']} ms "
                f"(> {OVERLOADED_CONTROL_MS}); figures: {summary}")
    assert abs(summary["trace"]["measured_delay_ms"] - delay) <= tol, summary
    # the commit needs the leader and one follower: the control, not the delayed one
    assert abs(summary["trace"]["commit_median_ms"] - summary["trace"]["control_ms"]) <= tol, summary
    assert summary["trace"]["commit_median_ms"] < delay - tol, summary
    # the leader's own histogram
    assert abs(summary["metrics"]["measured_delay_ms"] - delay) <= tol, summary
    # Spark's table and the dashboard's reading of it
    for source in ("spark", "dashboard"):
        assert abs(summary[source]["measured_delay_ms"] - delay) <= tol, (source, summary)
    assert run.spark_p50["__quorum__"] < delay - tol, run.spark_p50
    return None
