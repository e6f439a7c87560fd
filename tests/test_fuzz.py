"""Fuzzing: random and mutated requests to every gRPC handler, random bytes to every decoder.

Checked for every example: the broker answers with a status (a RocketMQ v2 code, or
gRPC's own INVALID_ARGUMENT/INTERNAL for bytes that are not the request message at
all), within its deadline (no stall), and afterwards it still serves the messages it
stored before, byte for byte.
"""

from __future__ import annotations

import base64
import string
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cluster import LocalCluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rmq import message, producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from rocketscope.broker.receipt import ReceiptHandle, ReceiptHandleError
from rocketscope.broker.store import record
from rocketscope.broker.store.commitlog import CommitLog
from rocketscope.broker.timer import RecallError, parse_recall_handle
from rocketscope.config import ConfigError, read_properties
from rocketscope.ha_events import HaEvent, HaEventError

pytestmark = pytest.mark.e2e
SERVICE = "/apache.rocketmq.v2.MessagingService/"
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])
CODES = {v.number for v in pb.Code.DESCRIPTOR.values}
names = st.one_of(st.sampled_from(["TopicFuzz", "GroupFuzz", "", " ", "%RETRY%GroupFuzz", "RMQ_SYS_TRACE_TOPIC",
                                   "a" * 300, "bad name", "x|y", "ünï"]),
                  st.text(alphabet=string.ascii_letters + "%|_-!@ \x00\x01", max_size=20))
