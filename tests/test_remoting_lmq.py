"""LMQ queues (``%LMQ%...``) read over remoting, as Apache RocketMQ serves them with ``enableLmq``.

Ground truth: the messages this test sends with ``INNER_MULTI_DISPATCH`` (which LMQ queues each names, in what
order, with which body), so the LMQ offsets each queue must hold are counted here, not read from the broker.
What Apache does, read from its sources (broker LmqTopicConfigManager, PullMessageProcessor,
ConsumerManageProcessor), and run on Apache 5.5.0 and 5.3.3 (tests/diff_lmq.py, answers recorded there): with
``enableLmq`` every ``%LMQ%`` name has a one-queue, read-write topic config made on the fly, so PULL_MESSAGE and
UPDATE_CONSUMER_OFFSET of queue 0 are served and a pulled record keeps its topic's queue offset, its LMQ offsets
being in ``INNER_MULTI_QUEUE_OFFSET``; without it an LMQ name is a topic like any other: TOPIC_NOT_EXIST.
Apache's example LMQPullConsumer reads an LMQ queue with GET_MIN_OFFSET and a held PULL_MESSAGE.
"""

from __future__ import annotations

import json
import select
import time
from collections.abc import Iterator
from pathlib import Path

import diff_lmq
import diff_support as d
import grpc
import pytest
from cluster import BrokerNode, LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from go_clients import run_go, summary
from peers_support import remoting
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import (
    RequestCode,
    ResponseCode,
    decode_messages,
    encode,
    properties_to_string,
)

pytestmark = pytest.mark.e2e
PARENT = "LmqParent"
LMQ_A = "%LMQ%alpha"  # Apache's example form (LMQProducer: %LMQ%123)
LMQ_B = f"%LMQ%${PARENT}$beta"  # a lite queue's form: %LMQ%$<topic>$<liteTopic>
GROUP = "LmqReader"
PULL_SUBSCRIPTION, PULL_SUSPEND = 0x4, 0x2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-lmq"), lambda: failed_call(request)) as c:
        on = c.start_broker("broker-lmq", enableLmq="true", enableMultiDispatch="true")
        off = c.start_broker("broker-plain")  # enableLmq false: Apache's default
        for node in (on, off):
            remoting.create_topic(node.admin_addr, PARENT, queues=1)
        yield c


def lmq_broker(cluster: LocalCluster) -> BrokerNode:
    return cluster.brokers["broker-lmq"]


def send(b: RemotingClient, body: bytes, lmqs: list[str], topic: str = PARENT) -> None:
    """SEND_MESSAGE_V2 of ``body`` to queue 0 of ``topic``, naming ``lmqs`` in INNER_MULTI_DISPATCH (Apache's
    example LMQProducer sets that user property)."""
    props = {"UNIQ_KEY": body.hex(), "INNER_MULTI_DISPATCH": ",".join(lmqs)}
    header = {"a": "LmqProducer", "b": topic, "c": "TBW102", "d": "1", "e": "0", "f": "0",
              "g": str(int(time.time() * 1000)), "h": "0", "i": properties_to_string(props), "m": "false"}
    resp = b.invoke(RequestCode.SEND_MESSAGE_V2, header, body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def pull_fields(topic: str, offset: int, *, queue_id: int = 0, suspend_ms: int = 0, max_nums: int = 32
                ) -> dict[str, str]:
    """PULL_MESSAGE's header as Apache's DefaultMQPullConsumer sends it (subscription in the request)."""
    flag = PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms else 0)
    return {"consumerGroup": GROUP, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
            "maxMsgNums": str(max_nums), "sysFlag": str(flag), "commitOffset": "0",
            "suspendTimeoutMillis": str(suspend_ms), "subscription": "*", "subVersion": "0", "expressionType": "TAG"}


