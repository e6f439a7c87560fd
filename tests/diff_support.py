"""Differential scenarios: one function, run by the same client against Apache RocketMQ and RocketScope.

Each ``scenario_*`` takes a :class:`Side` (how to reach one server and create topics and groups on
it) and returns what a client can observe, with names made relative (``{topic}``, ``{group}``) so
the two servers' answers compare as plain dicts.  tests/test_diff_grpc.py asserts that the answers
are equal, or that each side does what docs/COMPATIBILITY.md records for a deliberate deviation.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import rmq
from rocketmq import Message, Producer, SimpleConsumer, TransactionChecker, TransactionResolution
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from rocketmq.v5.exception.client_exception import InternalErrorException

MD = (("x-mq-client-id", "rocketscope-diff"), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))


@dataclass
class Side:
    """One server under comparison: its gRPC endpoint and its admin operations."""

    name: str
    endpoint: str
    create_topic: Callable[[str, str], None]  # (topic, message.type)
    create_group: Callable[[str, bool, int], None]  # (group, orderly, retryMaxTimes)
    topics: Callable[[], set[str]]
    broker_remoting: str = ""  # the broker's remoting address (consumer progress is read there, as mqadmin does)

    def unique(self, prefix: str) -> str:
        return f"{prefix}{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------- the official client
# Apache's proxy clamps a receive's long polling to at least 5 s (grpcClientConsumerMinLongPollingTimeoutMillis)
# and answers ILLEGAL_POLLING_TIME when the client's deadline (await + its 3 s request timeout) is shorter:
# the official client's await must be >= 5 s against Apache (docs/COMPATIBILITY.md).
AWAIT_S = 5


@contextmanager
def consumer(side: Side, group: str, topic: str) -> Iterator[SimpleConsumer]:
    with rmq.simple_consumer(side.endpoint, group, topic, await_s=AWAIT_S) as c:
        yield c


def receive(c: SimpleConsumer, batch: int, invisible_s: int) -> list[Message]:
    """One receive.  The official client's startup() does not wait for the server's answer to its
    Settings, and Apache's proxy fails a receive that comes before them with INTERNAL_SERVER_ERROR
    ("settings" is null): such a receive is retried (docs/COMPATIBILITY.md)."""
    for _ in range(50):
        try:
            return list(c.receive(batch, invisible_s))
        except InternalErrorException as exc:
            if '"settings" is null' not in str(exc):
                raise
            time.sleep(0.2)
    raise AssertionError("the server never received the client's Settings")


def drain(c: SimpleConsumer, expected: int, timeout: float = 60.0, invisible_s: int = 30,
          ack: bool = True) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for m in receive(c, 32, invisible_s):
            got.append(m)
            if ack:
                c.ack(m)
    return got


# ---------------------------------------------------------------------------- raw gRPC
def rpc(side: Side, method: str, req: Any, timeout: float = 30.0) -> Any:
    """One MessagingService call; a server stream (ReceiveMessage) comes back as a list."""
    with grpc.insecure_channel(side.endpoint) as ch:
        fn = getattr(svc_grpc.MessagingServiceStub(ch), method)
        if method == "ReceiveMessage":
            return list(fn(req, metadata=MD, timeout=timeout))
        return fn(req, metadata=MD, timeout=timeout)


def endpoints(side: Side) -> pb.Endpoints:
    host, port = side.endpoint.rsplit(":", 1)
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])


def status(resp: Any) -> tuple[str, str]:
    """(code name, message) of a response, or of the first status of a receive stream."""
    if isinstance(resp, list):
        resp = next((r for r in resp if r.WhichOneof("content") == "status"), None)
        if resp is None:
            return ("NO_STATUS", "")
    return (pb.Code.Name(resp.status.code), resp.status.message)


def raw_message(topic: str, body: bytes = b"x", tag: str | None = None, keys: list[str] | None = None,
                mtype: int = pb.NORMAL, group: str | None = None, delivery_s: int | None = None,
                message_id: str | None = None) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name=topic), body=body)
    sp = m.system_properties
    sp.message_id = uuid.uuid4().hex.upper() if message_id is None else message_id
    sp.message_type = mtype
    sp.body_encoding = pb.IDENTITY
    sp.born_host = "127.0.0.1"
    sp.born_timestamp.GetCurrentTime()
    if tag is not None:
        sp.tag = tag
    sp.keys.extend(keys or [])
    if group is not None:
        sp.message_group = group
    if delivery_s is not None:
        sp.delivery_timestamp.seconds = delivery_s
    return m


def consumer_settings(side: Side, group: str, topic: str, client_type: int = pb.SIMPLE_CONSUMER
                      ) -> svc.TelemetryCommand:
    """The Settings a consumer of ``topic`` (all tags) sends first on its Telemetry stream, as the official
    client does: 10 s request timeout, 20 s long polling."""
    cmd = svc.TelemetryCommand(settings=pb.Settings(
        client_type=client_type, access_point=endpoints(side),
        subscription=pb.Subscription(group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
            topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression="*"))])))
    cmd.settings.request_timeout.FromSeconds(10)
    cmd.settings.subscription.long_polling_timeout.FromSeconds(20)
    return cmd


@contextmanager
def telemetry(side: Side, cmd: svc.TelemetryCommand, timeout: float = 120.0) -> Iterator[svc.TelemetryCommand]:
    """A Telemetry stream that sent ``cmd`` (a client's Settings), open while the block runs; yields the
    server's first answer (the Settings it adopts for the client)."""
    done = threading.Event()

    def requests() -> Iterator[svc.TelemetryCommand]:
        yield cmd
        done.wait(timeout)

    with grpc.insecure_channel(side.endpoint) as ch:
        stream = svc_grpc.MessagingServiceStub(ch).Telemetry(requests(), metadata=MD, timeout=timeout)
        try:
            yield next(stream)
        finally:
            done.set()
            stream.cancel()


@contextmanager
def settings_sent(side: Side, group: str, topic: str) -> Iterator[None]:
    """A Telemetry stream that told the server this client's Settings (a simple consumer of ``topic``),
    open while the block runs: Apache's proxy needs them before any receive (see :func:`receive`)."""
    with telemetry(side, consumer_settings(side, group, topic)):
        yield


def send_status(side: Side, msg: pb.Message) -> tuple[str, str]:
    return status(rpc(side, "SendMessage", svc.SendMessageRequest(messages=[msg])))


def receive_req(topic: str, group: str, invisible_ms: int = 30_000, batch: int = 16, await_ms: int = 5_000,
                queue_id: int = -1) -> svc.ReceiveMessageRequest:
    req = svc.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=batch, auto_renew=False)
    req.message_queue.topic.name = topic
    req.message_queue.id = queue_id
    req.message_queue.permission = pb.READ_WRITE
    req.filter_expression.type = pb.TAG
    req.filter_expression.expression = "*"
    req.invisible_duration.FromMilliseconds(invisible_ms)
    req.long_polling_timeout.FromMilliseconds(await_ms)
    return req


