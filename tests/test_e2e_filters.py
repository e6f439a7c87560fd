"""SQL92 and tag filtering on every consume path, message types LITE/PRIORITY, and queue selection, end to end.

A real name server and two brokers: broker-a with enablePropertyFilter=true, broker-b with RocketMQ's
defaults (enablePropertyFilter=false) and sendMessageQueueSelection=CLIENT.  The ground truth of
every filter test is computed here from the properties the test itself gave each message, never by
the broker's evaluator.  Apache RocketMQ 5.3.3's answers these tests expect were observed with the
reference cluster (peers/reference_cluster.py; docs/COMPATIBILITY.md).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from cluster import LocalCluster, wait_until
from rmq import RecordingListener, config, drain, message, producer
from rocketmq import FilterExpression, PushConsumer, SimpleConsumer
from rocketmq.grpc_protocol import FilterType
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode, decode_messages
from rocketscope.trace.client_trace import close_client_metrics

# minutes on a loaded machine (two brokers, every consume path): `.venv/bin/pytest tests/test_e2e_filters.py -m long`
pytestmark = [pytest.mark.e2e, pytest.mark.long, pytest.mark.timeout(600)]
QUEUES = 4
MD = (("x-mq-client-id", "filters-test"), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("filters"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a", enablePropertyFilter=True, defaultTopicQueueNums=QUEUES)
        c.start_broker("broker-b", defaultTopicQueueNums=QUEUES, sendMessageQueueSelection="CLIENT")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def endpoint(c: LocalCluster, broker: str = "broker-a") -> str:
    return c.brokers[broker].endpoint


def new_topic(c: LocalCluster, broker: str = "broker-a", mtype: str = "NORMAL") -> str:
    name = f"F{uuid.uuid4().hex[:8]}"
    c.admin("updateTopic", "-b", c.brokers[broker].admin_addr, "-t", name, "-r", str(QUEUES), "-w", str(QUEUES),
            "-a", f"+message.type={mtype}", *(["-o"] if mtype == "FIFO" else []))
    return name


# 40 messages: n = 0..39, color red/blue alternating, tag TA for even n, TB for odd, one TC
def workload(c: LocalCluster, topic: str, broker: str = "broker-a") -> dict[str, dict[str, str]]:
    sent: dict[str, dict[str, str]] = {}
    with producer(endpoint(c, broker), topic) as p:
        for n in range(40):
            props = {"n": str(n), "color": "red" if n % 3 else "blue"}
            tag = "TC" if n == 39 else ("TA" if n % 2 == 0 else "TB")
            p.send(message(topic, f"m{n}".encode(), tag=tag, props=props))
            sent[f"m{n}"] = {**props, "TAGS": tag}
    return sent


SQL = "(n BETWEEN 10 AND 29 AND color = 'red') OR TAGS = 'TC'"


def truth(sent: dict[str, dict[str, str]]) -> set[str]:
    """What SQL selects, computed from the test's own numbers."""
    return {b for b, p in sent.items() if (10 <= int(p["n"]) <= 29 and p["color"] == "red") or p["TAGS"] == "TC"}


def lag(c: LocalCluster, group: str, topic: str, broker: str = "broker-a") -> int:
    """Messages between the group's committed offset and the end of each queue (RocketMQ's consumer lag)."""
    total = 0
    with RemotingClient(c.brokers[broker].admin_addr) as r:
        for q in range(QUEUES):
            hi = int(r.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}).fields["offset"])
            resp = r.invoke(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                                 "queueId": str(q)})
            total += hi - int(resp.fields.get("offset", "0"))
    return total


def test_simple_consumer_gets_exactly_the_sql92_matches_and_filtered_messages_leave_no_lag(
        cluster: LocalCluster) -> None:
    topic = new_topic(cluster)
    sent = workload(cluster, topic)
    want = truth(sent)
    assert len(want) == 15  # the 14 of n 10..29 not divisible by 3, and the TC message
    group = f"G{uuid.uuid4().hex[:8]}"
    c = SimpleConsumer(config(endpoint(cluster)), group, {topic: FilterExpression(SQL, FilterType.SQL)},
                       await_duration=2)
    c.startup()
    try:
        got = drain(c, len(want), timeout=60)
        got += drain(c, 1, timeout=3)  # nothing else may come
    finally:
        c.shutdown()
        close_client_metrics(c)
    assert sorted(m.body.decode() for m in got) == sorted(want)
    # the 26 filtered-out messages are consumed as far as offsets go (RocketMQ does the same)
    wait_until(lambda: lag(cluster, group, topic) == 0, timeout=30, what="lag 0 after filtering")


