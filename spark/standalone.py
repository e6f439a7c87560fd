"""A standalone Spark cluster on this machine: one master and N workers started with ``spark-class``.

For the scale-out figures (bench/spark_bench.py ``--cluster-workers``) and for anyone who
wants the jobs on a real cluster without installing Spark beyond pyspark: the daemons
come from the pyspark installation, bind loopback, and are stopped (process group) when
the context exits.  Ports are read back from the master's own log, since Spark moves to
the next port when the one asked for is taken (tests/test_spark_cluster.py does the same
for the same reason).
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 300.0
"""A daemon JVM starts in seconds on a quiet machine; the limit is for a loaded one."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class Cluster:
    url: str
    web_port: int
    workers: int
    cores: int

    def status(self) -> dict:
        """The master's JSON status; ``{}`` while it cannot answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json", timeout=10) as resp:
                data = json.loads(resp.read())
        except Exception:  # a starting or busy master: "not yet"
            return {}
        return data if isinstance(data, dict) else {}


def _from_log(log: Path, pattern: str) -> str | None:
    try:
        found = re.search(pattern, log.read_text(errors="replace"))
    except OSError:
        return None
    return found.group(1) if found else None


def _wait(what: str, check, procs: list[subprocess.Popen], logs: Path, timeout: float = START_TIMEOUT_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(
                    f"a Spark daemon exited with {p.returncode} while waiting for {what}; logs in {logs}")
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}; logs in {logs}")
        time.sleep(0.25)


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def standalone_cluster(workdir: Path, workers: int = 1, cores_per_worker: int = 1, worker_memory: str = "2g",
                       java_opts: str = "") -> Iterator[Cluster]:
    """A master and ``workers`` workers on loopback, each offering ``cores_per_worker`` cores."""
    from rocketscope.ports import free_port

    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", SPARK_MASTER_HOST="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_DAEMON_MEMORY="256m",
               SPARK_LOG_DIR=str(workdir / "logs"), SPARK_WORKER_DIR=str(workdir / "work"),
               SPARK_CONF_DIR=str(workdir / "conf"))
    if java_opts:
        env["SPARK_DAEMON_JAVA_OPTS"] = java_opts
    (workdir / "conf").mkdir(exist_ok=True)
    spark_class = str(spark_home() / "bin" / "spark-class")
    procs: list[subprocess.Popen] = []
    try:
        master_log = workdir / "master.log"
        with open(master_log, "wb") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(free_port()), "--webui-port", str(free_port())],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        url = _wait("the master's RPC endpoint",
                    lambda: _from_log(master_log, r"Starting Spark master at (spark://\S+)"), procs, workdir)
        web = int(_wait("the master's web UI", lambda: _from_log(
            master_log, r"Successfully started service 'MasterUI' on port (\d+)"), procs, workdir))
        cluster = Cluster(url, web, workers, workers * cores_per_worker)
        _wait("the master to report ALIVE", lambda: cluster.status().get("status") == "ALIVE", procs, workdir)
        for i in range(workers):
            with open(workdir / f"worker-{i}.log", "wb") as log:
                procs.append(subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(cores_per_worker),
                     "--memory", worker_memory, "--work-dir", str(workdir / "work" / str(i)), url],
                    env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait(f"{workers} worker(s) to register", lambda: cluster.status().get("aliveworkers", 0) >= workers
              and cluster.status().get("cores", 0) >= cluster.cores, procs, workdir)
        yield cluster
    finally:
        for proc in reversed(procs):
            _stop(proc)
