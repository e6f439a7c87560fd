"""spark-submit of the job against a real standalone master and worker on loopback.

The master and the worker are started from the pyspark installation (spark-class), with
small memory and the serial GC, on free loopback ports; the test waits on the master's
JSON status for the worker, runs spark-submit with ``spark/submit_main.py`` and checks
the output against the reference.  Both daemons are stopped (process group) afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketscope.spark.generate import GenConfig, generate
from rocketscope.spark.reference import Reference, read_rows

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(_spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_MASTER_HOST="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS=JAVA_OPTS,
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_WORKER_DIR=str(tmp / "work"),
        SPARK_CONF_DIR=str(tmp / "conf"),
    )
    (tmp / "conf").mkdir(exist_ok=True)
    return env


def _wait(what: str, check: Callable[[], bool], timeout: float, procs: list[subprocess.Popen]) -> None:
    """Poll ``check`` until it holds; fail early if a daemon died, say what never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"a Spark daemon exited with {p.returncode} while waiting for {what}")
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _master_status(port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as resp:
            return json.loads(resp.read())
    except OSError:
        return {}


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture()
def standalone(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], int]]:
    env = _env(tmp_path)
    spark_class = str(_spark_home() / "bin" / "spark-class")
    port, web = free_port(), free_port()
    procs: list[subprocess.Popen] = []
    try:
        with open(tmp_path / "master.log", "wb") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(web)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait("the master's status page", lambda: bool(_master_status(web)), 90, procs)
        with open(tmp_path / "worker.log", "wb") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port",
                 str(free_port()), "--webui-port", str(free_port()), "--cores", "2", "--memory", "1g",
                 "--work-dir", str(tmp_path / "work"), f"spark://127.0.0.1:{port}"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait("the worker to register", lambda: _master_status(web).get("aliveworkers", 0) >= 1, 90, procs)
        yield f"spark://127.0.0.1:{port}", env, web
    finally:
        for proc in reversed(procs):
            _stop(proc)


def test_spark_submit_against_standalone_cluster(standalone, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    master, env, web = standalone
    data, out = tmp_path / "data", tmp_path / "out"
    generate(data, GenConfig(messages=600, seed=21, chunk=600), progress=False)
    cmd = [
        str(_spark_home() / "bin" / "spark-submit"), "--master", master,
        "--driver-memory", "512m", "--executor-memory", "512m", "--total-executor-cores", "2",
        "--conf", f"spark.driver.extraJavaOptions={JAVA_OPTS}",
        "--conf", f"spark.executor.extraJavaOptions={JAVA_OPTS}",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.sql.session.timeZone=UTC",
        str(REPO / "spark" / "submit_main.py"), "replication-latency",
        "--input", str(data / "trace"), "--input", str(data / "ha"), "--output", str(out),
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "replication_latency" in json.loads(result.stdout.strip().splitlines()[-1])["seconds"]
    # It really ran on the cluster: the master lists the application as completed.
    assert [app["name"] for app in _master_status(web).get("completedapps", [])] == ["rocketscope-analyze"]

    import pyarrow.parquet as pq

    table = pq.read_table(out / "replication_latency")
    ref = Reference.from_rows(read_rows([data / "trace", data / "ha"])).replication_latency()
    assert table.num_rows == len(ref)
    assert sum(table.column("messages").to_pylist()) == sum(v["messages"] for v in ref.values())
    assert sum(table.column("samples").to_pylist()) == sum(v["samples"] for v in ref.values())
