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
  ``ConsumeResult.SUCCESS``);
* transactional Producer: EndTransaction at commit or rollback, and when the broker's
  check-back is answered by the TransactionChecker (from_check = true);
* optionally (``otel=True``) OpenTelemetry spans ``<topic> publish``, ``<topic> receive`` and
  ``<topic> process`` with the messaging semantic-convention attributes; the W3C context
  travels in the message's ``trace_context`` system property and in a ``traceparent`` user
  property (the Python client hands only user properties to the consumer).

Records go through :class:`~rocketscope.trace.dispatcher.AsyncTraceDispatcher` (bounded
queue, batches of 10 records / 128 KB / 5 s, never blocking the send path, flushed on
``shutdown`` and at interpreter exit, written and dropped records counted), which sends
them with a second, internal Producer to the trace topic, tag = the original topic.

The instrumented client announces itself to the broker with the gRPC metadata header
``x-rocketscope-trace: client``, so a broker with broker-side trace (brokerTraceEnable)
writes nothing for its operations and no record exists twice.

A SimpleConsumer delivery that is never acked gets its failed SubAfter (context code 1,
TIME_OUT) from the client when its invisible duration has passed, noticed at the next
``receive`` or at ``shutdown``: the broker knows the expiry too, but writes nothing for a
delivery it handed to an instrumented client (trace/broker_side.py), so it is recorded once.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
import time
from typing import Any, TypeVar

from rocketscope.trace.codec import EndTransactionRecord, PubRecord, SubAfterRecord, SubBeforeRecord
from rocketscope.trace.dispatcher import DEFAULT_TRACE_TOPIC, AsyncTraceDispatcher

log = logging.getLogger(__name__)

CLIENT_TRACE_HEADER = ("x-rocketscope-trace", "client")
REGION = "DefaultRegion"
CLIENT_QUEUE_SIZE = 16_384
"""Records the client's dispatcher holds.  RocketMQ's 2048 overflowed under a burst of 5,000
async sends (the trace producer sends one 10-record message per round trip); 16k records
are about 5 MB.  A sustained overload still drops, counted in rocketscope_trace_records_dropped_total."""
C = TypeVar("C")
CODE_SUCCESS, CODE_TIME_OUT, CODE_EXCEPTION, CODE_FAILED = 0, 1, 2, 4  # RocketMQ's ConsumeReturnType ordinals
MSG_TYPE_TRANS_HALF = 1
TRANSACTION_STATES = {1: "COMMIT_MESSAGE", 2: "ROLLBACK_MESSAGE"}  # TransactionResolution; else UNKNOW


class TraceTopicError(RuntimeError):
    """The trace topic does not exist: a clear error at ``instrument()`` instead of records that
    silently fail (RocketMQ users see only CODE 17 at lookup time, rocketmq-externals#563)."""


_REQUEST_ID_PREFIX = os.urandom(4).hex()
_request_seq = itertools.count()


def _new_request_id() -> str:
    """16 hex characters unique per delivery: a random per-process prefix and a counter.  It only
    pairs a SubBefore with its SubAfter (same msgId and group); ``uuid4`` on every received
    message cost the traced consumer more than the rest of the record."""
    return f"{_REQUEST_ID_PREFIX}{next(_request_seq) & 0xFFFFFFFF:08x}"


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
            producer.startup()  # a missing topic is only logged by the client: ask for its route ourselves
            try:
                _check_route(producer, self.trace_topic)
            except BaseException:
                producer.shutdown()
                close_client_metrics(producer)
                raise
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
                close_client_metrics(self._producer)
            finally:
                self._producer = None


