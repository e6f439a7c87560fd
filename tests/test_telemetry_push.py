"""Push mode: a Telemetry configured OTLP_GRPC / OTLP_HTTP against real OTLP receivers."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2
from telemetry_support import (
    OtlpGrpcReceiver,
    OtlpHttpReceiver,
    data_points,
    otlp_attributes,
    otlp_metrics,
    wait_until,
)

from rocketscope.telemetry import Telemetry, TelemetryConfig

CUMULATIVE = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
DELTA = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
IN_LABELS = {"topic": "orders", "message_type": "normal", "is_system": False}


@pytest.fixture
def receiver() -> Iterator[OtlpGrpcReceiver]:
    with OtlpGrpcReceiver() as r:
        yield r


def start(props: dict[str, str], node_id: str = "broker-a-0") -> Telemetry:
    # a long interval: the test pushes with flush(), so nothing depends on timing
    base = {"metricGrpcExporterIntervalInMills": "600000", **props}
    return Telemetry.start(TelemetryConfig.from_properties(base), "broker", "DefaultCluster", node_id)


def record_some(telemetry: Telemetry) -> None:
    telemetry.counter("rocketmq_messages_in_total").add(3, IN_LABELS)
    latency = telemetry.histogram("rocketmq_rpc_latency")
    for value in (0.5, 4, 4, 250):
        latency.record(value, {"protocol_type": "grpc", "request_code": "send_message", "response_code": "ok",
                               "is_long_polling": False, "result": "success"})
    telemetry.gauge("rocketmq_consumer_lag_messages",
                    lambda: [(7, {"consumer_group": "g1", "topic": "orders", "is_retry": False, "is_system": False})])
    telemetry.up_down_counter("rocketmq_controller_role").add(3)


def by_name(requests: list) -> dict[str, metrics_pb2.Metric]:
    return {m.name: m for m in otlp_metrics(requests)}


def test_otlp_grpc_push_carries_names_labels_headers_cumulative(receiver: OtlpGrpcReceiver) -> None:
    telemetry = start({"metricsExporterType": "OTLP_GRPC", "metricsGrpcExporterTarget": receiver.target,
                       "metricsLabel": "env:test,region:eu", "metricsGrpcExporterHeader": "x-tenant:t1,Auth:secret"})
    try:
        record_some(telemetry)
        assert telemetry.flush()
        metrics = wait_until(lambda: by_name(receiver.snapshot()), what="an OTLP export")
    finally:
        telemetry.stop()
    counter = metrics["rocketmq_messages_in_total"]
    assert counter.unit == "1"
    assert counter.sum.is_monotonic and counter.sum.aggregation_temporality == CUMULATIVE
    (point,) = counter.sum.data_points
    attrs = otlp_attributes(point)
    assert attrs == {**IN_LABELS, "cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a-0",
                     "env": "test", "region": "eu"}
    assert point.as_int == 3
    hist = metrics["rocketmq_rpc_latency"]
    assert hist.unit == "ms" and hist.histogram.aggregation_temporality == CUMULATIVE
    (hp,) = hist.histogram.data_points
    assert list(hp.explicit_bounds) == [1, 3, 5, 7, 10, 100, 1000, 2000, 3000]
    assert list(hp.bucket_counts) == [1, 0, 2, 0, 0, 0, 1, 0, 0, 0]
    assert otlp_attributes(hp)["is_long_polling"] is False
    (gp,) = data_points(metrics["rocketmq_consumer_lag_messages"])
    assert otlp_attributes(gp)["node_id"] == "broker-a-0" and gp.as_int == 7
    every_point = [p for m in metrics.values() for p in data_points(m)]
    assert all(otlp_attributes(p)["cluster"] == "DefaultCluster" for p in every_point)
    assert receiver.metadata[0]["x-tenant"] == "t1" and receiver.metadata[0]["auth"] == "secret"


def test_metrics_in_delta_pushes_delta_with_aggregation_label(receiver: OtlpGrpcReceiver) -> None:
    telemetry = start({"metricsExporterType": "OTLP_GRPC", "metricsGrpcExporterTarget": receiver.target,
                       "metricsInDelta": "true"})
    try:
        record_some(telemetry)
        assert telemetry.flush()
        telemetry.counter("rocketmq_messages_in_total").add(2, IN_LABELS)
        assert telemetry.flush()
        wait_until(lambda: len(receiver.snapshot()) >= 2, what="two exports")
    finally:
        telemetry.stop()
    first, second = (by_name([r]) for r in receiver.snapshot()[:2])
    counter = first["rocketmq_messages_in_total"]
    assert counter.sum.aggregation_temporality == DELTA
    assert first["rocketmq_rpc_latency"].histogram.aggregation_temporality == DELTA
    assert first["rocketmq_controller_role"].sum.aggregation_temporality == CUMULATIVE  # up-down stays cumulative
    assert otlp_attributes(counter.sum.data_points[0])["aggregation"] == "delta"
    assert otlp_attributes(data_points(first["rocketmq_consumer_lag_messages"])[0])["aggregation"] == "delta"
    assert [p.as_int for p in second["rocketmq_messages_in_total"].sum.data_points] == [2]  # the delta, not 5


def test_otlp_http_push_with_headers() -> None:
    with OtlpHttpReceiver() as http:
        telemetry = start({"metricsExporterType": "OTLP_HTTP", "metricsHttpExporterTarget": f"http://127.0.0.1:{http.port}",
                           "metricsGrpcExporterHeader": "x-tenant:t2"})
        try:
            record_some(telemetry)
            assert telemetry.flush()
            wait_until(lambda: http.requests, what="an OTLP/HTTP export")
        finally:
            telemetry.stop()
        assert http.paths[0] == "/v1/metrics"
        assert http.headers[0]["x-tenant"] == "t2"
        metrics = by_name(http.requests)
        (point,) = metrics["rocketmq_messages_in_total"].sum.data_points
        assert otlp_attributes(point)["node_id"] == "broker-a-0" and point.as_int == 3


def test_large_export_is_split_by_data_points_not_dropped() -> None:
    """10,000 lag series (~1.5 MB) against a receiver that accepts 256 KiB per message."""
    topics = 10_000
    with OtlpGrpcReceiver(max_receive_bytes=256 * 1024) as small:
        telemetry = start({"metricsExporterType": "OTLP_GRPC", "metricsGrpcExporterTarget": small.target,
                           "metricsExportBatchMaxDataPoints": "1000"})
        try:
            rows = [(i, {"consumer_group": "g", "topic": f"topic-{i:05d}", "is_retry": False, "is_system": False})
                    for i in range(topics)]
            telemetry.gauge("rocketmq_consumer_lag_messages", lambda: rows)
            assert telemetry.flush()
            wait_until(lambda: sum(len(data_points(m)) for m in otlp_metrics(small.snapshot())
                                   if m.name == "rocketmq_consumer_lag_messages") >= topics,
                       what="all lag points across split requests")
        finally:
            telemetry.stop()
        sizes = [sum(len(data_points(m)) for m in otlp_metrics([r])) for r in small.snapshot()]
        assert len(sizes) >= topics // 1000 and max(sizes) <= 1000
        by_collection: dict[int, list[int]] = {}
        for m in otlp_metrics(small.snapshot()):
            for p in data_points(m):
                by_collection.setdefault(p.time_unix_nano, []).append(p.as_int)
        first = by_collection[min(by_collection)]  # the flush(); stop() pushes again
        assert sorted(first) == list(range(topics))


def test_without_splitting_the_same_export_is_lost_whole() -> None:
    """The control for the test above: RocketMQ issue #10240's failure, reproduced."""
    with OtlpGrpcReceiver(max_receive_bytes=256 * 1024) as small:
        telemetry = start({"metricsExporterType": "OTLP_GRPC", "metricsGrpcExporterTarget": small.target,
                           "metricsExportBatchSplitEnabled": "false", "metricGrpcExporterTimeOutInMills": "500"})
        try:
            rows = [(i, {"consumer_group": "g", "topic": f"topic-{i:05d}", "is_retry": False, "is_system": False})
                    for i in range(10_000)]
            telemetry.gauge("rocketmq_consumer_lag_messages", lambda: rows)
            telemetry.flush()
        finally:
            telemetry.stop()
        assert small.snapshot() == []


