"""A transactional send retried across a failover, committed twice (issue 15): a regression test.

The chaos harness (tests/chaos, controller mode, seed 7) saw committed transactional messages
delivered twice to each SimpleConsumer group: the producer's send of the half message was
retried across a master change, both attempts were stored (two half messages with the same
message ID under two transaction IDs), the client committed one and the broker's check-back
committed the other.  The ground truth here is the message ID the test itself sent: one
client message, so its commit must be delivered once per group, whichever half is committed.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import grpc
import pytest
from cluster import LocalCluster, cluster_with_namesrv, start_dledger_group, wait_until
from conftest import failed_call
from rmq import simple_consumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

pytestmark = pytest.mark.e2e
TOPIC = "TopicTxRetry"
GROUP = "GroupTxRetry"
META = (("x-mq-client-id", "tx-retry-test"),)


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("txretry"), lambda: failed_call(request)) as c:
        yield c


def send_half(stub: svc_grpc.MessagingServiceStub, message_id: str) -> str:
    """One transactional SendMessage (what the client sends, and sends again on a retry): its transaction ID."""
    req = svc.SendMessageRequest()
    m = req.messages.add(body=b"tx-retry")
    m.topic.name = TOPIC
    m.system_properties.message_id = message_id
    m.system_properties.message_type = pb.TRANSACTION
    resp = stub.SendMessage(req, metadata=META, timeout=20)
    assert resp.status.code == pb.OK, resp.status.message
    return resp.entries[0].transaction_id


def commit(stub: svc_grpc.MessagingServiceStub, message_id: str, tx_id: str, source: int) -> None:
    req = svc.EndTransactionRequest(message_id=message_id, transaction_id=tx_id, resolution=pb.COMMIT, source=source)
    req.topic.name = TOPIC
    resp = stub.EndTransaction(req, metadata=META, timeout=20)
    assert resp.status.code == pb.OK, resp.status.message


@pytest.mark.timeout(180)
def test_half_message_stored_twice_by_a_retry_is_delivered_once(cluster: LocalCluster) -> None:
    """Two halves, one message ID: the client commits the first, a check-back's answer commits the second."""
    c = cluster
    node = c.start_broker("broker-txr")
    c.admin("updateTopic", "-b", node.admin_addr, "-t", TOPIC, "-r", "1", "-w", "1", "-a", "+message.type=TRANSACTION")
    message_id = uuid.uuid4().hex.upper()
    with grpc.insecure_channel(node.endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        first, second = send_half(stub, message_id), send_half(stub, message_id)
        assert first != second, "the broker gave both halves one transaction ID"
        commit(stub, message_id, first, pb.SOURCE_CLIENT)
        commit(stub, message_id, second, pb.SOURCE_SERVER_CHECK)
    seen: Counter[str] = Counter()
    with simple_consumer(node.endpoint, GROUP, TOPIC, await_s=1) as consumer:
        end = time.monotonic() + 10  # the second copy, if stored, is in the queue right behind the first
        while time.monotonic() < end:
            for m in consumer.receive(16, 30):
                seen[m.message_id] += 1
                consumer.ack(m)
    assert seen == Counter({message_id: 1}), f"one transactional message, deliveries: {dict(seen)}"


@pytest.mark.long  # a three-member DLedger group: about a minute on the 2-core machine
@pytest.mark.timeout(300)
def test_halves_of_one_message_committed_at_once_are_delivered_once(cluster: LocalCluster) -> None:
    """Chaos controller seed 7 (session 9): one send retried into four halves, four check-backs answered COMMIT at
    once, and each commit found no earlier one (they were all being replicated): four deliveries per group.
    A DLedger group, where (as in controller mode) a commit is visible only once replicated."""
    from concurrent.futures import ThreadPoolExecutor

    c = cluster
    nodes = start_dledger_group(c, "broker-txc", preferredLeaderId="n0")  # a commit is indexed once replicated
    wait_until(lambda: any(b["grpcAddr"] == nodes[0].endpoint and b["brokerId"] == 0
                           for b in c.admin_json("clusterList")), timeout=60, what="n0 leading")
    node = nodes[0]
    c.admin("updateTopic", "-b", node.admin_addr, "-t", TOPIC, "-r", "1", "-w", "1", "-a", "+message.type=TRANSACTION")
    message_id = uuid.uuid4().hex.upper()
    with grpc.insecure_channel(node.endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        halves = [send_half(stub, message_id) for _ in range(4)]
        assert len(set(halves)) == 4, "the broker gave two halves one transaction ID"
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda tx: commit(stub, message_id, tx, pb.SOURCE_SERVER_CHECK), halves))
    seen: Counter[str] = Counter()
    with simple_consumer(node.endpoint, GROUP, TOPIC, await_s=1) as consumer:
        end = time.monotonic() + 10  # any further copy is in the queue right behind the first
        while time.monotonic() < end:
            for m in consumer.receive(16, 30):
                seen[m.message_id] += 1
                consumer.ack(m)
    assert seen == Counter({message_id: 1}), f"one transactional message, deliveries: {dict(seen)}"