def pull_all(b: RemotingClient, topic: str) -> list[tuple[int, bytes]]:
    """Every record of LMQ queue ``topic`` from offset 0, as (its offset in that LMQ queue, body); pulls until
    the queue's end (PULL_NOT_FOUND), checking each answer's nextBeginOffset against the records it held."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        resp = b.invoke(RequestCode.PULL_MESSAGE, pull_fields(topic, offset, max_nums=4))
        if resp.code == ResponseCode.PULL_NOT_FOUND:
            assert int(resp.fields["nextBeginOffset"]) == offset
            return out
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        msgs = decode_messages(resp.body)
        for m in msgs:
            out.append((lmq_offset(m.properties, topic), m.body))
        offset += len(msgs)
        assert int(resp.fields["nextBeginOffset"]) == offset


def lmq_offset(props: dict[str, str], lmq: str) -> int:
    """The record's offset in ``lmq``: the position of ``lmq`` in INNER_MULTI_DISPATCH picks its entry of
    INNER_MULTI_QUEUE_OFFSET (where Apache's Java client reads it for a POP of an LMQ queue, MQClientAPIImpl;
    a pulled record keeps its topic's queueOffset)."""
    queues = props["INNER_MULTI_DISPATCH"].split(",")
    offsets = props["INNER_MULTI_QUEUE_OFFSET"].split(",")
    return int(offsets[queues.index(lmq)])


def offset_query(b: RemotingClient, code: int, topic: str, **extra: str) -> str:
    resp = b.invoke(code, {"topic": topic, "queueId": "0", **extra})
    assert resp.code == ResponseCode.SUCCESS, (code, resp.code, resp.remark)
    return resp.fields.get("offset", resp.fields.get("timestamp", ""))


def test_pull_and_offsets_of_two_lmq_queues(cluster: LocalCluster) -> None:
    with RemotingClient(lmq_broker(cluster).admin_addr) as b:
        sent: dict[str, list[bytes]] = {LMQ_A: [], LMQ_B: []}
        for i in range(7):  # every message to alpha, every other one to beta too
            body = f"lmq-{i}".encode()
            names = [LMQ_A, LMQ_B] if i % 2 == 0 else [LMQ_A]
            send(b, body, names)
            for name in names:
                sent[name].append(body)
        for name, bodies in sent.items():
            got = pull_all(b, name)
            assert got == list(enumerate(bodies)), name
            # LITE_PULL_MESSAGE (Apache's DefaultLitePullConsumer) takes the same header and path
            lite = b.invoke(RequestCode.LITE_PULL_MESSAGE, pull_fields(name, 0))
            assert lite.code == ResponseCode.SUCCESS, (lite.code, lite.remark)
            assert [m.body for m in decode_messages(lite.body)] == bodies
            assert int(offset_query(b, RequestCode.GET_MAX_OFFSET, name)) == len(bodies)
            assert int(offset_query(b, RequestCode.GET_MIN_OFFSET, name)) == 0
        # store times of beta's records, as its pulls give them: search by time and the earliest store time
        beta = decode_messages(b.invoke(RequestCode.PULL_MESSAGE, pull_fields(LMQ_B, 0)).body)
        assert int(offset_query(b, RequestCode.GET_EARLIEST_MSG_STORETIME, LMQ_B)) == beta[0].store_timestamp
        last = beta[-1].store_timestamp
        assert int(offset_query(b, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, LMQ_B, timestamp=str(last))) == \
            min(i for i, m in enumerate(beta) if m.store_timestamp == last)
        assert int(offset_query(b, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, LMQ_B,
                                timestamp=str(beta[0].store_timestamp - 60_000))) == 0
        # the group's offset in an LMQ queue: committed, then queried back (a consumer's restart point)
        resp = b.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": LMQ_A, "queueId": "0",
                                                             "commitOffset": "5"})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert offset_query(b, RequestCode.QUERY_CONSUMER_OFFSET, LMQ_A, consumerGroup=GROUP) == "5"
        # a pull's own commitOffset (sysFlag bit 1) moves it too, as a push consumer commits
        fields = pull_fields(LMQ_A, 6) | {"sysFlag": str(PULL_SUBSCRIPTION | 0x1), "commitOffset": "6"}
        assert b.invoke(RequestCode.PULL_MESSAGE, fields).code == ResponseCode.SUCCESS
        assert offset_query(b, RequestCode.QUERY_CONSUMER_OFFSET, LMQ_A, consumerGroup=GROUP) == "6"


def test_push_consumer_style_pull_by_heartbeat_subscription(cluster: LocalCluster) -> None:
    """Apache's example LMQPushConsumer subscribes the LMQ name itself: its HEART_BEAT carries the subscription
    and its pulls carry none (sysFlag without the subscription bit), so the broker takes the heartbeat's."""
    name = "%LMQ%pushed"
    with RemotingClient(lmq_broker(cluster).admin_addr) as b:
        for body in (b"p0", b"p1", b"p2"):
            send(b, body, [name])
        heartbeat = {"clientID": "lmq-push-1", "producerDataSet": [], "consumerDataSet": [{
            "groupName": "LmqPushGroup", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": name, "subString": "*", "expressionType": "TAG", "tagsSet": [],
                                     "codeSet": [], "subVersion": 1}]}]}
        assert b.invoke(RequestCode.HEART_BEAT, {}, json.dumps(heartbeat).encode()).code == ResponseCode.SUCCESS
        fields = pull_fields(name, 0) | {"consumerGroup": "LmqPushGroup", "sysFlag": "0"}
        resp = b.invoke(RequestCode.PULL_MESSAGE, fields)
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        assert [m.body for m in decode_messages(resp.body)] == [b"p0", b"p1", b"p2"]


