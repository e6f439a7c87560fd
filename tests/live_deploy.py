"""A live RocketScope deployment for checking deploy/ against what really happened.

Used by tests/test_deploy_queries_live.py: every kind of node the dashboards and alert rules
describe, each serving /metrics on a fixed port (so a node restarted after a kill is scraped
again at the same target), a real Prometheus scraping them with deploy/prometheus/alerts.yml
loaded, and helpers to evaluate Grafana targets and watch alerts.

Why fixed ports and not ``metricsPromExporterPort=0``: Prometheus' targets are static; a node
that comes back on another port would look dead for ever, and the alert would never clear.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cluster import BIN, BrokerNode, LocalCluster, Proc, _port_open, stop_together, wait_until
from conftest import free_port
from telemetry_support import PrometheusServer

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARDS = sorted((DEPLOY / "grafana").glob("*.json"))
CLUSTER = "DefaultCluster"

# The live copy of alerts.yml keeps every expression and threshold but shortens time: a `for` of 30 s to
# 15 min and the 5-10 min windows of increase()/delta() would not fit in a test.  promtool
# (deploy/prometheus/alerts_test.yml) checks the real durations; this checks that the expressions see
# the series live nodes emit and fire in the scenarios they describe.
LIVE_FOR = "10s"  # longer than a scrape missed on a loaded machine, short enough for the kill scenarios
# The scenario and kill tests wait for an alert to fire at least its `for`, eight times in the module: they
# run with this shorter one (LivePrometheus.reload_rules), about 40 s less per run.  A blip there cannot fail
# them (they wait for one named alert); the healthy test, which fails on any firing alert, keeps LIVE_FOR.
SCENARIO_FOR = "5s"
LIVE_WINDOW = "20s"
SHORTENED_WINDOWS = re.compile(r"\[(5m|10m)\]|(?<=offset )(5m|10m)\b")

PROM_KEYS = {"metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1"}
# controller-mode timing for loopback (tests/test_e2e_controller.py uses the same)
CONTROLLER_BROKER_TIMING = {
    "brokerHeartbeatInterval": 200, "controllerHeartBeatTimeoutMills": 1500, "syncBrokerMetadataPeriod": 1000,
    "checkSyncStateSetPeriod": 500, "haMaxTimeSlaveNotCatchup": 3000, "slaveTimeout": 2000,
    "sendHeartbeatTimeoutMillis": 500}


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def live_rules(path: Path, for_: str = LIVE_FOR) -> Path:
    """alerts.yml with every `for` at ``for_`` and 5-10 min windows at LIVE_WINDOW (see above)."""
    doc = yaml.safe_load(ALERTS.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = for_
            rule["expr"] = SHORTENED_WINDOWS.sub(lambda m: f"[{LIVE_WINDOW}]" if m.group(1) else LIVE_WINDOW,
                                                 rule["expr"])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ------------------------------------------------------------------------------- PromQL helpers
def _split_top(expr: str, words: tuple[str, ...]) -> list[tuple[str, str]]:
    """``expr`` split at top-level (outside parentheses and brackets) occurrences of ``words``:
    [(text, the word that follows it or "")]."""
    out: list[tuple[str, str]] = []
    depth, start, i = 0, 0, 0
    while i < len(expr):
        ch = expr[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            for w in words:
                if expr.startswith(w, i):
                    out.append((expr[start:i], w))
                    start = i = i + len(w)
                    break
            else:
                i += 1
            continue
        i += 1
    out.append((expr[start:], ""))
    return out


def signals(expr: str) -> list[str]:
    """The measured side of an alert expression: each operand of a top-level ``and`` with its threshold
    comparison removed (``max by (g) (x) < 3`` gives ``max by (g) (x)``).  An alert that returns nothing
    on a healthy cluster says nothing by itself; its signal must return the series it judges."""
    out = []
    for part, _ in _split_top(" ".join(expr.split()), (" and ", " or ")):
        pieces = _split_top(part, (" > ", " < ", " == ", " != ", " >= ", " <= "))
        out.append(pieces[0][0].strip() if len(pieces) > 1 else part.strip())
    return out


def by_labels(expr: str) -> set[str]:
    """Label names of the outermost ``by (...)`` clauses: each returned series must carry them."""
    labels: set[str] = set()
    for m in re.finditer(r"\bby\s*\(([^)]*)\)", expr):
        labels |= {x.strip() for x in m.group(1).split(",") if x.strip() and x.strip() != "le"}
    return labels


def legend_labels(legend: str) -> set[str]:
    return set(re.findall(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}", legend or ""))


@dataclass
class Target:
    board: str
    panel_id: int
    title: str
    ref: str
    expr: str
    legend: str

    @property
    def name(self) -> str:
        return f"{self.board}#{self.panel_id} {self.title!r} {self.ref}"


def grafana_targets() -> list[Target]:
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for t in panel.get("targets", []):
                out.append(Target(board["uid"], panel["id"], panel["title"], t["refId"], t["expr"],
                                  t.get("legendFormat", "")))
    return out


def grafana_variables() -> dict[str, dict[str, Any]]:
    """Every template variable of the dashboards (name -> its definition; the same name means the same
    query on every board)."""
    out: dict[str, dict[str, Any]] = {}
    for path in DASHBOARDS:
        for var in json.loads(path.read_text()).get("templating", {}).get("list", []):
            if var.get("type") == "query":
                out[var["name"]] = var
    return out


def substitute(expr: str, values: Mapping[str, list[str]]) -> str:
    """Grafana's substitution of multi-value variables in a Prometheus regex matcher: ``(a|b)``."""
    def value(name: str) -> str:
        vals = [re.escape(v) for v in values[name]]
        return vals[0] if len(vals) == 1 else "(" + "|".join(vals) + ")"

    return re.sub(r"\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?", lambda m: value(m.group(1)) if m.group(1) in values
                  else m.group(0), expr)


