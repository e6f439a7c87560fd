"""The background dispatcher with its real thread; ``send`` is the injection point, recorded here.

Every wait is on a condition with a timeout; nothing sleeps and hopes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rocketscope.trace.codec import PubRecord, SubBeforeRecord, decode, encode_record
from rocketscope.trace.dispatcher import DEFAULT_TRACE_TOPIC, AsyncTraceDispatcher

WAIT = 10.0  # seconds; only reached when something is broken


def pub(i: int, topic: str = "T", tags: str = "", keys: str = "") -> PubRecord:
    return PubRecord(1_700_000_000_000 + i, "R", "G", topic, f"MSG{i:06d}", tags, keys, "h:1", 1, 1, 0, "", True)


class RecordingSend:
    """A ``send`` that records every trace message; can be told to fail or to block."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[tuple[str, str, list[str]]] = []
        self.calls = 0
        self.fail_next = 0
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, topic: str, body: str, keys: list[str]) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT), "test never opened the gate"
        with self.cond:
            self.calls += 1
            if self.fail_next:
                self.fail_next -= 1
                self.cond.notify_all()
                raise ConnectionError("broker unavailable")
            self.messages.append((topic, body, keys))
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool]) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, WAIT), "condition not reached"

    def records(self) -> list:
        with self.cond:
            return [r for _, body, _ in self.messages for r in decode(body)]

    def batch_sizes(self) -> list[int]:
        with self.cond:
            return [len(decode(body)) for _, body, _ in self.messages]


@pytest.fixture
def send() -> RecordingSend:
    return RecordingSend()


@pytest.fixture
def make(send: RecordingSend) -> Iterator[Callable[..., AsyncTraceDispatcher]]:
    created: list[AsyncTraceDispatcher] = []

    def factory(**kwargs: object) -> AsyncTraceDispatcher:
        kwargs.setdefault("max_age_s", 3600.0)  # age never triggers unless a test asks for it
        dispatcher = AsyncTraceDispatcher(send, **kwargs)  # type: ignore[arg-type]
        created.append(dispatcher)
        return dispatcher

    yield factory
    send.gate.set()
    for dispatcher in created:
        dispatcher.close(WAIT)


def test_batches_by_count(make, send: RecordingSend) -> None:
    d = make(batch_count=5, linger_s=0)
    for i in range(12):
        assert d.append(pub(i))
    send.wait_for(lambda: len(send.messages) == 2)
    assert send.batch_sizes() == [5, 5]
    assert d.queue_depth == 2  # fewer than batch_count, young: they wait
    assert d.flush(WAIT)
    assert send.batch_sizes() == [5, 5, 2]
    assert [r.msg_id for r in send.records()] == [f"MSG{i:06d}" for i in range(12)]


def test_linger_sends_a_steady_stream_in_fewer_larger_messages(make, send: RecordingSend) -> None:
    """batch_count records wait linger_s for more: 12 records appended at once leave in one message."""
    d = make(batch_count=5, linger_s=0.2)
    for i in range(12):
        d.append(pub(i))
    send.wait_for(lambda: len(send.messages) == 1)  # no flush asked: the linger after 5 records sent them
    assert send.batch_sizes() == [12]
    assert d.queue_depth == 0 and d.written == 12


def test_linger_ends_at_ten_times_batch_count(make, send: RecordingSend) -> None:
    """A full chunk (BACKLOG_FACTOR x batch_count) goes without lingering, and what is left of a
    backlog, having waited through that send, does not linger again."""
    send.gate.clear()
    d = make(batch_count=2, linger_s=3600)
    d.append(pub(0))
    assert not d.flush(0.01)  # asks for record 0 now; the worker takes it and blocks in send
    assert send.entered.wait(WAIT)
    for i in range(1, 24):
        d.append(pub(i))
    send.gate.set()
    send.wait_for(lambda: len(send.messages) == 3)  # the hour-long linger was never waited out
    assert send.batch_sizes() == [1, 20, 3]


def test_batches_by_age(make, send: RecordingSend) -> None:
    d = make(batch_count=100, max_age_s=0.05)
    for i in range(3):
        d.append(pub(i))
    send.wait_for(lambda: len(send.messages) >= 1)  # no flush asked: only age can have sent it
    d.flush(WAIT)
    assert sum(send.batch_sizes()) == 3
    assert d.written == 3


def test_batches_by_size(make, send: RecordingSend) -> None:
    record_size = len(encode_record(pub(0, tags="x" * 300)).encode())
    d = make(batch_count=1000, batch_bytes=record_size * 3)
    for i in range(7):
        d.append(pub(i, tags="x" * 300))
    send.wait_for(lambda: len(send.messages) == 2)  # no flush asked: only size can have sent them
    assert send.batch_sizes() == [3, 3]
    assert all(len(body.encode()) <= record_size * 3 for _, body, _ in send.messages)
    assert d.flush(WAIT) and send.batch_sizes() == [3, 3, 1]


def test_trace_message_topic_and_keys(make, send: RecordingSend) -> None:
    d = make(trace_topic="MY_TRACE")
    d.append(pub(1, topic="orders", keys="order-7 customer-3"))
    d.append(SubBeforeRecord(2, "R", "CID", "REQ", "MSG000001", 0, "order-7"), topic="orders")
    d.append(pub(2, topic="payments"))
    assert d.flush(WAIT)
    by_first_id = {decode(body)[0].msg_id: (topic, keys) for topic, body, keys in send.messages}
    assert by_first_id["MSG000001"] == ("MY_TRACE", ["MSG000001", "order-7", "customer-3"])
    assert by_first_id["MSG000002"] == ("MY_TRACE", ["MSG000002"])
    assert DEFAULT_TRACE_TOPIC == "RMQ_SYS_TRACE_TOPIC"