def assigned_queue(side: Side, topic: str, group: str) -> int:
    """The queue id QueryAssignment gives (Apache: -1, any queue; RocketScope: a real queue id)."""
    resp = rpc(side, "QueryAssignment", svc.QueryAssignmentRequest(
        topic=pb.Resource(name=topic), group=pb.Resource(name=group), endpoints=endpoints(side)))
    return resp.assignments[0].message_queue.id


def relative(text: str, **names: str) -> str:
    """``text`` with the scenario's unique names replaced by ``{topic}`` style placeholders."""
    for key, value in sorted(names.items(), key=lambda kv: -len(kv[1])):
        text = text.replace(value, "{" + key + "}")
    return text


# ---------------------------------------------------------------------------- scenarios
def scenario_normal(side: Side) -> dict[str, Any]:
    """Send three messages with tag, keys and a user property; receive and ack them."""
    topic, group = side.unique("DiffNormal"), side.unique("GID_diff_normal")
    side.create_topic(topic, "NORMAL")
    side.create_group(group, False, 16)
    sent = {}
    with rmq.producer(side.endpoint, topic) as p:
        for i in range(3):
            receipt = p.send(rmq.message(topic, f"n{i}".encode(), tag="TagA", keys=[f"k{i}"], props={"p": str(i)}))
            sent[receipt.message_id] = f"n{i}"
    with consumer(side, group, topic) as c:
        got = drain(c, 3, timeout=60)
    return {
        "ids": sorted(m.message_id for m in got) == sorted(sent),
        "messages": sorted((m.body.decode(), m.tag, tuple(m.keys), m.properties.get("p"),
                            relative(m.topic, topic=topic), m.delivery_attempt, m.message_group) for m in got),
    }