def test_push_consumer_gets_exactly_the_sql92_matches(cluster: LocalCluster) -> None:
    topic = new_topic(cluster)
    sent = workload(cluster, topic)
    want = truth(sent)
    listener = RecordingListener()
    group = f"G{uuid.uuid4().hex[:8]}"
    c = PushConsumer(config(endpoint(cluster)), group, listener, {topic: FilterExpression(SQL, FilterType.SQL)},
                     consumption_thread_count=2)
    c.startup()
    try:
        wait_until(lambda: listener.count() >= len(want), timeout=60, what="push deliveries")
        time.sleep(2)  # and nothing more
    finally:
        c.shutdown()
        close_client_metrics(c)
    assert sorted({m.body.decode() for m in listener.messages}) == sorted(want)
    assert listener.count() == len(want)
    wait_until(lambda: lag(cluster, group, topic) == 0, timeout=30, what="lag 0 after filtering")


def test_tag_filter_with_alternatives(cluster: LocalCluster) -> None:
    topic = new_topic(cluster)
    sent = workload(cluster, topic)
    want = {b for b, p in sent.items() if p["TAGS"] in ("TB", "TC")}
    group = f"G{uuid.uuid4().hex[:8]}"
    c = SimpleConsumer(config(endpoint(cluster)), group, {topic: FilterExpression("TB || TC")}, await_duration=2)
    c.startup()
    try:
        got = drain(c, len(want), timeout=60) + drain(c, 1, timeout=3)
    finally:
        c.shutdown()
        close_client_metrics(c)
    assert sorted(m.body.decode() for m in got) == sorted(want)


def remoting_pull_all(c: LocalCluster, topic: str, expr: str, broker: str = "broker-a",
                      expression_type: str = "SQL92") -> tuple[list[str], list[Any]]:
    bodies, answers = [], []
    with RemotingClient(c.brokers[broker].admin_addr) as r:
        for q in range(QUEUES):
            offset = 0
            for _ in range(100):
                resp = r.invoke(RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "PullG", "topic": topic, "queueId": str(q), "queueOffset": str(offset),
                    "maxMsgNums": "4", "sysFlag": str(4), "commitOffset": "0", "suspendTimeoutMillis": "0",
                    "subscription": expr, "subVersion": "0", "expressionType": expression_type})
                answers.append(resp)
                if resp.code == ResponseCode.SUCCESS:
                    bodies += [m.body.decode() for m in decode_messages(resp.body)]
                elif resp.code != ResponseCode.PULL_RETRY_IMMEDIATELY:
                    break
                offset = int(resp.fields["nextBeginOffset"])
    return bodies, answers


def test_remoting_pull_filters_by_sql92_and_refuses_as_rocketmq(cluster: LocalCluster) -> None:
    topic = new_topic(cluster)
    sent = workload(cluster, topic)
    bodies, answers = remoting_pull_all(cluster, topic, SQL)
    assert sorted(bodies) == sorted(truth(sent))
    # a queue range with no match answers NO_MATCHED_MESSAGE and moves the offset on, as RocketMQ
    assert any(a.code == ResponseCode.PULL_RETRY_IMMEDIATELY and a.remark == "NO_MATCHED_MESSAGE" for a in answers)
    _, (bad, *_) = remoting_pull_all(cluster, topic, "n >")
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert bad.remark.startswith("parse the consumer's subscription failed") and "'n >'" in bad.remark
    other = new_topic(cluster, "broker-b")
    _, (off, *_) = remoting_pull_all(cluster, other, "n > 1", broker="broker-b")
    assert (off.code, off.remark.split(" (")[0]) == (
        ResponseCode.SYSTEM_ERROR, "The broker does not support consumer to filter message by SQL92")


