"""traceStore=elasticsearch: the broker bulk-indexes every record that reaches its trace topic.

Client-written trace messages (instrumented clients, mqadmin-era Java clients) and the
broker's own (broker-side trace) both end up stored on the trace topic, so indexing at
that one point sees them all, whoever wrote them.  The store's dispatch listener runs on
the broker's event loop and must stay cheap: it only decodes the body and appends to a
bounded buffer.  A background task writes the buffer with
:class:`~rocketscope.trace.elasticsearch_store.ElasticsearchTraceStore` (daily indices,
index template, ``_id`` = hash of the record, so re-indexing after a restart or a retry
stores nothing twice) on a worker thread, because the Elasticsearch client is blocking.

Elasticsearch being down must not stop the broker: a failed bulk is kept and retried
with back-off; when the buffer is full, new records are dropped and counted
(``dropped``).  The trace topic keeps every record either way, so lookup through the
embedded index still works.

Only tested against the in-process fake of tests/test_trace_elasticsearch.py, never
against a real Elasticsearch cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from rocketscope.trace.codec import TraceDecodeError, TraceRecord, decode
from rocketscope.trace.elasticsearch_store import ElasticsearchTraceStore

log = logging.getLogger(__name__)

MAX_BUFFERED = 200_000
BULK_RECORDS = 1_000
FLUSH_INTERVAL_S = 1.0
MAX_BACKOFF_S = 30.0


def store_from_settings(settings: Any) -> ElasticsearchTraceStore:
    """The store a broker's traceElasticsearch* keys describe; ValueError names the bad key."""
    hosts = [h.strip() for h in str(settings.traceElasticsearchHosts or "").split(",") if h.strip()]
    if not hosts:
        raise ValueError("traceStore=elasticsearch needs traceElasticsearchHosts (comma-separated URLs)")
    user = settings.traceElasticsearchUsername or None
    password = settings.traceElasticsearchPassword or None
    if (user is None) != (password is None):
        raise ValueError("give both traceElasticsearchUsername and traceElasticsearchPassword, or neither")
    return ElasticsearchTraceStore(hosts, username=user, password=password,
                                   index_prefix=settings.traceElasticsearchIndexPrefix or "rocketscope-trace",
                                   api_key=settings.traceElasticsearchApiKey or None, request_timeout=10)


class TraceIndexer:
    """Feed with :meth:`on_dispatch` (a MessageStore dispatch listener); ``start``/``stop`` the writer."""

    def __init__(self, store: ElasticsearchTraceStore, trace_topic: str,
                 active: Callable[[], bool] = lambda: True, max_buffered: int = MAX_BUFFERED,
                 flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.store = store
        self.trace_topic = trace_topic
        self.active = active  # only the writable node indexes: a replica sees the same messages
        self.max_buffered = max_buffered
        self.flush_interval_s = flush_interval_s
        self._buf: deque[TraceRecord] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._template_ok = False
        self.indexed = 0
        self.dropped = 0
        self.undecodable = 0
        self.failures = 0
        self.last_error = ""

    # --- feeding (event loop, must be cheap) ----------------------------------------------------
    def on_dispatch(self, msg: Any) -> None:
        if msg.topic != self.trace_topic or not self.active():
            return
        try:
            records = decode(msg.body, skip_unknown=True)
        except (TraceDecodeError, ValueError):
            self.undecodable += 1  # not trace data (someone else's message on the topic): nothing to index
            return
        room = self.max_buffered - len(self._buf)
        if room < len(records):
            self.dropped += len(records) - max(room, 0)
            records = records[: max(room, 0)]
        self._buf.extend(records)
        if len(self._buf) >= BULK_RECORDS:
            self._wake.set()

    # --- writing --------------------------------------------------------------------------------
    async def flush(self) -> bool:
        """Write everything buffered now; False (records kept) when Elasticsearch refused or is down."""
        if not self._template_ok:
            try:
                await asyncio.to_thread(self.store.ensure_template)
                self._template_ok = True
            except Exception as exc:
                self._fail(exc)
                return False
        while self._buf:
            chunk = [self._buf.popleft() for _ in range(min(BULK_RECORDS, len(self._buf)))]
            try:
                await asyncio.to_thread(self.store.write, chunk)
            except Exception as exc:
                self._buf.extendleft(reversed(chunk))  # keep the order; writing again is idempotent
                self._fail(exc)
                return False
            self.indexed += len(chunk)
        return True

    def _fail(self, exc: Exception) -> None:
        self.failures += 1
        self.last_error = str(exc)
        if self.failures == 1 or self.failures % 60 == 0:
            log.warning("trace indexing into Elasticsearch failed (%d times; %d records waiting): %s",
                        self.failures, len(self._buf), exc)

    async def _run(self) -> None:
        backoff = self.flush_interval_s
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), backoff)
            self._wake.clear()
            ok = await self.flush()
            backoff = self.flush_interval_s if ok else min(MAX_BACKOFF_S, backoff * 2)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="trace-es-indexer")

    async def stop(self, timeout_s: float = 10.0) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), timeout_s)  # what is left; the trace topic has it anyway
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.store.close)

    def stats(self) -> dict[str, Any]:
        return {"indexed": self.indexed, "dropped": self.dropped, "buffered": len(self._buf),
                "failures": self.failures, "undecodable": self.undecodable, "last_error": self.last_error}
