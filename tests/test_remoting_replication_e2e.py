"""Remoting sends wait for replication as gRPC sends do, and answer as Apache's broker does when it cannot.

Apache's answers are read from the 5.3.3 jars (javap): ``SendMessageProcessor.handlePutMessageResult``
answers FLUSH_SLAVE_TIMEOUT (12) with the stored message's headers (a status, not an error, for the
clients), IN_SYNC_REPLICAS_NOT_ENOUGH as SYSTEM_ERROR (1) "in-sync replicas not enough" (an error
the clients retry), and ``DefaultMessageStore.checkStoreStatus`` refuses a write on a SLAVE with
SERVICE_NOT_AVAILABLE (14); ``DLedgerCommitLog`` turns a quorum-ack timeout into
IN_SYNC_REPLICAS_NOT_ENOUGH.  Ground truth here: what Apache's Go client v2 reports per send, the
time a send took against the ``slaveTimeout``/``maxWaitAckTimeMs`` we set, the master's replication
status (HaStatus) and the queue offsets on each member.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from cluster import BrokerNode, LocalCluster, cluster_with_namesrv, start_dledger_group, wait_until
from conftest import failed_call
from go_clients import rmqgo, run_go

from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2
from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e
QUEUES = 4
SLAVE_TIMEOUT_MS = 1000
GO_FLUSH_SLAVE_TIMEOUT = 2  # primitive.SendFlushSlaveTimeout


def ha_status(n: BrokerNode) -> dict[str, Any]:
    with grpc.insecure_channel(n.admin_addr) as ch:
        return json.loads(admin_pb2_grpc.BrokerAdminStub(ch).HaStatus(common_pb2.Empty(), timeout=10).json)


def stored(n: BrokerNode, topic: str) -> int:
    with RemotingClient(n.admin_addr) as c:
        return sum(int(c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}).fields["offset"])
                   for q in range(QUEUES))


def raw_send(n: BrokerNode, topic: str) -> Any:
    fields = {"producerGroup": "RawProducer", "topic": topic, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": str(QUEUES), "queueId": "0", "sysFlag": "0",
              "bornTimestamp": str(int(time.time() * 1000)), "flag": "0", "properties": ""}
    with RemotingClient(n.admin_addr) as c:
        return c.invoke(RequestCode.SEND_MESSAGE, fields, b"raw")


def go_send(c: LocalCluster, topic: str, n: int) -> list[dict[str, Any]]:
    return run_go("produce", "-ns", c.namesrv_addr, "-topic", topic, "-n", str(n), "-retries", "0", timeout=90)


@pytest.fixture()
def master_slave(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    rmqgo()  # build (or skip) before any process starts
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-ms"), lambda: failed_call(request)) as c:
        master = c.start_broker("master", brokerName="broker-r", brokerRole="SYNC_MASTER",
                                slaveTimeout=SLAVE_TIMEOUT_MS)
        c.start_broker("slave", brokerName="broker-r", brokerRole="SLAVE", brokerId=1)
        c.admin("updateTopic", "-b", master.admin_addr, "-t", "ReplT", "-r", str(QUEUES), "-w", str(QUEUES))
        wait_until(lambda: any(s["connected"] for s in ha_status(master)["slaves"]), timeout=30,
                   what="slave replicating")
        yield c


def test_sync_master_send_over_remoting_waits_for_the_slave_and_times_out_as_apache(
        master_slave: LocalCluster) -> None:
    c = master_slave
    master, slave = c.brokers["master"], c.brokers["slave"]
    sent = go_send(c, "ReplT", 10)
    assert [e["event"] for e in sent if e["event"] != "summary"] == ["sent"] * 10, sent
    st = ha_status(master)  # read once the producer returned: the slave acknowledged everything acknowledged
    assert st["slaves"][0]["ackOffset"] == st["maxOffset"], st
    wait_until(lambda: stored(slave, "ReplT") == 10, what="the slave's consume queues")
    # the slave refuses a write as Apache's store does for BrokerRole.SLAVE
    refused = raw_send(slave, "ReplT")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (refused.remark or ""), refused
    assert stored(slave, "ReplT") == 10
    slave.proc.stop()
    wait_until(lambda: not ha_status(master)["slaves"][0]["connected"], what="slave gone")
    before = stored(master, "ReplT")
    late = go_send(c, "ReplT", 2)
    failed = [e for e in late if e["event"] == "send_failed"]
    assert len(failed) == 2, late
    # FLUSH_SLAVE_TIMEOUT, reported by the client as a status with the stored message's id, after slaveTimeout
    assert all(e["status"] == GO_FLUSH_SLAVE_TIMEOUT and e["offsetMsgId"] for e in failed), failed
    assert all(e["seconds"] >= SLAVE_TIMEOUT_MS / 1000 for e in failed), failed
    assert stored(master, "ReplT") - before == 2  # stored on the master, as Apache does (sendOK=true)


@pytest.mark.long
def test_dledger_send_over_remoting_without_a_majority_is_an_error_the_client_sees(
        tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> None:
    """Run: .venv/bin/pytest -q tests/test_remoting_replication_e2e.py -k dledger (about 30 s: three brokers)."""
    rmqgo()
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-dledger"), lambda: failed_call(request)) as c:
        nodes = start_dledger_group(c, "broker-q", maxWaitAckTimeMs=1000)
        leader = wait_until(lambda: next(((n,) for n in nodes if ha_status(n)["role"] == "LEADER"), None),
                            timeout=60, what="a DLedger leader")[0]
        c.admin("updateTopic", "-b", leader.admin_addr, "-t", "QuorumT", "-r", str(QUEUES), "-w", str(QUEUES))
        sent = go_send(c, "QuorumT", 5)
        assert [e["event"] for e in sent if e["event"] != "summary"] == ["sent"] * 5, sent
        followers = [n for n in nodes if n is not leader]
        # a follower refuses a write as a slave does
        refused = raw_send(followers[0], "QuorumT")
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused
        # both followers frozen at once: the leader leads for one more election timeout (300-600 ms), so this send,
        # written at once, cannot be committed at a majority (Apache: WAIT_QUORUM_ACK_TIMEOUT)
        for f in followers:
            f.proc.pause(True)
        try:
            lost = raw_send(leader, "QuorumT")
            assert lost.code == ResponseCode.SYSTEM_ERROR, lost
            assert (lost.remark or "").startswith("in-sync replicas not enough"), lost.remark
            assert "msgId" not in lost.fields  # not a stored message for the client: it retries
            # by now the leader has stepped down (check-quorum) and the group has no writer: the Go client's send
            # fails (seen: "route info not found", the name server's route has no brokerId 0), nothing reported sent
            late = go_send(c, "QuorumT", 1)
            assert [e["event"] for e in late if e["event"] != "summary"] == ["send_failed"], late
        finally:
            for f in followers:
                f.proc.pause(False)
