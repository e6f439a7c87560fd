"""The Apache RocketMQ reference cluster of `make peers` works: Apache's proxy serves the official
Python client, Apache's mqadmin sees the cluster, and Apache's Go client sends and consumes through
the name server (issue 18)."""

from __future__ import annotations

import subprocess
import uuid

import diff_support
import pytest
import rmq
from peers_support import json_lines, rc

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]


def test_python_client_sends_and_receives_through_apaches_proxy(apache_rocketmq: rc.ReferenceCluster) -> None:
    topic, group = f"PeersSmoke{uuid.uuid4().hex[:6]}", f"GID_peers_{uuid.uuid4().hex[:6]}"
    apache_rocketmq.create_topic(topic)
    bodies = {f"smoke-{i}".encode() for i in range(5)}
    with rmq.producer(apache_rocketmq.endpoint, topic) as p:
        sent = {p.send(rmq.message(topic, body, tag="smoke")).message_id for body in bodies}
    assert len(sent) == 5
    # await >= 5 s and a retried first receive: see diff_support.consumer and receive
    with rmq.simple_consumer(apache_rocketmq.endpoint, group, topic, await_s=diff_support.AWAIT_S) as c:
        got = diff_support.drain(c, 5, timeout=120)
    assert {m.message_id for m in got} == sent
    assert {m.body for m in got} == bodies


def test_mqadmin_lists_the_cluster_and_its_topics(apache_rocketmq: rc.ReferenceCluster) -> None:
    topic = f"PeersAdmin{uuid.uuid4().hex[:6]}"
    apache_rocketmq.create_topic(topic)
    clusters = apache_rocketmq.mqadmin("clusterList")
    line = next(row for row in clusters.splitlines() if rc.BROKER in row)
    assert rc.CLUSTER in line and apache_rocketmq.broker_addr in line
    topics = apache_rocketmq.mqadmin("topicList").split()
    assert topic in topics and "RMQ_SYS_TRACE_TOPIC" in topics  # traceTopicEnable=true


def test_go_client_sends_and_consumes_through_the_name_server(apache_rocketmq: rc.ReferenceCluster) -> None:
    """Apache's Go client (remoting) auto-creates the topic through TBW102 and reads back what it sent."""
    topic, group = f"PeersGo{uuid.uuid4().hex[:6]}", f"GID_go_{uuid.uuid4().hex[:6]}"
    ns = apache_rocketmq.namesrv_addr
    sent = subprocess.run([str(rc.RMQGO), "send", "-n", ns, "-t", topic, "-c", "4"], capture_output=True,
                          text=True, timeout=120)
    assert sent.returncode == 0, sent.stderr
    got = subprocess.run([str(rc.RMQGO), "consume", "-n", ns, "-t", topic, "-g", group, "-c", "4",
                          "-timeout", "120s"], capture_output=True, text=True, timeout=180)
    assert got.returncode == 0, got.stderr
    assert {m["msgId"] for m in json_lines(got.stdout)} == {m["msgId"] for m in json_lines(sent.stdout)}
    assert sorted(m["body"] for m in json_lines(got.stdout)) == [f"go-{i}" for i in range(4)]
