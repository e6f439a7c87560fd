"""Remoting clients in the broker's metrics: the connection gauges and rpc latency with protocol_type=remoting.

Ground truth is what this test does over remoting: one heartbeat of one client id (as Apache's Java client
sends for all the producers and consumers of its JVM) naming a producer group, a push consumer group
(CONSUME_PASSIVELY) and a pull consumer group (CONSUME_ACTIVELY), then the connection closed. Apache's
broker counts a connection per group and labels them ``protocol_type=remoting`` and ``consume_mode``
push/pull (BrokerMetricsManager); before session 13 RocketScope labelled every connection ``grpc``, a lite
pull consumer ``pop``, and counted one client id once (its last group).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cluster import LocalCluster, cluster_with_namesrv
from conftest import failed_call, free_port
from telemetry_support import samples, scrape, wait_until

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-metrics"), lambda: failed_call(request)) as c:
        port = free_port()
        c.start_broker("broker-a", metricsExporterType="PROM", metricsPromExporterHost="127.0.0.1",
                       metricsPromExporterPort=port)
        c.prom_url = f"http://127.0.0.1:{port}/metrics"  # type: ignore[attr-defined]
        yield c


def consumer(group: str, kind: str) -> dict[str, object]:
    return {"groupName": group, "consumeType": kind, "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": "MetricsT", "subString": "*", "expressionType": "TAG", "tagsSet": [],
                                     "codeSet": [], "subVersion": 1}]}


def connections(url: str) -> dict[tuple[str, ...], float]:
    out = {}
    for name, labels, value in samples(scrape(url)):
        if name == "rocketmq_producer_connections" and labels.get("protocol_type") == "remoting":
            out[("producer", labels["language"])] = value
        elif name == "rocketmq_consumer_connections" and labels.get("protocol_type") == "remoting":
            out[("consumer", labels["consumer_group"], labels["consume_mode"], labels["language"])] = value
    return out


def test_remoting_clients_counted_with_protocol_type_remoting(cluster: LocalCluster) -> None:
    url = cluster.prom_url  # type: ignore[attr-defined]
    body = {"clientID": "metrics-client@1", "producerDataSet": [{"groupName": "MetricsPG"}],
            "consumerDataSet": [consumer("MetricsPushG", "CONSUME_PASSIVELY"),
                                consumer("MetricsPullG", "CONSUME_ACTIVELY")]}
    expected = {("producer", "python"): 1.0, ("consumer", "MetricsPushG", "push", "python"): 1.0,
                ("consumer", "MetricsPullG", "pull", "python"): 1.0}
    with RemotingClient(cluster.brokers["broker-a"].admin_addr) as b:
        assert b.invoke(RequestCode.HEART_BEAT, {}, json.dumps(body).encode()).code == ResponseCode.SUCCESS
        wait_until(lambda: connections(url) == expected, timeout=30, what=f"the gauges {expected}")
    # the connection closed: its clients leave the gauges
    wait_until(lambda: connections(url) == {}, timeout=30, what="no remoting connection in the gauges")
    latency = [labels for name, labels, _ in samples(scrape(url)) if name == "rocketmq_rpc_latency_milliseconds_count"
               and labels.get("protocol_type") == "remoting" and labels.get("request_code") == "heart_beat"]
    assert latency and latency[0]["response_code"] == "success", latency