def _check_route(client: Any, topic: str) -> None:
    """Raise TraceTopicError when the name server/proxy answers TOPIC_NOT_FOUND for ``topic``.

    The official client's ``startup()`` only logs a topic without a route, and every trace send
    would then fail in the background; RocketMQ users meet this as CODE 17 at lookup time, much
    later.  Other failures (a timeout, a broker down) are left to the dispatcher's retries."""
    from rocketmq.grpc_protocol import Code, QueryRouteRequest

    cfg = client.client_configuration
    req = QueryRouteRequest()
    req.topic.name = topic
    req.topic.resource_namespace = cfg.namespace or ""
    req.endpoints.CopyFrom(cfg.rpc_endpoints.endpoints)
    future = client.rpc_client.query_topic_route_async(cfg.rpc_endpoints, req, metadata=client.sign(),
                                                       timeout=cfg.request_timeout)
    res = future.result(timeout=(cfg.request_timeout or 3) + 2)
    if res is not None and res.status.code == Code.TOPIC_NOT_FOUND:
        raise TraceTopicError(f"trace topic {topic} does not exist: create it (updateTopic) or turn on "
                              f"traceTopicEnable on the brokers; no trace record could be written "
                              f"({res.status.message})")


def _client_meter(client: Any) -> Any:
    """The meter of the official client's own metrics pipeline, when the broker turned it on
    (Settings.metric): what is recorded there is pushed by OTLP with the client's metrics to
    where the broker said (metricCollectorMode: its own port in proxy mode, which re-exports on
    the broker's /metrics; or a collector).  None when client metrics are off."""
    metrics_ = getattr(client, "client_metrics", None) or getattr(client, "_Client__client_metrics", None)
    provider = getattr(metrics_, "_ClientMetrics__meter_provider", None)
    enabled = getattr(metrics_, "_ClientMetrics__enabled", False)
    if provider is None or not enabled:
        return None
    try:
        return provider.get_meter("rocketscope.trace")
    except Exception:  # a client version without this pipeline: keep the global meter
        return None


def close_client_metrics(client: Any, timeout_ms: int = 5_000) -> None:
    """Push the official client's metrics one last time and stop their pipeline.

    The official Python client (rocketmq 5.1.2) stops its MeterProvider only when the broker turns
    client metrics off, never at ``shutdown()``: what was recorded since the last periodic push
    (every 60 s there) reaches the broker only at interpreter exit, when the broker may be gone,
    and the process then logs "Failed to export metrics" for each such client.  Called after the
    client's own shutdown; harmless when client metrics are off."""
    metrics_ = getattr(client, "client_metrics", None) or getattr(client, "_Client__client_metrics", None)
    provider = getattr(metrics_, "_ClientMetrics__meter_provider", None)
    if provider is None:
        return
    try:
        if provider.force_flush(timeout_ms):
            provider.shutdown(timeout_millis=timeout_ms)
        else:  # keep the pipeline: its periodic push (and the one at exit) still delivers the counts
            log.info("client metrics: last push at shutdown did not complete; the periodic push will retry")
    except Exception as exc:  # the last push failing must not turn a clean shutdown into an error
        log.info("client metrics: last push failed at shutdown: %s", exc)


def _bind_counters(client: Any, disp: AsyncTraceDispatcher) -> bool:
    """Move the dispatcher's written/dropped/failed counters and queue depth onto the client's
    exported meter (see _client_meter), so client-side drops reach the broker's /metrics or the
    collector (rocketscope_trace_records_dropped_total{source="client"}); without client metrics
    they stay on the global OpenTelemetry meter, for an application that configures its own.
    True when they are on the client's meter."""
    meter = _client_meter(client)
    if meter is None:
        return False
    try:
        disp.move_to_meter(meter)
    except AttributeError:  # pragma: no cover - a dispatcher given by the caller keeps its own meter
        return False
    return True


def _follow_client_metrics(client: Any, disp: AsyncTraceDispatcher) -> None:
    """Bind the counters whenever the broker (re)configures the client's metrics.

    The official client (rocketmq 5.1.x) finishes ``startup()`` once the broker's Settings set its
    publishing or subscription part, and only then starts the metrics pipeline from the same
    Settings (rpc_channel: reset_setting, then reset_metric): under load ``startup()`` can return
    before the pipeline exists.  Wrapping the client's ``reset_metrics`` binds the counters the
    moment the pipeline starts, or restarts on a new endpoint."""
    metrics_ = getattr(client, "client_metrics", None) or getattr(client, "_Client__client_metrics", None)
    original = getattr(metrics_, "reset_metrics", None)
    if original is None:
        return

    def reset_metrics(metric: Any) -> Any:
        result = original(metric)
        _bind_counters(client, disp)
        return result

    metrics_.reset_metrics = reset_metrics  # type: ignore[union-attr]  # original is not None, so neither is metrics_


