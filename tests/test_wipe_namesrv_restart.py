"""wipeWritePerm ends when the name server restarts, as on Apache RocketMQ 5.3.3.

Apache's name server keeps routes in memory only (RouteInfoManager.operateWritePermOfBroker sets the
queue data's perm in its topicQueueTable; nothing is written to disk; read with javap from
rocketmq-namesrv-5.3.3.jar). A restarted one learns each route from the broker's next registration,
with the broker's own topic perm, so the broker is writable again. RocketScope's name server keeps
the wipe in memory too (broker/namesrv/route_info.py ``write_wiped``): this test restarts it on the
same port and waits for the broker's re-registration (docs/COMPATIBILITY.md A11). About 15 s.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster import LocalCluster, wait_until
from rmq import message, producer
from test_admin_ops import admin, route_perms

pytestmark = [pytest.mark.e2e, pytest.mark.long]  # ~30 s; long for make test's budget


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("wipe-restart"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a")
        yield c
    finally:
        c.stop()


def test_a_restarted_name_server_forgets_the_wipe(cluster: LocalCluster) -> None:
    topic = "WipeRestart"
    admin(cluster, "updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2")
    wait_until(lambda: route_perms(cluster, topic) == {"broker-a": 6}, timeout=10, what="topic routed")
    assert "OK" in admin(cluster, "wipeWritePerm", "-b", "broker-a").stdout
    assert route_perms(cluster, topic) == {"broker-a": 4}

    ns = cluster.namesrvs[0]
    ns.stop()
    ns.start()  # same port, empty route table

    def perms() -> dict[str, int]:
        r = admin(cluster, "topicRoute", "-t", topic, "--json", check=False)
        return route_perms(cluster, topic) if r.returncode == 0 else {}

    wait_until(lambda: perms() == {"broker-a": 6}, timeout=60, what="broker re-registered, writable")
    with producer(cluster.brokers["broker-a"].endpoint, topic) as p:  # a fresh producer's route allows sends
        assert p.send(message(topic, b"after restart")).message_id
