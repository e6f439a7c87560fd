"""Batches through a three-process DLedger group: one Raft entry per batch, offsets intact across a restart (issue 20).

Ground truth is what the test sent: SEND_BATCH_MESSAGE frames of 32 numbered bodies over
remoting, one at a time, to the leader.  Each batch is one ``put_messages`` group, so the
leader's Raft log grows by one entry per batch (broker/dledger/node.py ``plan_entries``), not
one per message; every member's consume queue then holds exactly the messages sent, and after
all three members are stopped and started again the queue positions, the bodies read back and
the offsets of the next batch continue from there.

Marked ``long``: ``.venv/bin/pytest -q tests/test_e2e_dledger_batches.py`` (``make test-full`` runs it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from cluster import BrokerNode, LocalCluster, cluster_with_namesrv, stop_together, wait_until
from conftest import failed_call, free_port

from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2
from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import BatchEntry, RequestCode, encode_batch
from rocketscope.names import HA_EVENTS_TOPIC
from rocketscope.remoting_client import Connections, pull

pytestmark = pytest.mark.e2e
TOPIC, GROUP, BATCH = "TopicDlBatch", "GroupDlBatch", 32


def status(n: BrokerNode) -> dict[str, Any]:
    with grpc.insecure_channel(n.admin_addr) as ch:
        return json.loads(admin_pb2_grpc.BrokerAdminStub(ch).HaStatus(common_pb2.Empty(), timeout=10).json)


def leader(nodes: list[BrokerNode]) -> tuple[BrokerNode] | None:
    for n in nodes:
        try:
            if status(n)["role"] == "LEADER":
                return (n,)
        except grpc.RpcError:
            continue
    return None


def max_offset(n: BrokerNode) -> int:
    with RemotingClient(n.admin_addr) as c:
        return int(c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}).fields["offset"])


def ha_events(n: BrokerNode) -> int:
    """Messages in the replication-event topic (its queues: the default 4 and a few more asked for safety)."""
    with RemotingClient(n.admin_addr) as c:
        return sum(int(c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": HA_EVENTS_TOPIC, "queueId": str(q)})
                       .fields.get("offset", 0)) for q in range(16))


def send_batch(n: BrokerNode, first: int) -> int:
    """One SEND_BATCH_MESSAGE of bodies ``b-first`` .. ``b-(first+BATCH-1)``; returns the first queue offset."""
    body = encode_batch([BatchEntry(f"b-{i:05d}".encode() * 64, 0, {"UNIQ_KEY": f"K{i:08d}"})
                         for i in range(first, first + BATCH)])
    header = {"a": "g", "b": TOPIC, "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "0", "h": "0", "m": "true"}
    with RemotingClient(n.admin_addr) as c:
        resp = c.invoke(RequestCode.SEND_BATCH_MESSAGE, header, body)
    assert resp.code == 0, resp.remark
    assert len(resp.fields["msgId"].split(",")) == BATCH
    return int(resp.fields["queueOffset"])


def bodies(n: BrokerNode, count: int) -> list[bytes]:
    out: list[bytes] = []
    with Connections() as conns:
        while len(out) < count:
            res = pull(conns, n.admin_addr, GROUP, TOPIC, 0, len(out), 32)
            assert res.messages, f"pull at {len(out)} of {count}: code {res.code} {res.remark}"
            out += [m.body for m in res.messages]
    return out


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("dlbatch"), lambda: failed_call(request)) as c:
        yield c


@pytest.mark.long  # 20-50 s (three brokers started twice); the in-process half is tests/test_dledger_group_entries.py
def test_a_batch_is_one_raft_entry_and_offsets_survive_a_restart_of_the_group(cluster: LocalCluster) -> None:
    c = cluster
    peers = ";".join(f"n{i}-127.0.0.1:{free_port()}" for i in range(3))
    nodes = [c.start_broker(f"broker-b-n{i}", brokerName="broker-b", enableDLegerCommitLog="true",
                            dLegerGroup="broker-b", dLegerPeers=peers, dLegerSelfId=f"n{i}") for i in range(3)]
    (ld,) = wait_until(lambda: leader(nodes), timeout=60, what="a leader")
    c.admin("updateTopic", "-b", ld.admin_addr, "-t", TOPIC, "-r", "1", "-w", "1")
    wait_until(lambda: max_offset(ld) == 0, timeout=30, what="the topic on the leader")

    batches = 8
    before, events_before = status(ld)["lastIndex"], ha_events(ld)
    offsets = [send_batch(ld, b * BATCH) for b in range(batches)]
    grown = status(ld)["lastIndex"] - before
    events = ha_events(ld) - events_before  # read after: at least the events in the entries counted
    assert offsets == [b * BATCH for b in range(batches)]
    # one entry per batch; the only other writer of the log meanwhile is the replication-event topic
    # (broker/ha/event_log.py: throttled replica-ack and commit events), at most one entry per event
    assert batches <= grown <= batches + events, f"{batches} batches of {BATCH} and {events} events " \
        f"became {grown} Raft entries"
    sent = [f"b-{i:05d}".encode() * 64 for i in range(batches * BATCH)]
    wait_until(lambda: all(max_offset(n) == batches * BATCH for n in nodes), timeout=30,
               what="every member's consume queue holding every message")
    assert bodies(ld, len(sent)) == sent

    stop_together(n.proc for n in nodes)  # the whole group down before any member starts
    for n in nodes:
        n.proc.start()
    wait_until(lambda: all(_up(n) for n in nodes), timeout=90, what="the members back")
    (ld,) = wait_until(lambda: leader(nodes), timeout=60, what="a leader after the restart")
    seen: list[list[int]] = []
    try:
        wait_until(lambda: seen.append([max_offset(n) for n in nodes]) or seen[-1] == [batches * BATCH] * 3,
                   timeout=60, what="every member's consume queue as before the restart")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: last seen {seen[-1:]}") from None
    assert send_batch(ld, batches * BATCH) == batches * BATCH  # the queue goes on where it was
    sent += [f"b-{i:05d}".encode() * 64 for i in range(batches * BATCH, (batches + 1) * BATCH)]
    wait_until(lambda: all(max_offset(n) == len(sent) for n in nodes), timeout=30,
               what="every member holding the batch sent after the restart")
    assert bodies(ld, len(sent)) == sent


def _up(n: BrokerNode) -> bool:
    try:
        status(n)
        return True
    except grpc.RpcError:
        return False