def instrument(client: C, trace_topic: str | None = None, *, dispatcher: AsyncTraceDispatcher | None = None,
               otel: bool = False, tracer_provider: Any = None, group: str | None = None) -> C:
    """Trace ``client`` (a Producer, SimpleConsumer or PushConsumer); returns the same object.

    Raises :class:`TraceTopicError` when the trace topic does not exist (found out at once,
    not after records failed in the background); any other start-up problem of the trace
    producer (a broker down) is only logged, the dispatcher retries with the next batch.
    ``otel=True`` also emits OpenTelemetry spans through ``tracer_provider`` (default: the
    global one).  ``group`` is the producer group written into Pub and EndTransaction records:
    RocketMQ 5 producers have none, so by default the record names the client itself (its client
    id, host@pid#...), which is what tells two producers of one topic apart in a timeline."""
    from rocketmq import Producer, PushConsumer, SimpleConsumer

    if getattr(client, "_rocketscope_trace", None) is not None:
        return client  # already instrumented
    if not isinstance(client, Producer | SimpleConsumer | PushConsumer):
        raise TypeError(f"instrument() takes a Producer, SimpleConsumer or PushConsumer, not {type(client).__name__}")
    topic = trace_topic or DEFAULT_TRACE_TOPIC
    sender = _TraceSender(client.client_configuration, topic)  # type: ignore[attr-defined]
    if dispatcher is None:
        try:
            sender.start()
        except TraceTopicError:
            raise
        except Exception as exc:  # tracing must not stop the application: the dispatcher retries later
            log.warning("trace producer for %s did not start (%s); trace records wait in the queue", topic, exc)
    disp = dispatcher or AsyncTraceDispatcher(sender, trace_topic=topic, queue_size=CLIENT_QUEUE_SIZE)
    client._rocketscope_trace = disp  # type: ignore[attr-defined]
    spans = _Spans(tracer_provider) if otel else None
    _announce(client)
    finish: Any = None
    if isinstance(client, Producer):
        producer_group = group if group is not None else str(getattr(client, "client_id", "") or "")
        _trace_producer(client, disp, spans, producer_group)
    elif isinstance(client, SimpleConsumer):
        finish = _trace_simple_consumer(client, disp, spans)
    else:
        _trace_push_consumer(client, disp, spans)

    if dispatcher is None:
        _follow_client_metrics(client, disp)
        if not _bind_counters(client, disp):
            log.info("client-side trace counters are on the global OpenTelemetry meter until the broker turns "
                     "the client's metrics on (metricCollectorMode=proxy on the broker puts them on its /metrics)")
    original_shutdown = client.shutdown  # type: ignore[attr-defined]

    def shutdown() -> Any:
        """Flush every trace record of this client before it (and the trace producer) stops."""
        try:
            if finish is not None:
                finish()  # deliveries handed out and never acked: they will be redelivered
            return original_shutdown()
        finally:
            if dispatcher is None:
                disp.close()
            sender.close()
            close_client_metrics(client)  # the trace counters ride the client's metrics push

    client.shutdown = shutdown  # type: ignore[attr-defined]
    return client


# ------------------------------------------------------------------ producer
def _pub(message: Any, receipt: Any, started_ms: int, cost_ms: int, success: bool, store_host: str,
         msg_type: int | None = None, group: str = "") -> PubRecord:
    msg_id = getattr(receipt, "message_id", "") or ""
    if not msg_id and not success:
        msg_id = getattr(message, "message_id", "") or ""  # set by the client before a send it then lost
    return PubRecord(timestamp=started_ms, region_id=REGION, group=group, topic=message.topic,
                     msg_id=msg_id, tags=message.tag or "", keys=_keys(message),
                     store_host=store_host, body_length=len(message.body or b""), cost_time=int(cost_ms),
                     msg_type=_msg_type(message) if msg_type is None else msg_type, offset_msg_id="",
                     success=success)


