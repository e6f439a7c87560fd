"""End to end: real `rocketscope namesrv` and `rocketscope broker` processes, the official client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cluster import LocalCluster, wait_until
from rmq import RecordingListener, drain, message, producer, push_consumer, simple_consumer
from rocketmq import ConsumeResult
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a", maxMessageSize=64 * 1024, autoCreateSubscriptionGroup="true")
        for topic in ("TopicSend", "TopicRedeliver", "TopicDlq", "TopicPush", "TopicTwoGroups", "TopicRestart",
                      "TopicAdmin"):
            c.admin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4")
        c.admin("updateSubGroup", "-c", "DefaultCluster", "-g", "GroupDlq", "-r", "1")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def endpoint(c: LocalCluster) -> str:
    return c.brokers["broker-a"].endpoint


def test_sync_and_async_send_then_simple_consume(cluster: LocalCluster) -> None:
    ep = endpoint(cluster)
    with producer(ep, "TopicSend") as p:
        sync_ids = [p.send(message("TopicSend", f"sync-{i}".encode(), tag="A", keys=[f"key-{i}"])).message_id
                    for i in range(20)]
        futures = [p.send_async(message("TopicSend", f"async-{i}".encode())) for i in range(20)]
        async_ids = [f.result(timeout=10).message_id for f in futures]
    with simple_consumer(ep, "GroupSend", "TopicSend") as c:
        got = drain(c, 40)
    assert sorted(m.message_id for m in got) == sorted(sync_ids + async_ids)
    bodies = {m.message_id: m.body for m in got}
    assert bodies[sync_ids[3]] == b"sync-3"
    first = next(m for m in got if m.message_id == sync_ids[0])
    assert first.tag == "A" and "key-0" in first.keys
    assert first.delivery_attempt == 1


def test_redelivery_after_invisible_duration(cluster: LocalCluster) -> None:
    ep = endpoint(cluster)
    with producer(ep, "TopicRedeliver") as p:
        msg_id = p.send(message("TopicRedeliver", b"redeliver me")).message_id
    with simple_consumer(ep, "GroupRedeliver", "TopicRedeliver") as c:
        first = drain(c, 1, ack=False, invisible_s=1)
        assert [m.message_id for m in first] == [msg_id]
        again = drain(c, 1, ack=False, invisible_s=1, timeout=20)
        assert [m.message_id for m in again] == [msg_id]
        assert again[0].delivery_attempt == 2
        # the first receipt handle is stale now: acking with it is refused
        with pytest.raises(Exception, match=r"INVALID_RECEIPT_HANDLE|expired|40013"):
            c.ack(first[0])
        c.ack(again[0])
        assert drain(c, 1, timeout=3) == []


def test_retries_end_in_dead_letter_queue(cluster: LocalCluster) -> None:
    ep = endpoint(cluster)
    with producer(ep, "TopicDlq") as p:
        msg_id = p.send(message("TopicDlq", b"poison", keys=["poison-key"])).message_id
    attempts = []
    with simple_consumer(ep, "GroupDlq", "TopicDlq") as c:
        for _ in range(2):  # retryMaxTimes=1: two deliveries, then the DLQ
            got = drain(c, 1, ack=False, invisible_s=1, timeout=20)
            assert [m.message_id for m in got] == [msg_id]
            attempts.append(got[0].delivery_attempt)
        assert attempts == [1, 2]
        dlq = wait_until(lambda: cluster.admin_json("queryMsgById", "-i", msg_id, "-t", "%DLQ%GroupDlq"),
                         what="message in the DLQ")
        assert dlq[0]["body"] == "poison"
        assert dlq[0]["properties"]["DLQ_ORIGIN_TOPIC"] == "TopicDlq"
        assert drain(c, 1, timeout=3) == []


def test_push_consumer_gets_everything_and_retries_a_failure(cluster: LocalCluster) -> None:
    ep = endpoint(cluster)
    failed_once: set[str] = set()

    def decide(m):  # type: ignore[no-untyped-def]
        if m.body == b"push-3" and m.message_id not in failed_once:
            failed_once.add(m.message_id)
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    listener = RecordingListener(decide)
    with producer(ep, "TopicPush") as p:
        ids = {p.send(message("TopicPush", f"push-{i}".encode())).message_id for i in range(10)}
    with push_consumer(ep, "GroupPush", "TopicPush", listener):
        wait_until(lambda: listener.count() >= 11, timeout=40, what="10 messages and one redelivery")
    seen = [m.message_id for m in listener.messages]
    assert set(seen) == ids
    retried = [m for m in listener.messages if m.body == b"push-3"]
    assert [m.delivery_attempt for m in retried][:2] == [1, 2]


def test_two_groups_each_get_every_message(cluster: LocalCluster) -> None:
    ep = endpoint(cluster)
    with producer(ep, "TopicTwoGroups") as p:
        ids = sorted(p.send(message("TopicTwoGroups", f"m{i}".encode())).message_id for i in range(25))
    for group in ("GroupOne", "GroupTwo"):
        with simple_consumer(ep, group, "TopicTwoGroups") as c:
            assert sorted(m.message_id for m in drain(c, 25)) == ids


def test_broker_restart_keeps_messages_and_offsets(cluster: LocalCluster) -> None:
    ep = endpoint(cluster)
    with producer(ep, "TopicRestart") as p:
        ids = [p.send(message("TopicRestart", f"r{i}".encode())).message_id for i in range(10)]
    with simple_consumer(ep, "GroupRestart", "TopicRestart") as c:
        first = drain(c, 4, batch=1)
    assert len(first) == 4
    node = cluster.brokers["broker-a"]
    node.proc.stop()
    cluster.start_broker("broker-a")
    with simple_consumer(node.endpoint, "GroupRestart", "TopicRestart") as c:
        rest = drain(c, 6)
        assert drain(c, 1, timeout=3) == []
    assert sorted(m.message_id for m in first + rest) == sorted(ids)
    with simple_consumer(node.endpoint, "GroupRestartFresh", "TopicRestart") as c:
        assert sorted(m.message_id for m in drain(c, 10)) == sorted(ids)


def test_admin_commands(cluster: LocalCluster) -> None:
    ep = endpoint(cluster)
    with producer(ep, "TopicAdmin") as p:
        ids = [p.send(message("TopicAdmin", f"a{i}".encode(), keys=["order-42"])).message_id for i in range(3)]
    clusters = cluster.admin_json("clusterList")
    assert clusters[0]["brokerName"] == "broker-a" and clusters[0]["grpcAddr"] == ep
    assert "TopicAdmin" in cluster.admin_json("topicList")
    route = cluster.admin_json("topicRoute", "-t", "TopicAdmin")
    assert route["queueDatas"][0]["writeQueueNums"] == 4
    found = cluster.admin_json("queryMsgById", "-i", ids[1])
    assert [m["msgId"] for m in found] == [ids[1]] and found[0]["body"] == "a1"
    by_offset = cluster.admin_json("queryMsgById", "-i", found[0]["offsetMsgId"])
    assert by_offset[0]["msgId"] == ids[1]
    by_key = cluster.admin_json("queryMsgByKey", "-t", "TopicAdmin", "-k", "order-42")
    assert sorted(m["msgId"] for m in by_key) == sorted(ids)
    with simple_consumer(ep, "GroupAdmin", "TopicAdmin") as c:
        drain(c, 3)
    progress = wait_until(lambda: (lambda p: p if p["diffTotal"] == 0 else None)(
        cluster.admin_json("consumerProgress", "-g", "GroupAdmin")), what="lag 0")
    assert sum(q["brokerOffset"] for q in progress["queues"]) == 3
    table = cluster.admin("consumerProgress", "-g", "GroupAdmin").stdout
    assert "#ConsumerOffset" in table and "Diff Total: 0" in table
    status = cluster.admin_json("brokerStatus")
    assert int(next(iter(status.values()))["commitLogMaxOffset"]) > 0
    missing = cluster.admin("queryMsgById", "-i", "NO_SUCH_ID", check=False)
    assert missing.returncode == 1 and "no message" in missing.stderr
    cluster.admin("updateTopic", "-c", "DefaultCluster", "-t", "TopicDoomed")
    wait_until(lambda: "TopicDoomed" in cluster.admin_json("topicList"), what="topic registered")
    assert "success" in cluster.admin("deleteTopic", "-c", "DefaultCluster", "-t", "TopicDoomed").stdout
    assert "TopicDoomed" not in cluster.admin_json("topicList")
    assert cluster.admin("topicRoute", "-t", "TopicDoomed", check=False).returncode == 1


# ---------------------------------------------------------------- bad input
def _stub(c: LocalCluster) -> tuple[grpc.Channel, svc_grpc.MessagingServiceStub]:
    ch = grpc.insecure_channel(endpoint(c))
    return ch, svc_grpc.MessagingServiceStub(ch)


MD = (("x-mq-client-id", "test-client"),)


def _send_req(topic: str, body: bytes = b"x", **sp: object) -> svc.SendMessageRequest:
    req = svc.SendMessageRequest()
    m = req.messages.add(body=body)
    m.topic.name = topic
    m.system_properties.message_id = sp.pop("message_id", "ID1")  # type: ignore[arg-type]
    m.system_properties.message_type = pb.NORMAL
    for k, v in sp.items():
        if k == "keys":
            m.system_properties.keys.extend(v)  # type: ignore[arg-type]
        elif k == "user":
            m.user_properties.update(v)  # type: ignore[arg-type]
        else:
            setattr(m.system_properties, k, v)
    return req


@pytest.mark.parametrize(("req", "code", "field"), [
    (_send_req("bad topic!"), pb.ILLEGAL_TOPIC, "topic.name"),
    (_send_req("TopicSend", body=b""), pb.MESSAGE_BODY_EMPTY, "body"),
    (_send_req("TopicSend", body=b"x" * 70000), pb.MESSAGE_BODY_TOO_LARGE, "body"),
    (_send_req("TopicSend", tag="a|b"), pb.ILLEGAL_MESSAGE_TAG, "tag"),
    (_send_req("TopicSend", keys=[" "]), pb.ILLEGAL_MESSAGE_KEY, "keys"),
    (_send_req("TopicSend", message_id=""), pb.ILLEGAL_MESSAGE_ID, "message_id"),
    (_send_req("TopicSend", user={"UNIQ_KEY": "x"}), pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "user_properties"),
    (_send_req("TopicSend", message_group="g" * 100, message_type=pb.FIFO), pb.ILLEGAL_MESSAGE_GROUP,
     "message_group"),
    (svc.SendMessageRequest(), pb.BAD_REQUEST, "messages"),
])
def test_bad_send_requests_get_their_status_code(cluster: LocalCluster, req: svc.SendMessageRequest, code: int,
                                                 field: str) -> None:
    ch, stub = _stub(cluster)
    with ch:
        resp = stub.SendMessage(req, metadata=MD, timeout=5)
    assert resp.status.code == code, resp.status
    assert field in resp.status.message


def test_bad_consume_requests_get_their_status_code(cluster: LocalCluster) -> None:
    ch, stub = _stub(cluster)
    with ch:
        ack = svc.AckMessageRequest()
        ack.group.name = "GroupSend"
        ack.topic.name = "TopicSend"
        ack.entries.add(message_id="x", receipt_handle="garbage")
        resp = stub.AckMessage(ack, metadata=MD, timeout=5)
        assert resp.status.code == pb.INVALID_RECEIPT_HANDLE and "receipt_handle" in resp.status.message

        rcv = svc.ReceiveMessageRequest(batch_size=1)
        rcv.group.name = "GroupSend"
        rcv.message_queue.topic.name = "NoSuchTopicAnywhere"
        rcv.message_queue.id = 0
        rcv.invisible_duration.FromSeconds(10)
        got = list(stub.ReceiveMessage(rcv, metadata=MD, timeout=5))
        assert got[0].status.code == pb.TOPIC_NOT_FOUND

        rcv.message_queue.topic.name = "TopicSend"
        rcv.invisible_duration.FromMilliseconds(10)
        got = list(stub.ReceiveMessage(rcv, metadata=MD, timeout=5))
        assert got[0].status.code == pb.ILLEGAL_INVISIBLE_TIME and "invisible_duration" in got[0].status.message

        rcv.invisible_duration.FromSeconds(10)
        rcv.filter_expression.type = pb.SQL
        rcv.filter_expression.expression = "a >"  # SQL92 is served (broker/filter); one that does not parse is not
        got = list(stub.ReceiveMessage(rcv, metadata=MD, timeout=5))
        assert got[0].status.code == pb.ILLEGAL_FILTER_EXPRESSION and "'a >'" in got[0].status.message

        bad_group = svc.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER)
        bad_group.group.name = "bad group!"
        assert stub.Heartbeat(bad_group, metadata=MD, timeout=5).status.code == pb.ILLEGAL_CONSUMER_GROUP

        route = svc.QueryRouteRequest()
        route.topic.name = "RMQ_SYS_NOT_THERE"
        assert stub.QueryRoute(route, metadata=MD, timeout=5).status.code == pb.TOPIC_NOT_FOUND


def test_the_official_client_learns_max_message_size_from_settings(cluster: LocalCluster) -> None:
    # the broker's Settings reply carries maxMessageSize (64 KiB here); the client then refuses before sending
    with producer(endpoint(cluster), "TopicSend") as p, pytest.raises(Exception, match="max size=65536"):
        p.send(message("TopicSend", b"y" * 100_000))


def test_admin_json_is_json(cluster: LocalCluster, tmp_path: Path) -> None:
    out = cluster.admin("clusterList", "--json").stdout
    assert isinstance(json.loads(out), list)
