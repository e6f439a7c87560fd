"""Client-side message trace for the official RocketMQ 5 Python client (rocketmq-python-client).

    from rocketscope.trace import instrument
    producer = instrument(Producer(config, ("orders",)))       # started or not, API unchanged
    consumer = instrument(SimpleConsumer(config, "billing", {"orders": FilterExpression("*")}))

RocketMQ 5's gRPC clients write no trace at all; this adds RocketMQ's trace records to the
official client without changing how it is used:

* Producer ``send`` / ``send_async``: a Pub record for every send, failed ones included
  (cost, the broker that stored it, message type);
* SimpleConsumer ``receive`` / ``ack``: SubBefore when a message is handed to the
  application, SubAfter when it is acked (retry times, cost, success);
* PushConsumer: SubBefore and SubAfter around the application's listener (success is
  ``ConsumeResult.SUCCESS``).

Records go through :class:`~rocketscope.trace.dispatcher.AsyncTraceDispatcher` (bounded
queue, batches of 10 records / 128 KB / 5 s, never blocking the send path, flushed on
``shutdown`` and at interpreter exit, written and dropped records counted), which sends
them with a second, internal Producer to the trace topic, tag = the original topic.

The instrumented client announces itself to the broker with the gRPC metadata header
``x-rocketscope-trace: client``, so a broker with broker-side trace (brokerTraceEnable)
writes nothing for its operations and no record exists twice.

Not covered yet: EndTransaction records for transactional sends (the broker-side trace
writes them), OpenTelemetry spans.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, TypeVar

from rocketscope.trace.codec import PubRecord, SubAfterRecord, SubBeforeRecord
from rocketscope.trace.dispatcher import DEFAULT_TRACE_TOPIC, AsyncTraceDispatcher

log = logging.getLogger(__name__)

CLIENT_TRACE_HEADER = ("x-rocketscope-trace", "client")
REGION = "DefaultRegion"
CLIENT_QUEUE_SIZE = 16_384
"""Records the client's dispatcher holds.  RocketMQ's 2048 overflowed under a burst of 5,000
async sends (the trace producer sends one 10-record message per round trip); 16k records
are about 5 MB.  A sustained overload still drops, counted in rocketscope_trace_records_dropped_total."""
C = TypeVar("C")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _keys(message: Any) -> str:
    try:
        return " ".join(message.keys or ())
    except Exception:
        return ""


def _msg_type(message: Any) -> int:
    """RocketMQ's MessageType ordinal: Normal 0, Trans 1, Delay 3, Order 4."""
    if getattr(message, "message_group", None):
        return 4
    if getattr(message, "delivery_timestamp", None):
        return 3
    return 0


def _announce(client: Any) -> None:
    """Add the trace header to every RPC of ``client`` (the client builds metadata with ``sign()``)."""
    original = client.sign

    def sign() -> Any:
        metadata = original()
        return [*metadata, CLIENT_TRACE_HEADER]

    client.sign = sign


class _TraceSender:
    """The dispatcher's send function: an internal official-client Producer for the trace topic."""

    def __init__(self, config: Any, trace_topic: str) -> None:
        self.config = config
        self.trace_topic = trace_topic
        self._producer: Any = None

    def start(self) -> None:
        """Start the internal producer now: started lazily, its start-up (routes, settings) took
        long enough for a burst of sends to overflow the dispatcher's queue."""
        from rocketmq import Producer

        if self._producer is None:
            producer = Producer(self.config, (self.trace_topic,))
            _announce(producer)  # its own sends are not traced by the broker either
            producer.startup()
            self._producer = producer

    def __call__(self, trace_topic: str, body: str, keys: list[str], origin_topic: str = "") -> None:
        from rocketmq import Message

        if self._producer is None:
            self.start()
        msg = Message()
        msg.topic = trace_topic
        msg.body = body.encode("utf-8")
        if origin_topic:
            msg.tag = origin_topic
        for key in keys:
            msg.keys = key  # the client's setter adds one key per assignment
        self._producer.send(msg)

    def close(self) -> None:
        if self._producer is not None:
            try:
                self._producer.shutdown()
            finally:
                self._producer = None


def instrument(client: C, trace_topic: str | None = None, *, dispatcher: AsyncTraceDispatcher | None = None) -> C:
    """Trace ``client`` (a Producer, SimpleConsumer or PushConsumer); returns the same object."""
    from rocketmq import Producer, PushConsumer, SimpleConsumer

    if getattr(client, "_rocketscope_trace", None) is not None:
        return client  # already instrumented
    topic = trace_topic or DEFAULT_TRACE_TOPIC
    sender = _TraceSender(client.client_configuration, topic)  # type: ignore[attr-defined]
    if dispatcher is None:
        try:
            sender.start()
        except Exception as exc:  # tracing must not stop the application: the dispatcher retries later
            log.warning("trace producer for %s did not start (%s); trace records wait in the queue", topic, exc)
    disp = dispatcher or AsyncTraceDispatcher(sender, trace_topic=topic, queue_size=CLIENT_QUEUE_SIZE)
    client._rocketscope_trace = disp  # type: ignore[attr-defined]
    _announce(client)
    if isinstance(client, Producer):
        _trace_producer(client, disp)
    elif isinstance(client, SimpleConsumer):
        _trace_simple_consumer(client, disp)
    elif isinstance(client, PushConsumer):
        _trace_push_consumer(client, disp)
    else:
        raise TypeError(f"instrument() takes a Producer, SimpleConsumer or PushConsumer, not {type(client).__name__}")

    original_shutdown = client.shutdown  # type: ignore[attr-defined]

    def shutdown() -> Any:
        """Flush every trace record of this client before it (and the trace producer) stops."""
        try:
            return original_shutdown()
        finally:
            if dispatcher is None:
                disp.close()
            sender.close()

    client.shutdown = shutdown  # type: ignore[attr-defined]
    return client