def _store_host(receipt: Any) -> str:
    mq = getattr(receipt, "message_queue", None)
    try:
        return str(mq.endpoints) if mq is not None else ""
    except Exception:
        return ""


def _trace_producer(producer: Any, disp: AsyncTraceDispatcher, spans: _Spans | None, group: str = "") -> None:
    original_send, original_send_async = producer.send, producer.send_async

    def send(message: Any, transaction: Any = None) -> Any:
        started, t0 = _now_ms(), time.perf_counter()
        msg_type = MSG_TYPE_TRANS_HALF if transaction is not None else None
        span = spans.publish(message, "transaction" if transaction is not None else None) if spans else None
        try:
            receipt = original_send(message, transaction) if transaction is not None else original_send(message)
        except Exception as exc:
            disp.append(_pub(message, None, started, int((time.perf_counter() - t0) * 1000), False, "", msg_type,
                             group), message.topic)
            if span is not None:
                spans.end(span, None, exc)  # type: ignore[union-attr]
            raise
        disp.append(_pub(message, receipt, started, int((time.perf_counter() - t0) * 1000), True,
                         _store_host(receipt), msg_type, group), message.topic)
        if span is not None:
            spans.end(span, receipt, None)  # type: ignore[union-attr]
        return receipt

    def send_async(message: Any) -> Any:
        started, t0 = _now_ms(), time.perf_counter()
        span = spans.publish(message, None) if spans else None
        future = original_send_async(message)

        def done(fut: Any) -> None:
            cost = int((time.perf_counter() - t0) * 1000)
            try:
                receipt = fut.result()
            except Exception as exc:
                disp.append(_pub(message, None, started, cost, False, "", group=group), message.topic)
                if span is not None:
                    spans.end(span, None, exc)  # type: ignore[union-attr]
                return
            disp.append(_pub(message, receipt, started, cost, True, _store_host(receipt), group=group), message.topic)
            if span is not None:
                spans.end(span, receipt, None)  # type: ignore[union-attr]

        future.add_done_callback(done)
        return future

    producer.send, producer.send_async = send, send_async
    _trace_transactions(producer, disp, group)
    if spans is not None:
        _carry_trace_context(producer)


def _end_transaction(message: Any, transaction_id: str, resolution: Any, from_check: bool,
                     store_host: str = "", group: str = "") -> EndTransactionRecord:
    return EndTransactionRecord(
        timestamp=_now_ms(), region_id=REGION, group=group, topic=message.topic, msg_id=message.message_id or "",
        tags=message.tag or "", keys=_keys(message), store_host=store_host, msg_type=2,
        transaction_id=transaction_id or "", transaction_state=TRANSACTION_STATES.get(int(resolution), "UNKNOW"),
        from_check=from_check)


def _trace_transactions(producer: Any, disp: AsyncTraceDispatcher, group: str = "") -> None:
    """EndTransaction records: ``Transaction.commit/rollback`` go through ``producer.end_transaction``;
    a broker check-back runs the checker and answers from the client's private
    ``__server_transaction_check`` (the only place that knows the transaction ID and the answer)."""
    original_end = producer.end_transaction

    def end_transaction(endpoints: Any, message: Any, transaction_id: str, result: Any, source: Any) -> Any:
        response = original_end(endpoints, message, transaction_id, result, source)
        disp.append(_end_transaction(message, transaction_id, result, int(source) == 2, str(endpoints or ""),
                                     group), message.topic)
        return response

    producer.end_transaction = end_transaction
    checker = getattr(producer, "_Producer__checker", None)
    check_name = "_Producer__server_transaction_check"
    original_check = getattr(producer, check_name, None)
    if checker is None or original_check is None:
        return  # not a transactional producer (or another client version): commit/rollback are still traced
    answers = threading.local()
    found_checker: Any = checker  # non-None from here on (the closure below keeps it)

    class _Checker:
        """Remembers the checker's answer for the check-back that is running on this thread."""

        def check(self, message: Any) -> Any:
            answers.result = found_checker.check(message)
            return answers.result

    producer._Producer__checker = _Checker()

    def server_transaction_check(endpoints: Any, message: Any, transaction_id: str) -> Any:
        answers.result = None
        try:
            return original_check(endpoints, message, transaction_id)
        finally:
            if answers.result is not None:
                disp.append(_end_transaction(message, transaction_id, answers.result, True, str(endpoints or ""),
                                             group),
                            message.topic)

    setattr(producer, check_name, server_transaction_check)