def finite(result: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in result if not math.isnan(float(r["value"][1]))]


# ------------------------------------------------------------------------------- Prometheus
class LivePrometheus(PrometheusServer):
    """PrometheusServer plus: targets added later (config reload on SIGHUP), alert helpers."""

    def add_targets(self, job: str, targets: list[str]) -> None:
        config = json.loads(self.config_path.read_text())
        for sc in config["scrape_configs"]:
            if sc["job_name"] == job:
                sc["static_configs"][0]["targets"] += targets
                break
        else:
            config["scrape_configs"].append({"job_name": job, "static_configs": [{"targets": targets}]})
        self.config_path.write_text(json.dumps(config, indent=2))
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGHUP)
        wait_until(lambda: {f"{job}/{t}" for t in targets} <= {f"{a['labels']['job']}/{a['labels']['instance']}"
                                                                for a in self.targets()},
                   timeout=30, what=f"Prometheus to reload with {targets}")

    def reload_rules(self, path: Path, for_: str) -> None:
        """Rewrite the live rules at ``path`` with every `for` at ``for_`` and wait until Prometheus uses them."""
        live_rules(path, for_)
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGHUP)
        seconds = float(for_.removesuffix("s"))

        def reloaded() -> bool:
            rules = [r for g in self.api("rules")["groups"] for r in g["rules"] if r.get("type") == "alerting"]
            return bool(rules) and all(r["duration"] in (0, seconds) for r in rules) and \
                any(r["duration"] == seconds for r in rules)

        wait_until(reloaded, timeout=30, what=f"Prometheus to reload the rules with for: {for_}")

    def alerts(self, state: str | None = None) -> list[dict[str, Any]]:
        alerts = self.api("alerts")["alerts"]
        return [a for a in alerts if state is None or a["state"] == state]

    def wait_alert(self, name: str, timeout: float = 90.0, **labels: str) -> dict[str, Any]:
        def firing() -> dict[str, Any] | None:
            for a in self.alerts("firing"):
                if a["labels"]["alertname"] == name and all(a["labels"].get(k) == v for k, v in labels.items()):
                    return a
            return None

        return wait_until(firing, timeout=timeout, interval=0.5,
                          what=f"alert {name} {labels} firing (now: {self.alert_names()})")

    def wait_cleared(self, names: set[str], timeout: float = 120.0) -> None:
        wait_until(lambda: not (self.alert_names() & names), timeout=timeout, interval=0.5,
                   what=f"alerts {sorted(names)} to clear (still: {self.alert_names()})")

    def alert_names(self) -> set[str]:
        return {a["labels"]["alertname"] for a in self.alerts()}


