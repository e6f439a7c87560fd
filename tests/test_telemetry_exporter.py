"""Exporter mode: several nodes push OTLP (gRPC and HTTP) to one exporter, one /metrics out."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from telemetry_support import find, scrape, wait_until

from rocketscope.telemetry import Telemetry, TelemetryConfig
from rocketscope.telemetry.cli import exporter as exporter_command
from rocketscope.telemetry.exporter import ExporterConfig, ExporterServer

IN = {"topic": "orders", "message_type": "normal", "is_system": False}
LAG = {"consumer_group": "g1", "topic": "orders", "is_retry": False, "is_system": False}
RPC = {"protocol_type": "grpc", "request_code": "send_message", "response_code": "ok", "is_long_polling": False,
       "result": "success"}


@pytest.fixture
def exporter() -> Iterator[ExporterServer]:
    # pushes come from flush() only here: a fixed expiry keeps nodes whatever the machine's load
    server = ExporterServer(ExporterConfig(host="127.0.0.1", grpc_port=0, http_port=0, metrics_port=0,
                                           expire_after=120)).start()
    try:
        yield server
    finally:
        server.stop()


def pusher(exporter: ExporterServer, node_id: str, http: bool = False, **props: str) -> Telemetry:
    target = ({"metricsExporterType": "OTLP_HTTP", "metricsHttpExporterTarget": f"http://127.0.0.1:{exporter.http_port}"}
              if http else
              {"metricsExporterType": "OTLP_GRPC", "metricsGrpcExporterTarget": f"http://127.0.0.1:{exporter.grpc_port}"})
    config = TelemetryConfig.from_properties({"metricGrpcExporterIntervalInMills": "600000", **target, **props})
    return Telemetry.start(config, "broker", "DefaultCluster", node_id)


def exposition(exporter: ExporterServer) -> str:
    return scrape(f"http://127.0.0.1:{exporter.metrics_port}/metrics")


def test_two_brokers_one_exporter(exporter: ExporterServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rocketscope")
    a = pusher(exporter, "broker-a-0", metricsPerQueueLag="true")
    b = pusher(exporter, "broker-b-0", http=True, metricsInDelta="true")
    try:
        for node, lag, connections in ((a, 7, 2), (b, 5, 3)):
            node.gauge("rocketmq_consumer_lag_messages", lambda lag=lag: [(lag, LAG)])
            node.gauge("rocketmq_consumer_connections", lambda c=connections: [(c, {
                "consumer_group": "g1", "language": "python", "version": "v5_1_2", "consume_mode": "pop",
                "protocol_type": "grpc", "is_system": False})])
            node.gauge("rocketmq_topic_max_offset", lambda: [(1000, {"topic": "orders"})])
            node.gauge("rocketmq_consumer_committed_offset", lambda: [(990, {"consumer_group": "g1",
                                                                             "topic": "orders"})])
        a.gauge("rocketmq_consumer_queue_lag_messages", lambda: [(4, {**LAG, "queue_id": 3})])
        # a's identity as a broker: brokerName and address, as rocketmq-exporter labels broker and brokerIP
        a.gauge("rocketmq_ha_role", lambda: [(3, {"broker_group": "broker-a", "broker_addr": "127.0.0.1:10911"})])
        latency = a.histogram("rocketmq_rpc_latency")
        for value in (0.5, 2, 2, 6, 50, 5000):
            latency.record(value, RPC)
        a.counter("rocketmq_messages_in_total").add(10, IN)
        b.counter("rocketmq_messages_in_total").add(2, IN)
        b.histogram("rocketmq_rpc_latency").record(2, RPC)
        assert a.flush() and b.flush()
        wait_until(lambda: len(exporter.nodes()) == 2, what="both brokers at the exporter")
        # second collection: a's counter grows (legacy tps), b pushes a delta of 3 and one more latency
        a.counter("rocketmq_messages_in_total").add(20, IN)
        b.counter("rocketmq_messages_in_total").add(3, IN)
        b.histogram("rocketmq_rpc_latency").record(200, RPC)
        assert a.flush() and b.flush()

        def rendered() -> str | None:
            text = exposition(exporter)
            b_total = find(text, "rocketmq_messages_in_total", node_id="broker-b-0", aggregation="delta")
            ready = b_total and b_total[0][1] == 5 and find(text, "rocketmq_producer_tps", broker="broker-a")
            return text if ready else None

        text = wait_until(rendered, what="the second pushes rendered")
    finally:
        a.stop()
        b.stop()

    # each node's series kept apart
    totals = {lab["node_id"]: v for lab, v in find(text, "rocketmq_messages_in_total")}
    assert totals == {"broker-a-0": 30, "broker-b-0": 5}  # b pushed deltas 2 and 3
    assert {lab["node_id"] for lab, _ in find(text, "rocketmq_consumer_lag_messages")} == {"broker-a-0", "broker-b-0"}
    # booleans and integers render
    (lab, value), = find(text, "rocketmq_consumer_queue_lag_messages")
    assert lab["queue_id"] == "3" and lab["is_retry"] == "false" and value == 4
    # histogram buckets cumulative, +Inf == count, for a cumulative and a delta pusher
    bucket = "rocketmq_rpc_latency_milliseconds_bucket"
    a_buckets = {lab["le"]: v for lab, v in find(text, bucket, node_id="broker-a-0")}
    assert a_buckets == {"1.0": 1, "3.0": 3, "5.0": 3, "7.0": 4, "10.0": 4, "100.0": 5, "1000.0": 5, "2000.0": 5,
                         "3000.0": 5, "+Inf": 6}
    b_buckets = {lab["le"]: v for lab, v in find(text, bucket, node_id="broker-b-0")}
    assert b_buckets["3.0"] == 1 and b_buckets["1000.0"] == 2 and b_buckets["+Inf"] == 2
    assert find(text, "rocketmq_rpc_latency_milliseconds_count", node_id="broker-b-0")[0][1] == 2
    assert find(text, "rocketmq_rpc_latency_milliseconds_sum", node_id="broker-b-0")[0][1] == 202
    # legacy rocketmq-exporter names
    # broker = brokerName and brokerIP = address where the node states them (a's rocketmq_ha_role); b states
    # neither and keeps its node id and an empty brokerIP
    (lab, tps), = find(text, "rocketmq_producer_tps", broker="broker-a", topic="orders")
    assert tps > 0 and lab["cluster"] == "DefaultCluster"
    (lab, broker_tps), = find(text, "rocketmq_broker_tps", broker="broker-a")
    assert broker_tps == tps and lab["brokerIP"] == "127.0.0.1:10911"
    assert {lab["broker"]: v for lab, v in find(text, "rocketmq_producer_offset")} == {"broker-a": 1000,
                                                                                       "broker-b-0": 1000}
    assert find(text, "rocketmq_consumer_offset", broker="broker-a", group="g1")[0][1] == 990
    (lab, diff), = find(text, "rocketmq_group_diff", group="g1", topic="orders")
    assert diff == 12 and lab["countOfOnlineConsumers"] == "3" and lab["msgModel"] == "CLUSTERING"
    assert "exporter: node appeared" in caplog.text and "broker-b-0" in caplog.text


def test_a_node_that_stops_pushing_expires_after_three_intervals(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rocketscope")
    server = ExporterServer(ExporterConfig(host="127.0.0.1", grpc_port=0, http_port=0, metrics_port=0,
                                           default_expiry=600, min_expiry=0.5)).start()
    live = pusher(server, "broker-live", metricGrpcExporterIntervalInMills="400")
    gone = pusher(server, "broker-gone", metricGrpcExporterIntervalInMills="400")
    try:
        for node in (live, gone):
            node.counter("rocketmq_messages_in_total").add(1, IN)
        # the interval is learnt from the collections: then the expiry is 3 x 0.4 s, not 600 s
        wait_until(lambda: len(server.nodes()) == 2 and all(server.store.intervals().values()),
                   timeout=15, what="both push intervals learnt")
        gone.stop()
        wait_until(lambda: ("DefaultCluster", "broker", "broker-gone") not in server.nodes(), timeout=15,
                   what="the stopped node to expire")
        text = exposition(server)
        assert {lab["node_id"] for lab, _ in find(text, "rocketmq_messages_in_total")} == {"broker-live"}
        assert "exporter: node expired" in caplog.text and "broker-gone" in caplog.text
    finally:
        live.stop()
        gone.stop()
        server.stop()


def test_exporter_command_reports_busy_ports() -> None:
    server = ExporterServer(ExporterConfig(host="127.0.0.1", grpc_port=0, http_port=0, metrics_port=0)).start()
    try:
        result = CliRunner().invoke(exporter_command, ["--host", "127.0.0.1", "--grpc-port", "0", "--http-port", "0",
                                                       "--metrics-port", str(server.metrics_port)])
    finally:
        server.stop()
    assert result.exit_code != 0
    assert "choose other ports" in result.output
