"""spark-submit of the job against a real standalone master and worker on loopback.

The cluster comes from rocketscope.spark.standalone (the daemons of the pyspark installation,
small memory and the serial GC, ports read back from the master's log, start-up waited for on
conditions; it once failed in a clean-clone CI run on a loaded machine, so the limits are
generous and a failure carries the daemons' logs).  The test runs spark-submit with
``spark/submit_main.py``, waits for the master to list the application as completed, and checks
the output against the reference.  The daemons are stopped (process group) afterwards.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import wait_until

from rocketscope.spark.generate import GenConfig, generate
from rocketscope.spark.reference import Reference, read_rows
from rocketscope.spark.standalone import START_TIMEOUT_S, Cluster, spark_home, standalone_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
REPO = Path(__file__).resolve().parent.parent
SUBMIT_TIMEOUT_S = 900.0


@pytest.fixture()
def standalone(tmp_path: Path) -> Iterator[Cluster]:
    with standalone_cluster(tmp_path / "spark", workers=1, cores_per_worker=2, worker_memory="1g",
                            java_opts=JAVA_OPTS) as cluster:
        yield cluster


def _submit_cmd(master: str, *args: str) -> list[str]:
    return [
        str(spark_home() / "bin" / "spark-submit"), "--master", master,
        "--driver-memory", "512m", "--executor-memory", "512m", "--total-executor-cores", "2",
        "--conf", f"spark.driver.extraJavaOptions={JAVA_OPTS}",
        "--conf", f"spark.executor.extraJavaOptions={JAVA_OPTS}",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.sql.session.timeZone=UTC",
        str(REPO / "spark" / "submit_main.py"), *args,
    ]


def _completed_apps(cluster: Cluster) -> list[str]:
    """The master learns that a driver went away asynchronously: wait for it rather than read once."""
    wait_until(lambda: cluster.status().get("completedapps"), timeout=START_TIMEOUT_S, interval=0.25,
               what="the master to list the application as completed")
    return [app["name"] for app in cluster.status().get("completedapps", [])]


def test_spark_submit_against_standalone_cluster(standalone: Cluster, tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    generate(data, GenConfig(messages=600, seed=21, chunk=600), progress=False)
    cmd = _submit_cmd(standalone.url, "replication-latency", "--input", str(data / "trace"), "--input",
                      str(data / "ha"), "--output", str(out))
    result = subprocess.run(cmd, env=standalone.env, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "replication_latency" in json.loads(result.stdout.strip().splitlines()[-1])["seconds"]
    # it really ran on the cluster
    assert _completed_apps(standalone) == ["rocketscope-analyze"]

    import pyarrow.parquet as pq

    table = pq.read_table(out / "replication_latency")
    ref = Reference.from_rows(read_rows([data / "trace", data / "ha"])).replication_latency()
    assert table.num_rows == len(ref)
    assert sum(table.column("messages").to_pylist()) == sum(v["messages"] for v in ref.values())
    assert sum(table.column("samples").to_pylist()) == sum(v["samples"] for v in ref.values())


def test_spark_submit_reads_a_live_broker_with_namesrv(standalone: Cluster, tmp_path: Path) -> None:
    """``submit_main.py ... --namesrv``: the executors of a real standalone cluster pull the trace
    topic and RMQ_SYS_HA_EVENTS of a live broker (broker-side trace on) through the data source."""
    import pyarrow.parquet as pq
    from cluster import LocalCluster, wait_until
    from rmq import drain, message, producer, simple_consumer

    from rocketscope import topic_reader

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
        result = subprocess.run(
            _submit_cmd(standalone.url, "e2e-latency", "--namesrv", c.namesrv_addr, "--output", str(out)),
            env=standalone.env, capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S)
        assert result.returncode == 0, result.stderr[-4000:]
        assert _completed_apps(standalone) == ["rocketscope-analyze"]
        rows = [r for r in pq.read_table(out / "e2e_latency").to_pylist()
                if (r["topic"], r["group"]) == ("TopicSubmit", "GroupSubmit")]
        assert sum(r["messages"] for r in rows) == 4 and sum(r["samples"] for r in rows) == 4, rows
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()