# ------------------------------------------------------------------ consumers
def _sub_before(group: str, message: Any, request_id: str) -> SubBeforeRecord:
    attempt = getattr(message, "delivery_attempt", 1) or 1
    return SubBeforeRecord(timestamp=_now_ms(), region_id=REGION, group=group, request_id=request_id,
                           msg_id=message.message_id, retry_times=max(int(attempt) - 1, 0), keys=_keys(message))


def _sub_after(group: str, message: Any, request_id: str, cost_ms: int, success: bool,
               code: int | None = None) -> SubAfterRecord:
    return SubAfterRecord(request_id=request_id, msg_id=message.message_id, cost_time=int(cost_ms), success=success,
                          keys=_keys(message), context_code=(CODE_SUCCESS if success else CODE_TIME_OUT)
                          if code is None else code, timestamp=_now_ms(), group=group)


class _Handed:
    """One SimpleConsumer delivery between ``receive`` and its ack or expiry."""

    __slots__ = ("deadline", "deadline_ms", "message", "request_id", "t0")

    def __init__(self, message: Any, request_id: str, t0: float, invisible_s: float) -> None:
        self.message, self.request_id, self.t0 = message, request_id, t0
        self.deadline = t0 + invisible_s
        self.deadline_ms = _now_ms() + int(invisible_s * 1000)  # when it expired, for the record's time


def _trace_simple_consumer(consumer: Any, disp: AsyncTraceDispatcher, spans: _Spans | None) -> Any:
    """Wraps receive/ack/change_invisible_duration; returns the shutdown step that closes open deliveries."""
    group = consumer.consumer_group
    original_receive, original_ack = consumer.receive, consumer.ack
    original_change = getattr(consumer, "change_invisible_duration", None)
    handed: dict[str, _Handed] = {}  # receipt handle -> delivery
    lock = threading.Lock()
    earliest = [float("inf")]  # no deadline before this: receive() skips the scan (it runs on every call)

    def expire(now: float, everything: bool = False) -> None:
        """Deliveries whose invisible duration passed without an ack: the broker redelivers them
        (or dead-letters them), so their processing failed: SubAfter with TIME_OUT."""
        if not everything and now < earliest[0]:
            return
        with lock:
            gone = [h for h, d in handed.items() if everything or d.deadline <= now]
            done = [handed.pop(h) for h in gone]
            earliest[0] = min((d.deadline for d in handed.values()), default=float("inf"))
        for d in done:
            # stamped at the expiry, not when noticed (the next receive, maybe after the redelivery's ack)
            ended = min(now, d.deadline)
            record = _sub_after(group, d.message, d.request_id, int((ended - d.t0) * 1000), False, CODE_TIME_OUT)
            disp.append(dataclasses.replace(record, timestamp=min(d.deadline_ms, record.timestamp)), d.message.topic)

    def receive(max_message_num: int, invisible_duration: int) -> Any:
        expire(time.perf_counter())
        span = spans.start_receive(group) if spans else None
        messages: list[Any] = []
        try:
            messages = original_receive(max_message_num, invisible_duration)
        finally:
            if span is not None:
                spans.end_receive(span, messages)  # type: ignore[union-attr]
        now = time.perf_counter()
        expire(now)  # a redelivery in this batch proves its earlier hand-out expired meanwhile
        for m in messages:
            request_id = _new_request_id()
            with lock:
                handed[m.receipt_handle] = d = _Handed(m, request_id, now, float(invisible_duration))
                earliest[0] = min(earliest[0], d.deadline)
            disp.append(_sub_before(group, m, request_id), m.topic)
        return messages

    def ack(message: Any) -> Any:
        with lock:
            d = handed.pop(message.receipt_handle, None)
        request_id, t0 = (d.request_id, d.t0) if d else (_new_request_id(), time.perf_counter())
        try:
            result = original_ack(message)
        except Exception:
            disp.append(_sub_after(group, message, request_id, int((time.perf_counter() - t0) * 1000), False),
                        message.topic)
            raise
        disp.append(_sub_after(group, message, request_id, int((time.perf_counter() - t0) * 1000), True),
                    message.topic)
        return result

    def change_invisible_duration(message: Any, invisible_duration: int) -> Any:
        old = message.receipt_handle
        result = original_change(message, invisible_duration)  # type: ignore[misc]
        with lock:
            d = handed.pop(old, None)
            if d is not None:  # the delivery goes on under the new handle, with the new deadline
                d.deadline = time.perf_counter() + float(invisible_duration)
                d.deadline_ms = _now_ms() + int(float(invisible_duration) * 1000)
                handed[message.receipt_handle] = d
                earliest[0] = min(earliest[0], d.deadline)
        return result

    consumer.receive, consumer.ack = receive, ack
    if original_change is not None:
        consumer.change_invisible_duration = change_invisible_duration
    return lambda: expire(time.perf_counter(), everything=True)