def scenario_route_and_assignment(side: Side) -> dict[str, Any]:
    """QueryRoute and QueryAssignment of a 4-queue topic, and QueryRoute of a topic nobody created."""
    topic, group = side.unique("DiffRoute"), side.unique("GID_diff_route")
    side.create_topic(topic, "NORMAL")
    route = rpc(side, "QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=endpoints(side)))
    assign = rpc(side, "QueryAssignment", svc.QueryAssignmentRequest(
        topic=pb.Resource(name=topic), group=pb.Resource(name=group), endpoints=endpoints(side)))
    missing = side.unique("DiffNeverCreated")
    none = rpc(side, "QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name=missing), endpoints=endpoints(side)))
    return {
        "route.status": status(route)[0],
        "route.queue_ids": sorted(q.id for q in route.message_queues),
        "route.permissions": sorted({pb.Permission.Name(q.permission) for q in route.message_queues}),
        "route.accept_message_types": sorted({pb.MessageType.Name(t) for q in route.message_queues
                                              for t in q.accept_message_types}),
        "route.brokers": sorted({q.broker.name for q in route.message_queues}),
        "route.broker_endpoint_is_the_requested_one": all(
            q.broker.endpoints == endpoints(side) for q in route.message_queues),
        "assignment.status": status(assign)[0],
        "assignment.queue_ids": sorted(a.message_queue.id for a in assign.assignments),
        "assignment.permissions": sorted({pb.Permission.Name(a.message_queue.permission)
                                          for a in assign.assignments}),
        "missing_topic.route": (status(none)[0], relative(status(none)[1], topic=missing)),
    }


def scenario_auto_creation(side: Side) -> dict[str, Any]:
    """A send to a topic nobody created; a consumer group nobody created receives from an existing topic."""
    topic, group = side.unique("DiffAuto"), side.unique("GID_diff_auto")
    sent = send_status(side, raw_message(topic))
    existing = side.unique("DiffAutoGroup")
    side.create_topic(existing, "NORMAL")
    with rmq.producer(side.endpoint, existing) as p:
        msg_id = p.send(rmq.message(existing, b"to a new group")).message_id
    with consumer(side, group, existing) as c:
        got = drain(c, 1, timeout=60)
    return {"send_to_missing_topic": (sent[0], relative(sent[1], topic=topic)),
            "topic_created_by_the_send": topic in side.topics(),
            "new_group_receives": [m.message_id == msg_id for m in got]}


def scenario_bad_input(side: Side) -> dict[str, tuple[str, str]]:
    """Each malformed request's status code and message (names made relative)."""
    topic, group = side.unique("DiffBad"), side.unique("GID_diff_bad")
    side.create_topic(topic, "NORMAL")
    out: dict[str, tuple[str, str]] = {}

    def rel(st: tuple[str, str]) -> tuple[str, str]:
        return (st[0], relative(st[1], topic=topic, group=group))

    out["send: topic with a space"] = rel(send_status(side, raw_message("bad topic")))
    out["send: topic of 200 chars"] = rel(send_status(side, raw_message("T" * 200)))
    out["send: tag with |"] = rel(send_status(side, raw_message(topic, tag="a|b")))
    out["send: blank tag"] = rel(send_status(side, raw_message(topic, tag=" ")))
    out["send: blank key"] = rel(send_status(side, raw_message(topic, keys=[" "])))
    out["send: empty message id"] = rel(send_status(side, raw_message(topic, message_id="")))
    out["send: empty body"] = rel(send_status(side, raw_message(topic, body=b"")))
    out["send: FIFO message to a NORMAL topic"] = rel(send_status(side, raw_message(topic, mtype=pb.FIFO,
                                                                                     group="g")))
    out["send: DELAY message to a NORMAL topic"] = rel(send_status(side, raw_message(
        topic, mtype=pb.DELAY, delivery_s=int(time.time()) + 60)))
    out["send: no messages"] = rel(status(rpc(side, "SendMessage", svc.SendMessageRequest())))
    qid = assigned_queue(side, topic, group)
    out["receive: client never sent Settings"] = rel(status(rpc(side, "ReceiveMessage",
                                                                receive_req(topic, group, queue_id=qid))))
    with settings_sent(side, group, topic):
        for case, req in {
            "receive: queue id -1 (any queue)": receive_req(topic, group, queue_id=-1),
            "receive: invisible 100 ms": receive_req(topic, group, 100, queue_id=qid),
            "receive: empty group": receive_req(topic, "", queue_id=qid),
            "receive: group with a space": receive_req(topic, "bad group", queue_id=qid),
            "receive: batch 0": receive_req(topic, group, batch=0, queue_id=qid),
            "receive: batch 100000": receive_req(topic, group, batch=100_000, queue_id=qid),
            "receive: long polling 1 s": receive_req(topic, group, await_ms=1000, queue_id=qid),
            "receive: topic nobody created": receive_req("DiffNoSuchTopic", group, queue_id=qid),
        }.items():
            out[case] = rel(status(rpc(side, "ReceiveMessage", req)))
    ack = svc.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                entries=[svc.AckMessageEntry(message_id="00", receipt_handle="not-a-handle")])
    out["ack: receipt handle not-a-handle"] = rel(status(rpc(side, "AckMessage", ack)))
    change = svc.ChangeInvisibleDurationRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                                receipt_handle="not-a-handle", message_id="00")
    change.invisible_duration.FromSeconds(10)
    out["changeInvisibleDuration: receipt handle not-a-handle"] = rel(status(rpc(
        side, "ChangeInvisibleDuration", change)))
    return out


