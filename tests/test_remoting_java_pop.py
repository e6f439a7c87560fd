"""POP over remoting with Apache's own client code: MQClientAPIImpl.popMessageAsync / ackMessageAsync (5.3.3).

peers/java/src/RemotingPopTool.java sends the requests Apache's POP consumers send and parses
the answers with Apache's ``processPopResponse`` (messages, the POP_CK extraInfo); its acks are
built from that extraInfo as ``DefaultMQPushConsumerImpl.ackAsync`` builds them.  Ground truth:
the bodies sent here (each received and acked once, then nothing left to pop).  A JVM costs
5-20 s here, so the module is ``long``: ``.venv/bin/pytest -q tests/test_remoting_java_pop.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from test_remoting_java_secure import java_classes

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "peers"))
import reference_cluster as ref  # peers/ is not a package

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long]
SOURCE = Path(__file__).resolve().parent.parent / "peers" / "java" / "src" / "RemotingPopTool.java"
TOPIC, GROUP, QUEUES, COUNT = "JavaPopT", "JavaPopG", 2, 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    java_classes(SOURCE)  # compile (or skip) before any process starts
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-java-pop"), lambda: failed_call(request)) as c:
        c.start_broker("broker-a")
        c.admin("updateTopic", "-t", TOPIC, "-r", str(QUEUES), "-w", str(QUEUES))
        yield c


def send_numbered(node_addr: str, topic: str, prefix: str, n: int) -> None:
    """``n`` bodies ``<prefix>-<i>`` sent over remoting, round-robin over the topic's queues (the ground truth)."""
    with RemotingClient(node_addr) as b:
        for i in range(n):
            fields = {"producerGroup": "JavaPopProducer", "topic": topic, "defaultTopic": "TBW102",
                      "defaultTopicQueueNums": str(QUEUES), "queueId": str(i % QUEUES), "sysFlag": "0",
                      "bornTimestamp": str(int(time.time() * 1000)), "flag": "0", "properties": ""}
            assert b.invoke(RequestCode.SEND_MESSAGE, fields, f"{prefix}-{i}".encode()).code == ResponseCode.SUCCESS


def run_tool(cluster: LocalCluster, source: Path, main: str, *args: str, timeout: float) -> list[dict]:
    """Run one of the Java drivers against the cluster; its JSON events (it must exit 0)."""
    res = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *ref.JDK17_OPENS,
                          f"-Duser.home={cluster.root}", "-Drocketmq.log.level=WARN", "-cp",
                          f"{java_classes(source)}:{ref.LIB}/*", main, *args],
                         capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def test_apache_client_pops_and_acks_over_remoting(cluster: LocalCluster) -> None:
    node = cluster.brokers["broker-a"]
    send_numbered(node.admin_addr, TOPIC, "jpop", COUNT)
    events = run_tool(cluster, SOURCE, "RemotingPopTool", node.admin_addr, "broker-a", TOPIC, GROUP, str(COUNT), "60",
                      timeout=180)
    received = [e["body"] for e in events if e["event"] == "received"]
    assert sorted(received) == [f"jpop-{i}" for i in range(COUNT)]  # each once
    assert [e["status"] for e in events if e["event"] == "acked"] == ["OK"] * COUNT
    assert all(len(e["extraInfo"].split(" ")) == 8 for e in events if e["event"] == "received")
    final = next(e for e in events if e["event"] == "final")
    assert (final["status"], final["found"]) == ("POLLING_NOT_FOUND", 0)


def test_apache_client_batch_acks_over_remoting(cluster: LocalCluster) -> None:
    """MQClientAPIImpl.batchAckMessageAsync: the messages of each pop acknowledged by one BATCH_ACK_MESSAGE
    (200151) whose BitSet names them by their distance from the pop's start offset of their queue."""
    topic, group = "JavaBatchAckT", "JavaBatchAckG"
    cluster.admin("updateTopic", "-t", topic, "-r", str(QUEUES), "-w", str(QUEUES))
    node = cluster.brokers["broker-a"]
    send_numbered(node.admin_addr, topic, "jbatch", COUNT)
    events = run_tool(cluster, SOURCE, "RemotingPopTool", node.admin_addr, "broker-a", topic, group, str(COUNT),
                      "60", "batch", timeout=180)
    received = [e["body"] for e in events if e["event"] == "received"]
    assert sorted(received) == [f"jbatch-{i}" for i in range(COUNT)]  # each once
    acked = [e for e in events if e["event"] == "acked"]
    assert [e["status"] for e in acked] == ["OK"] * COUNT and max(e["batch"] for e in acked) > 1, acked
    final = next(e for e in events if e["event"] == "final")
    assert (final["status"], final["found"]) == ("POLLING_NOT_FOUND", 0)  # nothing left: every batch ack applied


PUSH_SOURCE = Path(__file__).resolve().parent.parent / "peers" / "java" / "src" / "RemotingPopConsumerTool.java"


def test_apache_push_consumer_in_pop_mode(cluster: LocalCluster) -> None:
    """DefaultMQPushConsumer with setClientRebalance(false) and the topic@group set to POP (SET_MESSAGE_REQUEST_MODE):
    QUERY_ASSIGNMENT answers POP, so it pops, acks,
    and a RECONSUME_LATER becomes a CHANGE_MESSAGE_INVISIBLETIME after which the message comes back."""
    topic, group, n = "JavaPushPopT", "JavaPushPopG", 4
    cluster.admin("updateTopic", "-t", topic, "-r", str(QUEUES), "-w", str(QUEUES))
    node = cluster.brokers["broker-a"]
    send_numbered(node.admin_addr, topic, "jpush", n)
    with RemotingClient(node.admin_addr) as b:  # what mqadmin setConsumeMode sends; without it the consumer pulls
        mode = {"topic": topic, "consumerGroup": group, "mode": "POP", "popShareQueueNum": 0}
        assert b.invoke(401, {}, json.dumps(mode).encode()).code == ResponseCode.SUCCESS
    events = run_tool(cluster, PUSH_SOURCE, "RemotingPopConsumerTool", cluster.namesrv_addr, topic, group, str(n),
                      "90", "jpush-1", timeout=240)
    assert {e["body"] for e in events} == {f"jpush-{i}" for i in range(n)}
    retried = [e["reconsumeTimes"] for e in events if e["body"] == "jpush-1"]
    assert retried[0] == 0 and len(retried) >= 2 and retried[-1] >= 1, retried  # put back, then redelivered
    # every ack arrived: the group's committed offsets reach the end of each queue
    with RemotingClient(node.admin_addr) as b:
        def committed_all() -> bool:
            for q in range(QUEUES):
                ask = {"consumerGroup": group, "topic": topic, "queueId": str(q)}
                end = int(b.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}).fields["offset"])
                got = b.invoke(RequestCode.QUERY_CONSUMER_OFFSET, ask)
                if got.code != ResponseCode.SUCCESS or int(got.fields["offset"]) != end:
                    return False
            return True

        wait_until(committed_all, timeout=20, what="the group's offsets at the end of the queues")
