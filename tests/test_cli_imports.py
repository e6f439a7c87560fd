"""`rocketscope --help` and each process command's ``--help`` load the CLI and nothing of what the commands run.

Why (issue 17 point 5): every ``rocketscope`` call pays its imports before it does anything, and the tests
and scripts make hundreds of them.  ``import rocketscope.cli`` once took about 1 s, half of it importing
Spark; the commands' modules are now imported only when a command runs (rocketscope/lazy_group.py and
the imports inside each command in rocketscope/cli.py), and ``rocketscope --help`` takes a few tens of ms.
A new top-level import in the CLI of the broker, gRPC, the OpenTelemetry SDK or an analytics package
would bring the cost back without failing anything else: this test runs the real console script with
``-X importtime`` (``PYTHONPROFILEIMPORTTIME``), which logs every module the process imports, and asserts
on those modules, not on time (docs/BENCHMARKS.md has the measured wall and CPU times).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from cluster import BIN

pytestmark = pytest.mark.e2e

# what no --help may load: the broker and its protocols, the telemetry pipeline, the analytics stack
HEAVY = ("grpc", "google.protobuf", "rocketmq", "rocketscope.broker", "rocketscope.telemetry", "rocketscope.trace",
         "rocketscope.spark", "rocketscope.dashboards", "opentelemetry", "prometheus_client", "cryptography", "yaml",
         "pyspark", "pandas", "pyarrow", "numpy", "streamlit", "altair", "elasticsearch", "duckdb")
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", re.M)


def heavy_imports(args: list[str]) -> tuple[list[str], set[str]]:
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    res = subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    modules = set(IMPORT_LINE.findall(res.stderr))
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)), modules


@pytest.mark.parametrize("args", [["--help"], ["namesrv", "--help"], ["broker", "--help"], ["controller", "--help"],
                                  ["container", "--help"]], ids=" ".join)
def test_help_loads_no_command_module(args: list[str]) -> None:
    heavy, modules = heavy_imports(args)
    assert "click" in modules, "no -X importtime output"  # the probe itself works
    assert heavy == [], f"rocketscope {' '.join(args)} imported what only the commands use"


def test_the_probe_sees_a_command_module() -> None:
    """The check itself: running a lazy command's --help imports its module, and the probe reports it."""
    heavy, _ = heavy_imports(["exporter", "--help"])
    assert any(m.startswith("rocketscope.telemetry") for m in heavy), heavy
