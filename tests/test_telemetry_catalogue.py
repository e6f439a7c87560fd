"""The catalogue: RocketMQ's names, units, labels and buckets, and docs/METRICS.md in sync."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rocketscope.telemetry import catalogue
from rocketscope.telemetry.catalogue import BY_NAME, CATALOGUE, Kind

ROOT = Path(__file__).resolve().parents[1]

# Apache RocketMQ 5's names that must exist unchanged (docs/METRICS.md)
DESIGN_NAMES = re.findall(r"\S+", """rocketmq_messages_in_total rocketmq_messages_out_total rocketmq_throughput_in_total
rocketmq_throughput_out_total rocketmq_message_size rocketmq_rpc_latency rocketmq_producer_connections
rocketmq_consumer_connections rocketmq_consumer_lag_messages rocketmq_consumer_lag_latency
rocketmq_consumer_inflight_messages rocketmq_consumer_queueing_latency rocketmq_consumer_ready_messages
rocketmq_send_to_dlq_messages_total rocketmq_commit_messages_total rocketmq_rollback_messages_total
rocketmq_half_messages rocketmq_finish_message_latency rocketmq_processor_watermark
rocketmq_broker_permission rocketmq_topic_number rocketmq_consumer_group_number rocketmq_storage_size
rocketmq_storage_flush_behind_bytes rocketmq_storage_dispatch_behind_bytes
rocketmq_storage_message_reserve_time rocketmq_timing_messages rocketmq_delay_message_latency dledger_role
dledger_term dledger_commit_index dledger_peer_lag_entries dledger_append_entry_latency
dledger_replicate_entry_latency dledger_election_total rocketmq_ha_replica_ack_offset
rocketmq_ha_replication_lag_bytes rocketmq_ha_sync_state_set_size rocketmq_ha_master_epoch
rocketmq_controller_role rocketmq_controller_request_total rocketmq_controller_request_latency
rocketmq_controller_election_total rocketmq_controller_active_broker_num rocketmq_namesrv_registered_brokers
rocketmq_namesrv_route_queries_total rocketscope_trace_records_written_total
rocketscope_trace_records_dropped_total rocketscope_trace_records_failed_total rocketscope_trace_queue_depth
rocketmq_acl_denied_total rocketmq_send_cost_time rocketmq_delivery_latency rocketmq_await_time
rocketmq_process_time""")


@pytest.mark.e2e
def test_docs_metrics_md_is_generated_from_the_catalogue() -> None:
    generated = subprocess.run([sys.executable, "-m", "rocketscope.telemetry.catalogue", "--markdown"],
                               capture_output=True, text=True, check=True, cwd=ROOT).stdout
    current = (ROOT / "docs" / "METRICS.md").read_text()
    assert current == generated, (
        "docs/METRICS.md is stale: run `.venv/bin/python -m rocketscope.telemetry.catalogue --markdown "
        "> docs/METRICS.md`")


def test_every_design_name_is_declared_and_names_are_unique() -> None:
    assert len(BY_NAME) == len(CATALOGUE)
    missing = [n for n in DESIGN_NAMES if n not in BY_NAME]
    assert not missing


def test_rocketmq_buckets_labels_and_kinds() -> None:
    kib, mib = 1024, 1024 * 1024
    assert BY_NAME["rocketmq_message_size"].buckets == (kib, 4 * kib, 512 * kib, mib, 2 * mib, 4 * mib)
    rpc = BY_NAME["rocketmq_rpc_latency"]
    assert rpc.buckets == (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
    assert rpc.labels == ("protocol_type", "request_code", "response_code", "is_long_polling", "result")
    assert rpc.unit == "ms" and rpc.kind is Kind.HISTOGRAM
    assert BY_NAME["rocketmq_finish_message_latency"].buckets == (5, 60, 600, 3600, 43200, 86400)
    assert BY_NAME["rocketmq_finish_message_latency"].unit == "s"  # RocketMQ declares ms but records s
    assert BY_NAME["rocketmq_delay_message_latency"].buckets == (60, 600, 3600, 43200, 86400, 259200)
    assert len(BY_NAME["rocketmq_controller_request_latency"].buckets or ()) == 22
    assert len(BY_NAME["dledger_append_entry_latency"].buckets or ()) == 23
    assert BY_NAME["rocketmq_send_cost_time"].buckets == (1, 5, 10, 20, 50, 200, 500)
    assert BY_NAME["rocketmq_messages_in_total"].labels == ("topic", "message_type", "is_system")
    assert BY_NAME["rocketmq_consumer_lag_messages"].labels == ("consumer_group", "topic", "is_retry", "is_system")
    assert "queue_id" in BY_NAME["rocketmq_consumer_queue_lag_messages"].labels
    assert BY_NAME["rocketmq_consumer_queue_lag_messages"].opt_in == "metricsPerQueueLag"


def test_units_are_opentelemetry_units_and_buckets_sorted() -> None:
    for inst in CATALOGUE:
        assert inst.unit in {"1", "By", "ms", "s", ""}, inst.name
        if inst.kind in (Kind.OBSERVABLE_GAUGE, Kind.UP_DOWN_COUNTER):
            # a gauge with unit 1 is renamed *_ratio by the OpenTelemetry-to-Prometheus translation
            assert (inst.unit == "1") == inst.name.endswith("_ratio"), inst.name
        if inst.buckets:
            assert list(inst.buckets) == sorted(set(inst.buckets)), inst.name
            assert inst.kind is Kind.HISTOGRAM
        if inst.kind in (Kind.COUNTER, Kind.OBSERVABLE_COUNTER):
            assert inst.name.endswith("_total"), inst.name
        assert inst.description.endswith("."), inst.name


def test_prometheus_names_follow_rocketmq_exposition() -> None:
    names = {i.name: i.prometheus_name for i in CATALOGUE}
    assert names["rocketmq_messages_in_total"] == "rocketmq_messages_in_total"
    assert names["rocketmq_throughput_in_total"] == "rocketmq_throughput_in_total"  # RocketMQ set no unit
    assert names["rocketmq_message_size"] == "rocketmq_message_size"
    assert names["rocketmq_consumer_lag_latency"] == "rocketmq_consumer_lag_latency_milliseconds"
    assert names["rocketmq_rpc_latency"] == "rocketmq_rpc_latency_milliseconds"
    assert names["rocketmq_storage_size"] == "rocketmq_storage_size_bytes"
    assert names["rocketmq_ha_replication_lag_bytes"] == "rocketmq_ha_replication_lag_bytes"
    for name in names.values():
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name)
    assert len(set(names.values())) == len(names)


def test_get_names_the_catalogue_for_unknown_instruments() -> None:
    try:
        catalogue.get("rocketmq_no_such_metric")
    except KeyError as exc:
        assert "telemetry/catalogue.py" in str(exc)
    else:
        raise AssertionError("expected KeyError")
