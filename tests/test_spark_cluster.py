"""spark-submit of the job against a real standalone master and worker on loopback.

The master and the worker are started from the pyspark installation (spark-class), with
small memory and the serial GC, on free loopback ports; the test waits on the master's
JSON status for the worker, runs spark-submit with ``spark/submit_main.py`` and checks
the output against the reference.  Both daemons are stopped (process group) afterwards.

Start-up is waited for on conditions, with generous limits, because it once failed in a
clean-clone CI run on a loaded machine: JVM start-up there takes tens of seconds, and a
port picked as free can be taken by another test before the daemon binds it, in which
case Spark quietly binds the next port.  So the master's RPC URL and web UI port are
read from its own log ("Starting Spark master at ...", "Successfully started service
'MasterUI' on port ..."), not assumed; a status page answering with a half-written or
non-JSON body counts as "not yet"; and a daemon that exits while we wait fails at once
with its log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketscope.spark.generate import GenConfig, generate
from rocketscope.spark.reference import Reference, read_rows

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 300.0
"""Per start-up step.  A daemon JVM starts in seconds on a quiet machine; the limit is for a loaded one."""
SUBMIT_TIMEOUT_S = 900.0


def free_port() -> int:
    """Below the ephemeral range and never handed out twice in this run (rocketscope.ports): a port
    from the kernel's port 0 can be handed to an outgoing connection before the daemon binds it."""
    from rocketscope.ports import free_port as pick

    return pick()


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


def _logs(tmp: Path) -> str:
    return "\n".join(f"----- {p.name} -----\n{p.read_text(errors='replace')[-4000:]}"
                     for p in sorted(tmp.glob("*.log")))


def _wait(what: str, check: Callable[[], Any], timeout: float, procs: list[subprocess.Popen], tmp: Path) -> Any:
    """Poll ``check`` until it returns something true (returned); fail early, with the daemons'
    logs, if a daemon died, and say what never happened on a timeout."""
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"a Spark daemon exited with {p.returncode} while waiting for {what}\n"
                                     f"{_logs(tmp)}")
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{_logs(tmp)}")
        time.sleep(0.25)


def _from_log(log: Path, pattern: str) -> str | None:
    """The first group of ``pattern`` in the daemon's log, once it has been written."""
    try:
        found = re.search(pattern, log.read_text(errors="replace"))
    except OSError:
        return None
    return found.group(1) if found else None


def _master_status(port: int) -> dict:
    """The master's JSON status; ``{}`` while it cannot answer yet (refused, slow, half-written, not JSON)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10) as resp:
            data = json.loads(resp.read())
    except Exception:  # any failure of a starting server means "not yet"
        return {}
    return data if isinstance(data, dict) else {}


def _stop(proc: subprocess.Popen) -> None:
    """Stop a daemon's process group (spark-class forks the JVM), never failing the teardown."""
    for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture()
def standalone(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], int]]:
    env = _env(tmp_path)
    spark_class = str(_spark_home() / "bin" / "spark-class")
    port, web_port = free_port(), free_port()
    procs: list[subprocess.Popen] = []
    try:
        with open(tmp_path / "master.log", "wb") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(web_port)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        master_log = tmp_path / "master.log"
        # The ports the master really bound (it moves to the next one if ours was taken meanwhile).
        url = _wait("the master's RPC endpoint", lambda: _from_log(master_log, r"Starting Spark master at (spark://\S+)"),
                    START_TIMEOUT_S, procs, tmp_path)
        web = int(_wait("the master's web UI",
                        lambda: _from_log(master_log, r"Successfully started service 'MasterUI' on port (\d+)"),
                        START_TIMEOUT_S, procs, tmp_path))
        _wait("the master's status page to report ALIVE",
              lambda: _master_status(web).get("status") == "ALIVE", START_TIMEOUT_S, procs, tmp_path)
        with open(tmp_path / "worker.log", "wb") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port",
                 str(free_port()), "--webui-port", str(free_port()), "--cores", "2", "--memory", "1g",
                 "--work-dir", str(tmp_path / "work"), url],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait("the worker to register with 2 free cores",
              lambda: _master_status(web).get("aliveworkers", 0) >= 1 and _master_status(web).get("cores", 0) >= 2,
              START_TIMEOUT_S, procs, tmp_path)
        yield url, env, web
    finally:
        for proc in reversed(procs):
            _stop(proc)


