"""Look up one message's trace: trace records from the trace topic, the stored message and HA events.

``TraceLookup(namesrv).lookup(msg_id)`` is **async** and returns a ``Timeline``.
"""

from __future__ import annotations

from typing import Any

from rocketscope.admin_client import AdminClient
from rocketscope.broker.ha.events import HaEvent
from rocketscope.trace.codec import TraceDecodeError, decode
from rocketscope.trace.timeline import StoreInfo, Timeline, build_timeline

HA_EVENTS_TOPIC = "RMQ_SYS_HA_EVENTS"


class TraceLookupError(LookupError):
    """The lookup cannot produce a timeline; the message says why."""


class TraceLookup:
    def __init__(self, namesrv: str, timeout_s: float = 5.0) -> None:
        self.namesrv = namesrv
        self.timeout_s = timeout_s

    async def lookup(self, msg_id: str, trace_topic: str = "RMQ_SYS_TRACE_TOPIC") -> Timeline:
        admin = AdminClient(self.namesrv, timeout_s=self.timeout_s)
        try:
            try:
                route = await admin.route(trace_topic)
            except Exception as e:
                raise TraceLookupError(f"trace topic {trace_topic} has no route (is traceTopicEnable on?): {e}") from e
            if not route.route.queue_datas:
                raise TraceLookupError(f"trace topic {trace_topic} has no route")
            records = []
            for view in await admin.query_message(msg_id, trace_topic):
                try:
                    records.extend(r for r in decode(view.body, skip_unknown=True) if r.msg_id == msg_id)
                except TraceDecodeError:
                    continue
            stored = [m for m in await admin.query_message(msg_id, None) if m.msg_id == msg_id]
            if not records:
                if not stored:
                    raise TraceLookupError(f"unknown message id {msg_id}: no message and no trace records")
                raise TraceLookupError(f"no trace records for {msg_id} in {trace_topic} (tracing off?)")
            store: Any = None
            ha: list[HaEvent] = []
            if stored:
                m = next((v for v in stored if not v.topic.startswith(("%RETRY%", "%DLQ%"))), stored[0])
                props = m.properties
                store = StoreInfo(topic=props.get("RETRY_TOPIC") or props.get("REAL_TOPIC") or m.topic,
                                  queue_id=m.queue_id,
                                  queue_offset=m.queue_offset, physical_offset=m.commitlog_offset,
                                  store_timestamp=m.store_timestamp, store_host=m.store_host,
                                  broker_group=m.broker_name)
                for view in await admin.query_message(m.broker_name, HA_EVENTS_TOPIC):
                    try:
                        ha.append(HaEvent.from_json(view.body))
                    except ValueError:
                        continue
            return build_timeline(msg_id, records, ha, store)
        finally:
            await admin.close()
