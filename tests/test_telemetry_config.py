"""TelemetryConfig.from_properties: RocketMQ's keys, defaults and parsing rules."""

from __future__ import annotations

import logging

import pytest

from rocketscope.telemetry.config import KEYS, ExporterType, TelemetryConfig, TelemetryConfigError, keys_table


def test_defaults_are_rocketmqs() -> None:
    config = TelemetryConfig.from_properties({})
    assert config.exporter_type is ExporterType.DISABLE and not config.enabled
    assert config.prom_port == 5557
    assert config.export_timeout_ms == 3000
    assert config.export_interval_ms == 60000
    assert config.log_interval_ms == 10000
    assert config.cardinality_limit == 50000
    assert config.batch_max_points == 1000
    assert config.in_delta is False and config.per_queue_lag is False
    assert config.labels == {} and config.headers == {}


@pytest.mark.parametrize(("raw", "expected"), [
    ("DISABLE", ExporterType.DISABLE), ("0", ExporterType.DISABLE), ("otlp_grpc", ExporterType.OTLP_GRPC),
    ("1", ExporterType.OTLP_GRPC), ("PROM", ExporterType.PROM), ("2", ExporterType.PROM), ("LOG", ExporterType.LOG),
    ("3", ExporterType.LOG), ("OTLP_HTTP", ExporterType.OTLP_HTTP), (" 4 ", ExporterType.OTLP_HTTP),
])
def test_exporter_type_accepts_names_and_ints(raw: str, expected: ExporterType) -> None:
    props = {"metricsExporterType": raw, "metricsGrpcExporterTarget": "http://x:1", "metricsHttpExporterTarget": "http://x"}
    assert TelemetryConfig.from_properties(props).exporter_type is expected


@pytest.mark.parametrize(("key", "value"), [
    ("metricsExporterType", "PROMETHEUS"), ("metricsExporterType", "9"), ("metricsPromExporterPort", "70000"),
    ("metricsPromExporterPort", "abc"), ("metricsInDelta", "yes"), ("metricsOtelCardinalityLimit", "0"),
    ("metricGrpcExporterIntervalInMills", "-5"), ("metricsExportBatchMaxDataPoints", "1.5"),
])
def test_bad_values_name_key_and_value(key: str, value: str) -> None:
    with pytest.raises(ValueError) as info:
        TelemetryConfig.from_properties({key: value})
    assert isinstance(info.value, TelemetryConfigError)
    assert key in str(info.value) and repr(value) in str(info.value)


def test_otlp_without_target_is_an_error_naming_the_key() -> None:
    with pytest.raises(TelemetryConfigError, match="metricsGrpcExporterTarget"):
        TelemetryConfig.from_properties({"metricsExporterType": "OTLP_GRPC"})
    with pytest.raises(TelemetryConfigError, match="metricsHttpExporterTarget"):
        TelemetryConfig.from_properties({"metricsExporterType": "OTLP_HTTP"})


def test_grpc_target_gets_https_unless_it_starts_with_http() -> None:
    def target(raw: str) -> str:
        props = {"metricsExporterType": "1", "metricsGrpcExporterTarget": raw}
        return TelemetryConfig.from_properties(props).grpc_target

    assert target("collector:4317") == "https://collector:4317"
    assert target("http://collector:4317") == "http://collector:4317"
    assert target("https://collector:4317") == "https://collector:4317"


def test_http_target_gets_the_signal_path_when_it_has_none() -> None:
    def url(raw: str) -> str:
        return TelemetryConfig.from_properties({"metricsHttpExporterTarget": raw}).http_url

    assert url("http://c:4318") == "http://c:4318/v1/metrics"
    assert url("http://c:4318/") == "http://c:4318/v1/metrics"
    assert url("http://c:4318/custom/path") == "http://c:4318/custom/path"


def test_label_and_header_csv_skip_bad_items_with_a_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = TelemetryConfig.from_properties({
            "metricsLabel": "env:prod, region:eu-1,bad,too:many:colons,",
            "metricsGrpcExporterHeader": "Authorization:Bearer abc,x-tenant:t1",
        })
    assert config.labels == {"env": "prod", "region": "eu-1"}
    assert config.headers == {"authorization": "Bearer abc", "x-tenant": "t1"}  # gRPC metadata keys are lower case
    logged = caplog.text
    assert "'bad'" in logged and "'too:many:colons'" in logged and "metricsLabel" in logged


def test_delta_applies_to_push_modes_only() -> None:
    prom = TelemetryConfig.from_properties({"metricsExporterType": "PROM", "metricsInDelta": "true"})
    push = TelemetryConfig.from_properties({"metricsExporterType": "OTLP_GRPC", "metricsInDelta": "TRUE",
                                            "metricsGrpcExporterTarget": "http://c:1"})
    assert prom.in_delta and not prom.delta
    assert push.delta


def test_every_key_has_a_default_and_a_doc_line() -> None:
    table = keys_table()
    for key in KEYS:
        assert key.doc and "\n" not in key.doc
        assert f"| `{key.name}` | `{key.default}` |" in table
        key.parse(key.default)  # every default parses
