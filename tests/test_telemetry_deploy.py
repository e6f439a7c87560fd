"""deploy/: Prometheus config and alert rules pass promtool; dashboards and rules use our names."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from telemetry_support import prometheus_binary

from rocketscope.telemetry.catalogue import CATALOGUE, Kind
from rocketscope.telemetry.exporter.legacy import LEGACY_DOC

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
METRIC_RE = re.compile(r"\b(?:rocketmq|rocketscope|dledger)_[a-zA-Z0-9_]+")


def known_series() -> set[str]:
    names = {"up"}
    for inst in CATALOGUE:
        names.add(inst.prometheus_name)
        if inst.kind is Kind.HISTOGRAM:
            names |= {inst.prometheus_name + s for s in ("_bucket", "_count", "_sum")}
    names |= {name for name, _, _ in LEGACY_DOC}
    return names


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([prometheus_binary("promtool"), *args], capture_output=True, text=True,
                            cwd=DEPLOY / "prometheus", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.e2e
def test_promtool_checks_config_and_rules() -> None:
    promtool("check", "config", "prometheus.yml")
    assert "SUCCESS" in promtool("check", "rules", "alerts.yml").stdout


@pytest.mark.e2e
def test_alert_rules_behave_as_their_unit_tests_say() -> None:
    promtool("test", "rules", "alerts_test.yml")


def test_every_alert_rule_has_promtool_cases_that_fire_and_that_do_not() -> None:
    """alerts_test.yml covers each rule's threshold: for every alert one evaluation expects it to fire and
    one (below the threshold or before its `for`) expects nothing."""
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    tests = yaml.safe_load((DEPLOY / "prometheus" / "alerts_test.yml").read_text())["tests"]
    fires = {c["alertname"] for t in tests for c in t.get("alert_rule_test", []) if c["exp_alerts"]}
    silent = {c["alertname"] for t in tests for c in t.get("alert_rule_test", []) if not c["exp_alerts"]}
    assert names <= fires, names - fires
    assert names <= silent, names - silent


def test_alerts_cover_the_operational_cases_with_our_names() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    exprs = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    for wanted in ("RocketScopeNoDLedgerLeader", "RocketScopeNoMaster", "RocketScopeReplicationLagHigh",
                   "RocketScopeSyncStateSetShrunk", "RocketScopeConsumerLagGrowing", "RocketScopeDLQGrowing",
                   "RocketScopeDiskUsageHigh", "RocketScopeTraceRecordsDropped"):
        assert wanted in exprs
    used = {m for expr in exprs.values() for m in METRIC_RE.findall(expr)}
    assert used <= known_series(), used - known_series()


@pytest.mark.parametrize("name", ["cluster", "ha", "consumers"])
def test_grafana_dashboards_query_only_catalogue_series(name: str) -> None:
    board = json.loads((DEPLOY / "grafana" / f"rocketscope-{name}.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert exprs and board["uid"] == f"rocketscope-{name}"
    used = {m for e in exprs for m in METRIC_RE.findall(e)}
    assert used and used <= known_series(), used - known_series()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_otel_collector_pipeline_references_defined_components() -> None:
    config = yaml.safe_load((DEPLOY / "otel-collector" / "config.yaml").read_text())
    pipeline = config["service"]["pipelines"]["metrics"]
    for section in ("receivers", "processors", "exporters"):
        assert set(pipeline[section]) <= set(config[section]), section
    assert config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(":4317")
