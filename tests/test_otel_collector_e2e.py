"""Push mode through a real OpenTelemetry Collector, and straight into Prometheus 3.

Ground truth is a workload we count with the official Python client: SMALL + LARGE messages of
known body sizes sent, CONSUMED of them received and acked by one group. Two single-broker
clusters, identical except for metricsExporterType, run the same workload: one serves /metrics
itself (PROM), the other pushes OTLP/gRPC to the collector built by `make otelcol` running
deploy/otel-collector/config.yaml (only ports overridden). The collector's Prometheus exporter
(scraped directly and by a real Prometheus) and its OTLP/HTTP forward must show the counted
numbers and the same values, labels included, as the PROM broker's own /metrics.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cluster import LocalCluster, wait_until
from conftest import free_port
from otel_support import COLLECTOR_CONFIG, Collector, OtlpHttpSink, Prometheus3Server, collector_binary
from rmq import drain, message, producer, simple_consumer
from telemetry_support import PrometheusServer, data_points, otlp_attributes, otlp_metrics, samples, scrape

from rocketscope.telemetry.catalogue import CATALOGUE

pytestmark = pytest.mark.e2e

TOPIC, GROUP = "TopicOtelPush", "GroupOtelPush"
SMALL, LARGE, CONSUMED = 20, 10, 18
SMALL_BODY, LARGE_BODY = 100, 2500  # stored sizes fall in (.., 1024] and (1024, 4096] with any header
IDENTITY = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a-0"}
# what the collector's Prometheus exporter adds to every series (the OTel scope and the resource's
# service.name as job); the broker's own /metrics has none of them
COLLECTOR_ONLY_LABELS = {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url", "job", "instance"}
# PROM mode keeps RocketMQ's names for these; the OTel rules (which the collector applies) add the unit
UNIT_RENAMED = {"rocketmq_throughput_in_total": "rocketmq_throughput_in_bytes_total",
           "rocketmq_throughput_out_total": "rocketmq_throughput_out_bytes_total",
           "rocketmq_message_size_bucket": "rocketmq_message_size_bytes_bucket",
           "rocketmq_message_size_count": "rocketmq_message_size_bytes_count",
           "rocketmq_message_size_sum": "rocketmq_message_size_bytes_sum"}
GAUGES_WITH_UNIT_1 = {i.prometheus_name for i in CATALOGUE if i.kind.prometheus_type == "gauge" and i.unit == "1"
                      and not i.prometheus_name.endswith("_ratio")}


def collector_name(name: str) -> str:
    """The name the collector's Prometheus exporter (and Prometheus 3's OTLP receiver) gives a series
    PROM mode calls ``name``: the unit renames above, and the OTel translator's ``_ratio`` on a gauge
    declared with unit "1" (a defect while the catalogue declares it: RocketMQ sets no unit there and
    deploy/'s alerts and panels query the name without _ratio; docs/PUSH.md)."""
    if name in UNIT_RENAMED:
        return UNIT_RENAMED[name]
    return name + "_ratio" if name in GAUGES_WITH_UNIT_1 else name
# series of the workload whose values both brokers must have identically (ours: counters, sizes, lag)
COMPARED = ("rocketmq_messages_in_total", "rocketmq_messages_out_total", "rocketmq_throughput_in_total",
            "rocketmq_throughput_out_total", "rocketmq_message_size_bucket", "rocketmq_message_size_count",
            "rocketmq_message_size_sum", "rocketmq_consumer_lag_messages", "rocketmq_consumer_inflight_messages",
            "rocketmq_consumer_ready_messages", "rocketmq_topic_max_offset", "rocketmq_consumer_committed_offset")


@dataclass
class Truth:
    sent: int
    small: int
    delivered: int

    @property
    def lag(self) -> int:
        return self.sent - self.delivered


def run_workload(c: LocalCluster) -> Truth:
    """SMALL + LARGE sends and CONSUMED receive+acks on broker-a of ``c``; returns what happened."""
    node = c.brokers["broker-a"]
    c.admin("updateTopic", "-b", node.admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
    c.admin("updateSubGroup", "-b", node.admin_addr, "-g", GROUP)
    with producer(node.endpoint, TOPIC) as p:
        for i in range(SMALL + LARGE):
            body = (b"s" * SMALL_BODY) if i < SMALL else (b"L" * LARGE_BODY)
            p.send(message(TOPIC, body))
    with simple_consumer(node.endpoint, GROUP, TOPIC) as cons:
        got = drain(cons, CONSUMED, batch=1)
    # one message per receive: exactly CONSUMED unless a hand-out expired and came back (30 s invisible)
    assert len(got) == CONSUMED == len({m.message_id for m in got})
    return Truth(sent=SMALL + LARGE, small=SMALL, delivered=len(got))


def start_cluster(root: Path, **broker_conf: Any) -> LocalCluster:
    c = LocalCluster(root)
    try:
        c.start_namesrv()
        c.start_broker("broker-a", **broker_conf)
    except BaseException:
        print(c.logs())
        c.stop()
        raise
    return c


def comparable(text: str, collector: bool) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The COMPARED series of one exposition keyed by (PROM-mode name, labels), for the workload's
    topic; collector series are renamed back and lose the labels only the collector adds, and
    ``le`` is normalised (``1024`` vs ``1024.0``)."""
    back = {collector_name(n): n for n in COMPARED}
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for name, labels, value in samples(text):
        name = back.get(name, name) if collector else name
        if name not in COMPARED or labels.get("topic") != TOPIC:
            continue
        labels = {k: v for k, v in labels.items() if not (collector and k in COLLECTOR_ONLY_LABELS)}
        if "le" in labels:
            labels["le"] = repr(float(labels["le"]))
        out[(name, frozenset(labels.items()))] = value
    return out


def one(table: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    hits = [v for (n, lab), v in table.items() if n == name and all((k, x) in lab for k, x in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} series"
    return hits[0]


def check_truth(table: dict[tuple[str, frozenset[tuple[str, str]]], float], truth: Truth) -> None:
    """The counted workload, series by series (labels of the identity included)."""
    assert one(table, "rocketmq_messages_in_total", **IDENTITY, message_type="normal") == truth.sent
    assert one(table, "rocketmq_messages_out_total", **IDENTITY, consumer_group=GROUP) == truth.delivered
    assert one(table, "rocketmq_message_size_count", **IDENTITY) == truth.sent
    assert one(table, "rocketmq_message_size_bucket", **IDENTITY, le="1024.0") == truth.small
    assert one(table, "rocketmq_message_size_bucket", **IDENTITY, le="4096.0") == truth.sent
    assert one(table, "rocketmq_consumer_lag_messages", **IDENTITY, consumer_group=GROUP, is_retry="false") \
        == truth.lag


@pytest.fixture(scope="module")
def prom_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Truth]]:
    """The reference: a PROM-mode broker after the workload; yields (its /metrics text, truth)."""
    port = free_port()
    c = start_cluster(tmp_path_factory.mktemp("otel-prom"), metricsExporterType="PROM",
                      metricsPromExporterHost="127.0.0.1", metricsPromExporterPort=port)
    try:
        truth = run_workload(c)
        url = f"http://127.0.0.1:{port}/metrics"
        # gauges are sampled at scrape time and the counters are final: wait until the lag reads true
        wait_until(lambda: one(comparable(scrape(url), False), "rocketmq_consumer_lag_messages",
                               consumer_group=GROUP, is_retry="false") == truth.lag, timeout=30,
                   what="the PROM broker's lag")
        yield scrape(url), truth
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


@dataclass
class Pipeline:
    cluster: LocalCluster
    collector: Collector
    sink: OtlpHttpSink
    truth: Truth


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """An OTLP_GRPC broker pushing every second into the collector, after the workload."""
    sink = OtlpHttpSink()
    collector = Collector(backend=sink.url)
    c: LocalCluster | None = None
    try:
        collector.start()
        c = start_cluster(tmp_path_factory.mktemp("otel-push"), metricsExporterType="OTLP_GRPC",
                          metricsGrpcExporterTarget=collector.grpc_target, metricGrpcExporterIntervalInMills=1000)
        yield Pipeline(c, collector, sink, run_workload(c))
    except BaseException:
        print(c.logs() if c else "", "----- collector -----\n", collector.log()[-6000:])
        raise
    finally:
        if c is not None:
            c.stop()
        collector.stop()
        sink.close()


def test_the_collector_validates_deploy_config(tmp_path: Path) -> None:
    """`otelcol validate` accepts deploy/'s file as it is (and rejects it with one misspelt key, so the
    check has teeth), and the build has every component the file names."""
    binary = collector_binary()
    res = subprocess.run([binary, "validate", f"--config={COLLECTOR_CONFIG}"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr + res.stdout
    typo = tmp_path / "typo.yaml"
    typo.write_text(COLLECTOR_CONFIG.read_text().replace("send_timestamps:", "send_timestamp:"))
    res = subprocess.run([binary, "validate", f"--config={typo}"], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "send_timestamp" in res.stderr, res.stderr
    components = subprocess.run([binary, "components"], capture_output=True, text=True, timeout=60).stdout
    for name in ("otlp", "batch", "memory_limiter", "prometheus", "otlp_http", "debug"):
        assert f"name: {name}\n" in components, components


def test_collector_exposes_the_pushed_values_unchanged(pipeline: Pipeline, prom_broker: tuple[str, Truth]) -> None:
    reference_text, reference_truth = prom_broker
    assert reference_truth == pipeline.truth  # the same workload happened on both brokers
    reference = comparable(reference_text, collector=False)
    check_truth(reference, pipeline.truth)

    # the counters are final when the workload ends; the collector has them after a push and a batch
    def arrived() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        table = comparable(scrape(pipeline.collector.metrics_url), collector=True)
        return table if table == reference else None

    try:
        got = wait_until(arrived, timeout=60, interval=0.5, what="the collector's series equal to PROM mode's")
    except AssertionError:
        got = comparable(scrape(pipeline.collector.metrics_url), collector=True)
        diff = {k: (reference.get(k), got.get(k)) for k in reference.keys() | got.keys()
                if reference.get(k) != got.get(k)}
        raise AssertionError(f"(PROM /metrics, collector) differ: {diff}") from None
    check_truth(got, pipeline.truth)
    assert len(got) >= 15, got  # every COMPARED family, histogram buckets included

    # the labels the collector adds are only the documented ones (deploy/otel-collector/config.yaml)
    text = scrape(pipeline.collector.metrics_url)
    added = {k for n, lab, _ in samples(text) if n == "rocketmq_messages_in_total" for k in lab} - {
        k for n, lab, _ in samples(reference_text) if n == "rocketmq_messages_in_total" for k in lab}
    assert added <= COLLECTOR_ONLY_LABELS, added

    # every series name PROM mode serves for the broker arrives too (renamed where documented)
    served = {n for n, _, _ in samples(text)}
    missing = {collector_name(n) for n, lab, _ in samples(reference_text)
               if n.startswith("rocketmq_") and lab.get("node_id") == IDENTITY["node_id"]} - served
    assert not missing, f"PROM-mode series missing behind the collector: {sorted(missing)}"


def test_prometheus_scrapes_the_collector(pipeline: Pipeline) -> None:
    """A real Prometheus (Debian's 2.42) scraping the collector's exporter sees the counted workload."""
    truth = pipeline.truth
    ident = ",".join(f'{k}="{v}"' for k, v in IDENTITY.items())
    with PrometheusServer({"otelcol": [f"127.0.0.1:{pipeline.collector.prom_port}"]}) as prom:
        prom.wait_healthy("otelcol", timeout=60)
        sel = f'topic="{TOPIC}",{ident}'
        assert prom.wait_value(f"rocketmq_messages_in_total{{{sel}}}", lambda v: v == truth.sent, 60) == truth.sent
        assert prom.wait_value(f'rocketmq_messages_out_total{{{sel},consumer_group="{GROUP}"}}') == truth.delivered
        assert prom.wait_value(f"rocketmq_message_size_bytes_count{{{sel}}}") == truth.sent
        assert prom.wait_value(f'rocketmq_message_size_bytes_bucket{{{sel},le=~"1024(\\\\.0)?"}}') == truth.small
        lag = collector_name("rocketmq_consumer_lag_messages")
        assert prom.wait_value(f'{lag}{{{sel},consumer_group="{GROUP}",is_retry="false"}}') == truth.lag
        # the rpc histogram of the sends: one observation per send, whatever their latency
        assert prom.wait_value(f'sum(rocketmq_rpc_latency_milliseconds_count{{{ident},request_code="send_message"}})'
                               ) == truth.sent
        labels = prom.query(f"rocketmq_messages_in_total{{{sel}}}")[0]["metric"]
        # the collector's job label (the broker's service.name) is kept as exported_job
        assert labels["job"] == "otelcol" and labels.get("exported_job") == "rocketscope-broker", labels
        assert labels.get("exported_instance"), labels  # the node's service.instance.id
        assert {k: labels[k] for k in IDENTITY} == IDENTITY


def test_collector_forwards_the_values_over_otlp_http(pipeline: Pipeline) -> None:
    """deploy/'s otlphttp/backend exporter forwards the same cumulative values with their attributes."""
    truth = pipeline.truth

    def latest(name: str, **attrs: Any) -> float | None:
        points = [p for m in otlp_metrics(pipeline.sink.snapshot()) if m.name == name for p in data_points(m)
                  if all(otlp_attributes(p).get(k) == v for k, v in attrs.items())]
        if not points:
            return None
        last = max(points, key=lambda p: p.time_unix_nano)
        return last.count if hasattr(last, "bucket_counts") else (last.as_int or last.as_double)

    wait_until(lambda: latest("rocketmq_messages_in_total", topic=TOPIC, **IDENTITY) == truth.sent, timeout=60,
               interval=0.5, what="messages in forwarded over OTLP/HTTP")
    assert latest("rocketmq_messages_out_total", topic=TOPIC, consumer_group=GROUP, **IDENTITY) == truth.delivered
    assert latest("rocketmq_message_size", topic=TOPIC, **IDENTITY) == truth.sent
    assert set(pipeline.sink.paths) == {"/v1/metrics"}


def check_prometheus3(prom: Prometheus3Server, cluster: str, truth: Truth,
                      reference: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> None:
    """The counted workload of ``cluster`` in Prometheus 3, and the PROM broker's byte counts."""
    ident = ",".join(f'{k}="{v}"' for k, v in {**IDENTITY, "cluster": cluster}.items())
    sel = f'topic="{TOPIC}",{ident}'
    assert prom.wait_value(f"rocketmq_messages_in_total{{{sel}}}", lambda v: v == truth.sent, 60) == truth.sent
    assert prom.wait_value(f'rocketmq_messages_out_total{{{sel},consumer_group="{GROUP}"}}',
                           lambda v: v == truth.delivered) == truth.delivered
    assert prom.wait_value(f"rocketmq_message_size_bytes_count{{{sel}}}") == truth.sent
    assert prom.wait_value(f'rocketmq_message_size_bytes_bucket{{{sel},le=~"1024(\\\\.0)?"}}') == truth.small
    lag = collector_name("rocketmq_consumer_lag_messages")
    assert prom.wait_value(f'{lag}{{{sel},consumer_group="{GROUP}",is_retry="false"}}',
                           lambda v: v == truth.lag) == truth.lag
    for name, labels in (("rocketmq_throughput_in_total", {"message_type": "normal"}),
                         ("rocketmq_message_size_sum", {})):
        pushed = prom.wait_value(f"{collector_name(name)}{{{sel}}}")
        assert math.isclose(pushed, one(reference, name, **labels)), (name, pushed)
    series = prom.query(f"rocketmq_messages_in_total{{{sel}}}")[0]["metric"]
    assert series.get("job") == "rocketscope-broker", series


def test_prometheus3_takes_otlp_from_the_broker_and_through_the_collector(
        tmp_path_factory: pytest.TempPathFactory, prom_broker: tuple[str, Truth]) -> None:
    """Prometheus 3's OTLP receiver, fed twice: by a broker's OTLP/HTTP push with nothing between
    them (cluster "Direct"), and by deploy/'s collector forwarding a broker's OTLP/gRPC push through
    its otlp_http/backend exporter (cluster "Relayed"). Both show the counted workload and the PROM
    broker's byte counts."""
    reference = comparable(prom_broker[0], collector=False)
    with Prometheus3Server() as prom:
        assert prom.version().startswith("3."), prom.version()
        collector = Collector(backend=f"{prom.url}/api/v1/otlp")  # otlp_http appends /v1/metrics
        clusters: list[LocalCluster] = []
        try:
            collector.start()
            clusters.append(start_cluster(
                tmp_path_factory.mktemp("otel-prom3-direct"), brokerClusterName="Direct",
                metricsExporterType="OTLP_HTTP", metricsHttpExporterTarget=prom.otlp_url,
                metricGrpcExporterIntervalInMills=1000))
            clusters.append(start_cluster(
                tmp_path_factory.mktemp("otel-prom3-relayed"), brokerClusterName="Relayed",
                metricsExporterType="OTLP_GRPC", metricsGrpcExporterTarget=collector.grpc_target,
                metricGrpcExporterIntervalInMills=1000))
            for c, cluster in zip(clusters, ("Direct", "Relayed"), strict=True):
                check_prometheus3(prom, cluster, run_workload(c), reference)
        except BaseException:
            print(*(c.logs() for c in clusters), "----- collector -----\n", collector.log()[-6000:])
            raise
        finally:
            for c in clusters:
                c.stop()
            collector.stop()
