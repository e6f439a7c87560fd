"""FIFO, delay, recall, transactions and the pull APIs, with the official client and real processes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from cluster import LocalCluster, wait_until
from rmq import config, drain, message, producer, simple_consumer
from rocketmq import Producer, TransactionChecker, TransactionResolution
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

pytestmark = pytest.mark.e2e
TOPICS = ("TopicFifo", "TopicDelay", "TopicRecall", "TopicTx", "TopicPull", "TopicDelayRestart")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("types"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a", transactionTimeOut=4000, transactionCheckInterval=1000, transactionCheckMax=5)
        for topic in TOPICS:
            c.admin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4")
        c.admin("updateSubGroup", "-c", "DefaultCluster", "-g", "GroupFifo", "-o", "true", "-r", "5")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def ep(c: LocalCluster) -> str:
    return c.brokers["broker-a"].endpoint


def test_fifo_message_groups_in_order_with_a_redelivery(cluster: LocalCluster) -> None:
    sent: dict[str, list[str]] = {"A": [], "B": []}
    with producer(ep(cluster), "TopicFifo") as p:
        for i in range(6):
            for g in ("A", "B"):
                m = message("TopicFifo", f"{g}{i}".encode())
                m.message_group = g
                sent[g].append(p.send(m).message_id)
    acked: dict[str, list[str]] = {"A": [], "B": []}
    skipped_once = False
    redelivered_attempts = []
    with simple_consumer(ep(cluster), "GroupFifo", "TopicFifo") as c:
        deadline = time.monotonic() + 60
        while sum(map(len, acked.values())) < 12 and time.monotonic() < deadline:
            # one receive may carry a run of a group's messages (RocketMQ's orderly POP), in order;
            # nothing of a group comes while a message of it from an earlier receive is unacked
            holding: dict[str, list[object]] = {"A": [], "B": []}
            stopped: set[str] = set()
            for m in c.receive(32, 2):
                g = m.message_group
                expected = sent[g][len(acked[g]) + len(holding[g])]
                assert m.message_id == expected, f"group {g} out of order"
                if m.body == b"A2" and not skipped_once:
                    skipped_once = True  # do not ack it (nor what follows it): it must come back before A3
                    stopped.add(g)
                if m.body == b"A2" and g not in stopped:
                    redelivered_attempts.append(m.delivery_attempt)
                holding[g].append(m)
            for g, ms in holding.items():
                if g in stopped:
                    continue
                for m in ms:
                    c.ack(m)
                    acked[g].append(m.message_id)
    assert acked == sent
    assert redelivered_attempts == [2]


def test_delay_message_arrives_no_earlier_than_its_time(cluster: LocalCluster) -> None:
    with producer(ep(cluster), "TopicDelay") as p:
        due = int(time.time()) + 3
        m = message("TopicDelay", b"later")
        m.delivery_timestamp = due
        receipt = p.send(m)
        assert receipt.recall_handle
    with simple_consumer(ep(cluster), "GroupDelay", "TopicDelay") as c:
        got = drain(c, 1, timeout=20)
        arrived = time.time()
    assert [g.message_id for g in got] == [receipt.message_id]
    assert arrived >= due
    assert got[0].delivery_timestamp // 1000 == due


def test_delay_message_survives_a_broker_kill(cluster: LocalCluster) -> None:
    node = cluster.brokers["broker-a"]
    with producer(node.endpoint, "TopicDelayRestart") as p:
        due = int(time.time()) + 4
        m = message("TopicDelayRestart", b"after restart")
        m.delivery_timestamp = due
        msg_id = p.send(m).message_id
    wait_until(lambda: int(cluster.admin_json("brokerStatus")[node.admin_addr]["commitLogSyncedOffset"]) > 0,
               what="flush")
    node.proc.kill9()
    cluster.start_broker("broker-a")
    with simple_consumer(node.endpoint, "GroupDelayRestart", "TopicDelayRestart") as c:
        got = drain(c, 1, timeout=30)
    assert [g.message_id for g in got] == [msg_id]
    assert time.time() >= due


def test_recalled_message_never_arrives(cluster: LocalCluster) -> None:
    with producer(ep(cluster), "TopicRecall") as p:
        due = int(time.time()) + 3
        keep, drop = message("TopicRecall", b"keep"), message("TopicRecall", b"drop")
        keep.delivery_timestamp = due
        drop.delivery_timestamp = due
        keep_id = p.send(keep).message_id
        drop_receipt = p.send(drop)
        assert p.recall_message("TopicRecall", drop_receipt.recall_handle) == drop_receipt.message_id
        with pytest.raises(Exception, match=r"already delivered|recalled"):
            p.recall_message("TopicRecall", drop_receipt.recall_handle)
    with simple_consumer(ep(cluster), "GroupRecall", "TopicRecall") as c:
        got = drain(c, 1, timeout=20)
        got += drain(c, 5, timeout=4)
    assert [g.message_id for g in got] == [keep_id]


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.decisions: dict[bytes, TransactionResolution] = {}
        self.checked: list[bytes] = []

    def check(self, message):  # type: ignore[no-untyped-def]
        self.checked.append(message.body)
        return self.decisions.get(message.body, TransactionResolution.ROLLBACK)


def test_transactions_commit_rollback_and_check_back(cluster: LocalCluster) -> None:
    checker = Checker()
    checker.decisions[b"unknown-commit"] = TransactionResolution.COMMIT
    checker.decisions[b"unknown-rollback"] = TransactionResolution.ROLLBACK
    p = Producer(config(ep(cluster)), ("TopicTx",), checker)
    p.startup()
    try:
        with simple_consumer(ep(cluster), "GroupTx", "TopicTx") as c:
            tx = p.begin_transaction()
            committed = p.send(message("TopicTx", b"commit-me"), tx)
            assert committed.transaction_id
            assert drain(c, 1, timeout=1) == []  # half message: invisible (well before transactionTimeOut)
            tx.commit()
            got = drain(c, 1, timeout=10)
            assert [g.message_id for g in got] == [committed.message_id]

            tx = p.begin_transaction()
            p.send(message("TopicTx", b"rollback-me"), tx)
            tx.rollback()

            for body in (b"unknown-commit", b"unknown-rollback"):  # producer "forgets" to end them
                p.send(message("TopicTx", body), p.begin_transaction())
            wait_until(lambda: {b"unknown-commit", b"unknown-rollback"} <= set(checker.checked), timeout=20,
                       what="check-backs")
            got = drain(c, 1, timeout=15)
            got += drain(c, 5, timeout=3)
            assert [g.body for g in got] == [b"unknown-commit"]
    finally:
        p.shutdown()


def _queue(topic: str, qid: int) -> pb.MessageQueue:
    mq = pb.MessageQueue(id=qid)
    mq.topic.name = topic
    mq.broker.name = "broker-a"
    return mq


def test_pull_by_offset_returns_exactly_the_range(cluster: LocalCluster) -> None:
    with producer(ep(cluster), "TopicPull") as p:
        for i in range(40):
            p.send(message("TopicPull", f"p{i}".encode()))
    md = (("x-mq-client-id", "puller"),)
    with grpc.insecure_channel(ep(cluster)) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        q = svc.QueryOffsetRequest(message_queue=_queue("TopicPull", 1), query_offset_policy=pb.BEGINNING)
        assert stub.QueryOffset(q, metadata=md, timeout=5).offset == 0
        q.query_offset_policy = pb.END
        end = stub.QueryOffset(q, metadata=md, timeout=5).offset
        assert end == 10
        req = svc.PullMessageRequest(message_queue=_queue("TopicPull", 1), offset=3, batch_size=4)
        req.group.name = "PullGroup"
        resp = list(stub.PullMessage(req, metadata=md, timeout=5))
        msgs = [r.message for r in resp if r.HasField("message")]
        assert [m.system_properties.queue_offset for m in msgs] == [3, 4, 5, 6]
        assert resp[-1].next_offset == 7
        req.offset = end + 5
        resp = list(stub.PullMessage(req, metadata=md, timeout=5))
        assert resp[0].status.code == pb.ILLEGAL_OFFSET and resp[-1].next_offset == end
        req.offset = end
        req.long_polling_timeout.FromMilliseconds(300)
        resp = list(stub.PullMessage(req, metadata=md, timeout=5))
        assert resp[0].status.code == pb.MESSAGE_NOT_FOUND and resp[-1].next_offset == end
        ts = svc.QueryOffsetRequest(message_queue=_queue("TopicPull", 1), query_offset_policy=pb.TIMESTAMP)
        ts.timestamp.FromMilliseconds(int(time.time() * 1000) + 60_000)
        assert stub.QueryOffset(ts, metadata=md, timeout=5).offset == end
        upd = svc.UpdateOffsetRequest(message_queue=_queue("TopicPull", 1), offset=7)
        upd.group.name = "PullGroup"
        assert stub.UpdateOffset(upd, metadata=md, timeout=5).status.code == pb.OK
        get = svc.GetOffsetRequest(message_queue=_queue("TopicPull", 1))
        get.group.name = "PullGroup"
        assert stub.GetOffset(get, metadata=md, timeout=5).offset == 7
        get.group.name = "NeverSeenGroup"
        assert stub.GetOffset(get, metadata=md, timeout=5).status.code == pb.OFFSET_NOT_FOUND
        upd.offset = 999
        assert stub.UpdateOffset(upd, metadata=md, timeout=5).status.code == pb.ILLEGAL_OFFSET