def test_log_mode_writes_one_otlp_json_line_per_collection(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rocketscope.metrics")
    telemetry = start({"metricsExporterType": "LOG", "metricLoggingExporterIntervalInMills": "600000"})
    try:
        telemetry.counter("rocketmq_messages_in_total").add(3, IN_LABELS)
        assert telemetry.flush()
    finally:
        telemetry.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "rocketscope.metrics"]
    assert lines
    data = json.loads(lines[0])
    points = [p for rm in data["resource_metrics"] for sm in rm["scope_metrics"] for m in sm["metrics"]
              if m["name"] == "rocketmq_messages_in_total" for p in m["data"]["data_points"]]
    assert points[0]["value"] == 3 and points[0]["attributes"]["node_id"] == "broker-a-0"


def test_a_process_that_only_records_histograms_still_pushes_them(receiver: OtlpGrpcReceiver) -> None:
    # no counter, gauge or up-down counter: the SDK has no data points of its own and would not export
    telemetry = start({"metricsExporterType": "OTLP_GRPC", "metricsGrpcExporterTarget": receiver.target})
    try:
        assert telemetry.flush()  # nothing recorded yet: nothing is sent (no empty request)
        assert receiver.snapshot() == []
        telemetry.histogram("rocketmq_rpc_latency").record(4, {"protocol_type": "grpc", "request_code": "send_message",
                                                               "response_code": "ok", "is_long_polling": False,
                                                               "result": "success"})
        assert telemetry.flush()
        requests = wait_until(lambda: receiver.snapshot(), what="a histogram-only export")
    finally:
        telemetry.stop()
    metrics = by_name(requests)
    assert set(metrics) == {"rocketmq_rpc_latency"}
    (hp,) = metrics["rocketmq_rpc_latency"].histogram.data_points
    assert hp.count == 1 and otlp_attributes(hp)["node_id"] == "broker-a-0"
    resource = {kv.key: kv.value.string_value for kv in requests[0].resource_metrics[0].resource.attributes}
    assert resource["service.name"] == "rocketscope-broker"
    assert requests[0].resource_metrics[0].scope_metrics[0].scope.name == "broker-meter"


