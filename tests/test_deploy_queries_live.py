"""Every query in deploy/ against a live deployment, and the alerts as behaviour (issue 16).

One deployment for the whole module (tests/live_deploy.py): a name server, a three-node DLedger
group, a SYNC_MASTER + slave pair (the master also takes the official clients' metric pushes,
metricCollectorMode=proxy), a standalone broker pushing OTLP to `rocketscope exporter`, three
controllers with a controller-managed pair, every node scraped by a real Prometheus (1 s scrape and
rule evaluation) that loads deploy/prometheus/alerts.yml (times shortened, see live_deploy.py).

The tests run in order, each building on the previous one's state:
1. healthy: a known workload, then nothing fires or is pending over several evaluations, while
   every rule's measured side returns the series it judges (a rule that sees nothing is no proof);
2. scenarios that must make series and alerts appear: a group that dead-letters a known number of
   messages, one that leaves messages in its retry topic, a broker with ACL denials and a tiny
   cardinality limit, the tool's reader reading a topic;
3. every Grafana target with its variables substituted returns data with the labels its legend uses;
   counts compare with what the test did;
4. kills: a master, a DLedger majority, a controller-mode slave, a controller majority; each alert
   fires with the right labels and clears after the node is back.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cluster import BrokerNode, LocalCluster, Proc, wait_until
from live_deploy import (
    CLUSTER,
    CONTROLLER_BROKER_TIMING,
    DEPLOY,
    SCENARIO_FOR,
    Deployment,
    LivePrometheus,
    Target,
    alert_rules,
    by_labels,
    finite,
    grafana_targets,
    grafana_variables,
    iter_series,
    legend_labels,
    live_rules,
    restart,
    signals,
    substitute,
)
from rmq import drain, message, producer, simple_consumer

pytestmark = pytest.mark.e2e

N_M, N_D, N_S, N_C = 40, 30, 20, 10  # messages sent to the master/slave pair, DLedger, standalone, controller set
CONSUMED = 30  # of TopicM, by GroupLive (acked): lag 10
DEAD = 3  # messages GroupDLQ (retryMaxTimes 0) never acks: all to its DLQ
RETRIED = 2  # messages GroupRetry never acks: into its retry topic
PUSHED = 5  # messages the push-consumer client sends and consumes (client histograms)

CLIENT_SCRIPT = """
import os, sys, time
sys.path.insert(0, {tests!r})
from rocketmq.v5.client.metrics.client_metrics import ClientMetrics
ClientMetrics.METRIC_READER_INTERVAL = 500  # the client's export period (60 s by default); its code is unchanged
from rmq import RecordingListener, message, producer, push_consumer
listener = RecordingListener()
with push_consumer({ep!r}, "GroupPush", "TopicP", listener) as c, producer({ep!r}, "TopicP") as p:
    # the metric switch comes with the broker's Settings: measure nothing before they arrived
    assert c._init_settings_event.wait(30) and p._init_settings_event.wait(30)
    time.sleep(0.5)
    # rounds of {n} sends and their consumption, each when the test creates the file round-<k> (fresh
    # traffic for the rate()-based panels); connected meanwhile (the connection gauges)
    for k in range(1, 100):
        while not os.path.exists(os.path.join({root!r}, f"round-{{k}}")):
            time.sleep(0.1)
        for i in range({n}):
            p.send(message("TopicP", b"x"))
        deadline = time.monotonic() + 60
        while listener.count() < k * {n} and time.monotonic() < deadline:
            time.sleep(0.1)
        print("consumed", listener.count(), flush=True)
