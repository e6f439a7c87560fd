"""Broker-side trace end to end: an uninstrumented official client, two consumer groups, one redelivery.

Assumes the broker constructs ``BrokerTracer`` when ``brokerTraceEnable=true`` (lead's wiring).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from cluster import LocalCluster, wait_until
from rmq import drain, message, producer, simple_consumer

from rocketscope.trace.cli import query_msg_trace_by_id
from rocketscope.trace.lookup import TraceLookup, TraceLookupError

pytestmark = pytest.mark.e2e
TOPIC = "TopicTraced"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("trace"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a", traceTopicEnable="true", brokerTraceEnable="true")
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "4", "-w", "4")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def _lookup(c: LocalCluster, msg_id: str):
    try:
        return asyncio.run(TraceLookup(c.namesrv_addr).lookup(msg_id))
    except TraceLookupError:
        return None


def test_pub_and_two_groups_with_a_retry(cluster: LocalCluster) -> None:
    ep = cluster.brokers["broker-a"].endpoint
    with producer(ep, TOPIC) as p:
        ids = [p.send(message(TOPIC, f"m-{i}".encode(), tag="T", keys=[f"k-{i}"])).message_id for i in range(20)]
    target = ids[0]

    with simple_consumer(ep, "GroupTraceA", TOPIC) as ca:
        got: list = []
        skipped = False
        deadline = time.monotonic() + 40
        while (len({m.message_id for m in got}) < 20 or not skipped) and time.monotonic() < deadline:
            for m in ca.receive(32, 1):
                if m.message_id == target and not skipped:
                    skipped = True  # never acked: the invisible time (1 s) passes and it comes back
                    continue
                got.append(m)
                ca.ack(m)
        assert {m.message_id for m in got} == set(ids)
    with simple_consumer(ep, "GroupTraceB", TOPIC) as cb:
        assert {m.message_id for m in drain(cb, 20, timeout=30)} == set(ids)

    def complete():
        tl = _lookup(cluster, target)
        if tl is None or tl.producer is None:
            return None
        groups = {g.group: g for g in tl.groups}
        if "GroupTraceA" not in groups or "GroupTraceB" not in groups:
            return None
        return tl if len(groups["GroupTraceA"].deliveries) >= 2 else None

    tl = wait_until(complete, timeout=20, what="trace timeline with both groups")
    assert tl.topic == TOPIC
    groups = {g.group: g for g in tl.groups}
    a = groups["GroupTraceA"].deliveries
    assert any(d.retry_times == 1 for d in a)
    assert len(groups["GroupTraceB"].deliveries) >= 1

    runner = CliRunner()
    res = runner.invoke(query_msg_trace_by_id, ["-n", cluster.namesrv_addr, "-i", target])
    assert res.exit_code == 0, res.output
    assert "Pub" in res.output and "GroupTraceA" in res.output and "GroupTraceB" in res.output
    res = runner.invoke(query_msg_trace_by_id, ["-n", cluster.namesrv_addr, "-i", target, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["msg_id"] == target

    res = runner.invoke(query_msg_trace_by_id, ["-n", cluster.namesrv_addr, "-i", "00" * 16])
    assert res.exit_code != 0