def test_append_never_blocks_and_drops_are_counted_when_full(make, send: RecordingSend) -> None:
    send.gate.clear()  # the broker hangs
    d = make(queue_size=4, batch_count=2)
    d.append(pub(0))
    d.append(pub(1))
    assert send.entered.wait(WAIT)  # the worker holds records 0-1 and is stuck in send
    accepted = [d.append(pub(i)) for i in range(2, 10)]  # returns at once although send is stuck
    assert accepted == [True] * 4 + [False] * 4
    assert d.dropped == 4 and d.queue_depth == 4
    send.gate.set()
    assert d.flush(WAIT)
    assert [r.msg_id for r in send.records()] == [f"MSG{i:06d}" for i in range(6)]
    assert (d.written, d.dropped, d.failed, d.queue_depth) == (6, 4, 0, 0)


def test_failed_send_is_retried_once(make, send: RecordingSend) -> None:
    send.fail_next = 1
    d = make(batch_count=3)
    for i in range(3):
        d.append(pub(i))
    assert d.flush(WAIT)
    assert send.calls == 2 and d.written == 3 and d.failed == 0


def test_send_failing_twice_counts_records_as_failed(make, send: RecordingSend) -> None:
    send.fail_next = 2
    d = make(batch_count=3)
    for i in range(3):
        d.append(pub(i))
    assert d.flush(WAIT)
    assert send.calls == 2 and d.failed == 3 and d.written == 0
    d.append(pub(9))
    assert d.flush(WAIT) and d.written == 1  # the dispatcher keeps going


def test_unencodable_record_is_refused_and_counted(make, send: RecordingSend) -> None:
    d = make()
    assert d.append(pub(1, tags="bad\x02tag")) is False
    assert d.failed == 1 and d.queue_depth == 0


def test_close_loses_nothing(make, send: RecordingSend) -> None:
    d = make(batch_count=7, queue_size=10_000)
    for i in range(1000):
        assert d.append(pub(i))
    assert d.close(WAIT)
    assert len(send.records()) == 1000 and d.written == 1000
    assert d.append(pub(1000)) is False and d.dropped == 1  # closed: refused and counted


def test_concurrent_producers(make, send: RecordingSend) -> None:
    d = make(batch_count=10, queue_size=100_000)
    threads = [threading.Thread(target=lambda base=t: [d.append(pub(base * 1000 + i)) for i in range(500)])
               for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert d.close(WAIT)
    assert sorted(r.msg_id for r in send.records()) == sorted(f"MSG{t * 1000 + i:06d}" for t in range(4)
                                                             for i in range(500))


def test_stats_snapshot(make, send: RecordingSend) -> None:
    d = make()
    d.append(pub(1))
    d.flush(WAIT)
    stats = d.stats()
    assert (stats.written, stats.dropped, stats.failed, stats.queue_depth) == (1, 0, 0, 0)


def test_invalid_parameters(send: RecordingSend) -> None:
    with pytest.raises(ValueError):
        AsyncTraceDispatcher(send, queue_size=0)
    with pytest.raises(ValueError):
        AsyncTraceDispatcher(send, max_age_s=0)
    with pytest.raises(ValueError, match="linger_s"):
        AsyncTraceDispatcher(send, linger_s=-1)


LABELS = {"trace_topic": "TT", "source": "client"}


def test_metrics_through_the_opentelemetry_api(send: RecordingSend) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    send.gate.clear()
    d = AsyncTraceDispatcher(send, trace_topic="TT", queue_size=2, batch_count=1, max_age_s=3600,
                             meter=provider.get_meter("rocketscope.trace"))
    try:
        d.append(pub(0))
        assert send.entered.wait(WAIT)
        d.append(pub(1))
        d.append(pub(2))
        d.append(pub(3))  # queue of 2 is full: dropped
        points = _points(reader)
        assert points["rocketscope_trace_queue_depth"] == [(LABELS, 2)]
        assert points["rocketscope_trace_records_dropped_total"] == [({**LABELS, "reason": "queue_full"}, 1)]
        send.fail_next = 2
        send.gate.set()
        assert d.flush(WAIT)
        points = _points(reader)
        assert points["rocketscope_trace_records_failed_total"] == [(LABELS, 1)]
        assert points["rocketscope_trace_records_written_total"] == [(LABELS, 2)]
        assert points["rocketscope_trace_queue_depth"] == [(LABELS, 0)]
    finally:
        send.gate.set()
        d.close(WAIT)
        provider.shutdown()


def _points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict, int]]]:
    out: dict[str, list[tuple[dict, int]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = [(dict(p.attributes), p.value) for p in metric.data.data_points]
    return out


@pytest.mark.e2e
def test_interpreter_exit_flushes_what_is_queued(tmp_path) -> None:
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        from rocketscope.trace.codec import RecallRecord, decode
        from rocketscope.trace.dispatcher import AsyncTraceDispatcher

        def send(topic, body, keys):
            print(len(decode(body)), flush=True)

        d = AsyncTraceDispatcher(send, batch_count=1000, max_age_s=3600)
        for i in range(50):
            d.append(RecallRecord(i, "R", "G", "T", f"M{i}", True))
        # no flush, no close: the atexit hook must deliver
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sum(int(line) for line in result.stdout.split()) == 50
