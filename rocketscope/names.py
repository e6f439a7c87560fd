"""RocketMQ's reserved names, defined once for every layer (broker, trace, Spark, dashboards, CLI).

A leaf module: it imports nothing from this project, so any layer may import it (docs/ARCHITECTURE.md).
The values are RocketMQ's own (Apache RocketMQ 5's TopicValidator and MixAll define them), so that a
RocketScope cluster and an Apache one name their system topics and groups alike; each line says what
the name is for.
"""

from __future__ import annotations

RETRY_PREFIX = "%RETRY%"
"""A consumer group's retry topic: ``%RETRY%<group>`` holds its messages waiting for redelivery."""

DLQ_PREFIX = "%DLQ%"
"""A consumer group's dead-letter topic: ``%DLQ%<group>`` holds what exhausted its retries."""

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
"""The default message-trace topic (clients' trace hooks and broker-side trace write to it)."""

HA_EVENTS_TOPIC = "RMQ_SYS_HA_EVENTS"
"""RocketScope's replication-event topic (role changes, replica acks, commits, truncations)."""

TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
"""Transactional half messages, invisible to consumers until committed."""

TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
"""Records of resolved half messages (commit or rollback)."""

TIMER_TOPIC = "rmq_sys_wheel_timer"
"""Delayed messages waiting for their time (RocketMQ 5's timer wheel)."""

READER_GROUP = "rocketscope-reader"
"""The consumer group RocketScope's own readers pull with (Spark's source, the trace lookup, the
dashboards): a tool connection, hidden from consumer metrics and consumer pages."""

POP_STATE_TOPIC = "RMQ_SYS_POP_STATE"
"""RocketScope's POP journal: hand-outs and acks as replicated records (broker/pop_log.py)."""

CONSUMER_OFFSETS_TOPIC = "RMQ_SYS_CONSUMER_OFFSETS"
"""RocketScope's replicated record of committed consumer offsets (broker/offset_log.py)."""

TBW102 = "TBW102"
"""The template topic Java producers fall back to when a topic has no route (auto-creation)."""

SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
"""Consumer groups RocketMQ reserves for itself (hidden from consumer metrics)."""

TIMER_PROGRESS_GROUP = "CID_RMQ_SYS_TIMER"
"""The group whose offset on the timer topic records the in-memory timer's progress (before the wheel):
where a fresh timer index starts."""

COMMITLOG_OFFSET_PROPERTY = "__COMMITLOG_OFFSET"
"""User property the broker adds to PullMessage answers only (the v2 protocol has no field for it)."""

SYSTEM_TOPIC_PREFIXES = ("RMQ_SYS_", "rmq_sys_", "SCHEDULE_TOPIC_XXXX", TBW102, "BenchmarkTest",
                         "OFFSET_MOVED_EVENT")
"""Topics RocketMQ reserves for itself: never auto-created for a client, hidden from user metrics."""


def is_system_topic(name: str) -> bool:
    """A topic RocketMQ reserves for itself (trace, HA events, transactions, timer, ...)."""
    return name.startswith(SYSTEM_TOPIC_PREFIXES)


def is_retry_or_dlq(name: str) -> bool:
    """A group's retry or dead-letter topic: it carries copies of user messages, not new ones."""
    return name.startswith((RETRY_PREFIX, DLQ_PREFIX))


def dlq_group(topic: str) -> str | None:
    """The consumer group whose dead-letter topic ``topic`` is, or None."""
    return topic[len(DLQ_PREFIX):] if topic.startswith(DLQ_PREFIX) else None