def test_held_pull_woken_by_multi_dispatch(cluster: LocalCluster) -> None:
    """A pull held at the end of an LMQ queue is answered by the next record dispatched to that queue, well
    before its suspend time and before the broker's 5 s re-check of held pulls would answer it."""
    name = "%LMQ%held"
    with RemotingClient(lmq_broker(cluster).admin_addr) as b, \
            RemotingClient(lmq_broker(cluster).admin_addr) as producer:
        send(producer, b"before", [name])
        end = int(offset_query(producer, RequestCode.GET_MAX_OFFSET, name))
        assert end == 1
        req = b.request(RequestCode.PULL_MESSAGE, pull_fields(name, end, suspend_ms=30_000))
        b.send_raw(encode(req))
        # held, not answered: the end of the queue with a suspend time (Apache's PULL_NOT_FOUND is held)
        readable, _, _ = select.select([b.sock], [], [], 1.0)
        assert not readable, "the pull at the end of the LMQ queue was answered at once, not held"
        send(producer, b"after", [name])
        sent_at = time.monotonic()  # after the send's answer: a slow send on a loaded machine does not count
        resp = b.read_frame()
        waited = time.monotonic() - sent_at
        assert resp.opaque == req.opaque
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        (m,) = decode_messages(resp.body)
        assert (m.body, lmq_offset(m.properties, name)) == (b"after", 1)
        assert int(resp.fields["nextBeginOffset"]) == 2
        # the dispatch woke it: a held pull nobody wakes is re-checked only every 5 s (broker_handlers), which
        # here would answer it about 4 s after the send (held at least 1 s before it)
        assert waited < 2.5, f"the held pull was answered {waited:.1f} s after the send"


def test_lmq_off_is_topic_not_exist(cluster: LocalCluster) -> None:
    """Without enableLmq, Apache's TopicConfigManager has no config for an LMQ name: TOPIC_NOT_EXIST, the same
    answer as any missing topic, for both name forms; the records' multi-dispatch names are ignored."""
    off = cluster.brokers["broker-plain"]
    with RemotingClient(off.admin_addr) as b:
        send(b, b"plain", [LMQ_A, LMQ_B])
        for name in (LMQ_A, LMQ_B):
            resp = b.invoke(RequestCode.PULL_MESSAGE, pull_fields(name, 0))
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST, (name, resp.code, resp.remark)
            assert resp.remark.startswith(f"topic[{name}] not exist, apply first please!")
            resp = b.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": name,
                                                                 "queueId": "0", "commitOffset": "0"})
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST, (name, resp.code, resp.remark)
            assert int(offset_query(b, RequestCode.GET_MAX_OFFSET, name)) == 0  # nothing indexed there
        (m,) = decode_messages(b.invoke(RequestCode.PULL_MESSAGE, pull_fields(PARENT, 0)).body)
        assert m.body == b"plain"  # stored in its topic only


def test_malformed_lmq_names_are_refused(cluster: LocalCluster) -> None:
    """Names that cannot be an LMQ queue: INVALID_PARAMETER naming the header field and the rule, with LMQ on
    and off (RocketScope checks names on the read side; Apache reads any name, docs/COMPATIBILITY.md); a queue
    other than 0 of an LMQ queue: INVALID_PARAMETER, as Apache's check against readQueueNums 1."""
    for node in cluster.brokers.values():
        with RemotingClient(node.admin_addr) as b:
            for bad in ("%LMQ%", "%LMQ%a/../b", "%LMQ%a b", "%LMQ%" + "x" * 260):
                resp = b.invoke(RequestCode.PULL_MESSAGE, pull_fields(bad, 0))
                assert resp.code == ResponseCode.INVALID_PARAMETER, (node.name, bad, resp.code, resp.remark)
                assert resp.remark.startswith("topic[") and "LMQ queue name" in resp.remark, resp.remark
    with RemotingClient(lmq_broker(cluster).admin_addr) as b:
        resp = b.invoke(RequestCode.PULL_MESSAGE, pull_fields(LMQ_A, 0, queue_id=1))
        assert resp.code == ResponseCode.INVALID_PARAMETER
        assert resp.remark.startswith(f"queueId[1] is illegal, topic:[{LMQ_A}] topicConfig.readQueueNums:[1]")