def grpc_pull(c: LocalCluster, topic: str, queue: int, expr: pb.FilterExpression, broker: str = "broker-a",
              ) -> tuple[int, str, list[str], int]:
    req = svc.PullMessageRequest(group=pb.Resource(name="GPullG"), offset=0, batch_size=64, filter_expression=expr)
    req.message_queue.topic.name = topic
    req.message_queue.id = queue
    req.long_polling_timeout.FromMilliseconds(0)
    code, text, bodies, nxt = pb.OK, "", [], -1
    with grpc.insecure_channel(endpoint(c, broker)) as ch:
        for resp in svc_grpc.MessagingServiceStub(ch).PullMessage(req, metadata=MD, timeout=20):
            kind = resp.WhichOneof("content")
            if kind == "status":
                code, text = resp.status.code, resp.status.message
            elif kind == "message":
                bodies.append(resp.message.body.decode())
            elif kind == "next_offset":
                nxt = resp.next_offset
    return code, text, bodies, nxt


def test_grpc_pull_and_receive_answer_filters_as_documented(cluster: LocalCluster) -> None:
    topic = new_topic(cluster)
    sent = workload(cluster, topic)
    sql = pb.FilterExpression(type=pb.SQL, expression=SQL)
    bodies = []
    for q in range(QUEUES):
        code, _, got, nxt = grpc_pull(cluster, topic, q, sql)
        assert code in (pb.OK, pb.MESSAGE_NOT_FOUND) and nxt > 0  # offsets move past filtered messages
        bodies += got
    assert sorted(bodies) == sorted(truth(sent))
    code, text, _, _ = grpc_pull(cluster, topic, 0, pb.FilterExpression(type=pb.SQL, expression="n >"))
    assert code == pb.ILLEGAL_FILTER_EXPRESSION and "'n >'" in text
    code, text, _, _ = grpc_pull(cluster, topic, 0, pb.FilterExpression(type=pb.SQL, expression=" "))
    assert (code, text) == (pb.ILLEGAL_FILTER_EXPRESSION, "Expression can't be null! SQL92")  # Apache's answer
    other = new_topic(cluster, "broker-b")
    code, text, _, _ = grpc_pull(cluster, other, 0, sql, broker="broker-b")
    assert code == pb.UNSUPPORTED and "enablePropertyFilter" in text


def raw_receive(c: LocalCluster, topic: str, group: str, expr: pb.FilterExpression, broker: str = "broker-a",
                ) -> tuple[int, str, list[pb.Message]]:
    req = svc.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=32, auto_renew=False,
                                    filter_expression=expr)
    req.message_queue.topic.name = topic
    req.message_queue.id = 0
    req.invisible_duration.FromSeconds(30)
    req.long_polling_timeout.FromMilliseconds(2000)
    code, text, msgs = pb.OK, "", []
    with grpc.insecure_channel(endpoint(c, broker)) as ch:
        for resp in svc_grpc.MessagingServiceStub(ch).ReceiveMessage(req, metadata=MD, timeout=20):
            kind = resp.WhichOneof("content")
            if kind == "status":
                code, text = resp.status.code, resp.status.message
            elif kind == "message":
                msgs.append(resp.message)
    return code, text, msgs


def test_receive_evaluates_sql92_even_with_property_filter_disabled_as_apache(cluster: LocalCluster) -> None:
    """Apache RocketMQ 5.3.3's POP does not look at enablePropertyFilter (observed: a SQL92 receive through its
    proxy with the key false returns the matches); only pulls are refused."""
    topic = new_topic(cluster, "broker-b")
    sent = workload(cluster, topic, "broker-b")
    got: list[str] = []
    group = f"G{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 30
    while len(got) < len(truth(sent)) and time.monotonic() < deadline:
        code, _, msgs = raw_receive(cluster, topic, group, pb.FilterExpression(type=pb.SQL, expression=SQL),
                                    "broker-b")
        got += [m.body.decode() for m in msgs]
    assert sorted(got) == sorted(truth(sent))
    code, text, _ = raw_receive(cluster, topic, group, pb.FilterExpression(type=pb.SQL, expression="color ="),
                                "broker-b")
    assert code == pb.ILLEGAL_FILTER_EXPRESSION and "'color ='" in text


def test_lite_and_priority_messages_on_a_normal_topic_are_refused_as_apache_55(cluster: LocalCluster) -> None:
    """Apache RocketMQ 5.5.0 (tests/test_diff_priority.py) refuses both: the type a message's priority or lite
    topic makes must be its topic's (Apache 5.3.3 stored them as NORMAL: docs/COMPATIBILITY.md F13)."""
    topic = new_topic(cluster)
    with grpc.insecure_channel(endpoint(cluster)) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        for mtype, field in ((pb.LITE, "lite_topic"), (pb.PRIORITY, "priority")):
            m = pb.Message(topic=pb.Resource(name=topic), body=b"x")
            m.system_properties.message_id = uuid.uuid4().hex.upper()
            m.system_properties.message_type = mtype
            setattr(m.system_properties, field, "lt1" if field == "lite_topic" else 3)
            resp = stub.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=MD, timeout=10)
            assert resp.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, resp.status
            assert pb.MessageType.Name(mtype) in resp.status.message and "NORMAL" in resp.status.message


