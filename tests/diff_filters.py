"""Differential scenarios of issue 21 (filters, message types, queue selection, namespaces), run by
tests/test_diff_filters.py against Apache RocketMQ 5.3.3 and RocketScope like tests/diff_support.py's."""

from __future__ import annotations

import time
from typing import Any

import diff_support as d
import grpc
import rmq
from rocketmq import FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import FilterType
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from rocketscope.trace.client_trace import close_client_metrics

SQL = "n >= 6 AND (TAGS = 'TA' OR color = 'red')"


def _receive_all(side: d.Side, topic: str, group: str, expr: pb.FilterExpression, want: int,
                 timeout: float = 40.0) -> tuple[tuple[str, str], list[pb.Message]]:
    """Raw ReceiveMessage calls (with the Settings Apache's proxy needs) until ``want`` messages came."""
    got: list[pb.Message] = []
    first = ("NO_STATUS", "")
    deadline = time.monotonic() + timeout
    queue = d.assigned_queue(side, topic, group)  # Apache: -1 (any queue); RocketScope: a real queue
    with d.settings_sent(side, group, topic):
        while time.monotonic() < deadline:
            req = d.receive_req(topic, group, await_ms=d.AWAIT_S * 1000, batch=32, queue_id=queue)
            req.filter_expression.CopyFrom(expr)
            resp = d.rpc(side, "ReceiveMessage", req)
            st = d.status(resp)
            if first[0] == "NO_STATUS":
                first = st
            got += [r.message for r in resp if r.WhichOneof("content") == "message"]
            if len(got) >= want or st[0] not in ("OK", "MESSAGE_NOT_FOUND"):
                break
    return first, got


def scenario_sql92_filter(side: d.Side) -> dict[str, Any]:
    """12 messages (n 0..11, tags TA/TB, colors); the official SimpleConsumer subscribes with SQL92."""
    topic, group = side.unique("DiffSql"), side.unique("GID_diff_sql")
    side.create_topic(topic, "NORMAL")
    side.create_group(group, False, 16)
    with rmq.producer(side.endpoint, topic) as p:
        for i in range(12):
            p.send(rmq.message(topic, f"s{i}".encode(), tag="TA" if i % 2 else "TB",
                               props={"n": str(i), "color": "red" if i % 3 == 0 else "blue"}))
    c = SimpleConsumer(rmq.config(side.endpoint), group, {topic: FilterExpression(SQL, FilterType.SQL)},
                       await_duration=d.AWAIT_S)
    c.startup()
    try:
        got = d.drain(c, 4, timeout=60)
        got += d.drain(c, 1, timeout=d.AWAIT_S + 1)  # nothing more may come
    finally:
        c.shutdown()
        close_client_metrics(c)
    bad = _receive_all(side, topic, side.unique("GID_diff_sqlbad"), pb.FilterExpression(type=pb.SQL,
                                                                                       expression="n >"), 1)[0]
    blank = _receive_all(side, topic, side.unique("GID_diff_sqlblank"), pb.FilterExpression(type=pb.SQL,
                                                                                           expression=""), 1)[0]
    tags = _receive_all(side, topic, side.unique("GID_diff_tags"), pb.FilterExpression(type=pb.TAG,
                                                                                       expression="TA||"), 6)[1]
    return {"sql92": sorted(m.body.decode() for m in got), "bad_sql92": bad, "blank_sql92": blank,
            "tag_a_or_nothing": sorted(m.body.decode() for m in tags)}


def scenario_lite_priority_and_queues(side: d.Side) -> dict[str, Any]:
    """LITE and PRIORITY sends; FIFO message groups' queues; the client's queue_id on a NORMAL send."""
    topic, ftopic = side.unique("DiffLite"), side.unique("DiffQFifo")
    side.create_topic(topic, "NORMAL")
    side.create_topic(ftopic, "FIFO")
    statuses = {}
    for name, mtype in (("LITE", pb.LITE), ("PRIORITY", pb.PRIORITY)):
        m = d.raw_message(topic, body=name.encode(), mtype=mtype)
        m.system_properties.lite_topic = "lt1"
        m.system_properties.priority = 3
        statuses[name] = d.send_status(side, m)
    offsets = []
    for _ in range(4):
        m = d.raw_message(topic, body=b"q3")
        m.system_properties.queue_id = 3
        resp = d.rpc(side, "SendMessage", svc.SendMessageRequest(messages=[m]))
        offsets.append(resp.entries[0].offset)
    groups = ["g0", "g2", "g3", "g4", "g11", "order-1"]
    for g in groups:
        d.send_status(side, d.raw_message(ftopic, body=g.encode(), mtype=pb.FIFO, group=g))
    stored = 4 + sum(st[0] == "OK" for st in statuses.values())  # RocketScope refuses LITE/PRIORITY here (F13)
    _, got = _receive_all(side, topic, side.unique("GID_diff_lite"), pb.FilterExpression(type=pb.TAG,
                                                                                        expression="*"), stored)
    _, fifo = _receive_all(side, ftopic, side.unique("GID_diff_qfifo"), pb.FilterExpression(type=pb.TAG,
                                                                                           expression="*"), 6)
    return {
        "send": statuses,
        "received": sorted((m.body.decode(), pb.MessageType.Name(m.system_properties.message_type),
                            m.system_properties.lite_topic, m.system_properties.priority)
                           for m in got if m.body != b"q3"),
        # four sends naming queue 3: all in queue 3 would give offsets 0,1,2,3
        "queue_id_honoured": sorted(m.system_properties.queue_id for m in got if m.body == b"q3") == [3] * 4,
        "fifo_queues": {m.body.decode(): m.system_properties.queue_id for m in fifo},
        "_offsets": offsets,
    }


def scenario_namespace(side: d.Side) -> dict[str, Any]:
    """resource_namespace and x-mq-namespace on a topic that exists only without the namespace."""
    topic = side.unique("DiffNs")
    side.create_topic(topic, "NORMAL")
    md = (*d.MD, ("x-mq-namespace", "nsA"))
    with grpc.insecure_channel(side.endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        route = stub.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name=topic, resource_namespace="nsA"),
                                                      endpoints=d.endpoints(side)), metadata=md, timeout=20)
        m = d.raw_message(topic, body=b"ns")
        m.topic.resource_namespace = "nsA"
        sent = stub.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=md, timeout=20)
    _, got = _receive_all(side, topic, side.unique("GID_diff_ns"), pb.FilterExpression(type=pb.TAG, expression="*"),
                          1)
    return {"route": d.status(route), "route_namespace": sorted({q.topic.resource_namespace
                                                                 for q in route.message_queues}),
            "send": d.status(sent),
            "received_namespace": sorted({(m.topic.resource_namespace, d.relative(m.topic.name, topic=topic))
                                          for m in got})}