"""


@dataclass
class Live:
    d: Deployment
    prom: LivePrometheus
    dledger: list[BrokerNode]
    master: BrokerNode
    slave: BrokerNode
    standalone: BrokerNode
    ctl_brokers: list[BrokerNode]
    leader: BrokerNode
    sent_ids: dict[str, list[str]] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def c(self) -> LocalCluster:
        return self.d.c

    def value(self, expr: str) -> float | None:
        res = self.prom.query(expr)
        return float(res[0]["value"][1]) if res else None

    def wait_value(self, expr: str, want: float, timeout: float = 60.0) -> float:
        seen: list[float | None] = []

        def probe() -> bool:
            seen[:] = [self.value(expr)]
            return seen[0] == want

        wait_until(probe, timeout=timeout, interval=0.5, what=f"{expr} == {want} (last {seen})")
        return want


def push_round(live: Live, root: Path) -> None:
    """One more round of the push client (PUSHED sends and their consumption); waits for it."""
    k = live.state["rounds"] = live.state.get("rounds", 0) + 1
    (root / f"round-{k}").touch()
    client: Proc = live.state["client"]
    wait_until(lambda: f"consumed {k * PUSHED}" in client.log(), timeout=120, what=f"the push client's round {k}")


def fresh_traffic(live: Live) -> None:
    """Sends to TopicFresh on every writable group and a push-client round: histogram_quantile(rate(..[5m]))
    panels show nothing (NaN) when nothing happened for five minutes, which is true but proves nothing."""
    send(";".join(n.endpoint for n in live.dledger), "TopicFresh", 5)
    for node in (live.master, live.standalone, live.state["ctl_master"]):
        send(node.endpoint, "TopicFresh", 5)
    push_round(live, live.c.root)
    # the group's leader recorded those appends, and Prometheus has them (else the p99 panels read NaN)
    wait_until(lambda: live.value("sum(increase(dledger_append_entry_latency_milliseconds_count[1m]))"),
               timeout=60, interval=0.5, what="fresh DLedger appends in Prometheus")
    # a controller request (heartbeats are not requests): electMaster of the current master, which keeps it
    addrs = ";".join(f"127.0.0.1:{p}" for p in live.d.controller_ports)

    def ctl(*args: str) -> Any:
        return json.loads(live.c.admin(*args, "-a", addrs, "--json", namesrv=False).stdout)

    master_id = ctl("getSyncStateSet", "-b", "broker-c")[0]["masterBrokerId"]
    ctl("electMaster", "-b", "broker-c", "-i", str(master_id))


def send(endpoint: str, topic: str, n: int) -> list[str]:
    with producer(endpoint, topic) as p:
        return [p.send(message(topic, f"{topic}-{i}".encode() * 8)).message_id for i in range(n)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("deploy-live")
    d = Deployment(LocalCluster(root))
    prom: LivePrometheus | None = None
    try:
        d.start_exporter()
        d.start_namesrv()
        dledger = d.start_dledger("broker-d")
        master = d.c.start_broker("broker-m-0", brokerName="broker-m", brokerRole="SYNC_MASTER",
                                  metricCollectorMode="proxy", metricsPerQueueLag="true", brokerTraceEnable="true",
                                  traceTopicEnable="true", **d.prom("broker-m-0"))
        slave = d.c.start_broker("broker-m-1", brokerName="broker-m", brokerRole="SLAVE", brokerId=1,
                                 **d.prom("broker-m-1"))
        grpc_port = d.exporter_ports[0]
        standalone = d.c.start_broker("broker-s-0", brokerName="broker-s", metricsExporterType="OTLP_GRPC",
                                      metricsGrpcExporterTarget=f"http://127.0.0.1:{grpc_port}",
                                      metricGrpcExporterIntervalInMills=1000)
        d.start_controllers()
        addrs = ";".join(f"127.0.0.1:{p}" for p in d.controller_ports)
        ctl = [d.c.start_broker(f"broker-c-{i}", brokerName="broker-c", enableControllerMode="true",
                                controllerAddr=addrs, allAckInSyncStateSet="true", minInSyncReplicas=1,
                                **CONTROLLER_BROKER_TIMING, **d.prom(f"broker-c-{i}")) for i in range(2)]
        leader = d.wait_role(dledger, "LEADER")
        ctl_master = d.wait_role(ctl, "MASTER")
        wait_until(lambda: d.ha_role(slave) == "SLAVE" and d.registered() >= 8, timeout=60,
                   what="every broker registered")

        for node, topic in ((master, "TopicM"), (master, "TopicDLQ"), (master, "TopicRetry"), (master, "TopicP"),
                            (leader, "TopicD"), (standalone, "TopicS"), (ctl_master, "TopicC"),
                            *((n, "TopicFresh") for n in (master, leader, standalone, ctl_master))):
            d.update_topic(node, topic)
        for group, retries in (("GroupLive", 16), ("GroupDLQ", 0), ("GroupRetry", 16), ("GroupPush", 16)):
            d.update_group(master, group, retries)

        live = Live(d, None, dledger, master, slave, standalone, ctl, leader)  # type: ignore[arg-type]
        live.state["ctl_master"] = ctl_master
        # the known workload (ground truth): sends and one group's consumption
        live.sent_ids["TopicM"] = send(master.endpoint, "TopicM", N_M)
        live.sent_ids["TopicD"] = send(leader.endpoint, "TopicD", N_D)
        live.sent_ids["TopicS"] = send(standalone.endpoint, "TopicS", N_S)
        live.sent_ids["TopicC"] = send(ctl_master.endpoint, "TopicC", N_C)
        with simple_consumer(master.endpoint, "GroupLive", "TopicM") as cons:
            got = drain(cons, CONSUMED, batch=1, timeout=60)
            assert len(got) == CONSUMED
        # an official client that pushes its metrics to the master (proxy mode) and stays connected
        script = CLIENT_SCRIPT.format(tests=str(Path(__file__).parent), ep=master.endpoint, n=PUSHED, root=str(root))
        client = Proc("push-client", [sys.executable, "-c", script], root / "push-client.log").start()
        d.extra.append(client)
        live.state["client"] = client
        push_round(live, root)

        jobs = {"rocketscope-namesrv": [d.target("namesrv0")],
                "rocketscope-broker": [d.target(n) for n in d.metrics if n.startswith("broker-")],
                "rocketscope-controller": [d.target(f"controller-n{i}") for i in range(3)],
                "rocketscope-exporter": [f"127.0.0.1:{d.exporter_ports[2]}"]}
        live.state["rules"] = rules = live_rules(root / "alerts-live.yml")
        prom = LivePrometheus(jobs, scrape_interval="1s", rule_files=[rules])
        prom.start()
        live.prom = prom
        for job in jobs:
            prom.wait_healthy(job, timeout=60)
        yield live
    except BaseException:
        print(d.logs())
        raise
    finally:
        if prom is not None:
            prom.stop()
        d.stop()


def scenario_rules(live: Live) -> LivePrometheus:
    """The live rules with SCENARIO_FOR (live_deploy.py says why), once the healthy check is done."""
    if live.state.get("for") != SCENARIO_FOR:
        live.prom.reload_rules(live.state["rules"], SCENARIO_FOR)
        live.state["for"] = SCENARIO_FOR
    return live.prom


def rule_sees_its_series(prom: LivePrometheus, rule: dict[str, Any]) -> bool:
    """The rule's measured side returns series carrying the labels it groups by: every operand of an ``and``,
    at least one of an ``or`` (DLQGrowing's second operand only sees series born within its window)."""
    sigs = signals(rule["expr"])
    seen = 0
    for sig in sigs:
        result = prom.query(sig)
        for labels, _ in iter_series(result):
            missing = {k for k in by_labels(sig) if not labels.get(k)}
            assert not missing, f"{rule['alert']}: {sig} returned {labels} without {missing}"
        seen += bool(result)
    return seen >= 1 if " or " in " ".join(rule["expr"].split()) else seen == len(sigs)


# ------------------------------------------------------------------------------------------- 1. healthy
@pytest.mark.timeout(600)
def test_healthy_deployment_fires_nothing_while_every_rule_sees_its_series(live: Live) -> None:
    prom = live.prom
    # every rule's measured side has data (the series the rule judges exist, with the labels it groups by);
    # rules about conditions that need a scenario first are checked after it (test 3)
    later = {"RocketScopeDLQGrowing", "RocketScopeMetricsOverflow"}
    for rule in alert_rules():
        if rule["alert"] not in later:
            wait_until(lambda r=rule: rule_sees_its_series(prom, r), timeout=60, interval=0.5,
                       what=f"{rule['alert']}: data for {signals(rule['expr'])}")
    # the roles the no-master rules judge: every group has a 3, and its other members say 2
    roles = {(m["broker_group"], m["node_id"]): v for m, v in iter_series(prom.query("rocketmq_ha_role"))}
    assert max(v for (g, _), v in roles.items() if g == "broker-m") == 3
    assert roles[("broker-m", "broker-m-1")] == 2
    assert sorted(v for (g, _), v in roles.items() if g == "broker-d") == [2, 2, 3]
    assert sorted(v for (g, _), v in roles.items() if g == "broker-c") == [2, 3]
    assert roles[("broker-s", "broker-s-0")] == 3  # the standalone broker, through the exporter
    assert max(v for _, v in iter_series(prom.query("rocketmq_controller_role"))) == 3

    # more evaluation intervals than a `for` lasts, with nothing firing; the rule groups really were evaluated.
    # A pending alert is reported, not failed: on a loaded machine a missed scrape or a DLedger election is a
    # real blip, and `for` exists to keep blips from firing
    evaluations: dict[str, set[str]] = {}
    pending: set[str] = set()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        alerts = prom.alerts()
        firing = [a for a in alerts if a["state"] == "firing"]
        missed = prom.query("count_over_time(up[2m]) - sum_over_time(up[2m]) > 0") if firing else []
        terms = prom.query("changes(dledger_term[2m]) > 0") if firing else []
        assert not firing, f"{firing}; scrapes missed: {missed}; DLedger term changes: {terms}"
        pending |= {a["labels"]["alertname"] for a in alerts}
        for g in prom.api("rules")["groups"]:
            evaluations.setdefault(g["name"], set()).add(g["lastEvaluation"])
        if min(len(v) for v in evaluations.values()) >= 15:
            break
        time.sleep(0.5)
    assert evaluations and min(len(v) for v in evaluations.values()) >= 15, evaluations
    if pending:
        print(f"pending (not firing) during the healthy period: {sorted(pending)}")


# ------------------------------------------------------------------------------------------- 2. scenarios
@pytest.mark.timeout(600)
def test_scenarios_dead_letters_retries_acl_overflow_and_the_reader(live: Live) -> None:
    d, master, prom = live.d, live.master, live.prom
    # GroupDLQ (retryMaxTimes 0) takes DEAD messages and never acks: each goes to its DLQ at its first expiry
    send(master.endpoint, "TopicDLQ", DEAD)
    with simple_consumer(master.endpoint, "GroupDLQ", "TopicDLQ") as cons:
        assert len(drain(cons, DEAD, ack=False, invisible_s=1, timeout=60)) == DEAD
        live.wait_value('sum(rocketmq_send_to_dlq_messages_total{consumer_group="GroupDLQ"})', DEAD, timeout=60)
    prom.wait_alert("RocketScopeDLQGrowing", consumer_group="GroupDLQ", topic="TopicDLQ", cluster=CLUSTER)
    # GroupRetry never acks RETRIED messages: they wait in its retry topic (retry lag)
    send(master.endpoint, "TopicRetry", RETRIED)
    with simple_consumer(master.endpoint, "GroupRetry", "TopicRetry") as cons:
        assert len(drain(cons, RETRIED, ack=False, invisible_s=1, timeout=60)) == RETRIED
    # the tool's own reader reads TopicM whole: a reader, not a consumer
    from rocketscope.topic_reader import discover_queues, pull_messages, queue_bounds

    read = 0
    for q in discover_queues(d.c.namesrv_addr, ["TopicM"]):
        lo, hi = queue_bounds(q)
        read += sum(1 for _ in pull_messages(q, lo, hi))
    assert read == N_M
    live.state["reader_done"] = time.time()
    # a broker with ACL on and a cardinality limit of 2 label sets per instrument: unsigned requests are
    # denied, and its gauges (system topics alone) overflow the limit
    acl = DEPLOY / "conf" / "acl" / "plain_acl.yml"
    guarded = d.c.start_broker("broker-o-0", brokerName="broker-o", aclEnable="true", aclFile=acl,
                               metricsOtelCardinalityLimit=2, **d.prom("broker-o-0"))
    prom.add_targets("rocketscope-broker", [d.target("broker-o-0")])
    import grpc
    from rocketmq.grpc_protocol import service_pb2 as svc
    from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

    with grpc.insecure_channel(guarded.endpoint) as ch:  # an unsigned request: refused, and counted
        req = svc.QueryRouteRequest()
        req.topic.name = "TopicM"
        try:
            status = svc_grpc.MessagingServiceStub(ch).QueryRoute(req, timeout=10).status
            assert status.code != 20000, "an unsigned QueryRoute was accepted with ACL on"
        except grpc.RpcError:
            pass
    wait_until(lambda: live.value('sum(rocketmq_acl_denied_total{node_id="broker-o-0"})'), timeout=60,
               what="the ACL denial on /metrics")
    prom.wait_alert("RocketScopeMetricsOverflow", node_id="broker-o-0", cluster=CLUSTER)
    # broker-side trace with room for one record: a burst of sends drops trace records, counted and alerted
    tight = d.c.start_broker("broker-t-0", brokerName="broker-t", brokerTraceEnable="true", traceTopicEnable="true",
                             brokerTraceQueueSize=1, **d.prom("broker-t-0"))
    prom.add_targets("rocketscope-broker", [d.target("broker-t-0")])
    d.update_topic(tight, "TopicT")
    wait_until(lambda: prom.query('rocketscope_trace_records_dropped_total{node_id="broker-t-0"}'), timeout=60,
               what="broker-t's trace series scraped (from 0) before the burst")
    deadline = time.monotonic() + 120
    while not live.value('sum(rocketscope_trace_records_dropped_total{node_id="broker-t-0"})'):
        assert time.monotonic() < deadline, "a burst of sends never overflowed a trace queue of 1"
        send(tight.endpoint, "TopicT", 50)
    prom.wait_alert("RocketScopeTraceRecordsDropped", node_id="broker-t-0", source="broker", cluster=CLUSTER)


# ------------------------------------------------------------------------------------------- 3. every query
def _variable_values(live: Live) -> dict[str, list[str]]:
    """Each template variable as Grafana computes it (its label_values query through the HTTP API)."""
    out: dict[str, list[str]] = {}
    for name, var in grafana_variables().items():
        q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((.*),\s*([a-zA-Z_]+)\)", q.strip())
        assert m, f"variable {name}: unexpected query {q}"
        selector = substitute(m.group(1), out) if out else m.group(1)
        values = live.prom.api(f"label/{m.group(2)}/values", **{"match[]": selector})
        out[name] = sorted(values)
    return out


def _check_target(live: Live, t: Target, values: dict[str, list[str]]) -> list[dict[str, Any]]:
    expr = substitute(t.expr, values)
    result = live.prom.query(expr)
    data = finite(result)
    assert data, f"{t.name}: no data for {expr} (raw: {result})"
    for labels, _ in iter_series(data):
        missing = {k for k in legend_labels(t.legend) if not labels.get(k)}
        assert not missing, f"{t.name}: {labels} lacks {missing} used by its legend {t.legend!r}"
    return data


@pytest.mark.timeout(600)
def test_every_grafana_target_and_rule_returns_data_with_its_labels(live: Live) -> None:
    prom = live.prom
    values = _variable_values(live)
    # the cluster variable offers the deployment's cluster and nothing else (no "" from the name server,
    # no controller group name); the group variable lists consumers, never the tool's reader
    assert values["cluster"] == [CLUSTER], values
    assert "rocketscope-reader" not in values["consumer_group"]
    assert {"GroupLive", "GroupDLQ", "GroupRetry", "GroupPush"} <= set(values["consumer_group"]), values
    # the retry lag needs the revived messages in the retry topic: wait for it once
    wait_until(lambda: prom.query('rocketmq_consumer_lag_messages{consumer_group="GroupRetry",is_retry="true"}'),
               timeout=90, interval=0.5, what="GroupRetry's retry lag")
    fresh_traffic(live)
    # every target under "All", and with one group chosen (Grafana's other common state): the group that has
    # what the panel shows (a panel of retry lag is empty for a group without retries, truthfully)
    one_group = {"Retry lag": "GroupRetry", "Sent to DLQ": "GroupDLQ", "Client": "GroupPush"}
    for state in ("all", "one"):
        if state == "one":
            fresh_traffic(live)  # the first pass may have taken minutes on a loaded machine
        for t in grafana_targets():
            chosen = values
            if state == "one":
                group = next((g for k, g in one_group.items() if t.title.startswith(k)), "GroupLive")
                chosen = {**values, "consumer_group": [group]}
            wait_until(lambda t=t, v=chosen: _check_target(live, t, v), timeout=45, interval=1, what=t.name)
    for rule in alert_rules():
        wait_until(lambda r=rule: rule_sees_its_series(prom, r), timeout=60, interval=0.5, what=rule["alert"])


@pytest.mark.timeout(300)
def test_counts_agree_with_the_workload(live: Live) -> None:
    v, prom = live.value, live.prom
    # messages in: each topic counted once, on the node that stored it (not again on replicas)
    for topic, n in (("TopicM", N_M), ("TopicD", N_D), ("TopicS", N_S), ("TopicC", N_C)):
        assert v(f'sum(rocketmq_messages_in_total{{topic="{topic}"}})') == n, topic
    # messages out: the consumer group's acknowledged count; nothing for the reader, which read all N_M
    assert v('sum(rocketmq_messages_out_total{topic="TopicM",consumer_group="GroupLive"})') == CONSUMED
    assert prom.query('rocketmq_messages_out_total{consumer_group="rocketscope-reader"}') == []
    assert prom.query('rocketmq_consumer_lag_messages{consumer_group="rocketscope-reader"}') == []
    # the lag panel (consumers#1) shows N_M - CONSUMED for the group
    lag = dict((m["topic"], val) for m, val in iter_series(prom.query(
        'sum by (consumer_group, topic) (rocketmq_consumer_lag_messages{cluster=~"DefaultCluster", '
        'consumer_group=~"GroupLive", is_retry="false"})')))
    assert lag == {"TopicM": N_M - CONSUMED}
    assert v('sum(rocketmq_send_to_dlq_messages_total{consumer_group="GroupDLQ",topic="TopicDLQ"})') == DEAD
    # the DLQ panel (increase over 10 min) shows DEAD: the series starts at 0, so nothing is lost at its
    # start; Prometheus extrapolates increase() towards the window's end, hence the upper bound
    dlq_panel = v('sum by (consumer_group, topic) (increase(rocketmq_send_to_dlq_messages_total'
                  '{consumer_group="GroupDLQ"}[10m]))')
    assert dlq_panel is not None and DEAD <= dlq_panel <= DEAD * 1.25
    assert v('sum(rocketmq_consumer_lag_messages{consumer_group="GroupRetry",is_retry="true"})') == RETRIED
    # the official clients' histograms, re-exported by the master with its identity
    pushed = PUSHED * live.state["rounds"]
    for series, labels in (("rocketmq_send_cost_time_milliseconds_count", 'topic="TopicP"'),
                           ("rocketmq_process_time_milliseconds_count", 'consumer_group="GroupPush"')):
        expr = f"sum by (cluster, node_type, node_id) ({series}{{{labels}}})"
        # the client pushes every 0.5 s: wait for its last round to arrive
        wait_until(lambda e=expr: [(m, val) for m, val in iter_series(prom.query(e))] == [
            ({"cluster": CLUSTER, "node_type": "broker", "node_id": "broker-m-0"}, pushed)], timeout=30,
            what=f"{expr} == {pushed} from broker-m-0 ({prom.query(expr)})")
    # connection gauges: RocketMQ's version form; the push client is connected as producer and consumer
    versions = {m["version"] for m, _ in iter_series(prom.query("rocketmq_producer_connections"))}
    assert versions and all(re.fullmatch(r"v\d+(_\d+)+", x) for x in versions), versions
    # the name server: brokers per broker cluster, labelled with its own cluster
    brokers = {(m["cluster"], m["broker_cluster"]): val
               for m, val in iter_series(prom.query("rocketmq_namesrv_registered_brokers"))}
    assert brokers == {(CLUSTER, CLUSTER): live.d.registered()}
    # the exporter's rocketmq-exporter gauges for the standalone broker: its brokerName and address
    (labels, offset), = iter_series(prom.query('rocketmq_producer_offset{topic="TopicS"}'))
    assert labels["broker"] == "broker-s" and offset == N_S
    tps = prom.query('rocketmq_broker_tps{broker="broker-s"}')
    assert tps and tps[0]["metric"]["brokerIP"] == live.standalone.admin_addr
    # DLedger: the replicate latency of each follower covers every entry the leader proposed
    counts = {m["remote_id"]: val for m, val in iter_series(prom.query(
        'sum by (remote_id) (dledger_replicate_entry_latency_milliseconds_count{group="broker-d"})'))}
    assert len(counts) == 2 and all(c >= N_D for c in counts.values()), counts
    # topic and group creation were timed: the topics and groups the test created, at least
    created = v('sum(rocketmq_topic_create_execution_time_milliseconds_count{node_id="broker-m-0",'
                'invocation_status="success",is_system="false"})')
    assert created is not None and created >= 4
    assert (v('sum(rocketmq_consumer_group_create_execution_time_milliseconds_count{node_id="broker-m-0"})')
            or 0) >= 4


# ------------------------------------------------------------------------------------------- 4. kills
@pytest.mark.timeout(600)
def test_killed_master_fires_no_master_and_clears_when_it_returns(live: Live) -> None:
    prom = scenario_rules(live)
    prom.wait_cleared({"RocketScopeTargetDown", "RocketScopeNoMaster"})
    live.master.proc.kill9()
    prom.wait_alert("RocketScopeNoMaster", broker_group="broker-m", cluster=CLUSTER)
    prom.wait_alert("RocketScopeTargetDown", instance=live.d.target("broker-m-0"))
    restart(live.master)
    prom.wait_cleared({"RocketScopeNoMaster", "RocketScopeTargetDown"})


@pytest.mark.timeout(600)
def test_dledger_majority_lost_fires_no_leader_and_clears_after(live: Live) -> None:
    prom, d = scenario_rules(live), live.d
    leader = d.wait_role(live.dledger, "LEADER")
    follower = next(n for n in live.dledger if n is not leader)
    for n in (leader, follower):
        n.proc.kill9()
    prom.wait_alert("RocketScopeNoDLedgerLeader", group="broker-d", cluster=CLUSTER)
    prom.wait_alert("RocketScopeNoMaster", broker_group="broker-d", cluster=CLUSTER)
    for n in (leader, follower):
        restart(n)
    d.wait_role(live.dledger, "LEADER")
    prom.wait_cleared({"RocketScopeNoDLedgerLeader", "RocketScopeNoMaster", "RocketScopeTargetDown"})


@pytest.mark.timeout(600)
def test_controller_mode_slave_lost_shrinks_sync_state_set_and_it_clears_after(live: Live) -> None:
    prom, d = scenario_rules(live), live.d
    master = d.wait_role(live.ctl_brokers, "MASTER")
    slave = next(n for n in live.ctl_brokers if n is not master)
    slave.proc.kill9()
    prom.wait_alert("RocketScopeSyncStateSetShrunk", broker_group="broker-c", cluster=CLUSTER)
    assert "RocketScopeNoMaster" not in prom.alert_names()  # the master is alive
    restart(slave)
    prom.wait_cleared({"RocketScopeSyncStateSetShrunk", "RocketScopeTargetDown"})


@pytest.mark.timeout(600)
def test_controller_majority_lost_fires_no_controller_leader_and_clears_after(live: Live) -> None:
    prom, d = scenario_rules(live), live.d
    gone = d.controllers[:2]
    for p in gone:
        p.kill9()
    prom.wait_alert("RocketScopeNoControllerLeader", cluster=CLUSTER)
    for p in gone:
        p.start()
    prom.wait_cleared({"RocketScopeNoControllerLeader", "RocketScopeTargetDown"})


def test_dead_letter_alert_clears_once_the_dlq_stops_growing(live: Live) -> None:
    # its window is LIVE_WINDOW in the live rules: no dead letter since the scenario, so it has cleared
    live.prom.wait_cleared({"RocketScopeDLQGrowing"}, timeout=90)


def test_the_scrape_config_in_deploy_names_the_jobs_the_rules_use() -> None:
    text = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    for job in ("rocketscope-namesrv", "rocketscope-broker", "rocketscope-controller", "rocketscope-exporter"):
        assert f"job_name: {job}" in text


@pytest.mark.timeout(600)
def test_disk_nearly_full_fires_the_disk_alerts_and_they_clear_after(live: Live) -> None:
    """A broker whose store lives on its own small file system (tmpfs, root only), filled by a ballast file
    to 90 % and then 97 %: the usage the broker reports is the file system's real usage."""
    import os
    import shutil

    d, prom = live.d, scenario_rules(live)
    mount = live.c.root / "small-disk"
    mount.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], capture_output=True,
                         text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for the store (needs root): {res.stderr.strip()}")
    node = None
    try:
        node = d.c.start_broker("broker-f-0", brokerName="broker-f", storePathRootDir=mount / "store",
                                **d.prom("broker-f-0"))
        prom.add_targets("rocketscope-broker", [d.target("broker-f-0")])
        ballast = mount / "ballast"

        def fill_to(ratio: float) -> None:
            usage = shutil.disk_usage(mount)
            extra = int(ratio * usage.total) - usage.used
            with open(ballast, "ab") as fh:
                fh.write(b"\0" * max(0, extra))
                fh.flush()
                os.fsync(fh.fileno())

        fill_to(0.90)
        prom.wait_alert("RocketScopeDiskUsageHigh", node_id="broker-f-0", cluster=CLUSTER)
        assert "RocketScopeDiskUsageCritical" not in prom.alert_names()
        fill_to(0.97)
        prom.wait_alert("RocketScopeDiskUsageCritical", node_id="broker-f-0", cluster=CLUSTER)
        ballast.unlink()
        prom.wait_cleared({"RocketScopeDiskUsageHigh", "RocketScopeDiskUsageCritical"})
    finally:
        if node is not None:
            node.proc.stop()
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


