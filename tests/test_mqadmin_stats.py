"""Apache's mqadmin 5.3.3 statsAll and consumerProgress against RocketScope, for a group that consumed only
over gRPC (the official Python SimpleConsumer), on traffic the test sent and counted.

statsAll reads the broker's counters over VIEW_BROKER_STATS_DATA (broker/broker_stats.py,
broker/remoting/admin_ops_handlers.py); both commands first ask the route of ``%RETRY%<group>``,
which the broker creates at the group's first consumer heartbeat, as Apache does
(broker/grpc_service.py ``_retry_topic``). Two JVM starts (about 10 s each on this machine).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import LocalCluster
from peers_support import require_peers
from rmq import drain, message, producer, simple_consumer
from test_admin_ops import CLUSTER, admin, diff_total, mqadmin, ok

pytestmark = pytest.mark.e2e

SENT, CONSUMED = 12, 8


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("mqadmin-stats"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def stats_rows(out: str, topic: str) -> list[list[str]]:
    """statsAll's rows of ``topic``: topic, group, accumulation, in TPS, out TPS, in 24 h, out 24 h."""
    return [line.split() for line in ok(out).splitlines() if line.split()[:1] == [topic]]


def test_stats_all_and_consumer_progress_of_a_grpc_group(cluster: LocalCluster, tmp_path: Path) -> None:
    require_peers()
    topic, group = "StatsTopic", "StatsGrpcGroup"
    a = cluster.brokers["broker-a"]
    admin(cluster, "updateTopic", "-c", CLUSTER, "-t", topic, "-r", "4", "-w", "4")
    started = time.monotonic()
    with producer(a.endpoint, topic) as p:
        for i in range(SENT):
            p.send(message(topic, f"stats-{i}".encode()))
    with simple_consumer(a.endpoint, group, topic) as consumer:
        got = drain(consumer, CONSUMED, batch=1, timeout=40)  # one at a time: exactly CONSUMED taken and acked
    assert len({m.message_id for m in got}) == CONSUMED

    rows = stats_rows(mqadmin(cluster.namesrv_addr, tmp_path, "statsAll", "-t", topic), topic)
    elapsed = time.monotonic() - started
    assert len(rows) == 1 and rows[0][1] == group, rows
    _, _, accumulation, in_tps, out_tps, in_day, out_day = rows[0]
    assert (int(accumulation), int(in_day), int(out_day)) == (SENT - CONSUMED, SENT, CONSUMED)
    if elapsed < 45:  # the minute window still holds every send and receive: TPS is the count over 60 s
        assert (in_tps, out_tps) == (f"{SENT / 60:.2f}", f"{CONSUMED / 60:.2f}")
    else:
        assert float(in_tps) > 0 and float(out_tps) > 0

    # the group never retried: its %RETRY% topic exists from its heartbeat, so mqadmin gets the table
    assert diff_total(mqadmin(cluster.namesrv_addr, tmp_path, "consumerProgress", "-g", group)) == SENT - CONSUMED
