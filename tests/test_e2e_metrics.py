"""A real Prometheus scrapes a live name server, broker and exporter; values match what happened."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster import BIN, LocalCluster, Proc, _port_open, wait_until
from conftest import free_port
from rmq import drain, message, producer, simple_consumer
from telemetry_support import PrometheusServer, find, samples, scrape

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def metrics_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    root = tmp_path_factory.mktemp("metrics")
    c = LocalCluster(root)
    exp_grpc, exp_http, exp_metrics = free_port(), free_port(), free_port()
    exporter = Proc("exporter", [str(BIN), "exporter", "--host", "127.0.0.1", "--grpc-port", str(exp_grpc),
                                 "--http-port", str(exp_http), "--metrics-port", str(exp_metrics),
                                 "--expire-after", "30"], root / "exporter.log")
    prom_ports = {"namesrv": free_port(), "broker-a": free_port()}
    try:
        exporter.start()
        wait_until(lambda: _port_open(exp_metrics), what="exporter")
        ns_conf = root / "namesrv.conf"
        ns_conf.write_text(f"metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\n"
                           f"metricsPromExporterPort={prom_ports['namesrv']}\n")
        port = free_port()
        c.namesrv_ports.append(port)
        c.namesrvs.append(Proc("namesrv0", [str(BIN), "namesrv", "-c", str(ns_conf), "-p", str(port)],
                               root / "namesrv0.log").start())
        wait_until(lambda: _port_open(port), what="name server")
        c.start_broker("broker-a", metricsExporterType="PROM", metricsPromExporterHost="127.0.0.1",
                       metricsPromExporterPort=prom_ports["broker-a"])
        c.start_broker("broker-b", metricsExporterType="OTLP_GRPC",
                       metricsGrpcExporterTarget=f"http://127.0.0.1:{exp_grpc}", metricGrpcExporterIntervalInMills=1000)
        c.admin("updateTopic", "-b", c.brokers["broker-a"].admin_addr, "-t", "TopicMetrics", "-r", "2", "-w", "2")
        c.admin("updateSubGroup", "-b", c.brokers["broker-a"].admin_addr, "-g", "GroupMetrics")
        yield {"cluster": c, "prom": prom_ports, "exporter": exp_metrics}
    except BaseException:
        print(c.logs(), exporter.log()[-3000:])
        raise
    finally:
        c.stop()
        exporter.stop()


def test_prometheus_scrapes_namesrv_broker_and_exporter(metrics_cluster: dict[str, object]) -> None:
    c: LocalCluster = metrics_cluster["cluster"]  # type: ignore[assignment]
    prom_ports: dict[str, int] = metrics_cluster["prom"]  # type: ignore[assignment]
    ep = c.brokers["broker-a"].endpoint
    with producer(ep, "TopicMetrics") as p:
        for i in range(30):
            p.send(message("TopicMetrics", f"m{i}".encode() * 10))
    with simple_consumer(ep, "GroupMetrics", "TopicMetrics") as cons:
        assert len(drain(cons, 20, batch=1)) == 20  # 20 consumed and acked, 10 left: lag 10

    jobs = {"namesrv": [f"127.0.0.1:{prom_ports['namesrv']}"], "broker": [f"127.0.0.1:{prom_ports['broker-a']}"],
            "exporter": [f"127.0.0.1:{metrics_cluster['exporter']}"]}
    with PrometheusServer(jobs, scrape_interval="1s") as prom:
        wait_until(lambda: len(prom.targets()) == 3 and all(t["health"] == "up" for t in prom.targets()),
                   timeout=40, what="all three targets up")

        def value(expr: str) -> float | None:
            res = prom.query(expr)
            return float(res[0]["value"][1]) if res else None

        wait_until(lambda: value('sum(rocketmq_messages_in_total{topic="TopicMetrics"})') == 30, timeout=30,
                   what="messages in = 30")
        assert value('sum(rocketmq_messages_out_total{topic="TopicMetrics",consumer_group="GroupMetrics"})') == 20
        wait_until(lambda: value('rocketmq_consumer_lag_messages{topic="TopicMetrics",consumer_group="GroupMetrics",'
                                 'is_retry="false"}') == 10, timeout=30, what="lag = 10")
        labels = prom.query('rocketmq_messages_in_total{topic="TopicMetrics"}')[0]["metric"]
        assert labels["cluster"] == "DefaultCluster" and labels["node_type"] == "broker"
        assert labels["node_id"] == "broker-a-0" and labels["message_type"] == "normal"
        assert value("rocketmq_namesrv_registered_brokers") == 2
        assert value('rocketmq_ha_role{node_id="broker-a-0",broker_group="broker-a"}') == 3  # 3 = master
        ns = prom.query("rocketmq_namesrv_registered_brokers")[0]["metric"]
        assert ns["cluster"] == "DefaultCluster" and ns["broker_cluster"] == "DefaultCluster"
        # broker-b pushes OTLP to the exporter, which Prometheus scrapes
        wait_until(lambda: value('rocketmq_topic_number{node_id="broker-b-0"}') is not None, timeout=30,
                   what="broker-b's series through the exporter")
    text = scrape(f"http://127.0.0.1:{prom_ports['broker-a']}/metrics")
    rpc = find(text, "rocketmq_rpc_latency_milliseconds_count", request_code="send_message", protocol_type="grpc")
    assert rpc and sum(v for _, v in rpc) >= 30
    assert find(text, "rocketmq_message_size_bucket", topic="TopicMetrics", le="1024.0")
    # the event-loop probe (broker/loop_lag.py) has been recording since the broker started, seconds ago
    loop_lag = find(text, "rocketscope_event_loop_lag_milliseconds_count")
    assert loop_lag and loop_lag[0][1] > 0, "no event-loop lag series on the broker's /metrics"


def test_metrics_addr_is_registered_for_dashboards(metrics_cluster: dict[str, object]) -> None:
    c: LocalCluster = metrics_cluster["cluster"]  # type: ignore[assignment]
    nodes = {n["brokerName"]: n for n in c.admin_json("clusterList")}
    assert nodes["broker-a"]["metricsAddr"].endswith(str(metrics_cluster["prom"]["broker-a"]))  # type: ignore[index]
    assert nodes["broker-b"]["metricsAddr"] == ""  # OTLP push: nothing to scrape on the broker itself


CLIENT_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
from rocketmq.v5.client.metrics.client_metrics import ClientMetrics
ClientMetrics.METRIC_READER_INTERVAL = 500  # the client's export period (60 s by default); its code is unchanged
from rmq import drain, message, producer, simple_consumer
with producer({ep!r}, "TopicClientMetrics") as p:
    # a producer does not wait for the broker's Settings at start-up; the metric switch comes with them,
    # so wait for them (a client attribute) or the first sends happen before the client measures anything
    assert p._init_settings_event.wait(20)
    time.sleep(0.2)
    for i in range(5):
        p.send(message("TopicClientMetrics", b"x"))
    print("sent", flush=True)
    time.sleep(60)  # stay connected while the test reads the broker's /metrics; the test ends this process
"""


def test_official_client_pushes_its_metrics_to_the_broker_in_proxy_mode(tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys
    from pathlib import Path

    c = LocalCluster(tmp_path_factory.mktemp("clientmetrics"))
    prom = free_port()
    try:
        c.start_namesrv()
        node = c.start_broker("broker-a", metricsExporterType="PROM", metricsPromExporterHost="127.0.0.1",
                              metricsPromExporterPort=prom, metricCollectorMode="proxy")
        script = CLIENT_SCRIPT.format(tests=str(Path(__file__).parent), ep=node.endpoint)
        client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        url = f"http://127.0.0.1:{prom}/metrics"

        def sends_seen() -> float:
            return sum(v for n, lab, v in samples(scrape(url)) if n.startswith("rocketmq_send_cost_time")
                       and n.endswith("_count") and lab.get("topic") == "TopicClientMetrics")

        # the client pushes when its process exits; wait for that push, not for a fixed time
        try:
            wait_until(lambda: sends_seen() >= 5, timeout=60, what="the client's send histogram on /metrics")
            assert sends_seen() == 5
        finally:
            client.kill()
            client.wait(10)
        # (the Python SimpleConsumer records no consume-side histograms; its PushConsumer does)
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()
