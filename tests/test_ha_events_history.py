"""Replication events over real processes (issue 15): the history lives in RMQ_SYS_HA_EVENTS.

* `admin haEvents` answers from the replicated topic, so after a restart of every node the
  earlier leaderships, a follower's truncation and every node's role changes are still there,
  each with the Raft term it happened in (never -1 in DLedger mode).
* commit_advanced events are throttled to haEventCommitIntervalMillis: a counted burst of sends
  produces at most duration / interval + slack of them, the replaced ones are counted, and their
  offsets and times survive as the written events' steps.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from cluster import BrokerNode, LocalCluster, cluster_with_namesrv, stop_together, wait_until
from conftest import failed_call, free_port
from rmq import message, producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from telemetry_support import find, scrape

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2

pytestmark = pytest.mark.e2e
COMMIT_INTERVAL_MS = 250
TOPIC = "TopicHaEv"


def admin_call(addr: str, method: str, request: Any) -> Any:
    with grpc.insecure_channel(addr) as ch:
        return getattr(admin_pb2_grpc.BrokerAdminStub(ch), method)(request, timeout=10)


def status(addr: str) -> dict[str, Any]:
    return json.loads(admin_call(addr, "HaStatus", common_pb2.Empty()).json)


def events(addr: str, limit: int = 5000) -> list[dict[str, Any]]:
    return [json.loads(e) for e in admin_call(addr, "HaEvents", admin_pb2.HaEventsRequest(max=limit)).events]


def raw_send(endpoint: str, n: int, timeout: float) -> None:
    """Send ``n`` messages straight to one node, ignoring the outcome (they may never commit)."""
    with grpc.insecure_channel(endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        for i in range(n):
            req = svc.SendMessageRequest()
            m = req.messages.add(body=b"uncommitted-%d" % i)
            m.topic.name = TOPIC
            m.system_properties.message_id = f"UNCOMMITTED{i:04d}{time.time_ns()}"
            m.system_properties.message_type = pb.NORMAL
            try:
                stub.SendMessage(req, timeout=timeout, metadata=(("x-mq-client-id", "raw-test"),))
            except grpc.RpcError:
                pass


def start_group(c: LocalCluster, name: str, conf: Callable[[int], dict[str, Any]], size: int = 3
                ) -> list[BrokerNode]:
    """A DLedger group whose member ``i`` also gets ``conf(i)`` (tests/cluster.py's helper gives all the same)."""
    peer_ports = [free_port() for _ in range(size)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(peer_ports))
    return [c.start_broker(f"{name}-n{i}", brokerName=name, enableDLegerCommitLog="true", dLegerGroup=name,
                           dLegerPeers=peers, dLegerSelfId=f"n{i}", **conf(i)) for i in range(size)]


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("haev"), lambda: failed_call(request)) as c:
        yield c