@pytest.mark.long  # ~100 s (a master, a worker and spark-submit); bench/spark_bench.py --cluster-workers 1,2 runs the
# same jobs on one and two workers; the jobs themselves stay in make test in local mode (tests/test_spark_jobs.py)
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
        "--conf", "spark.sql.session.timeZone=UTC", *_jars(),
        str(REPO / "spark" / "submit_main.py"), "replication-latency",
        "--input", str(data / "trace"), "--input", str(data / "ha"), "--output", str(out),
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert "replication_latency" in summary["seconds"]
    assert summary["decoder"] == "jvm", result.stderr[-4000:]  # the jar reached the driver through --jars
    # It really ran on the cluster: the master lists the application as completed (it learns that
    # the driver went away asynchronously, so wait for it rather than read the status once).
    _wait("the master to list the application as completed",
          lambda: _master_status(web).get("completedapps"), START_TIMEOUT_S, [], tmp_path)
    assert [app["name"] for app in _master_status(web).get("completedapps", [])] == ["rocketscope-analyze"]

    import pyarrow.parquet as pq

    table = pq.read_table(out / "replication_latency")
    ref = Reference.from_rows(read_rows([data / "trace", data / "ha"])).replication_latency()
    assert table.num_rows == len(ref)
    assert sum(table.column("messages").to_pylist()) == sum(v["messages"] for v in ref.values())
    assert sum(table.column("samples").to_pylist()) == sum(v["samples"] for v in ref.values())


def _jars() -> list[str]:
    """``--jars`` with the JVM trace decoder (built by make): spark-submit starts the driver JVM before the
    session exists, so the session's own spark.jars would reach the executors but not the driver.  The same
    jar's cache serializer goes with it (deploy/spark/README.md), so the cached tables travel between the
    driver and an executor JVM as its row batches."""
    from rocketscope.spark.session import cache_conf, decoder_jar

    jar = decoder_jar()
    assert jar is not None, "build/spark-jvm/rocketscope-spark.jar is missing: run make"
    return ["--jars", str(jar), *[arg for key, value in cache_conf().items() for arg in ("--conf", f"{key}={value}")]]


def _submit_cmd(master: str, *args: str) -> list[str]:
    return [
        str(_spark_home() / "bin" / "spark-submit"), "--master", master,
        "--driver-memory", "512m", "--executor-memory", "512m", "--total-executor-cores", "2",
        "--conf", f"spark.driver.extraJavaOptions={JAVA_OPTS}",
        "--conf", f"spark.executor.extraJavaOptions={JAVA_OPTS}",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.sql.session.timeZone=UTC", *_jars(),
        str(REPO / "spark" / "submit_main.py"), *args,
    ]


@pytest.mark.long  # ~55 s; the live source is covered in make test by test_truth_consumers_failover (local mode)
def test_spark_submit_reads_a_live_broker_with_namesrv(standalone, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``submit_main.py ... --namesrv``: the executors of a real standalone cluster pull the trace
    topic and RMQ_SYS_HA_EVENTS of a live broker (broker-side trace on) through the data source."""
    import pyarrow.parquet as pq
    from cluster import LocalCluster, wait_until
    from rmq import drain, message, producer, simple_consumer

    from rocketscope import topic_reader

    master, env, web = standalone
    (tmp_path / "rmq").mkdir()
    c = LocalCluster(tmp_path / "rmq")
    try:
        c.start_namesrv()
        node = c.start_broker("broker-s", traceTopicEnable="true", brokerTraceEnable="true")
        c.admin("updateTopic", "-b", node.admin_addr, "-t", "TopicSubmit", "-r", "2", "-w", "2")
        with producer(node.endpoint, "TopicSubmit") as p:
            ids = {p.send(message("TopicSubmit", f"s-{i}".encode())).message_id for i in range(4)}
        with simple_consumer(node.endpoint, "GroupSubmit", "TopicSubmit") as consumer:
            assert {m.message_id for m in drain(consumer, 4, timeout=60)} >= ids

        def sub_after_records() -> int:
            """SubAfter records on the trace topic (broker-side trace is written asynchronously)."""
            n = 0
            for q in topic_reader.discover_queues(c.namesrv_addr, ["RMQ_SYS_TRACE_TOPIC"]):
                lo, hi = topic_reader.queue_bounds(q)
                n += sum(bytes(m.body).count(b"SubAfter") for m in topic_reader.pull_messages(q, lo, hi))
            return n

        wait_until(lambda: sub_after_records() >= 4, timeout=120, interval=1, what="SubAfter records of 4 messages")
        out = tmp_path / "out"
        result = subprocess.run(_submit_cmd(master, "e2e-latency", "--namesrv", c.namesrv_addr, "--output", str(out)),
                                env=env, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S)
        assert result.returncode == 0, result.stderr[-4000:]
        _wait("the master to list the application as completed",
              lambda: _master_status(web).get("completedapps"), START_TIMEOUT_S, [], tmp_path)
        assert [app["name"] for app in _master_status(web).get("completedapps", [])] == ["rocketscope-analyze"]
        rows = [r for r in pq.read_table(out / "e2e_latency").to_pylist()
                if (r["topic"], r["group"]) == ("TopicSubmit", "GroupSubmit")]
        assert sum(r["messages"] for r in rows) == 4 and sum(r["samples"] for r in rows) == 4, rows
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()
