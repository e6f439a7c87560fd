"""RocketMQ 5's timer metrics on /metrics (broker/timer.py), read against delays the test scheduled and counted.

One broker with the Prometheus exporter; the official Python client sends N messages due 20 s later and a
simple consumer receives them. While they wait, /metrics shows N pending (rocketmq_timing_messages),
N enqueued (rocketmq_timer_enqueue_total) and N in the 5-60 s bucket of the wheel's distribution
(rocketmq_timer_message_snapshot); after the consumer got all N, N dequeued and none pending.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import LocalCluster, wait_until
from conftest import free_port
from rmq import drain, message, producer, simple_consumer
from telemetry_support import find, scrape

pytestmark = pytest.mark.e2e

N, DELAY_S = 8, 20
TOPIC, GROUP = "TimerMetricsTopic", "TimerMetricsGroup"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, str]]:
    c = LocalCluster(tmp_path)
    port = free_port()
    try:
        c.start_namesrv()
        c.start_broker("broker-a", metricsExporterType="PROM", metricsPromExporterHost="127.0.0.1",
                       metricsPromExporterPort=port)
        yield c, f"http://127.0.0.1:{port}/metrics"
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def value(url: str, name: str, **labels: str) -> float:
    return sum(v for _, v in find(scrape(url), name, **labels))


@pytest.mark.slow
def test_timer_gauges_and_counters_follow_scheduled_messages(cluster: tuple[LocalCluster, str]) -> None:
    c, url = cluster
    c.admin("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "2", "-w", "2", "-a", "+message.type=DELAY")
    endpoint = c.brokers["broker-a"].endpoint
    due = int(time.time()) + DELAY_S
    with producer(endpoint, TOPIC) as p:
        for i in range(N):
            m = message(TOPIC, f"late-{i}".encode())
            m.delivery_timestamp = due
            p.send(m)

    def pending_seen() -> bool:
        return (value(url, "rocketmq_timing_messages", topic=TOPIC) == N
                and value(url, "rocketmq_timer_enqueue_total", topic=TOPIC) == N
                and value(url, "rocketmq_timer_message_snapshot", timer_bound_s="60") == N)

    wait_until(pending_seen, timeout=DELAY_S - 6, interval=0.5, what=f"{N} pending in the timer metrics")
    assert time.time() < due  # read before they were due: the gauges showed them waiting
    assert value(url, "rocketmq_timer_dequeue_total", topic=TOPIC) == 0
    assert value(url, "rocketmq_timer_dequeue_lag") == 0 and value(url, "rocketmq_timer_enqueue_lag") == 0

    with simple_consumer(endpoint, GROUP, TOPIC) as consumer:
        got = drain(consumer, N, timeout=DELAY_S + 30)
    assert len({m.message_id for m in got}) == N and time.time() >= due

    def delivered_seen() -> bool:
        return (value(url, "rocketmq_timer_dequeue_total", topic=TOPIC) == N
                and value(url, "rocketmq_timing_messages", topic=TOPIC) == 0
                and value(url, "rocketmq_timer_dequeue_lag") == 0)

    wait_until(delivered_seen, timeout=15, interval=0.5, what=f"{N} delivered in the timer metrics")
    assert value(url, "rocketmq_timer_enqueue_total", topic=TOPIC) == N  # nothing enqueued twice