def test_log_mode_writes_histogram_only_collections(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rocketscope.metrics")
    telemetry = start({"metricsExporterType": "LOG", "metricLoggingExporterIntervalInMills": "600000"})
    try:
        telemetry.histogram("rocketmq_message_size").record(1100, IN_LABELS)
        assert telemetry.flush()
    finally:
        telemetry.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "rocketscope.metrics"]
    assert lines
    names = {m["name"] for rm in json.loads(lines[0])["resource_metrics"] for sm in rm["scope_metrics"]
             for m in sm["metrics"]}
    assert names == {"rocketmq_message_size"}


def test_a_restarted_node_pushes_under_the_same_instance_and_other_nodes_under_their_own(
        receiver: OtlpGrpcReceiver) -> None:
    """A collector makes the resource's service.instance.id the series' ``instance`` label: the
    SDK's default (a random id per process start) would start new series at every restart."""
    def pushed_instance(node_id: str) -> str:
        before = len(receiver.snapshot())
        telemetry = start({"metricsExporterType": "OTLP_GRPC", "metricsGrpcExporterTarget": receiver.target},
                          node_id=node_id)
        try:
            record_some(telemetry)
            assert telemetry.flush()
            requests = wait_until(lambda: receiver.snapshot()[before:], what=f"an export from {node_id}")
        finally:
            telemetry.stop()
        attributes = {kv.key: kv.value.string_value for kv in requests[0].resource_metrics[0].resource.attributes}
        return attributes["service.instance.id"]

    first, restarted = pushed_instance("broker-a-0"), pushed_instance("broker-a-0")
    assert first == restarted
    assert pushed_instance("broker-a-1") != first