def scenario_invisible_time(side: Side) -> dict[str, Any]:
    """A received, unacked message stays invisible for its 10 s, then comes back as attempt 2."""
    topic, group = side.unique("DiffInvisible"), side.unique("GID_diff_inv")
    side.create_topic(topic, "NORMAL")
    side.create_group(group, False, 16)
    with rmq.producer(side.endpoint, topic) as p:
        msg_id = p.send(rmq.message(topic, b"once")).message_id
    with consumer(side, group, topic) as c:
        first = drain(c, 1, timeout=60, invisible_s=10, ack=False)
        t0 = time.monotonic()
        early = receive(c, 32, 10)  # one long poll (5 s) well inside the 10 s
        second = drain(c, 1, timeout=60, invisible_s=30, ack=True)
        waited = time.monotonic() - t0
    return {"first": [(m.message_id == msg_id, m.delivery_attempt) for m in first],
            "within_invisible_time": len(early),
            "second": [(m.message_id == msg_id, m.delivery_attempt) for m in second],
            "second_not_before_invisible_time": waited >= 10 - 0.5, "_waited_s": round(waited, 1)}


def scenario_retry_and_dlq(side: Side) -> dict[str, Any]:
    """retryMaxTimes=1: two deliveries, then the message moves to the group's dead-letter topic."""
    topic, group = side.unique("DiffDlq"), side.unique("GID_diff_dlq")
    side.create_topic(topic, "NORMAL")
    side.create_group(group, False, 1)
    with rmq.producer(side.endpoint, topic) as p:
        p.send(rmq.message(topic, b"doomed"))
    attempts = []
    with consumer(side, group, topic) as c:
        deadline = time.monotonic() + 90
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 12:
            got = receive(c, 1, 1)  # never acked: every delivery fails
            for m in got:
                attempts.append(m.delivery_attempt)
                quiet_since = time.monotonic()
    names = {relative(t, topic=topic, group=group) for t in side.topics() if group in t}
    return {"delivery_attempts": attempts, "topics_named_after_group": sorted(names)}


