"""A default name server, broker, controller and admin CLI do not import what only optional features use.

Why: every end-to-end test starts several of these processes, and each paid ~0.3 CPU s (broker) at start
importing the OpenTelemetry SDK and exporters, prometheus_client, cryptography and PyYAML it never used
with the default ``metricsExporterType=DISABLE``, TLS off and no ACL file (telemetry/core.py,
rocketscope/tls.py, broker/security/acl.py import them on first use), and every ``rocketscope admin`` call
imported the official client's package ``__init__`` (rocketscope/cli.py defers it as the servers do).
A new top-level import of one of them would silently bring the cost back; this test runs the real
processes with ``-X importtime`` (``PYTHONPROFILEIMPORTTIME``), which logs every module a process
imports, at start or later, and reads their logs after a message went through the broker.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import BIN, LocalCluster, Proc, cluster_with_namesrv, stop_together, wait_until
from conftest import failed_call, free_port
from rmq import drain, message, producer, simple_consumer

pytestmark = pytest.mark.e2e

# top-level packages (or module prefixes) a server with default settings must not load
OPTIONAL = ("opentelemetry.sdk", "opentelemetry.exporter", "prometheus_client", "cryptography", "yaml",
            "rocketscope.telemetry.core", "rocketscope.telemetry.exporter.server", "wsgiref", "pyspark",
            "streamlit", "rocketmq.v5")
# and what only some of the processes use: the Raft core (controllers, DLedger brokers)
RAFT = ("rocketscope.broker.dledger", "rocketscope.broker.raft")
OPTIONAL_FOR = {"namesrv": RAFT, "broker": RAFT, "controller": (), "admin CLI": RAFT}
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", re.M)


def imported(log: str) -> set[str]:
    return set(IMPORT_LINE.findall(log))


def optional_in(modules: set[str], extra: tuple[str, ...] = ()) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in OPTIONAL + extra))


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # Proc.start copies the environment
    with cluster_with_namesrv(tmp_path, lambda: failed_call(request)) as c:
        yield c


def test_default_servers_import_no_optional_package(cluster: LocalCluster, tmp_path: Path) -> None:
    raft_port, client_port = free_port(), free_port()
    conf = tmp_path / "controller.conf"
    conf.write_text(f"controllerDLegerGroup=g\ncontrollerDLegerPeers=n0-127.0.0.1:{raft_port}\n"
                    f"controllerDLegerSelfId=n0\ncontrollerStorePath={tmp_path / 'ctl'}\nlistenPort={client_port}\n")
    controller = Proc("controller", [str(BIN), "controller", "-c", str(conf)], tmp_path / "controller.log").start()
    try:
        node = cluster.start_broker()
        admin = cluster.admin("updateTopic", "-t", "LazyT", "-c", "DefaultCluster")
        with producer(node.endpoint, "LazyT") as p:
            sent = {p.send(message("LazyT", b"x")).message_id for _ in range(3)}
        with simple_consumer(node.endpoint, "LazyG", "LazyT") as c:
            assert {m.message_id for m in drain(c, len(sent))} == sent
        wait_until(lambda: "serving brokers" in controller.log(), what="controller serving")
        logs = {"namesrv": cluster.namesrvs[0].log(), "broker": node.proc.log(), "controller": controller.log(),
                "admin CLI": admin.stderr}
    finally:
        stop_together([controller])
    for name, log in logs.items():
        modules = imported(log)
        assert "grpc" in modules, f"{name}: no -X importtime output in its log"  # the probe itself works
        assert optional_in(modules, OPTIONAL_FOR[name]) == [], f"a default {name} imported optional packages"