class _TracedListener:
    def __init__(self, inner: Any, group: str, disp: AsyncTraceDispatcher, spans: _Spans | None = None) -> None:
        self.inner, self.group, self.disp, self.spans = inner, group, disp, spans

    def consume(self, message: Any) -> Any:
        from rocketmq import ConsumeResult

        request_id = _new_request_id()
        self.disp.append(_sub_before(self.group, message, request_id), message.topic)
        t0 = time.perf_counter()
        result = None
        error: BaseException | None = None
        span = self.spans.start_process(self.group, message) if self.spans else None
        try:
            result = self.inner.consume(message)
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            ok = result == ConsumeResult.SUCCESS
            code = CODE_SUCCESS if ok else (CODE_EXCEPTION if error is not None else CODE_FAILED)
            self.disp.append(_sub_after(self.group, message, request_id, int((time.perf_counter() - t0) * 1000),
                                        ok, code), message.topic)
            if span is not None:
                self.spans.end_process(span, ok, error)  # type: ignore[union-attr]


def _trace_push_consumer(consumer: Any, disp: AsyncTraceDispatcher, spans: _Spans | None) -> None:
    attr = "_PushConsumer__message_listener"  # the listener the client's consumption threads call
    inner = getattr(consumer, attr, None)
    if inner is None:
        raise TypeError("this rocketmq-python-client version keeps the PushConsumer's listener elsewhere; "
                        "instrument() cannot wrap it")
    traced = _TracedListener(inner, consumer.consumer_group, disp, spans)
    setattr(consumer, attr, traced)
    # already started: the consumption pool holds its own reference to the listener
    consumption = getattr(consumer, "_PushConsumer__consumption", None)
    if consumption is not None:
        for name in ("_Consumption__message_listener", "_FifoConsumption__message_listener"):
            if hasattr(consumption, name):
                setattr(consumption, name, traced)


# ------------------------------------------------------------------ OpenTelemetry (otel=True)
TRACEPARENT = "traceparent"


