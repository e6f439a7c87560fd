"""A broker-only install works: the core commands run without the analytics, dashboard and es extras.

The packages of those extras (PySpark, pandas, pyarrow, Streamlit, Altair, Elasticsearch,
DuckDB) are made unimportable in the child processes by a ``sitecustomize`` module on
PYTHONPATH, which is what a host that ran ``pip install rocketscope`` without extras looks
like to Python. A real name server and broker then serve the official client.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster import BIN, LocalCluster
from conftest import free_port
from rmq import message, producer, simple_consumer

pytestmark = pytest.mark.e2e

EXTRA_PACKAGES = ("pyspark", "pandas", "pyarrow", "streamlit", "altair", "elasticsearch", "duckdb")

BLOCKER = f'''
import importlib.machinery, sys

class _WithoutExtras(importlib.machinery.PathFinder):
    """The path finder, blind to the optional extras' packages: absent, as on a broker-only install."""
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in {EXTRA_PACKAGES!r}:
            return None
        return super().find_spec(name, path, target)

sys.meta_path[:] = [_WithoutExtras if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
'''


@pytest.fixture
def broker_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=60)


def test_the_blocker_really_blocks(broker_only: Path) -> None:
    res = subprocess.run([sys.executable, "-c", "import pyspark"], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "No module named 'pyspark'" in res.stderr


def test_core_commands_need_no_extras_and_optional_ones_name_their_extra(broker_only: Path) -> None:
    for args in (["--help"], ["namesrv", "--help"], ["broker", "--help"], ["controller", "--help"],
                 ["container", "--help"], ["admin", "--help"], ["exporter", "--help"]):
        res = _run(*args)
        assert res.returncode == 0, f"rocketscope {' '.join(args)}: {res.stderr}"
    res = _run("analyze", "--help")
    assert res.returncode != 0 and "pip install 'rocketscope[analytics]'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    res = _run("dashboard", "--port", str(free_port()))
    assert res.returncode != 0 and "pip install 'rocketscope[dashboard]'" in res.stderr, res.stderr


def test_a_broker_only_install_serves_the_official_client(broker_only: Path, tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    try:
        cluster.start_namesrv()
        node = cluster.start_broker("broker-only", metricsExporterType="PROM", metricsPromExporterPort=free_port())
        topic, group = "BrokerOnlyTopic", "BrokerOnlyGroup"
        cluster.admin("updateTopic", "-c", "DefaultCluster", "-t", topic)
        sent: set[str] = set()
        with producer(node.endpoint, topic) as p:
            for i in range(5):
                sent.add(str(p.send(message(topic, f"m{i}".encode())).message_id))
        received: set[str] = set()
        with simple_consumer(node.endpoint, group, topic) as c:
            deadline = time.monotonic() + 60
            while received != sent and time.monotonic() < deadline:
                for m in c.receive(16, 15):
                    received.add(str(m.message_id))
                    c.ack(m)
        assert received == sent, cluster.logs()
    finally:
        cluster.stop()
