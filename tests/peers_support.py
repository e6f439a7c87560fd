"""The Apache RocketMQ reference cluster (peers/reference_cluster.py) and Apache's clients, for tests.

The peers come from `make peers` (part of `make test`).  When they are missing, a test fails
under CI or as root (where `make test` would have installed them) and skips otherwise, with a
message naming `make peers` (the rule of tests/telemetry_support.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import missing_install

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "peers"))
import reference_cluster as rc  # noqa: E402
import remoting  # noqa: E402,F401  (re-exported for the tests)

ReferenceCluster = rc.ReferenceCluster

PROXY_TEST_CONF = rc.TEST_PROXY_CONF
BROKER_TEST_CONF = rc.TEST_BROKER_CONF

# A cold start of three JVMs took 2-4 minutes on a 2-core machine under a load average of 10-20
START_TIMEOUT = 600.0


def require_peers() -> None:
    why = rc.missing()
    if why is None:
        return
    missing_install(why)


def reference_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCluster]:
    """Body of the session fixture ``apache_rocketmq`` (tests/conftest.py): start, yield, stop.

    With ROCKETSCOPE_APACHE_DIR set, the tests use the cluster that ``reference_cluster.py start
    --dir $ROCKETSCOPE_APACHE_DIR`` left running (and leave it running): a JVM start costs minutes
    on a loaded machine, so a developer starts it once.  That cluster must have PROXY_TEST_CONF and
    BROKER_TEST_CONF (``--test-conf``)."""
    require_peers()
    attached = os.environ.get("ROCKETSCOPE_APACHE_DIR")
    if attached:
        yield ReferenceCluster.attach(Path(attached))
        return
    yield from _throwaway(ReferenceCluster(tmp_path_factory.mktemp("apache-rocketmq"),
                                           proxy_conf=dict(PROXY_TEST_CONF), broker_conf=dict(BROKER_TEST_CONF)))


def _throwaway(cluster: ReferenceCluster) -> Iterator[ReferenceCluster]:
    """Start ``cluster`` (its logs printed if it fails to), yield it, stop it without graceful JVM shutdowns
    (no 27 s of them for a cluster the session throws away)."""
    try:
        cluster.start(timeout=START_TIMEOUT)
    except BaseException:
        print(cluster.logs())
        raise
    try:
        yield cluster
    finally:
        cluster.stop(graceful=False)


# The second reference: priority messages (Apache 5.4) and Lite mode (5.5); tests/test_diff_priority.py
VERSION_55 = "5.5.0"
# Lite mode needs these (both false by default: a lite consumer then gets nothing; docs/COMPATIBILITY.md P9)
LITE_BROKER_CONF = {"enableLmq": "true", "enableMultiDispatch": "true"}


def reference_cluster_55(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCluster]:
    """Like :func:`reference_cluster`, for Apache RocketMQ 5.5.0 (``ROCKETSCOPE_APACHE55_DIR``: a cluster that
    ``reference_cluster.py start --version 5.5.0 --test-conf --broker-conf enableLmq=true --broker-conf
    enableMultiDispatch=true --dir DIR`` left running)."""
    why = rc.missing(VERSION_55)
    if why is not None:
        missing_install(why)
    attached = os.environ.get("ROCKETSCOPE_APACHE55_DIR")
    if attached:
        cluster = ReferenceCluster.attach(Path(attached))
        assert cluster.version == VERSION_55, f"{attached} runs Apache RocketMQ {cluster.version}"
        yield cluster
        return
    yield from _throwaway(ReferenceCluster(tmp_path_factory.mktemp("apache-rocketmq-55"),
                                           proxy_conf=dict(PROXY_TEST_CONF),
                                           broker_conf={**BROKER_TEST_CONF, **LITE_BROKER_CONF}, version=VERSION_55))


def java_tool(tool: str, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Run peers/java/src/<tool>.java (RemotingTool: Apache's remoting client with trace;
    GrpcTool: Apache's gRPC Java client) as built by `make peers`."""
    lib = rc.LIB if tool == "RemotingTool" else rc.GRPC_CLIENT_LIB
    classes = rc.CLASSES / ("remoting" if tool == "RemotingTool" else "grpc")
    cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *rc.JDK17_OPENS,
           f"-Duser.home={rc.CACHE / 'home'}", "-Drmq.logback.configurationFile=rmq.client.logback.xml",
           "-Drocketmq.log.level=WARN", "-cp", f"{classes}:{lib}/*", tool, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