# ------------------------------------------------------------------------ 5. replicas and consumers behind
def send_many(endpoint: str, topic: str, bodies: list[bytes], window: int = 256) -> int:
    """Send every body with at most ``window`` sends in flight; returns how many the broker acknowledged."""
    acked = 0
    with producer(endpoint, topic) as p:
        for start in range(0, len(bodies), window):
            futures = [p.send_async(message(topic, b)) for b in bodies[start:start + window]]
            for f in futures:
                f.result(timeout=120)
                acked += 1
    return acked


PEER_LAG_ENTRIES = 10_001  # RocketScopeDLedgerPeerLagHigh: > 10000 entries
BYTE_LAG_BODIES = 140  # x 512 KiB (the live segments are 1 MiB): RocketScopeReplicationLagHigh is > 64 MiB


@pytest.mark.timeout(900)
def test_a_paused_follower_fires_peer_lag_and_replication_lag_and_they_clear_after(live: Live) -> None:
    """One follower of the DLedger group is stopped (SIGSTOP) while the two others keep a majority:
    the test writes 10,001 small messages and 70 MiB through the leader, so the paused follower is
    more than 10,000 entries and 64 MiB behind (what the two alerts judge, counted by the test, not
    read from the broker); both alerts name that follower, and clear once it is resumed and caught up."""
    d, prom = live.d, scenario_rules(live)
    prom.wait_cleared({"RocketScopeDLedgerPeerLagHigh", "RocketScopeReplicationLagHigh"})
    leader = d.wait_role(live.dledger, "LEADER")
    follower = next(n for n in live.dledger if n is not leader)
    self_id = follower.name.rsplit("-", 1)[1]  # broker-d-n1 -> n1 (dLegerSelfId)
    # the two live members: a send reaching one that is not (or no longer) the leader is forwarded
    endpoints = ";".join(n.endpoint for n in live.dledger if n is not follower)
    follower.proc.pause(True)
    try:
        small = send_many(endpoints, "TopicD", [b"lag-%d" % i for i in range(PEER_LAG_ENTRIES)])
        big = send_many(endpoints, "TopicD", [bytes([i % 256]) * (1 << 19) for i in range(BYTE_LAG_BODIES)],
                        window=4)
        assert (small, big) == (PEER_LAG_ENTRIES, BYTE_LAG_BODIES)  # the majority acknowledged every send
        prom.wait_alert("RocketScopeDLedgerPeerLagHigh", group="broker-d", remote_id=self_id, cluster=CLUSTER)
        prom.wait_alert("RocketScopeReplicationLagHigh", broker_group="broker-d", replica=f"broker-d-{self_id}",
                        cluster=CLUSTER)
    finally:
        follower.proc.pause(False)
    prom.wait_cleared({"RocketScopeDLedgerPeerLagHigh", "RocketScopeReplicationLagHigh"}, timeout=300)


LAG_GROWTH = 1_000  # GroupLive's lag on TopicM was CONSUMED short of N_M (10): 1,010 > 1000 after this


@pytest.mark.timeout(600)
def test_a_group_falling_behind_fires_consumer_lag_growing_and_it_clears_when_it_catches_up(live: Live) -> None:
    prom = scenario_rules(live)
    prom.wait_cleared({"RocketScopeConsumerLagGrowing"})
    assert send_many(live.master.endpoint, "TopicM", [b"behind-%d" % i for i in range(LAG_GROWTH)]) == LAG_GROWTH
    prom.wait_alert("RocketScopeConsumerLagGrowing", consumer_group="GroupLive", topic="TopicM", cluster=CLUSTER)
    with simple_consumer(live.master.endpoint, "GroupLive", "TopicM") as cons:
        got = drain(cons, LAG_GROWTH + N_M - CONSUMED, timeout=180)
    assert len({m.message_id for m in got}) == LAG_GROWTH + N_M - CONSUMED  # everything the group had not acked
    prom.wait_cleared({"RocketScopeConsumerLagGrowing"})
