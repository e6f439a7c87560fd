"""Retention in DLedger mode over real processes (issue 15): the log is bounded, and safely so.

Small segments and an expiry of 14 s force retention.  While one member is down the
others keep every expired segment it still needs (they log why); once it is back and caught up,
every member deletes the old segments and compacts its Raft index; a follower restarted after
the deletion catches up; a consumer loses nothing it had not consumed; the replicas' commit
logs are equal over the range they all still hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster import BrokerNode, LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call, free_port
from rmq import drain_ids, message, producer, simple_consumer

from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2

pytestmark = pytest.mark.e2e
TOPIC, GROUP = "TopicRet", "GroupRet"
SEGMENT = 64 * 1024
BODY = b"r" * 1024


def admin(addr: str, method: str) -> Any:
    with grpc.insecure_channel(addr) as ch:
        return getattr(admin_pb2_grpc.BrokerAdminStub(ch), method)(common_pb2.Empty(), timeout=10)


def status(n: BrokerNode) -> dict[str, Any]:
    return json.loads(admin(n.admin_addr, "HaStatus").json)


def min_offset(n: BrokerNode) -> int:
    return int(admin(n.admin_addr, "BrokerStatus").table["commitLogMinOffset"])


def segments(n: BrokerNode) -> list[Path]:
    return sorted((n.store / "commitlog").iterdir())


def log_range(n: BrokerNode, lo: int, hi: int) -> bytes:
    out = bytearray()
    for seg in segments(n):
        start = int(seg.name)
        data = seg.read_bytes()
        a, b = max(lo, start), min(hi, start + len(data))
        if a < b:
            out += data[a - start:b - start]
    return bytes(out)


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("dlret"), lambda: failed_call(request)) as c:
        yield c


def test_dledger_retention_bounds_the_log_without_losing_what_replicas_or_consumers_need(
        cluster: LocalCluster) -> None:
    c = cluster
    peer_ports = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(peer_ports))
    conf = {"mappedFileSizeCommitLog": SEGMENT, "fileReservedTime": 0.004,  # 14.4 s: phase 3 consumes well within it
            "deleteWhen": ";".join(str(h) for h in range(24)), "cleanResourceInterval": 300}
    nodes = [c.start_broker(f"broker-r-n{i}", brokerName="broker-r", enableDLegerCommitLog="true",
                            dLegerGroup="broker-r", dLegerPeers=peers, dLegerSelfId=f"n{i}", **conf)
             for i in range(3)]

    def leader() -> tuple[int] | None:
        for i, n in enumerate(nodes):
            if n.proc.alive and status(n)["role"] == "LEADER":
                return (i,)
        return None

    (ld,) = wait_until(leader, timeout=60, what="a leader")
    c.admin("updateTopic", "-b", nodes[ld].admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
    endpoints = ";".join(n.endpoint for n in nodes)
    with simple_consumer(endpoints, GROUP, TOPIC) as cons:
        # 1. a member is down: the expired segments it still needs stay on the others
        lagging = next(i for i in range(3) if i != ld)
        nodes[lagging].proc.stop()
        with producer(endpoints, TOPIC) as p:
            first = {p.send(message(TOPIC, BODY)).message_id for _ in range(300)}
        got = {m.message_id for m in drain_ids(cons, first, timeout=120, quiet=1.0)}
        assert first <= got
        wait_until(lambda: "retention keeps" in nodes[ld].proc.log(), timeout=60,
                   what="the leader holding expired segments back for the member that is down")
        assert min_offset(nodes[ld]) == 0 and len(segments(nodes[ld])) >= 4

        # 2. the member returns: every member deletes the old segments and compacts its index
        nodes[lagging].proc.start()
        wait_until(lambda: len({status(n)["commitIndex"] for n in nodes}) == 1, timeout=90,
                   what="the returning member caught up")
        wait_until(lambda: all(min_offset(n) > 0 for n in nodes), timeout=90,
                   what="old segments deleted on every member")
        assert all(len(segments(n)) <= 3 for n in nodes), [len(segments(n)) for n in nodes]
        for n in nodes:
            assert (n.store / "dledger" / "index.v2").exists(), f"{n.name}: Raft index not compacted"

        # 3. a follower restarted after the deletion loads the compacted log and keeps up
        (ld,) = wait_until(leader, timeout=60, what="a leader")
        restarted = next(i for i in range(3) if i != ld)
        nodes[restarted].proc.stop()
        nodes[restarted].proc.start()
        with producer(endpoints, TOPIC) as p:
            second = {p.send(message(TOPIC, BODY + b"2")).message_id for _ in range(100)}
        wait_until(lambda: len({status(n)["commitIndex"] for n in nodes}) == 1, timeout=90,
                   what="the restarted follower caught up")
        got = {m.message_id for m in drain_ids(cons, second, timeout=120, quiet=1.0)}
        assert second <= got, f"{len(second - got)} messages a consumer still needed were lost"

    # 4. the replicas agree over everything they all still hold
    statuses = [status(n) for n in nodes]
    hi = min(s["commitOffset"] for s in statuses)
    lo = max(min_offset(n) for n in nodes)
    assert hi > lo
    copies = [log_range(n, lo, hi) for n in nodes]
    assert copies[0] == copies[1] == copies[2], "replicas disagree below the committed offset"