small_ints = st.one_of(st.integers(-3, 10), st.sampled_from([2**31 - 1, -(2**31), 1024, 1025]))
durations_ms = st.one_of(st.integers(-10_000, 1_000), st.sampled_from([0, 10, 999, 10**9, 12 * 3600 * 1000 + 1]))


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, grpc.Channel, list]]:
    c = LocalCluster(tmp_path_factory.mktemp("fuzz"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a", autoCreateTopicEnable="false", maxMessageSize=8192)
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", "TopicFuzz", "-r", "2", "-w", "2")
        with producer(c.brokers["broker-a"].endpoint, "TopicFuzz") as p:
            stored = [(p.send(message("TopicFuzz", f"keep-{i}".encode() * 10)).message_id, f"keep-{i}".encode() * 10)
                      for i in range(6)]
        ch = grpc.insecure_channel(c.brokers["broker-a"].endpoint)
        yield c, ch, stored
        ch.close()
        assert c.brokers["broker-a"].proc.alive, "the broker died during fuzzing"
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def call(ch: grpc.Channel, method: str, req: object, resp_type: type, stream: bool = False, timeout: float = 2.0
         ) -> list:
    md = (("x-mq-client-id", "fuzzer"),)
    if stream:
        fn = ch.unary_stream(SERVICE + method, request_serializer=lambda m: m.SerializeToString(),
                             response_deserializer=resp_type.FromString)
        return list(fn(req, metadata=md, timeout=timeout))
    fn = ch.unary_unary(SERVICE + method, request_serializer=lambda m: m.SerializeToString(),
                        response_deserializer=resp_type.FromString)
    return [fn(req, metadata=md, timeout=timeout)]


def assert_answered(responses: list) -> None:
    statuses = [r.status for r in responses if r.HasField("status")]
    assert statuses, "no status in the answer"
    assert statuses[0].code in CODES and statuses[0].code != pb.CODE_UNSPECIFIED
    if statuses[0].code == pb.INTERNAL_SERVER_ERROR:
        raise AssertionError(f"handler failed internally: {statuses[0].message}")


def resource(name: str) -> pb.Resource:
    return pb.Resource(name=name)


def queue(topic: str, qid: int, broker: str) -> pb.MessageQueue:
    return pb.MessageQueue(topic=resource(topic), id=qid, broker=pb.Broker(name=broker))


@st.composite
def grpc_messages(draw: st.DrawFn) -> pb.Message:
    m = pb.Message(topic=resource(draw(names)), body=draw(st.binary(max_size=9000)))
    sp = m.system_properties
    sp.message_id = draw(st.one_of(st.just("ID-FUZZ"), st.text(max_size=140)))
    sp.message_type = draw(st.sampled_from([v.number for v in pb.MessageType.DESCRIPTOR.values]))
    sp.tag = draw(st.one_of(st.just(""), st.text(max_size=20)))
    sp.keys.extend(draw(st.lists(st.text(max_size=10), max_size=3)))
    sp.message_group = draw(st.one_of(st.just(""), st.text(max_size=80)))
    if draw(st.booleans()):
        sp.delivery_timestamp.FromMilliseconds(draw(st.integers(0, 2**42)))
    for k, v in draw(st.dictionaries(st.text(max_size=12), st.text(max_size=20), max_size=4)).items():
        m.user_properties[k] = v
    return m


@given(msgs=st.lists(grpc_messages(), max_size=3))
@FUZZ
def test_fuzz_send_message(fuzz_cluster, msgs) -> None:  # type: ignore[no-untyped-def]
    _, ch, _ = fuzz_cluster
    assert_answered(call(ch, "SendMessage", svc.SendMessageRequest(messages=msgs), svc.SendMessageResponse))


@given(topic=names, group=names, qid=small_ints, broker=names, batch=small_ints, invisible=durations_ms,
       poll=durations_ms, expr=st.text(max_size=20), ftype=st.integers(0, 3), auto=st.booleans())
@FUZZ
def test_fuzz_receive_message(fuzz_cluster, topic, group, qid, broker, batch, invisible, poll, expr, ftype,  # type: ignore[no-untyped-def]
                              auto) -> None:
    _, ch, _ = fuzz_cluster
    req = svc.ReceiveMessageRequest(group=resource(group), message_queue=queue(topic, qid, broker),
                                    batch_size=batch, auto_renew=auto,
                                    filter_expression=pb.FilterExpression(type=ftype, expression=expr))
    req.invisible_duration.FromMilliseconds(invisible)
    req.long_polling_timeout.FromMilliseconds(min(poll, 300))
    assert_answered(call(ch, "ReceiveMessage", req, svc.ReceiveMessageResponse, stream=True, timeout=1.5))


@given(group=names, topic=names, handles=st.lists(st.one_of(
    st.text(max_size=60), st.builds(lambda t, q, o, s: f"r1 broker-a {t} {q} {o} {s} 0", names, small_ints,
                                    small_ints, small_ints)), max_size=4))
@FUZZ
def test_fuzz_ack_and_change_invisible(fuzz_cluster, group, topic, handles) -> None:  # type: ignore[no-untyped-def]
    _, ch, _ = fuzz_cluster
    req = svc.AckMessageRequest(group=resource(group), topic=resource(topic),
                                entries=[svc.AckMessageEntry(message_id="x", receipt_handle=h) for h in handles])
    assert_answered(call(ch, "AckMessage", req, svc.AckMessageResponse))
    for h in handles[:1]:
        civ = svc.ChangeInvisibleDurationRequest(group=resource(group), topic=resource(topic), receipt_handle=h)
        civ.invisible_duration.FromSeconds(5)
        assert_answered(call(ch, "ChangeInvisibleDuration", civ, svc.ChangeInvisibleDurationResponse))
        dlq = svc.ForwardMessageToDeadLetterQueueRequest(group=resource(group), topic=resource(topic),
                                                         receipt_handle=h, message_id="x")
        assert_answered(call(ch, "ForwardMessageToDeadLetterQueue", dlq, svc.ForwardMessageToDeadLetterQueueResponse))


@given(topic=names, group=names, qid=small_ints, broker=names, offset=st.integers(-5, 2**62), batch=small_ints,
       policy=st.integers(0, 4), ts=st.integers(-(2**40), 2**42))
@FUZZ
def test_fuzz_pull_and_offsets(fuzz_cluster, topic, group, qid, broker, offset, batch, policy, ts) -> None:  # type: ignore[no-untyped-def]
    _, ch, _ = fuzz_cluster
    mq = queue(topic, qid, broker)
    pull = svc.PullMessageRequest(group=resource(group), message_queue=mq, offset=offset, batch_size=batch)
    pull.long_polling_timeout.FromMilliseconds(100)
    assert_answered(call(ch, "PullMessage", pull, svc.PullMessageResponse, stream=True))
    q = svc.QueryOffsetRequest(message_queue=mq, query_offset_policy=policy)
    q.timestamp.FromMilliseconds(ts)
    assert_answered(call(ch, "QueryOffset", q, svc.QueryOffsetResponse))
    assert_answered(call(ch, "GetOffset", svc.GetOffsetRequest(group=resource(group), message_queue=mq),
                         svc.GetOffsetResponse))
    assert_answered(call(ch, "UpdateOffset", svc.UpdateOffsetRequest(group=resource(group), message_queue=mq,
                                                                     offset=offset), svc.UpdateOffsetResponse))


@given(topic=names, group=names, tx=st.text(max_size=40), res=st.integers(0, 3), src=st.integers(0, 3),
       handle=st.one_of(st.text(max_size=60), st.binary(max_size=40).map(lambda b: b.hex())), ctype=st.integers(0, 8))
@FUZZ
def test_fuzz_route_heartbeat_transactions_recall(fuzz_cluster, topic, group, tx, res, src, handle, ctype) -> None:  # type: ignore[no-untyped-def]
    _, ch, _ = fuzz_cluster
    assert_answered(call(ch, "QueryRoute", svc.QueryRouteRequest(topic=resource(topic)), svc.QueryRouteResponse))
    assert_answered(call(ch, "QueryAssignment", svc.QueryAssignmentRequest(topic=resource(topic),
                                                                           group=resource(group)),
                         svc.QueryAssignmentResponse))
    assert_answered(call(ch, "Heartbeat", svc.HeartbeatRequest(group=resource(group), client_type=ctype),
                         svc.HeartbeatResponse))
    end = svc.EndTransactionRequest(topic=resource(topic), message_id="m", transaction_id=tx, resolution=res,
                                    source=src)
    assert_answered(call(ch, "EndTransaction", end, svc.EndTransactionResponse))
    assert_answered(call(ch, "RecallMessage", svc.RecallMessageRequest(topic=resource(topic), recall_handle=handle),
                         svc.RecallMessageResponse))
    assert_answered(call(ch, "NotifyClientTermination", svc.NotifyClientTerminationRequest(group=resource(group)),
                         svc.NotifyClientTerminationResponse))


@given(data=st.binary(max_size=200), method=st.sampled_from(["SendMessage", "AckMessage", "QueryRoute",
                                                              "EndTransaction", "ChangeInvisibleDuration"]))
@FUZZ
def test_fuzz_raw_bytes_get_a_grpc_status(fuzz_cluster, data, method) -> None:  # type: ignore[no-untyped-def]
    _, ch, _ = fuzz_cluster
    resp_type = getattr(svc, method + "Response")
    fn = ch.unary_unary(SERVICE + method, request_serializer=lambda b: b, response_deserializer=resp_type.FromString)
    resp = fn(data, metadata=(("x-mq-client-id", "fuzzer"),), timeout=2)
    # bytes that parse are an ordinary request; bytes that do not get BAD_REQUEST naming the request type
    assert resp.status.code in CODES and resp.status.code not in (pb.CODE_UNSPECIFIED, pb.INTERNAL_SERVER_ERROR)
    if resp.status.code == pb.BAD_REQUEST and "not a valid" in resp.status.message:
        assert method + "Request" in resp.status.message


def test_stored_data_unchanged_after_fuzzing(fuzz_cluster) -> None:  # type: ignore[no-untyped-def]
    _, ch, stored = fuzz_cluster
    found = {}
    for qid in (0, 1):
        req = svc.PullMessageRequest(group=resource("Verifier"), message_queue=queue("TopicFuzz", qid, "broker-a"),
                                     offset=0, batch_size=100)
        for r in call(ch, "PullMessage", req, svc.PullMessageResponse, stream=True):
            if r.HasField("message") and r.message.body.startswith(b"keep-"):
                found[r.message.system_properties.message_id] = r.message.body
    assert found == dict(stored)


# ------------------------------------------------------------------ decoders
@given(st.text(max_size=120))
@settings(max_examples=300, deadline=None)
def test_fuzz_receipt_handle_decoder(text: str) -> None:
    try:
        ReceiptHandle.decode(text)
    except ReceiptHandleError:
        pass


@given(st.text(max_size=120))
@settings(max_examples=300, deadline=None)
def test_fuzz_recall_handle_decoder(text: str) -> None:
    try:
        parse_recall_handle(text)
    except RecallError:
        pass


@pytest.mark.parametrize("text", ["not-a-handle", "a", base64.urlsafe_b64encode(b"r1 b t soon id").decode(),
                                  base64.urlsafe_b64encode(b"\xff\xfe").decode()])
def test_a_bad_recall_handle_is_named_in_the_clients_terms(text: str) -> None:
    """BAD_REQUEST naming the field, never the decoder's exception text (row 55 of docs/COMPATIBILITY.md)."""
    with pytest.raises(RecallError) as caught:
        parse_recall_handle(text)
    message = str(caught.value)
    assert message.startswith("recall_handle is not one this broker issued"), message
    assert "padding" not in message and "codec" not in message and "invalid literal" not in message, message


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_fuzz_property_and_event_decoders(data: bytes) -> None:
    try:
        record.decode_properties(data)
    except (record.RecordError, UnicodeDecodeError):
        pass
    try:
        HaEvent.from_json(data)
    except HaEventError:
        pass


@given(st.binary(max_size=400))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzz_properties_file(tmp_path: Path, data: bytes) -> None:
    f = tmp_path / "fuzz.conf"
    f.write_bytes(data)
    try:
        read_properties(f)
    except ConfigError:
        pass


@given(st.binary(min_size=1, max_size=5000))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzz_commitlog_recovery_of_random_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    root = tmp_path_factory.mktemp("cl")
    (root / ("0" * 20)).write_bytes(data)
    log = CommitLog(root, 8192)
    result = log.recover(0)
    assert 0 <= result.end <= len(data)
    assert list(log.iter_messages(0, result.end)) == []  # random bytes never decode as a verified record
    log.close()
