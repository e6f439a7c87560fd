"""Data sources of the dashboards: deterministic fixtures, or the live cluster / Prometheus / Parquet.

Configuration: environment variables (ROCKETSCOPE_NAMESRV, ROCKETSCOPE_PROMETHEUS, ROCKETSCOPE_ANALYTICS,
ROCKETSCOPE_FIXTURES=1), overridden by query parameters of the same names in lower case without the
prefix (?namesrv=...&prometheus=...&analytics=...&fixtures=1).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rocketscope.names import DLQ_PREFIX, RETRY_PREFIX

BASE_MS = 1_763_800_000_000  # fixed fixture epoch (ms)


class SourceError(Exception):
    """A data source that could not answer; the message says what to do."""


@dataclass
class Config:
    namesrv: str = ""
    prometheus: str = ""
    analytics: str = ""
    fixtures: bool = False

    @property
    def live_cluster(self) -> bool:
        return bool(self.namesrv) and not self.fixtures


def load_config(query_params: Any = None) -> Config:
    qp = dict(query_params or {})

    def get(name: str) -> str:
        value = qp.get(name)
        if isinstance(value, list):
            value = value[-1] if value else None
        return str(value) if value else os.environ.get(f"ROCKETSCOPE_{name.upper()}", "")

    fixtures = get("fixtures").strip().lower() in ("1", "true", "yes", "on")
    return Config(get("namesrv").strip(), get("prometheus").strip(), get("analytics").strip(), fixtures)


# ---------------------------------------------------------------------------------------
# Fixtures


def _t(ms: int) -> int:
    return BASE_MS + ms


FIXTURE_MSG_ID = "7F00000100002A9F0000000000000A10"
FIXTURE_FAILED_MSG_ID = "7F00000100002A9F0000000000000B20"


def _fixture_timeline(msg_id: str, failing: bool) -> dict[str, Any]:
    send = {"group": "pg-orders", "topic": "Orders", "tags": "created", "keys": "order-42", "region_id": "",
            "store_host": "127.0.0.1:10911", "client_host": "127.0.0.1", "begin": _t(0), "end": _t(4),
            "cost_time": 4, "status": "success", "msg_type": 0, "msg_type_name": "Normal_Msg",
            "offset_msg_id": "7F00000100002A9F0000000000001000"}
    replicas = [
        {"replica": "bg-a-n1", "node": "127.0.0.1:10921", "timestamp": _t(6), "offset": 4200, "latency_ms": 6},
        {"replica": "bg-a-n2", "node": "127.0.0.1:10931", "timestamp": _t(9), "offset": 4200, "latency_ms": 9},
    ]

    def delivery(req: str, group: str, begin: int, cost: int, retry: int, status: str) -> dict[str, Any]:
        return {"request_id": req, "group": group, "begin": _t(begin), "end": _t(begin + cost), "cost_time": cost,
                "retry_times": retry, "status": status, "context_code": 0, "region_id": ""}

    groups: list[dict[str, Any]] = [{"group": "cg-billing", "status": "success", "retries_scheduled": [], "dlq": None,
               "deliveries": [delivery("r1", "cg-billing", 15, 7, 0, "success")]}]
    if failing:
        groups.append({"group": "cg-audit", "status": "failed", "retries_scheduled": [_t(1030)], "dlq": None,
                       "deliveries": [delivery("r2", "cg-audit", 18, 5, 0, "failed"),
                                      delivery("r3", "cg-audit", 1030, 6, 1, "unknown")]})
    else:
        groups.append({"group": "cg-audit", "status": "success", "retries_scheduled": [], "dlq": None,
                       "deliveries": [delivery("r2", "cg-audit", 18, 5, 0, "success")]})
    return {
        "msg_id": msg_id, "topic": "Orders", "tags": "created", "keys": "order-42", "sends": [send],
        "transactions": [], "recalls": [],
        "store": {"topic": "Orders", "queue_id": 2, "queue_offset": 17, "physical_offset": 4096,
                  "store_timestamp": _t(3), "store_host": "127.0.0.1:10911", "broker_group": "bg-a",
                  "source": "store"},
        "replication": {"broker_group": "bg-a", "physical_offset": 4096, "replicas": replicas,
                        "pending_replicas": [], "commit_timestamp": _t(9), "commit_offset": 4200,
                        "commit_latency_ms": 9, "truncations": []},
        "groups": groups, "warnings": [], "ignored_records": 0, "producer": send,
    }


class FixtureSource:
    """Deterministic data for demos and tests."""

    name = "fixtures"

    def name_servers(self) -> pd.DataFrame:
        return pd.DataFrame([{"name_server": "127.0.0.1:9876", "reachable": True, "brokers": 8, "topics": 12}])

    def cluster(self) -> pd.DataFrame:
        rows = []
        for group, mode, gen in (("bg-a", "dledger", 3), ("bg-b", "controller", 5), ("bg-c", "master_slave", -1)):
            for i in range(3 if mode != "master_slave" else 2):
                leader = i == 0
                rows.append({
                    "cluster": "DefaultCluster", "broker_group": group, "broker_id": 0 if leader else i,
                    "addr": f"127.0.0.1:{10911 + 100 * 'abc'.index(group[-1]) + 10 * i}",
                    "role": ("LEADER" if mode == "dledger" else "MASTER") if leader else
                            ("FOLLOWER" if mode == "dledger" else "SLAVE"),
                    "ha_mode": mode, "term_or_epoch": gen,
                    "sync_state_set": "n0,n1,n2" if mode == "controller" else "",
                    "replica_lag_bytes": 0 if leader else 1024 * i * ('abc'.index(group[-1]) + 1),
                })
        return pd.DataFrame(rows)

    def consumers(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        queues = []
        for group, topic, base in (("cg-billing", "Orders", 0), ("cg-audit", "Orders", 40), ("cg-mail", "Users", 3)):
            for q in range(4):
                broker_offset = 1000 + 10 * q
                consumer_offset = broker_offset - base - q
                queues.append({"group": group, "topic": topic, "broker": "bg-a", "queue_id": q,
                               "broker_offset": broker_offset, "consumer_offset": consumer_offset,
                               "lag": broker_offset - consumer_offset, "inflight": q % 2})
        dlq = pd.DataFrame([{"group": "cg-audit", "dlq_topic": f"{DLQ_PREFIX}cg-audit", "messages": 3},
                            {"group": "cg-billing", "dlq_topic": f"{DLQ_PREFIX}cg-billing", "messages": 0}])
        return pd.DataFrame(queues), dlq

    def trace(self, msg_id: str) -> dict[str, Any] | None:
        if msg_id == FIXTURE_MSG_ID:
            return _fixture_timeline(msg_id, failing=False)
        if msg_id == FIXTURE_FAILED_MSG_ID:
            return _fixture_timeline(msg_id, failing=True)
        return None


def fixture_metrics() -> tuple[pd.DataFrame, pd.DataFrame]:
    times = pd.date_range(pd.Timestamp(BASE_MS, unit="ms", tz="UTC"), periods=30, freq="1min")
    tput = pd.DataFrame([{"time": t, "topic": topic, "msgs_per_s": base + (i * 7 % 11)}
                         for i, t in enumerate(times) for topic, base in (("Orders", 120), ("Users", 40))])
    lag = pd.DataFrame([{"time": t, "group": g, "lag_messages": max(0, base - i * 2 + (i % 5))}
                        for i, t in enumerate(times) for g, base in (("cg-billing", 10), ("cg-audit", 60))])
    return tput, lag


def fixture_analytics() -> tuple[pd.DataFrame, pd.DataFrame]:
    minutes = pd.date_range(pd.Timestamp(BASE_MS, unit="ms", tz="UTC"), periods=20, freq="1min")
    rows = []
    for i, m in enumerate(minutes):
        for replica, base in (("bg-a-n1", 3), ("bg-a-n2", 5), ("__quorum__", 4)):
            spike = 40 if 8 <= i <= 9 else 0
            rows.append({"date": m.date().isoformat(), "minute": m, "topic": "Orders", "broker_group": "bg-a",
                         "replica": replica, "messages": 600, "samples": 598, "p50_ms": base + spike,
                         "p95_ms": 2 * base + spike, "p99_ms": 3 * base + 2 * spike, "max_ms": 4 * base + 3 * spike})
    failovers = pd.DataFrame([{
        "broker_group": "bg-a", "old_gen": 2, "new_gen": 3, "old_leader": "127.0.0.1:10911",
        "new_leader": "127.0.0.1:10921", "last_seen_ts": minutes[8], "election_started_ts": minutes[8]
        + pd.Timedelta(seconds=2), "elected_ts": minutes[8] + pd.Timedelta(seconds=3),
        "unavailable_from_ts": minutes[8], "unavailable_to_ts": minutes[8] + pd.Timedelta(seconds=4),
        "detection_gap_ms": 2000, "election_ms": 1000, "unavailability_ms": 4000, "sent_before": 500,
        "at_risk": 3, "truncated": 2, "resent": 2, "lost": 0, "failed_sends": 5,
    }])
    return pd.DataFrame(rows), failovers


# ---------------------------------------------------------------------------------------
# Live sources


def _run(coro_fn: Any) -> Any:
    try:
        return asyncio.run(coro_fn())
    except SourceError:
        raise
    except Exception as exc:  # grpc, AdminError, OSError: all become one actionable message
        raise SourceError(str(exc) or type(exc).__name__) from None


def _ha_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """The columns the Cluster page shows, from a broker's HaStatus JSON (fields differ by HA mode)."""

    def pick(*names: str) -> Any:
        for n in names:
            if doc.get(n) not in (None, ""):
                return doc[n]
        return None

    lag = pick("lagBytes", "replica_lag_bytes")  # a slave's own lag
    if lag is None and isinstance(doc.get("slaves"), list):  # a master: its worst slave
        lag = max((s.get("lagBytes", 0) for s in doc["slaves"]), default=None)
    lag_entries = None
    if isinstance(doc.get("peers"), dict) and doc.get("lastIndex") is not None:  # a DLedger leader
        matches = [p["match"] for p in doc["peers"].values() if isinstance(p, dict) and "match" in p]
        lag_entries = max((doc["lastIndex"] - m for m in matches), default=None)
    sss = pick("syncStateSet", "sync_state_set")
    out = {"ha_mode": pick("mode", "ha_mode") or "", "term_or_epoch": pick("term", "epoch", "masterEpoch"),
           "sync_state_set": ",".join(map(str, sss)) if isinstance(sss, list | tuple | set) else (sss or ""),
           "replica_lag_bytes": lag if isinstance(lag, int | float) else None, "replica_lag_entries": lag_entries}
    if pick("role"):
        out["ha_role"] = str(doc["role"])
    return out