def scenario_delay(side: Side) -> dict[str, Any]:
    """A message due in 4 s arrives no earlier, carrying its delivery timestamp."""
    topic, group = side.unique("DiffDelay"), side.unique("GID_diff_delay")
    side.create_topic(topic, "DELAY")
    side.create_group(group, False, 16)
    due = int(time.time()) + 4
    with rmq.producer(side.endpoint, topic) as p:
        m = rmq.message(topic, b"later")
        m.delivery_timestamp = due
        msg_id = p.send(m).message_id
    with consumer(side, group, topic) as c:
        got = drain(c, 1, timeout=60)
        arrived = time.time()
    return {"received": [g.message_id == msg_id for g in got], "not_before_due": arrived >= due,
            "delivery_timestamp_s": [g.delivery_timestamp // 1000 - due for g in got],
            "message_type": [g.message_type for g in got], "_late_s": round(arrived - due, 1)}


def scenario_fifo(side: Side) -> dict[str, Any]:
    """Six messages in each of two message groups arrive in order, one in flight per group."""
    topic, group = side.unique("DiffFifo"), side.unique("GID_diff_fifo")
    side.create_topic(topic, "FIFO")
    side.create_group(group, True, 5)
    with rmq.producer(side.endpoint, topic) as p:
        for i in range(6):
            for g in ("A", "B"):
                m = rmq.message(topic, f"{g}{i}".encode())
                m.message_group = g
                p.send(m)
    order: dict[str, list[str]] = {"A": [], "B": []}
    two_in_flight = 0
    with consumer(side, group, topic) as c:
        deadline = time.monotonic() + 90
        while sum(map(len, order.values())) < 12 and time.monotonic() < deadline:
            got = receive(c, 32, 10)
            groups = [m.message_group for m in got]
            two_in_flight += len(groups) - len(set(groups))
            for m in got:
                order[m.message_group].append(m.body.decode())
                c.ack(m)
    return {"order": order, "batches_with_two_of_one_group": two_in_flight}


class _Checker(TransactionChecker):
    def __init__(self) -> None:
        self.checked: list[bytes] = []

    def check(self, message):  # type: ignore[no-untyped-def]
        self.checked.append(message.body)
        return TransactionResolution.COMMIT if message.body == b"check-commit" else TransactionResolution.ROLLBACK


def scenario_transaction(side: Side) -> dict[str, Any]:
    """Commit, rollback, and two unresolved half messages the broker checks back (commit / rollback)."""
    topic, group = side.unique("DiffTx"), side.unique("GID_diff_tx")
    side.create_topic(topic, "TRANSACTION")
    side.create_group(group, False, 16)
    checker = _Checker()
    p = Producer(rmq.config(side.endpoint), (topic,), checker)
    p.startup()
    try:
        tx = p.begin_transaction()
        p.send(rmq.message(topic, b"commit"), tx)
        tx.commit()
        tx = p.begin_transaction()
        p.send(rmq.message(topic, b"rollback"), tx)
        tx.rollback()
        for body in (b"check-commit", b"check-rollback"):
            p.send(rmq.message(topic, body), p.begin_transaction())
        with consumer(side, group, topic) as c:
            got = drain(c, 2, timeout=120)
            got += drain(c, 10, timeout=5)
    finally:
        p.shutdown()
    return {"received": sorted(m.body.decode() for m in got),
            "checked": sorted({b.decode() for b in checker.checked})}


# ---------------------------------------------------------------------------- every scenario, one Java run
# peers/java/src/GrpcDiffTool.java runs the scenarios above with Apache's Java client in one JVM (a JVM start
# costs seconds, minutes under load): the topics and groups it expects, named after one prefix.
JAVA_TOPICS = {"Normal": "NORMAL", "Fifo": "FIFO", "Delay": "DELAY", "Tx": "TRANSACTION", "Recall": "DELAY",
               "Dlq": "NORMAL", "Inv": "NORMAL", "Change": "NORMAL", "Bad": "NORMAL", "BadFifo": "FIFO"}
JAVA_GROUPS = {"normal": (False, 16), "fifo": (True, 5), "delay": (False, 16), "tx": (False, 16),
               "recall": (False, 16), "dlq": (False, 1), "inv": (False, 16), "change": (False, 16),
               "bad": (False, 16)}
# what each scenario uses: only those are created (each RocketScope admin call starts a process)
JAVA_NEEDS = {"normal": (("Normal",), "normal"), "fifo": (("Fifo",), "fifo"), "delay": (("Delay",), "delay"),
              "transaction": (("Tx",), "tx"), "recall": (("Recall",), "recall"), "retry_dlq": (("Dlq",), "dlq"),
              "invisible_time": (("Inv",), "inv"), "change_invisible": (("Change",), "change"),
              "bad_input": (("Bad", "BadFifo"), "bad")}


def settings_answer(side: Side, cmd: svc.TelemetryCommand) -> dict[str, Any]:
    """The Settings the server answers a client's first Settings with, as JSON (what the client adopts).

    The access point, the client's own subscription entries and resource names are dropped: they are what the
    client sent, not the server's answer."""
    from google.protobuf import json_format

    with telemetry(side, cmd, timeout=60) as answer:
        pass
    got = json_format.MessageToDict(answer.settings)
    got.pop("accessPoint", None)
    for part in ("subscription", "publishing"):
        got.get(part, {}).pop("subscriptions", None)
        got.get(part, {}).pop("group", None)
        got.get(part, {}).pop("topics", None)
    metric = got.get("metric", {})
    if "endpoints" in metric:  # where to push client metrics: an address of the side itself, compared as a fact
        metric["endpoints"] = "<the server's own address>" if any(
            a.get("port") == int(side.endpoint.rsplit(":", 1)[1]) for a in metric["endpoints"].get("addresses", [])
        ) else "<another address>"
    return {"status": pb.Code.Name(answer.status.code) if answer.HasField("status") else None, "settings": got}


def scenario_settings_answers(side: Side) -> dict[str, Any]:
    """The Settings each client type is answered with (its retry policy, batch and polling, the publishing
    limits, and ``metric``: whether and where the client should push its client metrics)."""
    topic, group = side.unique("DiffSettings"), side.unique("GID_diff_settings")
    side.create_topic(topic, "NORMAL")
    side.create_group(group, False, 16)
    producer = svc.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PRODUCER, access_point=endpoints(side),
        publishing=pb.Publishing(topics=[pb.Resource(name=topic)])))
    producer.settings.request_timeout.FromSeconds(3)
    return {"producer": settings_answer(side, producer),
            "simple": settings_answer(side, consumer_settings(side, group, topic, pb.SIMPLE_CONSUMER)),
            "push": settings_answer(side, consumer_settings(side, group, topic, pb.PUSH_CONSUMER))}


