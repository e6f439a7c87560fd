"""Differential scenarios of priority messages and Lite mode (issue 21), run by tests/test_diff_priority.py
against Apache RocketMQ 5.5.0 (the second reference, docs/PEERS.md) and RocketScope like tests/diff_support.py's.

The ground truth is what the scenario sends: each message's priority, hence the queue Apache's rule puts it in
(``min(priority, writeQueueNums - 1)``, broker/priority.py) and the order a backlog must drain in (the highest
queue first, each queue in the order sent)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import diff_support as d
import rmq
from rocketmq import Message
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from rocketscope.trace.client_trace import close_client_metrics

QUEUES = 4  # both sides' test topics (tests/test_diff_grpc.py rocketscope_side, ReferenceCluster.create_topic)
# the priorities of the backlog, in the order sent: some above the last queue (7, 9), some repeated
PRIORITIES = (0, 5, 1, 9, 2, 3, 0, 7, 1, 2, 3, 4)


# Apache RocketMQ 5.5.0's answers to scenario_priority_rules (observed 2026-11-27 with tests/test_diff_priority.py;
# codes only: the texts are each server's own, RocketScope's name the field)
APACHE_55_RULES: dict[str, Any] = {
    "priority_on_normal_topic": "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",  # "expected type is NORMAL, actual PRIORITY"
    "normal_type_with_priority_on_normal_topic": "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",  # the priority decides
    "normal_on_priority_topic": "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",
    "priority_type_without_priority": "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",  # "actual type is NORMAL"
    "fifo_with_priority_on_priority_topic": "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",  # "actual type is FIFO"
    "negative_priority": "INTERNAL_SERVER_ERROR",  # Message.setPriority's IllegalArgumentException
    "priority_100": "OK",
    "priority_0": "OK",
    "route_accepts": ["PRIORITY"],
    "stored": [("p0", 0, 0, "PRIORITY"), ("p100", 3, 100, "PRIORITY")],  # priority 100: the last queue
}
# a remoting single send (remoting_priority_queues) on a PRIORITY and on a NORMAL topic: the broker does not look
# at the topic's type (only the proxy does)
APACHE_55_REMOTING = {"None": 0, "1": 1, "9": 3}
OURS_NEGATIVE_PRIORITY = "BAD_REQUEST"  # deviation P6
APACHE_55_LITE = {"lite_on_normal_topic": "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE",
                  # "lite group G is expected to bind topic null, but actual is T": the group has no lite bind topic
                  "sync_lite_subscription": "ILLEGAL_TOPIC"}


def codes(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with each (code, text) status reduced to its code: what clients branch on."""
    return {k: v[0] if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) and v[0].isupper() else v
            for k, v in result.items()}


def expected_drain(priorities: tuple[int, ...] = PRIORITIES, queues: int = QUEUES) -> list[str]:
    """The bodies (``m<i>``) in the order a backlog of ``priorities`` drains from a PRIORITY topic."""
    sent = [(min(p, queues - 1), i) for i, p in enumerate(priorities)]
    return [f"m{i}" for _, i in sorted(sent, key=lambda qi: (-qi[0], qi[1]))]


def scenario_priority_backlog(side: d.Side) -> dict[str, Any]:
    """The official Producer sends 12 priority messages to a PRIORITY topic; then the official SimpleConsumer
    drains the backlog (batches of up to 32, each message acked)."""
    topic, group = side.unique("DiffPrio"), side.unique("GID_diff_prio")
    side.create_topic(topic, "PRIORITY")
    side.create_group(group, False, 16)
    return backlog_on(side, topic, group)