class LiveSource:
    """The cluster's admin API (AdminClient) and, if importable, TraceLookup."""

    name = "live"

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv

    def _client(self) -> Any:
        from rocketscope.admin_client import AdminClient

        return AdminClient(self.namesrv, timeout_s=3.0)

    def name_servers(self) -> pd.DataFrame:
        """Each configured name server, asked on its own: one down must show as down, not hide the others."""
        async def go() -> pd.DataFrame:
            from rocketscope.admin_client import AdminClient

            rows = []
            for addr in [a.strip() for a in self.namesrv.split(";") if a.strip()]:
                client = AdminClient(addr, timeout_s=2.0)
                try:
                    brokers = await client.cluster()
                    topics = await client.topics()
                    rows.append({"name_server": addr, "reachable": True, "brokers": len(brokers),
                                 "topics": len(topics)})
                except Exception:
                    rows.append({"name_server": addr, "reachable": False, "brokers": None, "topics": None})
                finally:
                    await client.close()
            return pd.DataFrame(rows, columns=["name_server", "reachable", "brokers", "topics"])

        return _run(go)

    def cluster(self) -> pd.DataFrame:
        async def go() -> pd.DataFrame:
            from rocketscope.broker.protocol import common_pb2

            client = self._client()
            try:
                rows = []
                for b in await client.cluster():
                    row = {"cluster": b.cluster, "broker_group": b.name, "broker_id": b.broker_id, "addr": b.addr,
                           "role": b.role, "ha_mode": "", "term_or_epoch": None, "sync_state_set": "",
                           "replica_lag_bytes": None, "replica_lag_entries": None, "ha_role": ""}
                    try:
                        resp = await client.broker_call(b.addr, "HaStatus", common_pb2.Empty())
                        row.update(_ha_fields(json.loads(resp.json or "{}")))  # type: ignore[attr-defined]
                    except Exception as exc:  # one broker down must not hide the others
                        row["ha_mode"] = f"unavailable: {exc}"
                    rows.append(row)
                return pd.DataFrame(rows)
            finally:
                await client.close()

        return _run(go)

    def consumers(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        async def go() -> tuple[pd.DataFrame, pd.DataFrame]:
            from rocketscope.broker.protocol import admin_pb2, common_pb2

            client = self._client()
            try:
                queues, dlq = [], []
                masters = await client.masters()
                for m in masters:
                    groups = await client.broker_call(m.addr, "GetSubGroups", common_pb2.Empty())
                    for g in groups.groups:  # type: ignore[attr-defined]
                        if is_tool_group(g.group_name):
                            continue  # RocketScope's own reader (Spark, trace lookup): a tool, not a consumer
                        req = admin_pb2.ConsumerProgressRequest(group=g.group_name)
                        prog = await client.broker_call(m.addr, "ConsumerProgress", req)
                        for q in prog.queues:  # type: ignore[attr-defined]
                            if q.topic.startswith(RETRY_PREFIX):
                                continue  # retry backlog is not lag (LAG_DEFINITION)
                            queues.append({"group": g.group_name, "topic": q.topic, "broker": m.name,
                                           "queue_id": q.queue_id, "broker_offset": q.broker_offset,
                                           "consumer_offset": q.consumer_offset,
                                           "lag": max(0, q.broker_offset - q.consumer_offset),
                                           "inflight": q.inflight})
                for topic in await client.topics():
                    if topic.startswith(DLQ_PREFIX):
                        total = 0
                        for m in masters:
                            try:
                                offs = await client.broker_call(m.addr, "QueueOffsets",
                                                                admin_pb2.QueueOffsetsRequest(topic=topic))
                                total += sum(q.max_offset - q.min_offset for q in offs.queues)  # type: ignore[attr-defined]
                            except Exception:
                                continue
                        dlq.append({"group": topic[len(DLQ_PREFIX):], "dlq_topic": topic, "messages": total})
                return (pd.DataFrame(queues, columns=["group", "topic", "broker", "queue_id", "broker_offset",
                                                      "consumer_offset", "lag", "inflight"]),
                        pd.DataFrame(dlq, columns=["group", "dlq_topic", "messages"]))
            finally:
                await client.close()

        return _run(go)

    def trace(self, msg_id: str) -> dict[str, Any] | None:
        try:
            from rocketscope.trace.lookup import TraceLookup  # type: ignore[import-not-found]
        except ImportError:
            raise SourceError("trace lookup is not available in this installation (rocketscope.trace.lookup); "
                              "use fixtures mode (ROCKETSCOPE_FIXTURES=1) to try the page") from None
        from rocketscope.trace.lookup import TraceLookupError

        try:
            result = asyncio.run(TraceLookup(self.namesrv).lookup(msg_id))
        except TraceLookupError as exc:
            if str(exc).startswith("unknown message id"):
                return None  # the page explains "no trace found"; anything else is a real failure
            raise SourceError(str(exc)) from None
        except Exception as exc:
            raise SourceError(f"trace lookup of {msg_id} failed: {exc}") from None
        if result is None:
            return None
        data = result.to_dict()
        if not data.get("sends") and not data.get("groups") and not data.get("store"):
            return None
        return data


LAG_DEFINITION = ("lag = messages of a group's subscribed topics stored on the master (or leader) of each broker "
                  "group and not yet acknowledged by the group, summed over broker groups; the retry topic's backlog "
                  "is not lag (rocketmq_consumer_lag_messages with is_retry=\"false\", as RocketMQ's consumer "
                  "progress counts it)")
"""One definition for every view: the Consumers page (per queue, masters only), the Metrics page from
Prometheus (the same series, masters only) and from the nodes' /metrics."""
PROM_LAG_QUERY = ('sum by (consumer_group) (rocketmq_consumer_lag_messages{is_system="false",is_retry="false"} '
                  "and on (cluster, node_id) (rocketmq_ha_role == 3))")
"""Masters and leaders only (rocketmq_ha_role 3): replicas report the same queues, and the largest of them
was what an earlier max() showed, so a topic on two masters with lag 10 and 15 showed 15, not 25."""


def is_tool_group(group: str) -> bool:
    """RocketScope's own reader group (rocketmq_messages_out_total and the dashboards leave it out; it
    stays visible as a tool connection)."""
    from rocketscope.topic_reader import PULL_GROUP

    return group == PULL_GROUP or group.startswith(PULL_GROUP + "-")


def scrape_nodes(namesrv: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Without Prometheus: read every registered node's /metrics now (metrics_addr of its registration).

    Returns (messages in and out per topic since each node started, SendMessage latency
    histogram buckets, consumer lag per group).  No history: the page shows totals and the
    current lag; rates over time need Prometheus (--prometheus).
    """
    from prometheus_client.parser import text_string_to_metric_families

    async def nodes() -> list[tuple[str, str, bool]]:
        from rocketscope.admin_client import AdminClient

        client = AdminClient(namesrv, timeout_s=3.0)
        try:
            return [(f"{b.name}/{b.broker_id}", b.registration.metrics_addr, b.broker_id == 0)
                    for b in await client.cluster() if b.registration.metrics_addr]
        finally:
            await client.close()

    targets = _run(nodes)
    if not targets:
        raise SourceError("no broker registered a /metrics address: start brokers with metricsExporterType=PROM, "
                          "or give --prometheus")
    flows: dict[tuple[str, str], float] = {}
    buckets: dict[float, float] = {}
    lag: dict[str, float] = {}
    errors = []
    for node, addr, master in targets:
        try:
            with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except OSError as exc:
            errors.append(f"{node} ({addr}): {exc}")
            continue
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = s.labels
                if s.name == "rocketmq_messages_in_total" and labels.get("is_system") != "true":
                    key = (labels.get("topic", ""), "in")
                    flows[key] = flows.get(key, 0.0) + s.value
                elif (s.name == "rocketmq_messages_out_total" and labels.get("is_system") != "true"
                      and not is_tool_group(labels.get("consumer_group", ""))):
                    key = (labels.get("topic", ""), "out")
                    flows[key] = flows.get(key, 0.0) + s.value
                elif s.name == "rocketmq_rpc_latency_milliseconds_bucket" and labels.get("request_code") in \
                        ("send_message", "SendMessage"):
                    le = float(labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + s.value
                elif (s.name == "rocketmq_consumer_lag_messages" and master and labels.get("is_system") != "true"
                      and labels.get("is_retry") != "true" and not is_tool_group(labels.get("consumer_group", ""))):
                    group = labels.get("consumer_group", "")  # LAG_DEFINITION: masters only, retry apart
                    lag[group] = lag.get(group, 0.0) + s.value
    if errors and len(errors) == len(targets):
        raise SourceError("no node answered on /metrics: " + "; ".join(errors))
    flow_df = pd.DataFrame([{"topic": t, "direction": d, "messages": v} for (t, d), v in sorted(flows.items())],
                           columns=["topic", "direction", "messages"])
    hist: list[dict[str, Any]] = []
    previous = 0.0
    for le in sorted(buckets):  # cumulative Prometheus buckets -> count per bucket
        label = "+Inf" if le == float("inf") else f"≤ {le:g} ms"
        hist.append({"bucket": label, "order": len(hist), "requests": buckets[le] - previous})
        previous = buckets[le]
    lag_df = pd.DataFrame([{"group": g, "lag_messages": v} for g, v in sorted(lag.items())],
                          columns=["group", "lag_messages"])
    return flow_df, pd.DataFrame(hist, columns=["bucket", "order", "requests"]), lag_df


def get_source(cfg: Config) -> FixtureSource | LiveSource:
    return LiveSource(cfg.namesrv) if cfg.live_cluster else FixtureSource()


# ---------------------------------------------------------------------------------------
# Prometheus and Parquet


def _prom_range(url: str, query: str, minutes: int = 30, step: str = "30s") -> list[dict[str, Any]]:
    import time

    end = time.time()
    params = urllib.parse.urlencode({"query": query, "start": end - 60 * minutes, "end": end, "step": step})
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{params}", timeout=5) as resp:
            body = json.load(resp)
    except Exception as exc:
        raise SourceError(f"Prometheus at {url} did not answer ({exc}); check ROCKETSCOPE_PROMETHEUS") from None
    if body.get("status") != "success":
        raise SourceError(f"Prometheus rejected the query: {body.get('error', body)}")
    return body["data"]["result"]


def _series(result: list[dict[str, Any]], label: str, value: str) -> pd.DataFrame:
    rows = [{"time": pd.Timestamp(float(ts), unit="s", tz="UTC"), label: s["metric"].get(label, ""),
             value: float(v)} for s in result for ts, v in s["values"]]
    return pd.DataFrame(rows, columns=["time", label, value])


def prometheus_metrics(url: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    tput = _series(_prom_range(url, "sum by (topic) (rate(rocketmq_messages_in_total[1m]))"), "topic",
                   "msgs_per_s")
    lag = _series(_prom_range(url, PROM_LAG_QUERY), "consumer_group", "lag_messages").rename(
        columns={"consumer_group": "group"})
    lag = lag[~lag["group"].map(is_tool_group)] if not lag.empty else lag
    return tput, lag


def prometheus_flow_and_latency(url: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Messages out per consumer group (rate), and SendMessage latency p50/p99 over time."""
    out = _series(_prom_range(url, "sum by (consumer_group) (rate(rocketmq_messages_out_total[1m]))"),
                  "consumer_group", "msgs_per_s")
    frames = []
    for q in (0.5, 0.99):
        query = (f"histogram_quantile({q}, sum by (le) (rate(rocketmq_rpc_latency_milliseconds_bucket"
                 '{request_code="send_message"}[1m])))')
        df = _series(_prom_range(url, query), "quantile", "latency_ms")
        df["quantile"] = f"p{int(q * 100)}"
        frames.append(df)
    return out, pd.concat(frames, ignore_index=True)


def analytics_tables(path: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    root = Path(path)
    out = []
    for table in ("replication_latency", "failover_impact"):
        d = root / table
        if not d.is_dir():
            raise SourceError(f"no {table} table under {root}: run `rocketscope analyze all --output {root}` "
                              "or point ROCKETSCOPE_ANALYTICS at its output directory")
        try:
            out.append(pd.read_parquet(d))
        except Exception as exc:
            raise SourceError(f"cannot read {d}: {exc}") from None
    return out[0], out[1]
