"""Look up one message's trace: trace records from the trace topic, the stored message and HA events.

``TraceLookup(namesrv).lookup(msg_id)`` is **async** and returns a ``Timeline``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rocketscope import topic_reader
from rocketscope.admin_client import AdminClient
from rocketscope.ha_events import HaEvent
from rocketscope.names import DLQ_PREFIX, HA_EVENTS_TOPIC, RETRY_PREFIX, TRACE_TOPIC
from rocketscope.trace.codec import TraceDecodeError, TraceRecord, decode
from rocketscope.trace.timeline import StoreInfo, Timeline, build_timeline

HA_LOOKBACK_MS = 5_000  # events are stamped by the node that saw them: allow for clock skew between nodes
HA_MAX_EVENTS = 20_000
HA_TAIL_AFTER_COMMIT = 512


def ha_events_after(namesrv: str, group: str, store_ms: int, phys_offset: int,
                    timeout_s: float = 5.0) -> list[HaEvent]:
    """The broker group's replication events from just before the message was stored until its
    commit (plus a tail, for the replicas that ack later), read from RMQ_SYS_HA_EVENTS by time.

    Why not a key query: the events of a group share one key, and a key query returns only
    the newest few dozen, so messages older than the last failover lost their replication
    rows.  Reading forward from the store time finds the acks that cover the message
    whatever happened since.
    """
    out: list[HaEvent] = []
    for queue in topic_reader.discover_queues(namesrv, [HA_EVENTS_TOPIC], timeout_s):
        if queue.broker != group:
            continue
        lo, hi = topic_reader.queue_bounds(queue, timeout_s)
        start = max(lo, topic_reader.offset_at(queue, store_ms - HA_LOOKBACK_MS, timeout_s))
        committed_at = -1
        read = 0
        for message in topic_reader.pull_messages(queue, start, min(hi, start + HA_MAX_EVENTS), 512, timeout_s):
            read += 1
            try:
                event = HaEvent.from_json(bytes(message.body))
            except ValueError:
                continue
            out.append(event)
            if committed_at < 0 and event.type == "commit_advanced" and event.offset > phys_offset:
                committed_at = read
            if committed_at >= 0 and read - committed_at >= HA_TAIL_AFTER_COMMIT:
                break
    return out


class TraceLookupError(LookupError):
    """The lookup cannot produce a timeline; the message says why."""


class TraceLookup:
    """``es_store`` (an ElasticsearchTraceStore): take the trace records from Elasticsearch (traceStore=
    elasticsearch, a term query on msg_id) instead of the trace topic's key index; the stored message and
    the replication events still come from the cluster."""

    def __init__(self, namesrv: str, timeout_s: float = 5.0, es_store: Any = None) -> None:
        self.namesrv = namesrv
        self.timeout_s = timeout_s
        self.es_store = es_store

    async def _records_from_topic(self, admin: AdminClient, msg_id: str, trace_topic: str) -> list[Any]:
        try:
            route = await admin.route(trace_topic)
        except Exception as e:
            raise TraceLookupError(f"trace topic {trace_topic} has no route (is traceTopicEnable on?): {e}") from e
        if not route.route.queue_datas:
            raise TraceLookupError(f"trace topic {trace_topic} has no route")
        records: list[TraceRecord] = []
        for view in await admin.query_message(msg_id, trace_topic):
            try:
                records.extend(r for r in decode(view.body, skip_unknown=True) if r.msg_id == msg_id)
            except TraceDecodeError:
                continue
        return records

    async def lookup(self, msg_id: str, trace_topic: str = TRACE_TOPIC) -> Timeline:
        admin = AdminClient(self.namesrv, timeout_s=self.timeout_s)
        try:
            if self.es_store is not None:
                try:
                    records = await asyncio.to_thread(self.es_store.lookup, msg_id)
                except Exception as e:
                    raise TraceLookupError(f"Elasticsearch lookup failed: {e}") from e
            else:
                records = await self._records_from_topic(admin, msg_id, trace_topic)
            stored = [m for m in await admin.query_message(msg_id, None) if m.msg_id == msg_id]
            if not stored:
                # a remoting cluster (Apache RocketMQ) indexes keys per topic: ask in the topics the records name
                for topic in sorted({r.topic for r in records if getattr(r, "topic", "")}):
                    stored += [m for m in await admin.query_message(msg_id, topic) if m.msg_id == msg_id]
            if not records:
                if not stored:
                    raise TraceLookupError(f"unknown message id {msg_id}: no message and no trace records")
                raise TraceLookupError(f"no trace records for {msg_id} in {trace_topic} (tracing off?)")
            store: Any = None
            ha: list[HaEvent] = []
            if stored:
                m = next((v for v in stored if not v.topic.startswith((RETRY_PREFIX, DLQ_PREFIX))), stored[0])
                props = m.properties
                store = StoreInfo(topic=props.get("RETRY_TOPIC") or props.get("REAL_TOPIC") or m.topic,
                                  queue_id=m.queue_id,
                                  queue_offset=m.queue_offset, physical_offset=m.commitlog_offset,
                                  store_timestamp=m.store_timestamp, store_host=m.store_host,
                                  broker_group=m.broker_name)
                try:
                    ha = await asyncio.to_thread(ha_events_after, self.namesrv, m.broker_name,
                                                 m.store_timestamp, m.commitlog_offset, self.timeout_s)
                except (topic_reader.NoRoute, topic_reader.Unreachable):
                    ha = []  # no replication events to show (a standalone broker, or the group is down)
            return build_timeline(msg_id, records, ha, store)
        finally:
            await admin.close()