# ------------------------------------------------------------------ producer
def _pub(message: Any, receipt: Any, started_ms: int, cost_ms: int, success: bool, store_host: str) -> PubRecord:
    return PubRecord(timestamp=started_ms, region_id=REGION, group="", topic=message.topic,
                     msg_id=getattr(receipt, "message_id", "") or "", tags=message.tag or "", keys=_keys(message),
                     store_host=store_host, body_length=len(message.body or b""), cost_time=int(cost_ms),
                     msg_type=_msg_type(message), offset_msg_id="", success=success)


def _store_host(receipt: Any) -> str:
    mq = getattr(receipt, "message_queue", None)
    try:
        return str(mq.endpoints) if mq is not None else ""
    except Exception:
        return ""


def _trace_producer(producer: Any, disp: AsyncTraceDispatcher) -> None:
    original_send, original_send_async = producer.send, producer.send_async

    def send(message: Any, transaction: Any = None) -> Any:
        started, t0 = _now_ms(), time.perf_counter()
        try:
            receipt = original_send(message, transaction) if transaction is not None else original_send(message)
        except Exception:
            disp.append(_pub(message, None, started, int((time.perf_counter() - t0) * 1000), False, ""),
                        message.topic)
            raise
        disp.append(_pub(message, receipt, started, int((time.perf_counter() - t0) * 1000), True,
                         _store_host(receipt)), message.topic)
        return receipt

    def send_async(message: Any) -> Any:
        started, t0 = _now_ms(), time.perf_counter()
        future = original_send_async(message)

        def done(fut: Any) -> None:
            cost = int((time.perf_counter() - t0) * 1000)
            try:
                receipt = fut.result()
            except Exception:
                disp.append(_pub(message, None, started, cost, False, ""), message.topic)
                return
            disp.append(_pub(message, receipt, started, cost, True, _store_host(receipt)), message.topic)

        future.add_done_callback(done)
        return future

    producer.send, producer.send_async = send, send_async


# ------------------------------------------------------------------ consumers
def _sub_before(group: str, message: Any, request_id: str) -> SubBeforeRecord:
    attempt = getattr(message, "delivery_attempt", 1) or 1
    return SubBeforeRecord(timestamp=_now_ms(), region_id=REGION, group=group, request_id=request_id,
                           msg_id=message.message_id, retry_times=max(int(attempt) - 1, 0), keys=_keys(message))


def _sub_after(group: str, message: Any, request_id: str, cost_ms: int, success: bool) -> SubAfterRecord:
    return SubAfterRecord(request_id=request_id, msg_id=message.message_id, cost_time=int(cost_ms), success=success,
                          keys=_keys(message), context_code=0 if success else 1, timestamp=_now_ms(), group=group)


def _trace_simple_consumer(consumer: Any, disp: AsyncTraceDispatcher) -> None:
    group = consumer.consumer_group
    original_receive, original_ack = consumer.receive, consumer.ack
    handed: dict[str, tuple[str, float]] = {}  # receipt handle -> (request id, perf_counter at hand-out)

    def receive(max_message_num: int, invisible_duration: int) -> Any:
        messages = original_receive(max_message_num, invisible_duration)
        for m in messages:
            request_id = uuid.uuid4().hex[:16]
            handed[m.receipt_handle] = (request_id, time.perf_counter())
            disp.append(_sub_before(group, m, request_id), m.topic)
        if len(handed) > 100_000:  # handles never acked (expired): forget the oldest
            for handle in list(handed)[:50_000]:
                handed.pop(handle, None)
        return messages

    def ack(message: Any) -> Any:
        request_id, t0 = handed.pop(message.receipt_handle, (uuid.uuid4().hex[:16], time.perf_counter()))
        try:
            result = original_ack(message)
        except Exception:
            disp.append(_sub_after(group, message, request_id, int((time.perf_counter() - t0) * 1000), False),
                        message.topic)
            raise
        disp.append(_sub_after(group, message, request_id, int((time.perf_counter() - t0) * 1000), True),
                    message.topic)
        return result

    consumer.receive, consumer.ack = receive, ack


class _TracedListener:
    def __init__(self, inner: Any, group: str, disp: AsyncTraceDispatcher) -> None:
        self.inner, self.group, self.disp = inner, group, disp

    def consume(self, message: Any) -> Any:
        from rocketmq import ConsumeResult

        request_id = uuid.uuid4().hex[:16]
        self.disp.append(_sub_before(self.group, message, request_id), message.topic)
        t0 = time.perf_counter()
        result = None
        try:
            result = self.inner.consume(message)
            return result
        finally:
            self.disp.append(_sub_after(self.group, message, request_id, int((time.perf_counter() - t0) * 1000),
                                        result == ConsumeResult.SUCCESS), message.topic)


def _trace_push_consumer(consumer: Any, disp: AsyncTraceDispatcher) -> None:
    attr = "_PushConsumer__message_listener"  # the listener the client's consumption threads call
    inner = getattr(consumer, attr, None)
    if inner is None:
        raise TypeError("this rocketmq-python-client version keeps the PushConsumer's listener elsewhere; "
                        "instrument() cannot wrap it")
    traced = _TracedListener(inner, consumer.consumer_group, disp)
    setattr(consumer, attr, traced)
    # already started: the consumption pool holds its own reference to the listener
    consumption = getattr(consumer, "_PushConsumer__consumption", None)
    if consumption is not None:
        for name in ("_Consumption__message_listener", "_FifoConsumption__message_listener"):
            if hasattr(consumption, name):
                setattr(consumption, name, traced)