def backlog_on(side: d.Side, topic: str, group: str) -> dict[str, Any]:
    """scenario_priority_backlog on a PRIORITY topic (with 4 queues) and a group that exist."""
    receipts = []
    with rmq.producer(side.endpoint, topic) as p:
        for i, prio in enumerate(PRIORITIES):
            m = Message()
            m.topic, m.body, m.priority = topic, f"m{i}".encode(), prio
            receipts.append(p.send(m))
    c = rmq.SimpleConsumer(rmq.config(side.endpoint), group, {topic: rmq.FilterExpression("*")},
                           await_duration=d.AWAIT_S)
    c.startup()
    try:
        got = d.drain(c, len(PRIORITIES), timeout=60)
    finally:
        c.shutdown()
        close_client_metrics(c)
    return {"sent": len(receipts),
            "drained": [m.body.decode() for m in got],
            "priorities": sorted({(m.body.decode(), m.priority) for m in got}),
            "types": sorted({Message.message_type_desc(m.message_type) for m in got})}


def receive_raw(side: d.Side, topic: str, want: int) -> list[pb.Message]:
    group = side.unique("GID_diff_prio_raw")
    got: list[pb.Message] = []
    deadline = time.monotonic() + 40
    queue = d.assigned_queue(side, topic, group)  # Apache: -1 (any queue); RocketScope: a real queue
    with d.settings_sent(side, group, topic):
        while len(got) < want and time.monotonic() < deadline:
            resp = d.rpc(side, "ReceiveMessage", d.receive_req(topic, group, await_ms=d.AWAIT_S * 1000, batch=32,
                                                               queue_id=queue))
            got += [r.message for r in resp if r.WhichOneof("content") == "message"]
    return got


def scenario_priority_rules(side: d.Side) -> dict[str, Any]:
    """Raw SendMessage calls: which type a priority makes, against which topics, and what a priority beyond
    the last queue or below 0 does."""
    ptopic, ntopic = side.unique("DiffPrioR"), side.unique("DiffPrioN")
    side.create_topic(ptopic, "PRIORITY")
    side.create_topic(ntopic, "NORMAL")

    def send(topic: str, mtype: int, priority: int | None = None, group: str | None = None,
             body: bytes = b"x") -> tuple[str, str]:
        m = d.raw_message(topic, body=body, mtype=mtype, group=group)
        if priority is not None:
            m.system_properties.priority = priority
        code, text = d.send_status(side, m)
        return code, d.relative(text, topic=topic) if code != "OK" else ""

    out: dict[str, Any] = {
        "priority_on_normal_topic": send(ntopic, pb.PRIORITY, 3),
        "normal_type_with_priority_on_normal_topic": send(ntopic, pb.NORMAL, 3),
        "normal_on_priority_topic": send(ptopic, pb.NORMAL),
        "priority_type_without_priority": send(ptopic, pb.PRIORITY),
        "fifo_with_priority_on_priority_topic": send(ptopic, pb.FIFO, 3, group="g1"),
        "negative_priority": send(ptopic, pb.PRIORITY, -1),
        "priority_100": send(ptopic, pb.PRIORITY, 100, body=b"p100"),
        "priority_0": send(ptopic, pb.PRIORITY, 0, body=b"p0"),
    }
    route = d.rpc(side, "QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name=ptopic),
                                                            endpoints=d.endpoints(side)))
    out["route_accepts"] = sorted({pb.MessageType.Name(t) for q in route.message_queues
                                   for t in q.accept_message_types})
    got = receive_raw(side, ptopic, 2)
    out["stored"] = sorted((m.body.decode(), m.system_properties.queue_id, m.system_properties.priority,
                            pb.MessageType.Name(m.system_properties.message_type)) for m in got)
    return codes(out) | {"_texts": {k: v[1] for k, v in out.items() if isinstance(v, tuple) and v[1]}}


