"""A real Prometheus (Debian package) scrapes a PROM-mode node and the exporter."""

from __future__ import annotations

from pathlib import Path

import pytest
from telemetry_support import PrometheusServer, wait_until

from rocketscope.telemetry import Telemetry, TelemetryConfig
from rocketscope.telemetry.exporter import ExporterConfig, ExporterServer

ALERTS = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "alerts.yml"
IN = {"topic": "orders", "message_type": "normal", "is_system": False}
LAG = {"consumer_group": "g1", "topic": "orders", "is_retry": False, "is_system": False}
RPC = {"protocol_type": "grpc", "request_code": "send_message", "response_code": "ok", "is_long_polling": False,
       "result": "success"}


@pytest.mark.e2e
def test_prometheus_scrapes_a_prom_node_and_the_exporter() -> None:
    pulled = Telemetry.start(TelemetryConfig.from_properties({
        "metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1", "metricsPromExporterPort": "0",
    }), "broker", "DefaultCluster", "broker-a-0")
    exporter = ExporterServer(ExporterConfig(host="127.0.0.1", grpc_port=0, http_port=0, metrics_port=0)).start()
    pushed = Telemetry.start(TelemetryConfig.from_properties({
        "metricsExporterType": "OTLP_GRPC", "metricsGrpcExporterTarget": f"http://127.0.0.1:{exporter.grpc_port}",
        # keeps pushing while Prometheus starts: the exporter expires nodes that stop
        "metricGrpcExporterIntervalInMills": "500", "metricsInDelta": "true",
    }), "broker", "DefaultCluster", "broker-b-0")
    try:
        pulled.counter("rocketmq_messages_in_total").add(3, IN)
        latency = pulled.histogram("rocketmq_rpc_latency")
        for value in (0.5, 2, 2, 6, 50, 5000):
            latency.record(value, RPC)
        pulled.gauge("rocketmq_consumer_lag_messages", lambda: [(7, LAG)])
        pushed.counter("rocketmq_messages_in_total").add(4, IN)
        pushed.gauge("rocketmq_consumer_lag_messages", lambda: [(5, LAG)])
        assert pushed.flush()
        pushed.counter("rocketmq_messages_in_total").add(3, IN)  # a second delta
        assert pushed.flush()
        wait_until(lambda: exporter.nodes(), what="the pushed node at the exporter")

        jobs = {"rocketscope-broker": [f"127.0.0.1:{pulled.prometheus_port}"],
                "rocketscope-exporter": [f"127.0.0.1:{exporter.metrics_port}"]}
        with PrometheusServer(jobs, rule_files=[ALERTS]) as prom:
            prom.wait_healthy("rocketscope-broker")
            prom.wait_healthy("rocketscope-exporter")
            assert prom.wait_value('rocketmq_messages_in_total{node_id="broker-a-0",is_system="false"}',
                                   lambda v: v == 3) == 3
            assert prom.wait_value('rocketmq_messages_in_total{node_id="broker-b-0",aggregation="delta"}',
                                   lambda v: v == 7) == 7
            assert prom.wait_value('rocketmq_rpc_latency_milliseconds_bucket{node_id="broker-a-0",le="3.0"}') == 3
            # cumulative buckets make the quantile right: the median of 0.5,2,2,6,50,5000 lies in (1,3]
            median = prom.wait_value('histogram_quantile(0.5, rocketmq_rpc_latency_milliseconds_bucket'
                                     '{node_id="broker-a-0"})')
            assert 1 < median <= 3
            assert prom.wait_value('sum(rocketmq_consumer_lag_messages{consumer_group="g1"})', lambda v: v == 12) == 12
            assert prom.wait_value('rocketmq_group_diff{group="g1",topic="orders"}') == 5  # legacy, from pushes
            groups = {g["name"] for g in prom.api("rules")["groups"]}
            assert {"rocketscope-availability", "rocketscope-replication", "rocketscope-consumers"} <= groups
    finally:
        pushed.stop()
        exporter.stop()
        pulled.stop()
