"""PROM mode writes /metrics itself (telemetry/promtext.py, for speed); it must say exactly what
prometheus_client would say for the same data.

The same instruments are recorded in a PROM Telemetry and in an OTLP_GRPC one pushing to an
in-test receiver; the OTLP points go through the exporter's path (telemetry/render.py:
prometheus_client metric families, ``generate_latest``). Both texts are parsed with
prometheus_client's parser and must hold the same samples (names, label sets, values),
awkward label values included (quotes, backslashes, newlines, non-ASCII, booleans, ints).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from telemetry_support import OtlpGrpcReceiver, samples, scrape, wait_until

from rocketscope.telemetry import Telemetry, TelemetryConfig
from rocketscope.telemetry.otlp import points
from rocketscope.telemetry.render import families

AWKWARD_TOPICS = ['plain', 'quote"d', "back\\slash", "new\nline", "ünïcödé-主题"]


def record(t: Telemetry) -> None:
    for i, topic in enumerate(AWKWARD_TOPICS):
        t.counter("rocketmq_messages_in_total").add(i + 1, {"topic": topic, "message_type": "normal",
                                                            "is_system": i % 2 == 0})
    latency = t.histogram("rocketmq_rpc_latency")
    for value in (0.5, 4, 4, 250, 99_999):
        latency.record(value, {"protocol_type": "grpc", "request_code": "send_message", "response_code": "ok",
                               "is_long_polling": False, "result": "success"})
    lags = tuple((float(i * 10), {"consumer_group": f"g{i}", "topic": topic, "is_retry": i == 1, "is_system": False})
                 for i, topic in enumerate(AWKWARD_TOPICS))
    t.gauge("rocketmq_consumer_lag_messages", lambda: lags)
    t.up_down_counter("rocketmq_controller_role").add(3)


class _Families:
    def __init__(self, fams: list[Any]) -> None:
        self.fams = fams

    def collect(self) -> list[Any]:
        return self.fams


def ours(text: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {(name, tuple(sorted(labels.items())), value) for name, labels, value in samples(text)
            if name.startswith("rocketmq_")}


def test_promtext_says_what_prometheus_client_says() -> None:
    base = {"metricsLabel": "env:test", "metricGrpcExporterIntervalInMills": "600000"}
    prom = Telemetry.start(TelemetryConfig.from_properties({**base, "metricsExporterType": "PROM",
                                                             "metricsPromExporterHost": "127.0.0.1",
                                                             "metricsPromExporterPort": "0"}),
                           "broker", "DefaultCluster", "broker-a-0")
    with OtlpGrpcReceiver() as receiver:
        push = Telemetry.start(TelemetryConfig.from_properties({**base, "metricsExporterType": "OTLP_GRPC",
                                                                 "metricsGrpcExporterTarget": receiver.target}),
                               "broker", "DefaultCluster", "broker-a-0")
        try:
            record(prom)
            record(push)
            assert push.flush()
            requests = wait_until(receiver.snapshot, what="an OTLP export")
        finally:
            push.stop()
    try:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(families(p for r in requests for p in points(r))))  # type: ignore[arg-type]
        reference = ours(generate_latest(registry).decode())
        written = ours(scrape(f"http://127.0.0.1:{prom.prometheus_port}/metrics"))
    finally:
        prom.stop()
    names = {name for name, _, _ in reference}
    # every kind is covered: a counter, a histogram (buckets, sum, count), a gauge, an up-down counter
    assert {"rocketmq_messages_in_total", "rocketmq_rpc_latency_milliseconds_bucket",
            "rocketmq_rpc_latency_milliseconds_count", "rocketmq_consumer_lag_messages",
            "rocketmq_controller_role"} <= names, names
    assert any('quote"d' in dict(labels).get("topic", "") for _, labels, _ in written)
    written_here = {s for s in written if s[0] in names}
    assert written_here == reference, (
        f"only in promtext: {sorted(written_here - reference)[:5]}; only in prometheus_client: "
        f"{sorted(reference - written_here)[:5]}")