def scenario_lite_refusals(side: d.Side) -> dict[str, Any]:
    """What a LITE message and a lite consumer's SyncLiteSubscription get without a LITE topic."""
    topic = side.unique("DiffLiteN")
    side.create_topic(topic, "NORMAL")
    m = d.raw_message(topic, body=b"lite", mtype=pb.LITE)
    m.system_properties.lite_topic = "lt1"
    out: dict[str, Any] = {"lite_on_normal_topic": d.send_status(side, m)}
    req = svc.SyncLiteSubscriptionRequest(action=pb.LiteSubscriptionAction.Value("PARTIAL_ADD"),
                                          topic=pb.Resource(name=topic),
                                          group=pb.Resource(name=side.unique("GID_diff_lite")),
                                          lite_topic_set=["lt1"])
    try:
        out["sync_lite_subscription"] = d.status(d.rpc(side, "SyncLiteSubscription", req))
    except Exception as exc:  # an RPC error (UNIMPLEMENTED) rather than a status
        code = getattr(exc, "code", lambda: None)()
        out["sync_lite_subscription"] = ("RPC_" + (code.name if code else type(exc).__name__), "")
    return codes(out) | {"_texts": {k: d.relative(v[1], topic=topic) for k, v in out.items()}}


def remoting_priority_queues(broker_addr: str, topic: str, queues: int = QUEUES) -> dict[str, int]:
    """The queue a remoting SEND_MESSAGE_V2 (a single message naming queue 0, as Apache's Java client sends) lands
    in, by the priority in its properties: Apache's broker moves it to ``min(priority, writeQueueNums - 1)``."""
    from rocketscope.broker.remoting.client import RemotingClient
    from rocketscope.broker.remoting.codec import RequestCode, ResponseCode, properties_to_string

    out = {}
    with RemotingClient(broker_addr) as b:
        for priority in (None, 1, 9):
            props = {"UNIQ_KEY": uuid.uuid4().hex.upper()}
            if priority is not None:
                props["_SYS_MSG_PRIORITY_"] = str(priority)
            header = {"a": "PrioPG", "b": topic, "c": "TBW102", "d": str(queues), "e": "0", "f": "0",
                      "g": str(int(time.time() * 1000)), "h": "0", "i": properties_to_string(props), "m": "false"}
            resp = b.invoke(RequestCode.SEND_MESSAGE_V2, header, b"remoting")
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            out[str(priority)] = int(resp.fields["queueId"])
    return out


def scenario_lite_push_consumer(side: d.Side, create_lite_topic: Any, bind_group: Any) -> dict[str, Any]:
    """The official LitePushConsumer subscribes to lite topic ``a`` of a LITE topic, then the official Producer sends
    4 lite messages (lite topics a, b, a, c): which arrive.  ``create_lite_topic(topic)`` and
    ``bind_group(group, topic)`` are the side's admin steps (mqadmin on Apache)."""
    import threading

    from rocketmq import ConsumeResult, LitePushConsumer, MessageListener

    topic, group = side.unique("DiffLiteT"), side.unique("GID_diff_litepush")
    create_lite_topic(topic)
    bind_group(group, topic)
    got: list[tuple[str, str, str]] = []
    lock = threading.Lock()

    class Listener(MessageListener):
        def consume(self, message):  # type: ignore[no-untyped-def]
            with lock:
                got.append((message.body.decode(), message.lite_topic, Message.message_type_desc(message.message_type)))
            return ConsumeResult.SUCCESS

    c = LitePushConsumer(rmq.config(side.endpoint), group, topic, Listener())
    c.startup()
    try:
        subscribed, why = "OK", ""
        try:
            c.subscribe_lite("a")
        except Exception as exc:  # what the server answered the lite subscription
            subscribed, why = type(exc).__name__, str(exc)[:300]
        if subscribed == "OK":
            with rmq.producer(side.endpoint, topic) as p:
                for i, lite in enumerate("abac"):
                    m = Message()
                    m.topic, m.body, m.lite_topic = topic, f"L{i}".encode(), lite
                    p.send(m)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(got) < 2:
                time.sleep(0.2)
            time.sleep(1)  # a third message (of b or c) would be a wrong delivery: give it a moment to show
    finally:
        c.shutdown()
        close_client_metrics(c)
    return {"subscribe_lite": subscribed, "received": sorted(got), "_why": why}