GET_CONSUME_STATS = 208  # mqadmin consumerProgress asks each broker this (ConsumeStats: offsetTable, consumeTps)


def consume_stats(side: Side, group: str, topic: str) -> dict[str, Any]:
    """Per queue (brokerOffset, consumerOffset) and the diff total, read from the broker over remoting."""
    from peers_support import remoting

    body = remoting.call(side.broker_remoting, GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}).body
    raw = body.decode()
    # the offsetTable's keys are MessageQueue objects (not valid JSON); each value follows its key's queueId
    queues = re.findall(r'"queueId":(\d+)[^}]*}\s*:\s*\{([^}]*)\}', raw)
    table = {}
    for qid, value in queues:
        fields = dict(re.findall(r'"(\w+)":(-?\d+)', value))
        table[int(qid)] = (int(fields.get("brokerOffset", -1)), int(fields.get("consumerOffset", -1)))
    return {"queues": dict(sorted(table.items())),
            "diff_total": sum(b - c for b, c in table.values())}


def scenario_consumer_progress(side: Side) -> dict[str, Any]:
    """Consumer progress as mqadmin's consumerProgress reads it from the broker: 12 messages sent to a 4-queue
    topic; after a SimpleConsumer group received and acked all of them, every queue's consumer offset reaches
    its broker offset (ground truth: the 12 sends and the 12 acks counted here)."""
    topic, group = side.unique("DiffProgress"), side.unique("GID_diff_progress")
    side.create_topic(topic, "NORMAL")
    side.create_group(group, False, 16)
    with rmq.producer(side.endpoint, topic) as p:
        for i in range(12):
            p.send(rmq.message(topic, f"p{i}".encode()))
    with consumer(side, group, topic) as c:
        got = drain(c, 12, timeout=60)
    acked = len(got)
    # offsets are committed after the acks (Apache: by the POP checkpoint; both asynchronously): wait for them
    deadline, stats = time.monotonic() + 30, consume_stats(side, group, topic)
    while stats["diff_total"] and time.monotonic() < deadline:
        time.sleep(0.2)
        stats = consume_stats(side, group, topic)
    brokers = sum(b for b, _ in stats["queues"].values())
    return {"acked": acked, "broker_offsets_total": brokers, "diff_total_after_acks": stats["diff_total"],
            "queues": sorted(stats["queues"])}


