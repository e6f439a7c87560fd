"""Helpers around the official RocketMQ 5 Python client (rocketmq-python-client), used unchanged."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.v5.client.connection.rpc_client import RpcClient
from rocketmq.v5.exception.client_exception import BadRequestException

from rocketscope.trace.client_trace import close_client_metrics


def give_this_thread_the_clients_loop() -> None:
    """Make the client's I/O loop this thread's current event loop, as the client does when it builds a channel here.

    Why: the client answers a route query through a concurrent future and adds its callback after sending; when the
    answer is already there (a fast broker, a busy machine), the callback runs in the caller's thread, and the
    callback opens the telemetry stream, which grpc.aio binds to that thread's current event loop. After any
    asyncio.run() in the same thread there is none ("There is no current event loop in thread 'MainThread'"), the
    stream is never made and the route update fails ("failed to fetch topic ... route"). A CI run of
    tests/test_trace_instrument.py failed this way once. The client is used unchanged; this only restores the state
    it expects.
    """
    RpcClient()  # starts the client's class-wide I/O loop thread if no client has yet
    asyncio.set_event_loop(RpcClient.get_channel_io_loop())


def config(endpoint: str, credentials: Credentials | None = None) -> ClientConfiguration:
    """A client configuration, with this thread ready for the client's callbacks (give_this_thread_the_clients_loop)."""
    give_this_thread_the_clients_loop()
    return ClientConfiguration(endpoint, credentials or Credentials())


def message(topic: str, body: bytes, tag: str | None = None, keys: list[str] | None = None,
            props: dict[str, str] | None = None) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    if tag:
        m.tag = tag
    for key in keys or ():
        m.keys = key  # the client's setter adds one key per assignment
    for k, v in (props or {}).items():
        m.add_property(k, v)
    return m


@contextmanager
def producer(endpoint: str, *topics: str) -> Iterator[Producer]:
    p = Producer(config(endpoint), topics or None)
    p.startup()
    try:
        yield p
    finally:
        p.shutdown()
        close_client_metrics(p)


class AckedLoad:
    """Sends from a thread, eight in flight at a time, until ``stop``: the load the e2e fault tests count on.

    ``acked`` maps every acknowledged message id to its body, ``sent`` holds every body sent (a test may add
    bodies it sent itself), ``errors`` the sends that failed (allowed while a leader or master is replaced:
    each test says what it does with them). ``pause`` seconds between rounds of eight keeps the load steady
    (0: flat out).
    """

    def __init__(self, endpoint: str, topic: str, prefix: str, pause: float = 0.0) -> None:
        self.endpoint, self.topic, self.prefix, self.pause = endpoint, topic, prefix, pause
        self.acked: dict[str, bytes] = {}
        self.sent: set[bytes] = set()
        self.errors: list[Exception] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> AckedLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        with producer(self.endpoint, self.topic) as p:
            i = 0
            while not self._stop.is_set():
                batch = []
                for _ in range(8):
                    body = f"{self.prefix}{i}".encode()
                    i += 1
                    self.sent.add(body)
                    batch.append((body, p.send_async(message(self.topic, body))))
                for body, fut in batch:
                    try:
                        self.acked[fut.result(timeout=20).message_id] = body
                    except Exception as exc:
                        self.errors.append(exc)
                if self.pause:
                    self._stop.wait(self.pause)


@contextmanager
def simple_consumer(endpoint: str, group: str, topic: str, await_s: int = 2,
                    tag: str = "*") -> Iterator[SimpleConsumer]:
    c = SimpleConsumer(config(endpoint), group, {topic: FilterExpression(tag)}, await_duration=await_s)
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()
        close_client_metrics(c)


def drain(consumer: SimpleConsumer, expected: int, timeout: float = 30.0, invisible_s: int = 30,
          ack: bool = True, batch: int = 32) -> list[Message]:
    """Receive (and ack) until ``expected`` messages arrived or ``timeout`` passed.

    An ack refused with INVALID_RECEIPT_HANDLE means the invisible duration ran out on
    a loaded machine and the broker will deliver the message again (at-least-once), so
    the helper keeps draining instead of failing; callers count distinct message IDs.
    """
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for msg in consumer.receive(batch, invisible_s):
            got.append(msg)
            if ack:
                try:
                    consumer.ack(msg)
                except BadRequestException as exc:
                    if "receipt_handle" not in str(exc):
                        raise
    return got


def drain_ids(consumer: SimpleConsumer, wanted: set[str], timeout: float = 90.0, quiet: float = 3.0,
              invisible_s: int = 30, batch: int = 32) -> list[Message]:
    """Receive (and ack) until every ID in ``wanted`` was seen, then ``quiet`` seconds more.

    Counting messages is not enough after a failover: redeliveries and sent-but-unacknowledged
    messages are consumed too, so a count can be reached while acknowledged ones are still
    waiting in the queues.  The extra quiet period collects whatever else is there.
    """
    got: list[Message] = []
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while not wanted <= seen and time.monotonic() < deadline:
        for msg in drain(consumer, 1, timeout=min(5.0, max(0.1, deadline - time.monotonic())),
                         invisible_s=invisible_s, batch=batch):
            got.append(msg)
            seen.add(msg.message_id)
    got += drain(consumer, 1_000_000, timeout=quiet, invisible_s=invisible_s, batch=batch)
    return got


class RecordingListener(MessageListener):
    """A push listener that records what it saw; ``decide`` picks the result per message."""

    def __init__(self, decide: Callable[[Message], ConsumeResult] | None = None) -> None:
        self.messages: list[Message] = []
        self.lock = threading.Lock()
        self.decide = decide

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.messages.append(message)
        return self.decide(message) if self.decide else ConsumeResult.SUCCESS

    def count(self) -> int:
        with self.lock:
            return len(self.messages)


@contextmanager
def push_consumer(endpoint: str, group: str, topic: str, listener: MessageListener) -> Iterator[PushConsumer]:
    c = PushConsumer(config(endpoint), group, listener, {topic: FilterExpression("*")}, consumption_thread_count=4)
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()
        close_client_metrics(c)