class _Spans:
    """OpenTelemetry spans after the messaging semantic conventions, as the OTel javaagent names them for
    the 5.x Java client: ``<topic> publish`` (PRODUCER), ``<topic> receive`` and ``<topic> process``
    (CONSUMER, the process span a child of the send span's context carried in the message).

    Only the OpenTelemetry API is used: the application's TracerProvider decides sampling and export."""

    def __init__(self, tracer_provider: Any = None) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self.tracer = trace.get_tracer("rocketscope.trace", tracer_provider=tracer_provider)
        self.propagator = TraceContextTextMapPropagator()

    @staticmethod
    def _message_attributes(message: Any) -> dict[str, Any]:
        attrs: dict[str, Any] = {"messaging.system": "rocketmq", "messaging.destination.name": message.topic or ""}
        if message.tag:
            attrs["messaging.rocketmq.message.tag"] = message.tag
        keys = sorted(message.keys or ())
        if keys:
            attrs["messaging.rocketmq.message.keys"] = keys
        if message.body is not None:
            attrs["messaging.message.body.size"] = len(message.body)
        return attrs

    def publish(self, message: Any, kind: str | None) -> Any:
        """Start the send span and put its W3C context into the message (user property ``traceparent``;
        ``_carry_trace_context`` also copies it into the ``trace_context`` system property)."""
        attrs = self._message_attributes(message)
        attrs["messaging.operation"] = "publish"
        attrs["messaging.rocketmq.message.type"] = kind or {4: "fifo", 3: "delay"}.get(_msg_type(message), "normal")
        if message.message_group:
            attrs["messaging.rocketmq.message.group"] = message.message_group
        if message.delivery_timestamp:
            attrs["messaging.rocketmq.message.delivery_timestamp"] = int(message.delivery_timestamp)
        span = self.tracer.start_span(f"{message.topic} publish", kind=self._trace.SpanKind.PRODUCER,
                                      attributes=attrs)
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        if carrier.get(TRACEPARENT):
            try:
                message.add_property(TRACEPARENT, carrier[TRACEPARENT])
            except Exception:  # a frozen or odd message: the span still counts
                pass
        return span

    def end(self, span: Any, receipt: Any, error: BaseException | None) -> None:
        if receipt is not None and getattr(receipt, "message_id", None):
            span.set_attribute("messaging.message.id", receipt.message_id)
        if error is not None:
            span.record_exception(error)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
        span.end()

    def start_receive(self, group: str) -> Any:
        return self.tracer.start_span("receive", kind=self._trace.SpanKind.CONSUMER, attributes={
            "messaging.system": "rocketmq", "messaging.operation": "receive",
            "messaging.rocketmq.client_group": group})

    def end_receive(self, span: Any, messages: list[Any]) -> None:
        """The topic is known only once messages arrived: the span is renamed ``<topic> receive``."""
        span.set_attribute("messaging.batch.message_count", len(messages))
        if messages:
            span.update_name(f"{messages[0].topic} receive")
            span.set_attribute("messaging.destination.name", messages[0].topic)
        span.end()

    def _extract(self, message: Any) -> Any:
        try:
            props = message.properties or {}
        except Exception:
            props = {}
        return self.propagator.extract({TRACEPARENT: props[TRACEPARENT]}) if TRACEPARENT in props else None

    def start_process(self, group: str, message: Any) -> Any:
        attrs = self._message_attributes(message)
        attrs.update({"messaging.operation": "process", "messaging.rocketmq.client_group": group,
                      "messaging.message.id": message.message_id or ""})
        if message.delivery_attempt:
            attrs["messaging.rocketmq.message.attempt"] = int(message.delivery_attempt)
        return self.tracer.start_span(f"{message.topic} process", context=self._extract(message),
                                      kind=self._trace.SpanKind.CONSUMER, attributes=attrs)

    def end_process(self, span: Any, ok: bool, error: BaseException | None) -> None:
        if error is not None:
            span.record_exception(error)
        if not ok:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, "consume failed"))
        span.end()


def _carry_trace_context(producer: Any) -> None:
    """Copy the ``traceparent`` user property into the message's ``trace_context`` system property
    (apache.rocketmq.v2 SystemProperties), where RocketMQ 5 keeps the W3C context.  The Python client
    has no setter for it, so its private request builder is wrapped; a client version without it
    keeps only the user property."""
    name = "_Producer__send_req"
    original = getattr(producer, name, None)
    if original is None:
        return

    def send_req(message: Any) -> Any:
        req = original(message)
        try:
            traceparent = (message.properties or {}).get(TRACEPARENT)
            if traceparent:
                for m in req.messages:
                    m.system_properties.trace_context = traceparent
        except Exception:
            pass
        return req

    setattr(producer, name, send_req)