# ------------------------------------------------------------------------------- the deployment
@dataclass
class Deployment:
    c: LocalCluster
    metrics: dict[str, int] = field(default_factory=dict)  # node name -> its /metrics port
    controllers: list[Proc] = field(default_factory=list)
    controller_ports: list[int] = field(default_factory=list)
    exporter: Proc | None = None
    exporter_ports: tuple[int, int, int] = (0, 0, 0)  # grpc, http, metrics
    extra: list[Proc] = field(default_factory=list)

    def prom(self, name: str) -> dict[str, Any]:
        port = self.metrics[name] = self.metrics.get(name) or free_port()
        return {**PROM_KEYS, "metricsPromExporterPort": port}

    def target(self, name: str) -> str:
        return f"127.0.0.1:{self.metrics[name]}"

    def start_exporter(self) -> None:
        g, h, m = free_port(), free_port(), free_port()
        self.exporter_ports = (g, h, m)
        self.exporter = Proc("exporter", [str(BIN), "exporter", "--host", "127.0.0.1", "--grpc-port", str(g),
                                          "--http-port", str(h), "--metrics-port", str(m), "--expire-after", "60"],
                             self.c.root / "exporter.log").start()
        wait_until(lambda: _port_open(m), what="exporter")

    def start_namesrv(self) -> None:
        self.c.start_namesrv(1, conf=lambda i: {**self.prom(f"namesrv{i}"), "brokerClusterName": CLUSTER})

    def start_dledger(self, name: str, size: int = 3) -> list[BrokerNode]:
        peer_ports = [free_port() for _ in range(size)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(peer_ports))
        return [self.c.start_broker(f"{name}-n{i}", brokerName=name, enableDLegerCommitLog="true", dLegerGroup=name,
                                    dLegerPeers=peers, dLegerSelfId=f"n{i}", dLegerElectionTicksMin=30,
                                    dLegerElectionTicksMax=40, **self.prom(f"{name}-n{i}"))
                for i in range(size)]

    def start_controllers(self, n: int = 3) -> None:
        raft = [free_port() for _ in range(n)]
        self.controller_ports = [free_port() for _ in range(n)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(raft))
        for i in range(n):
            conf = self.c.root / f"controller-n{i}.conf"
            values = {"controllerDLegerGroup": "ctl", "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}",
                      "controllerStorePath": self.c.root / f"controller-n{i}", "listenPort": self.controller_ports[i],
                      "scanNotActiveBrokerInterval": 200, "scanInactiveMasterInterval": 200,
                      "brokerClusterName": CLUSTER, **self.prom(f"controller-n{i}")}
            conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
            self.controllers.append(Proc(f"controller-n{i}", [str(BIN), "controller", "-c", str(conf)],
                                         self.c.root / f"controller-n{i}.log").start())
        for p in self.controller_ports:
            wait_until(lambda p=p: _port_open(p), what=f"controller on {p}")

    # in-process admin calls (what `rocketscope admin` sends): at load 30+ each CLI process takes tens of seconds
    def ha_role(self, node: BrokerNode) -> str:
        import grpc

        from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2

        if not node.proc.alive:
            return ""
        try:
            with grpc.insecure_channel(node.admin_addr) as ch:
                resp = admin_pb2_grpc.BrokerAdminStub(ch).HaStatus(common_pb2.Empty(), timeout=5)
            return str(json.loads(resp.json).get("role", ""))
        except (grpc.RpcError, ValueError):
            return ""

    def update_topic(self, node: BrokerNode, topic: str, queues: int = 4) -> None:
        import grpc

        from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2

        cfg = common_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, perm=6)
        with grpc.insecure_channel(node.admin_addr) as ch:
            st = admin_pb2_grpc.BrokerAdminStub(ch).UpdateTopic(admin_pb2.UpdateTopicRequest(config=cfg), timeout=60)
        assert st.code == 0, f"UpdateTopic {topic} at {node.name}: {st.remark}"

    def update_group(self, node: BrokerNode, group: str, retry_max_times: int) -> None:
        import grpc

        from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2

        cfg = common_pb2.SubscriptionGroupConfig(group_name=group, consume_enable=True, retry_max_times=retry_max_times,
                                                 retry_queue_nums=1)
        with grpc.insecure_channel(node.admin_addr) as ch:
            st = admin_pb2_grpc.BrokerAdminStub(ch).UpdateSubGroup(admin_pb2.UpdateSubGroupRequest(config=cfg),
                                                                   timeout=60)
        assert st.code == 0, f"UpdateSubGroup {group} at {node.name}: {st.remark}"

    def registered(self) -> int:
        """Brokers registered at the name server."""
        import grpc

        from rocketscope.broker.protocol import common_pb2, namesrv_pb2_grpc

        with grpc.insecure_channel(self.c.namesrv_addr) as ch:
            return len(namesrv_pb2_grpc.NameServerStub(ch).GetClusterInfo(common_pb2.Empty(), timeout=10).brokers)

    def wait_role(self, nodes: list[BrokerNode], role: str, timeout: float = 60.0) -> BrokerNode:
        found: list[BrokerNode] = []

        def one() -> bool:
            for n in nodes:
                if n.proc.alive and self.ha_role(n) == role:
                    found.append(n)
                    return True
            return False

        wait_until(one, timeout=timeout, interval=0.3, what=f"a {role} among {[n.name for n in nodes]}")
        return found[-1]

    def stop(self) -> None:
        """Clients, then brokers and the exporter, then name servers and controllers, each set together
        (tests/cluster.py stop_together: this deployment's stop was the 13-15 s 'teardown' of its last test)."""
        stop_together(self.extra)
        stop_together([*(n.proc for n in self.c.brokers.values()), self.exporter])
        stop_together([*self.c.namesrvs, *self.controllers])

    def logs(self) -> str:
        parts = [self.c.logs()]
        parts += [f"----- {p.name} -----\n{p.log()[-4000:]}" for p in [*self.controllers, *self.extra]]
        if self.exporter is not None:
            parts.append(f"----- exporter -----\n{self.exporter.log()[-3000:]}")
        return "\n".join(parts)


def restart(node: BrokerNode) -> None:
    node.proc.start()
    wait_until(lambda: _port_open(node.grpc_port) and _port_open(node.listen_port), timeout=60,
               what=f"{node.name} back")


def iter_series(result: list[dict[str, Any]]) -> Iterator[tuple[dict[str, str], float]]:
    for r in result:
        yield r["metric"], float(r["value"][1])