def _relative_all(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return relative(value, **names)
    if isinstance(value, list):
        return [_relative_all(v, names) for v in value]
    if isinstance(value, dict):
        return {relative(k, **names): _relative_all(v, names) for k, v in value.items()}
    return value


def java_scenarios(side: Side, scenarios: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Every scenario of GrpcDiffTool (or ``scenarios``) in one JVM against ``side``: {scenario: result},
    unique names made relative; ``retry_dlq`` also gets the topics named after its group afterwards."""
    from concurrent.futures import ThreadPoolExecutor

    from peers_support import java_tool, json_lines

    prefix = side.unique("DiffJ")
    needs = [JAVA_NEEDS[s] for s in scenarios or JAVA_NEEDS]
    topics = [t for ts, _ in needs for t in ts]
    with ThreadPoolExecutor(4) as pool:  # each RocketScope admin call is a process start: side by side
        list(pool.map(lambda t: side.create_topic(prefix + t, JAVA_TOPICS[t]), topics))
        list(pool.map(lambda g: side.create_group(f"GID_{prefix}_{g}", *JAVA_GROUPS[g]), [g for _, g in needs]))
    res = java_tool("GrpcDiffTool", side.endpoint, prefix, *scenarios, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    names = {f"group_{g}": f"GID_{prefix}_{g}" for g in JAVA_GROUPS}
    names |= {f"topic_{t}": prefix + t for t in JAVA_TOPICS} | {"prefix": prefix}
    out = {r.pop("scenario"): _relative_all(r, names) for r in json_lines(res.stdout)}
    if "retry_dlq" in out:
        group = f"GID_{prefix}_dlq"
        out["retry_dlq"]["topics_named_after_group"] = sorted(
            relative(t, **names) for t in side.topics() if group in t)
    return out