# Queues Apache RocketMQ 5.3.3's proxy chose for these FIFO message groups on a topic of 4 write queues
# (observed with the reference cluster; tests/test_sql92.py checks the formula on more)
APACHE_FIFO_QUEUES = {"g0": 0, "g2": 3, "g3": 2, "g4": 1, "g11": 3, "order-1": 3, "abc": 0}


def received_queues(c: LocalCluster, topic: str, broker: str, n: int) -> dict[str, int]:
    out: dict[str, int] = {}
    group = f"G{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        for m in raw_receive(c, topic, group, pb.FilterExpression(type=pb.TAG, expression="*"), broker)[2]:
            out[m.body.decode()] = m.system_properties.queue_id
    return out


def test_fifo_groups_land_in_apaches_queues_and_client_queue_choice_is_opt_in(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, mtype="FIFO")
    with grpc.insecure_channel(endpoint(cluster)) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        for g in APACHE_FIFO_QUEUES:
            m = pb.Message(topic=pb.Resource(name=topic), body=g.encode())
            m.system_properties.message_id = uuid.uuid4().hex.upper()
            m.system_properties.message_type = pb.FIFO
            m.system_properties.message_group = g
            m.system_properties.queue_id = 3  # ignored in the default (PROXY) mode, as by Apache's proxy
            assert stub.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=MD, timeout=10).status.code == pb.OK
    assert received_queues(cluster, topic, "broker-a", len(APACHE_FIFO_QUEUES)) == APACHE_FIFO_QUEUES
    # sendMessageQueueSelection=CLIENT (broker-b): the queue a client names in system_properties.queue_id is
    # where the message is stored (the official Java client fills it in; the Python client 5.1.2 does not)
    for broker, expect in (("broker-b", {f"c{i}": i % 2 + 2 for i in range(6)}), ("broker-a", None)):
        other = new_topic(cluster, broker)
        with grpc.insecure_channel(endpoint(cluster, broker)) as ch:
            stub = svc_grpc.MessagingServiceStub(ch)
            for i in range(6):
                m = pb.Message(topic=pb.Resource(name=other), body=f"c{i}".encode())
                m.system_properties.message_id = uuid.uuid4().hex.upper()
                m.system_properties.message_type = pb.NORMAL
                m.system_properties.queue_id = i % 2 + 2
                assert stub.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=MD,
                                        timeout=10).status.code == pb.OK
        got = received_queues(cluster, other, broker, 6)
        if expect is not None:
            assert got == expect
        else:  # PROXY (the default, as Apache's proxy): round robin over the 4 queues whatever the client named
            assert len(set(got.values())) == QUEUES, got


def test_check_client_config_answers_as_rocketmq(cluster: LocalCluster) -> None:
    """CHECK_CLIENT_CONFIG (46), which Apache's Java push consumer sends at start for a SQL92 subscription."""
    import json

    def check(broker: str, expression_type: str, sub: str) -> tuple[int, str | None]:
        body = json.dumps({"clientId": "c1", "group": "G46", "subscriptionData": {
            "topic": "T46", "subString": sub, "expressionType": expression_type, "classFilterMode": False,
            "tagsSet": [], "codeSet": [], "subVersion": 0}}).encode()
        with RemotingClient(cluster.brokers[broker].admin_addr) as r:
            resp = r.invoke(46, {}, body)
        return resp.code, resp.remark

    assert check("broker-a", "SQL92", "n > 5")[0] == ResponseCode.SUCCESS
    assert check("broker-a", "TAG", "TA || TB")[0] == ResponseCode.SUCCESS
    code, remark = check("broker-a", "SQL92", "n >")
    assert code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "'n >'" in (remark or "")
    assert check("broker-b", "SQL92", "n > 5") == (
        ResponseCode.SYSTEM_ERROR, "The broker does not support consumer to filter message by SQL92")
    assert check("broker-b", "TAG", "*")[0] == ResponseCode.SUCCESS