def test_multi_dispatch_names_stay_inside_the_store(cluster: LocalCluster) -> None:
    """An INNER_MULTI_DISPATCH name that is not one path component indexes nothing (Apache's dispatch skips a
    name with a path separator, ConsumeQueue.multiDispatchLmqQueue): no consume queue is made outside the store's
    consumequeue directory, and the record's other LMQ queue gets it."""
    node = lmq_broker(cluster)
    with RemotingClient(node.admin_addr) as b:
        before = int(offset_query(b, RequestCode.GET_MAX_OFFSET, LMQ_A))
        send(b, b"escape", ["%LMQ%/../../escaped", LMQ_A])
        wait_until(lambda: int(offset_query(b, RequestCode.GET_MAX_OFFSET, LMQ_A)) == before + 1,
                   what="the record dispatched to alpha")  # its other name was passed over, not failed on
    root = Path(node.store)
    assert not (root / "escaped").exists() and not (root.parent / "escaped").exists()
    assert not any(p.name == "escaped" for p in root.rglob("escaped"))


def grpc_queue(node: BrokerNode, topic: str) -> pb.MessageQueue:
    mq = pb.MessageQueue(id=0)
    mq.topic.name = topic
    mq.broker.name = node.name
    return mq


def test_grpc_pull_and_offsets_of_an_lmq_queue(cluster: LocalCluster) -> None:
    """The v2 protocol's PullMessage, QueryOffset, UpdateOffset and GetOffset on an LMQ queue: the same core
    answer (TopicManager.select) through the gRPC door; off, NOT_FOUND as for any missing topic; a malformed
    name, ILLEGAL_TOPIC naming the field."""
    name = f"%LMQ%${PARENT}$viagrpc"
    node = lmq_broker(cluster)
    bodies = [f"g{i}".encode() for i in range(5)]
    with RemotingClient(node.admin_addr) as b:
        for body in bodies:
            send(b, body, [name])
    md = (("x-mq-client-id", "lmq-puller"),)
    with grpc.insecure_channel(node.endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        q = svc.QueryOffsetRequest(message_queue=grpc_queue(node, name), query_offset_policy=pb.END)
        assert stub.QueryOffset(q, metadata=md, timeout=10).offset == len(bodies)
        req = svc.PullMessageRequest(message_queue=grpc_queue(node, name), offset=1, batch_size=32)
        req.group.name = GROUP
        resp = list(stub.PullMessage(req, metadata=md, timeout=10))
        assert resp[0].status.code == pb.OK, resp[0].status
        assert [r.message.body for r in resp if r.HasField("message")] == bodies[1:]
        assert resp[-1].next_offset == len(bodies)
        upd = svc.UpdateOffsetRequest(message_queue=grpc_queue(node, name), offset=3)
        upd.group.name = GROUP
        assert stub.UpdateOffset(upd, metadata=md, timeout=10).status.code == pb.OK
        get = svc.GetOffsetRequest(message_queue=grpc_queue(node, name))
        get.group.name = GROUP
        assert stub.GetOffset(get, metadata=md, timeout=10).offset == 3
        bad = svc.QueryOffsetRequest(message_queue=grpc_queue(node, "%LMQ%a/b"), query_offset_policy=pb.END)
        status = stub.QueryOffset(bad, metadata=md, timeout=10).status
        assert status.code == pb.ILLEGAL_TOPIC and status.message.startswith("message_queue.topic.name:"), status
    off = cluster.brokers["broker-plain"]
    with grpc.insecure_channel(off.endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        req = svc.PullMessageRequest(message_queue=grpc_queue(off, name), offset=0, batch_size=32)
        req.group.name = GROUP
        resp = list(stub.PullMessage(req, metadata=md, timeout=10))
        assert resp[0].status.code == pb.TOPIC_NOT_FOUND, resp[0].status


def test_go_client_pulls_an_lmq_queue(cluster: LocalCluster) -> None:
    """Apache's Go client v2, unchanged (tests/clients/go ``rmqgo pull``: PullConsumer.PullFrom), reads a lite
    LMQ queue as Apache's example LMQPullConsumer does: the parent topic's route names the broker, then PULL_MESSAGE
    of queue 0 of the LMQ name.  The client decodes the records itself; their LMQ offsets are counted here."""
    name = f"%LMQ%${PARENT}$gopull"
    node = lmq_broker(cluster)
    bodies = [f"go-{i}" for i in range(6)]
    with RemotingClient(node.admin_addr) as b:
        for body in bodies:
            send(b, body.encode(), [LMQ_A, name])  # a second LMQ named first: the offsets' order matters
    events = run_go("pull", "-ns", cluster.namesrv_addr, "-route", PARENT, "-topic", name, "-broker", node.name,
                    "-group", "GoLmqPuller", "-n", str(len(bodies)), "-timeout", "60")
    got = [e for e in events if e.get("event") == "received"]
    assert [e["body"] for e in got] == bodies, events
    assert [lmq_offset({"INNER_MULTI_DISPATCH": e["multiDispatch"], "INNER_MULTI_QUEUE_OFFSET": e["multiQueueOffset"]},
                       name) for e in got] == list(range(len(bodies)))
    assert summary(events)["nextOffset"] == len(bodies)


def side_of(node: BrokerNode) -> d.Side:
    """The broker as tests/diff_lmq.py's scenarios see a server: its remoting port and topic creation."""
    def create_topic(topic: str, mtype: str) -> None:
        remoting.create_topic(node.admin_addr, topic, 4, mtype)

    return d.Side(node.name, node.endpoint, create_topic, lambda group, orderly, retry: None, set, node.admin_addr)


def test_lmq_reads_as_recorded_from_apache(cluster: LocalCluster) -> None:
    """tests/diff_lmq.py's scenarios against the answers recorded from Apache RocketMQ (5.5.0 with enableLmq,
    5.3.3 without; compared live by tests/test_diff_priority.py and tests/test_diff_grpc.py): every code, offset
    and record the same; malformed names refused where Apache reads them (docs/COMPATIBILITY.md R29)."""
    on = diff_lmq.scenario_lmq_reads(side_of(lmq_broker(cluster)))
    assert {k: v for k, v in on.items() if not k.startswith("_")} == diff_lmq.APACHE_55_LMQ
    assert [code for code, _ in on["_bad"].values()] == [ResponseCode.INVALID_PARAMETER] * len(diff_lmq.BAD_NAMES)
    off = diff_lmq.scenario_lmq_off(side_of(cluster.brokers["broker-plain"]))
    assert off == diff_lmq.APACHE_533_LMQ_OFF


@pytest.mark.slow
@pytest.mark.long
def test_java_client_pulls_an_lmq_queue(cluster: LocalCluster) -> None:
    """Apache's Java client 5.3.3, unchanged (peers/java/src/RemotingLmqTool.java: DefaultMQPullConsumer as Apache's
    example LMQPullConsumer uses it): min and max offset, pulls of a lite LMQ queue, search by time, the earliest
    store time, an offset committed and read back.  A JVM start is seconds, hence ``long``.  Run on Apache 5.5.0
    with enableLmq (session 24) the tool printed the same events for the same kind of sends: the records with
    their topic's queueId and queueOffset, the LMQ offsets in INNER_MULTI_QUEUE_OFFSET."""
    from test_remoting_java_pop import run_tool
    from test_remoting_java_secure import java_classes

    source = Path(__file__).resolve().parent.parent / "peers" / "java" / "src" / "RemotingLmqTool.java"
    java_classes(source)  # compile (or skip without the peers) before sending
    parent, name = "LmqJavaParent", "%LMQ%$LmqJavaParent$java"
    node = lmq_broker(cluster)
    remoting.create_topic(node.admin_addr, parent, queues=1)
    wait_until(lambda: _has_route(cluster.namesrv_addr, parent), timeout=60, what=f"{parent}'s route")
    bodies = [f"java-{i}" for i in range(4)]
    with RemotingClient(node.admin_addr) as b:
        for body in bodies:
            send(b, body.encode(), [LMQ_A, name], topic=parent)
    events = run_tool(cluster, source, "RemotingLmqTool", cluster.namesrv_addr, parent, node.name, name,
                      "JavaLmqPuller", str(len(bodies)), "60", timeout=240)
    by = {e["event"]: e for e in events}
    assert (by["offsets"]["min"], by["offsets"]["max"]) == (0, len(bodies))
    got = [e for e in events if e["event"] == "received"]
    assert [(e["body"], e["topic"], e["queueId"], e["queueOffset"]) for e in got] == \
        [(body, parent, 0, i) for i, body in enumerate(bodies)]
    assert [lmq_offset({"INNER_MULTI_DISPATCH": e["multiDispatch"], "INNER_MULTI_QUEUE_OFFSET": e["multiQueueOffset"]},
                       name) for e in got] == list(range(len(bodies)))
    assert (by["searched"]["offset"], by["searched"]["earliest"]) == (0, True)
    assert (by["committed"]["offset"], by["committed"]["fromBroker"]) == (len(bodies), len(bodies))


def _has_route(namesrv: str, topic: str) -> bool:
    try:
        return bool(remoting.route(namesrv, topic).get("queueDatas"))
    except remoting.RemotingError:
        return False
