"""The one promise of ``dLegerSyncAppends false``, with real processes: a killed process loses nothing.

A DLedger group of three brokers with appends that count once written (the Raft log fsynced every
10 ms in the background, Apache DLedger's and JetStream's policy; docs/RAFT.md) under load from the
official client.  Its leader is killed with SIGKILL, restarted, and the next leader killed too; every
send the client saw acknowledged must then be consumed, and the members' commit logs must agree below
the committed offset.  A power cut (what the mode does not promise) is the simulator's to show
(tests/test_raft_sim_background_flush.py).

Failed sends while a leader is being replaced are allowed (the client is told); acknowledged ones lost are not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import (
    BrokerNode,
    LocalCluster,
    cluster_with_namesrv,
    commitlog_bytes,
    ha_status,
    start_dledger_group,
    wait_until,
)
from conftest import failed_call
from rmq import AckedLoad, drain_ids, simple_consumer

pytestmark = pytest.mark.e2e
TOPIC = "TopicBgFlush"


def leader_of(nodes: list[BrokerNode], exclude: BrokerNode | None = None) -> BrokerNode | None:
    for n in nodes:
        if n is exclude or not n.proc.alive:
            continue
        try:
            if ha_status(n.admin_addr)["role"] == "LEADER":
                return n
        except AssertionError:
            continue
    return None


@pytest.fixture()
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path, lambda: failed_call(request)) as c:
        yield c


def test_unsynced_appends_lose_no_acknowledged_send_when_leaders_are_killed(cluster: LocalCluster) -> None:
    c = cluster
    nodes = start_dledger_group(c, "broker-bg", 3, dLegerSyncAppends="false")
    assert all("fsynced every 10 ms in the background" in n.proc.log() for n in nodes), "the mode is not on"
    first = wait_until(lambda: leader_of(nodes), timeout=30, what="a leader")
    c.admin("updateTopic", "-b", first.admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
    endpoint = ";".join(n.endpoint for n in nodes)
    # a failed send during a failover is allowed (the client was told); a lost acknowledged one is not
    load = AckedLoad(endpoint, TOPIC, "bg-").start()
    acked = load.acked

    def acked_more(than: int) -> bool:
        return len(acked) >= than

    try:
        for kill in range(2):
            wait_until(lambda n=len(acked) + 100: acked_more(n), timeout=60,
                       what=f"sends acknowledged before kill {kill + 1}")
            victim = wait_until(lambda: leader_of(nodes), timeout=30, what="the leader to kill")
            victim.proc.kill9()
            wait_until(lambda v=victim: leader_of(nodes, exclude=v), timeout=30, what="a new leader after kill -9")
            wait_until(lambda n=len(acked) + 50: acked_more(n), timeout=60, what="sends succeed after the failover")
            c.start_broker(victim.name)
        wait_until(lambda n=len(acked) + 50: acked_more(n), timeout=60, what="sends with every member back")
    finally:
        load.stop()

    def converged() -> list | None:  # type: ignore[type-arg]
        sts = [ha_status(n.admin_addr) for n in nodes]
        return sts if len({s["commitIndex"] for s in sts}) == 1 and sts[0]["commitIndex"] > 0 else None

    statuses = wait_until(converged, timeout=60, what="all members at the same commit index")
    end = min(s["commitOffset"] for s in statuses)
    logs = [commitlog_bytes(n.store, end) for n in nodes]
    assert logs[0] == logs[1] == logs[2], "members disagree below the committed offset"
    with simple_consumer(endpoint, "GroupBgFlush", TOPIC) as consumer:
        got = drain_ids(consumer, set(acked), timeout=120)
    consumed = {m.message_id: m.body for m in got}
    missing = set(acked) - set(consumed)
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost"
    assert all(consumed[mid] == body for mid, body in acked.items()), "a message came back with another body"