@pytest.mark.timeout(600)  # about 60 s on a quiet machine; elections and restarts take far longer under load
def test_ha_events_survive_restarts_with_follower_truncations_and_terms(cluster: LocalCluster) -> None:
    c = cluster
    prom = [free_port() for _ in range(3)]
    nodes = start_group(c, "broker-h", lambda i: {
        "metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1", "metricsPromExporterPort": prom[i],
        "haEventCommitIntervalMillis": COMMIT_INTERVAL_MS, "maxWaitAckTimeMs": 1500})

    def leader(exclude: tuple[int, ...] = ()) -> int | None:
        for i, n in enumerate(nodes):
            if i in exclude:
                continue
            try:
                if status(n.admin_addr)["role"] == "LEADER":
                    return i
            except grpc.RpcError:
                continue
        return None

    def await_leader(exclude: tuple[int, ...] = (), timeout: float = 60) -> int:
        return wait_until(lambda: (lambda i: (i,) if i is not None else None)(leader(exclude)), timeout=timeout,
                          what=f"a leader (not {exclude})")[0]

    first = await_leader()
    ld = nodes[first]
    c.admin("updateTopic", "-b", ld.admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")

    # --- 2. a counted burst: commit events are throttled to one per COMMIT_INTERVAL_MS on the leader
    sent = 0
    errors = 0
    with producer(";".join(n.endpoint for n in nodes), TOPIC) as p:
        t0 = time.time()
        lock = threading.Lock()

        def worker() -> None:
            nonlocal sent, errors
            for i in range(100):
                try:
                    p.send(message(TOPIC, b"burst-%d" % i))
                    with lock:
                        sent += 1
                except Exception:
                    with lock:
                        errors += 1

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        t1 = time.time()
    assert sent >= 380, f"only {sent} of 400 sends acknowledged ({errors} failed)"
    # every node throttles its own commit events (leadership may move on a loaded machine)
    def settled() -> bool:
        """The burst's commit events are all in the topic: two reads 2 s apart agree."""
        def count() -> int:
            return sum(1 for e in events(ld.admin_addr) if e["type"] == "commit_advanced")
        a = count()
        time.sleep(2.0)
        return a > 0 and count() == a

    wait_until(settled, timeout=90, what="the burst's commit events written")
    commits: dict[str, list[dict[str, Any]]] = {}
    for e in events(ld.admin_addr):
        if e["type"] == "commit_advanced" and t0 * 1000 <= e["ts"] <= t1 * 1000 + COMMIT_INTERVAL_MS:
            commits.setdefault(e["node"], []).append(e)
    bound = (t1 - t0) * 1000 / COMMIT_INTERVAL_MS + 2
    assert commits, "no commit event for the burst"
    for node, evs in commits.items():
        assert len(evs) <= bound, f"{node}: {len(evs)} commit events for {sent} sends in {t1 - t0:.1f} s " \
                                  f"(bound {bound:.0f})"
        # the replaced advances are not lost: each written event carries them as steps, oldest
        # first, each before the event itself (rocketscope/ha_events.py, HaEvent.expand)
        for e in evs:
            advances = [*(tuple(st) for st in e.get("steps", [])), (e["offset"], e["ts"])]
            assert all(a[0] < b[0] and a[1] <= b[1] for a, b in itertools.pairwise(advances)), (node, e)
    folded = sum(len(e.get("steps", [])) for evs in commits.values() for e in evs)
    assert folded > 0, "a 400-send burst in a few seconds folded no commit advance into a later event"
    text = scrape(f"http://127.0.0.1:{prom[first]}/metrics")
    throttled = find(text, "rocketmq_ha_events_throttled_total", event_type="commit_advanced")
    assert throttled and throttled[0][1] >= 1, "replaced commit events are not counted"

    # --- 1a. a follower truncation: the leader appends entries its stopped followers never see.
    # The followers are killed, not paused: a paused follower still receives the leader's appends into
    # its socket buffer and takes them on resuming, and then the old leader has nothing to truncate.
    # (On a loaded machine leadership may move before the kill: then try again with the new leader.)
    for _attempt in range(3):
        cur = await_leader()
        old = nodes[cur]
        followers = [i for i in range(3) if i != cur]
        for i in followers:
            nodes[i].proc.kill9()
        sender = threading.Thread(target=raw_send, args=(old.endpoint, 3, 2.0))
        try:
            # the followers hold at most what the leader had when they died: entries past that diverge
            held = status(old.admin_addr)["lastIndex"]
            sender.start()
            wait_until(lambda old=old, held=held: status(old.admin_addr)["lastIndex"] > held, timeout=20,
                       what="entries the stopped followers never saw on the old leader")
            old.proc.pause(True)
            break
        except AssertionError:
            continue
        finally:
            for i in followers:
                nodes[i].proc.start()
            if not old.proc.alive:
                raise AssertionError("the leader died")
    else:
        raise AssertionError("no leader kept its leadership long enough to append uncommitted entries")
    try:
        second = await_leader((cur,), 90)
    finally:
        old.proc.pause(False)
    sender.join(60)
    old_node = f"broker-h-n{cur}"
    wait_until(lambda: any(e["type"] == "truncation" and e["node"] == old_node
                           for e in events(nodes[second].admin_addr)) or None,
               timeout=120, interval=0.5, what="the old leader's truncation in the topic")
    before = events(nodes[second].admin_addr)
    terms_before = {e["term"] for e in before if e["type"] == "leader_elected"}
    assert len(terms_before) >= 2, terms_before

    # --- 1b. restart every node: the history comes back from the topic, not from memory
    stop_together(n.proc for n in nodes)  # the whole group down before any member starts
    for n in nodes:
        n.proc.start()
    third = await_leader(timeout=90)
    wait_until(lambda: all(status(n.admin_addr)["commitIndex"] >= status(nodes[third].admin_addr)["commitIndex"] > 0
                           for n in nodes), timeout=60, what="every node caught up")
    all_nodes = {f"broker-h-n{i}" for i in range(3)}
    for n in nodes:  # every node answers the whole history from its own copy of the topic
        after = wait_until(lambda n=n: (lambda ev: ev if {e["node"] for e in ev if e["type"] == "role_change"
                                                          and e["ts"] > before[-1]["ts"]} == all_nodes else None)(
            events(n.admin_addr)), timeout=60, interval=0.5,
            what=f"{n.name}: every node's role change after the restart")
        kinds = {(e["type"], e["node"]) for e in after}
        assert ("truncation", old_node) in kinds, f"{n.name} lost the follower truncation"
        assert terms_before <= {e["term"] for e in after if e["type"] == "leader_elected"}, \
            f"{n.name} lost earlier leaderships"
        assert not [e for e in after if e["term"] < 0], "DLedger events without a term"
        restarted = [e for e in after if e["type"] == "role_change" and e["ts"] > before[-1]["ts"]]
        max_term = max(e["term"] for e in before)
        first_after = {}
        for e in restarted:
            first_after.setdefault(e["node"], e)
        assert all(e["term"] >= max_term for e in first_after.values()), first_after
