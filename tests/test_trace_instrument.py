"""Client-side trace of the official client (rocketscope.trace.instrument) against a live broker.

The broker also has broker-side trace on, so these tests check that an instrumented
client's operations are recorded exactly once (by the client).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import LocalCluster, wait_until
from rmq import RecordingListener, config, message
from rocketmq import (
    ConsumeResult,
    FilterExpression,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.v5.exception.client_exception import ClientException

from rocketscope.trace import instrument
from rocketscope.trace.client_trace import TraceTopicError
from rocketscope.trace.codec import EndTransactionRecord, PubRecord, SubAfterRecord, SubBeforeRecord, decode
from rocketscope.trace.lookup import TraceLookup

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("client-trace"))
    try:
        c.start_namesrv()
        node = c.start_broker("broker-ct", traceTopicEnable="true", brokerTraceEnable="true",
                              transactionTimeOut=2000, transactionCheckInterval=1000, transactionCheckMax=5,
                              minInvisibleTimeMillsForRecv=1000, autoCreateTopicEnable="false")
        for topic in ("TopicCt", "TopicPush", "TopicTxT", "TopicNack", "TopicOtel"):
            c.admin("updateTopic", "-b", node.admin_addr, "-t", topic, "-r", "2", "-w", "2")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def trace_records(c: LocalCluster) -> list[Any]:
    """Every record on the trace topic, with the tag (original topic) of its trace message."""
    from rocketscope.topic_reader import discover_queues, pull_messages, queue_bounds

    out = []
    for q in discover_queues(c.namesrv_addr, ["RMQ_SYS_TRACE_TOPIC"]):
        lo, hi = queue_bounds(q)
        for m in pull_messages(q, lo, hi):
            out.extend((m.system_properties.tag, r) for r in decode(bytes(m.body)))
    return out


def test_instrumented_producer_and_simple_consumer_write_each_record_once(traced: LocalCluster) -> None:
    c = traced
    endpoint = c.brokers["broker-ct"].endpoint
    producer = instrument(Producer(config(endpoint), ("TopicCt",)))
    producer.startup()
    ids = [producer.send(message("TopicCt", f"ct-{i}".encode(), tag="t", keys=[f"k{i}"])).message_id
           for i in range(5)]
    ids.append(producer.send_async(message("TopicCt", b"async", keys=["k-async"])).result(timeout=30).message_id)
    with pytest.raises(ClientException):
        producer.send(message("TopicCt", b"x" * (5 << 20)))  # over the 4 MiB body limit: refused
    producer.shutdown()  # right after the last send: the records must not be lost

    consumer = instrument(SimpleConsumer(config(endpoint), "GroupCt", {"TopicCt": FilterExpression("*")},
                                         await_duration=2))
    consumer.startup()
    got: set[str] = set()
    try:
        wait_until(lambda: _receive_ack(consumer, got) >= len(ids), timeout=60, what="all messages consumed")
    finally:
        consumer.shutdown()

    def complete() -> bool:
        recs = [r for _, r in trace_records(c)]
        subs = {r.msg_id for r in recs if isinstance(r, SubAfterRecord)}
        return set(ids) <= subs
    wait_until(complete, timeout=60, what="the consumer's trace records")
    tagged = trace_records(c)
    records = [r for _, r in tagged]
    pubs = Counter(r.msg_id for r in records if isinstance(r, PubRecord) and r.success)
    assert all(pubs[i] == 1 for i in ids), pubs  # the client's record only: the broker wrote none
    assert any(isinstance(r, PubRecord) and not r.success and r.body_length == 5 << 20 for r in records)
    befores = Counter(r.msg_id for r in records if isinstance(r, SubBeforeRecord) and r.group == "GroupCt")
    afters = Counter(r.msg_id for r in records if isinstance(r, SubAfterRecord) and r.success)
    assert all(befores[i] == 1 and afters[i] == 1 for i in ids), (befores, afters)
    assert {tag for tag, r in tagged if getattr(r, "msg_id", None) in ids} == {"TopicCt"}
    # and the lookup tells the whole story of one of them
    timeline = asyncio.run(TraceLookup(c.namesrv_addr).lookup(ids[0])).to_dict()
    assert timeline["sends"] and timeline["sends"][0]["status"] == "success"
    assert [g["group"] for g in timeline["groups"]] == ["GroupCt"]


def _receive_ack(consumer: SimpleConsumer, got: set[str]) -> int:
    for m in consumer.receive(16, 15):
        consumer.ack(m)
        got.add(m.message_id)
    return len(got)


def test_instrumented_push_consumer_traces_its_listener(traced: LocalCluster) -> None:
    c = traced
    endpoint = c.brokers["broker-ct"].endpoint
    with_trace = instrument(Producer(config(endpoint), ("TopicPush",)))
    with_trace.startup()
    ids = {with_trace.send(message("TopicPush", f"push-{i}".encode())).message_id for i in range(3)}
    with_trace.shutdown()
    listener = RecordingListener()
    consumer = PushConsumer(config(endpoint), "GroupPush", listener, {"TopicPush": FilterExpression("*")},
                            consumption_thread_count=2)
    consumer.startup()
    instrument(consumer)  # started already: the listener is wrapped in place
    try:
        wait_until(lambda: {m.message_id for m in list(listener.messages)} >= ids, timeout=60,
                   what="push deliveries")
    finally:
        consumer.shutdown()

    def complete() -> bool:
        recs = [r for _, r in trace_records(c)]
        return ids <= {r.msg_id for r in recs if isinstance(r, SubAfterRecord) and r.group == "GroupPush"}
    wait_until(complete, timeout=60, what="the push consumer's SubAfter records")
    records = [r for _, r in trace_records(c)]
    befores = Counter(r.msg_id for r in records if isinstance(r, SubBeforeRecord) and r.group == "GroupPush")
    assert all(befores[i] == 1 for i in ids), befores


def test_json_http_endpoint_answers_lookups(traced: LocalCluster) -> None:
    """`rocketscope traceServer` as a real process: a timeline, a 404 with its reason, a 400 for a bad ID."""
    import json
    import subprocess
    import sys
    import urllib.error
    import urllib.request
    from pathlib import Path

    from conftest import free_port

    c = traced
    endpoint = c.brokers["broker-ct"].endpoint
    producer = instrument(Producer(config(endpoint), ("TopicCt",)))
    producer.startup()
    msg_id = producer.send(message("TopicCt", b"over http")).message_id
    producer.shutdown()
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rocketscope"), "traceServer", "-n", c.namesrv_addr,
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(path: str) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
        except OSError:
            return 0, {}

    try:
        wait_until(lambda: get("/healthz")[0] == 200, timeout=30, what="the trace server")
        wait_until(lambda: get(f"/api/trace/{msg_id}")[0] == 200, timeout=60, what="the timeline over HTTP")
        status, doc = get(f"/api/trace/{msg_id}")
        assert doc["msg_id"] == msg_id and doc["topic"] == "TopicCt" and doc["sends"][0]["status"] == "success"
        status, doc = get("/api/trace/0102FC00000000000000000000000DEAD")
        assert status == 404 and "unknown message id" in doc["error"]
        status, doc = get("/api/trace/not%20an%20id!")
        assert status == 400 and "msgId" in doc["error"]
        status, doc = get(f"/api/trace/{msg_id}?traceTopic=NoSuchTraceTopic")
        assert status == 404 and "NoSuchTraceTopic" in doc["error"]  # a clear answer, not a hang
    finally:
        proc.terminate()
        proc.wait(10)


class _Checker(TransactionChecker):
    def check(self, message):  # type: ignore[no-untyped-def]
        return TransactionResolution.COMMIT


def test_transactions_write_end_transaction_once_with_state_and_check_back(traced: LocalCluster) -> None:
    """Commit, rollback and a check-back answered by the checker: one EndTransaction each, by the client."""
    c = traced
    producer = instrument(Producer(config(c.brokers["broker-ct"].endpoint), ("TopicTxT",), _Checker()))
    producer.startup()
    try:
        tx = producer.begin_transaction()
        committed = producer.send(message("TopicTxT", b"commit-me"), tx).message_id
        tx.commit()
        tx = producer.begin_transaction()
        rolled_back = producer.send(message("TopicTxT", b"rollback-me"), tx).message_id
        tx.rollback()
        forgotten = producer.send(message("TopicTxT", b"check-me"), producer.begin_transaction()).message_id

        def ends() -> list[EndTransactionRecord]:
            return [r for _, r in trace_records(c) if isinstance(r, EndTransactionRecord)]
        wait_until(lambda: {committed, rolled_back, forgotten} <= {r.msg_id for r in ends()}, timeout=60,
                   what="EndTransaction records of all three (the third after a check-back)")
    finally:
        producer.shutdown()
    by_id = Counter(r.msg_id for r in ends())
    assert by_id[committed] == by_id[rolled_back] == by_id[forgotten] == 1, by_id  # the broker wrote none
    state = {r.msg_id: (r.transaction_state, r.from_check) for r in ends()}
    assert state[committed] == ("COMMIT_MESSAGE", False)
    assert state[rolled_back] == ("ROLLBACK_MESSAGE", False)
    assert state[forgotten] == ("COMMIT_MESSAGE", True)
    half = [r for _, r in trace_records(c) if isinstance(r, PubRecord) and r.msg_id == committed]
    assert [(r.msg_type, r.success) for r in half] == [(1, True)]  # Trans_Msg_Half
    timeline = asyncio.run(TraceLookup(c.namesrv_addr).lookup(committed)).to_dict()
    assert [t["state"] for t in timeline["transactions"]] == ["COMMIT_MESSAGE"]


def test_unacked_delivery_is_one_failed_sub_after_written_by_the_client(traced: LocalCluster) -> None:
    """A SimpleConsumer delivery left to expire: the client writes SubAfter(TIME_OUT) when its invisible
    duration has passed; the broker, which sees the expiry too, writes nothing (no duplicate)."""
    c = traced
    endpoint = c.brokers["broker-ct"].endpoint
    producer = instrument(Producer(config(endpoint), ("TopicNack",)))
    producer.startup()
    msg_id = producer.send(message("TopicNack", b"fail once")).message_id
    producer.shutdown()
    consumer = instrument(SimpleConsumer(config(endpoint), "GroupNack", {"TopicNack": FilterExpression("*")},
                                         await_duration=2))
    consumer.startup()
    attempts: list[int] = []
    try:
        def consume() -> bool:
            for m in consumer.receive(4, 2):
                attempts.append(m.delivery_attempt)
                if m.delivery_attempt > 1:  # the first delivery is left to expire
                    consumer.ack(m)
                    return True
            return False
        wait_until(consume, timeout=60, what="the redelivery")
    finally:
        consumer.shutdown()

    def mine() -> list[Any]:
        return [r for _, r in trace_records(c) if getattr(r, "msg_id", "") == msg_id
                and isinstance(r, SubBeforeRecord | SubAfterRecord)]
    wait_until(lambda: sum(isinstance(r, SubAfterRecord) for r in mine()) >= 2, timeout=60, what="both SubAfter")
    befores = [r for r in mine() if isinstance(r, SubBeforeRecord)]
    # in delivery order, by when each delivery's SubBefore was written: the expired delivery's SubAfter is written
    # when the client notices the expiry, which can come after the redelivery's ack (seen in CI)
    delivered_at = {r.request_id: r.timestamp for r in befores}
    afters = sorted((r for r in mine() if isinstance(r, SubAfterRecord)),
                    key=lambda r: (delivered_at.get(r.request_id, r.timestamp), r.timestamp))
    assert [(r.success, r.context_code) for r in afters] == [(False, 1), (True, 0)], afters
    assert {r.request_id for r in befores} == {r.request_id for r in afters} and len(befores) == 2
    group = asyncio.run(TraceLookup(c.namesrv_addr).lookup(msg_id)).to_dict()["groups"][0]
    assert [d["status"] for d in group["deliveries"]] == ["failed", "success"]
    assert [d["retry_times"] for d in group["deliveries"]] == [0, 1]


def test_missing_trace_topic_is_a_clear_error_not_a_hang(traced: LocalCluster) -> None:
    import time

    producer = Producer(config(traced.brokers["broker-ct"].endpoint), ("TopicCt",))
    t0 = time.monotonic()
    with pytest.raises(TraceTopicError, match="NoSuchTraceTopic does not exist"):
        instrument(producer, trace_topic="NoSuchTraceTopic")
    assert time.monotonic() - t0 < 30


def test_open_telemetry_spans_and_w3c_context(traced: LocalCluster) -> None:
    """otel=True: `<topic> publish` and `<topic> process` spans of one trace, the context carried by the
    message (traceparent user property, trace_context system property), semantic-convention attributes."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from rocketscope.topic_reader import discover_queues, pull_messages, queue_bounds

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    c = traced
    endpoint = c.brokers["broker-ct"].endpoint
    producer = instrument(Producer(config(endpoint), ("TopicOtel",)), otel=True, tracer_provider=provider)
    producer.startup()
    msg_id = producer.send(message("TopicOtel", b"span me", tag="TagO", keys=["order-1"])).message_id
    producer.shutdown()
    listener = RecordingListener(lambda m: ConsumeResult.SUCCESS)
    consumer = instrument(PushConsumer(config(endpoint), "GroupOtel", listener, {"TopicOtel": FilterExpression("*")},
                                       consumption_thread_count=1), otel=True, tracer_provider=provider)
    consumer.startup()
    try:
        wait_until(lambda: any(m.message_id == msg_id for m in list(listener.messages)), timeout=60,
                   what="the push delivery")
        wait_until(lambda: any(s.name == "TopicOtel process" for s in exporter.get_finished_spans()), timeout=30,
                   what="the process span")
    finally:
        consumer.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    publish, process = spans["TopicOtel publish"], spans["TopicOtel process"]
    assert publish.kind == SpanKind.PRODUCER and process.kind == SpanKind.CONSUMER
    assert process.context.trace_id == publish.context.trace_id and process.parent.span_id == publish.context.span_id
    assert publish.attributes["messaging.system"] == "rocketmq"
    assert publish.attributes["messaging.destination.name"] == "TopicOtel"
    assert publish.attributes["messaging.operation"] == "publish"
    assert publish.attributes["messaging.message.id"] == msg_id
    assert publish.attributes["messaging.rocketmq.message.tag"] == "TagO"
    assert tuple(publish.attributes["messaging.rocketmq.message.keys"]) == ("order-1",)
    assert process.attributes["messaging.rocketmq.client_group"] == "GroupOtel"
    traceparent = f"00-{publish.context.trace_id:032x}-{publish.context.span_id:016x}-"  # then the flags
    stored = [m for q in discover_queues(c.namesrv_addr, ["TopicOtel"])
              for m in pull_messages(q, *queue_bounds(q)) if m.system_properties.message_id == msg_id]
    assert stored and stored[0].system_properties.trace_context.startswith(traceparent)
    assert stored[0].user_properties["traceparent"] == stored[0].system_properties.trace_context
