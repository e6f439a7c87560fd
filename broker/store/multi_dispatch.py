"""Multi-dispatch: one commit-log record, extra consume-queue entries in light message queues (LMQ).

Why: Apache RocketMQ's Lite mode (5.5) stores a lite message once, in its topic, and lists in the record's
property ``INNER_MULTI_DISPATCH`` the LMQ queues (``%LMQ%$<topic>$<liteTopic>``, queue 0) that also index it.
The writer gives the record its offset in each of those queues when it appends it and writes them into the
record itself (``INNER_MULTI_QUEUE_OFFSET``), so every member of a replicated group, and a recovery replaying
the commit log, builds the same LMQ entries from the log alone: nothing about LMQ queues is replicated
separately.  A record without the offsets (the writer's multi-dispatch off: ``enableMultiDispatch=false``)
is indexed in its topic only.

Only messages of ordinary topics are multi-dispatched: a retry or dead-letter copy (``%RETRY%``/``%DLQ%``)
carries its original's properties, and must not index the message a second time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping

MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
LMQ_PREFIX = "%LMQ%"
LMQ_QUEUE_ID = 0
SEPARATOR = ","
# an LMQ queue's name is also its consume queue's directory (consumequeue/<name>/0): one path component of
# RocketMQ's topic characters plus ``$``, which lite queues use (``%LMQ%$<topic>$<liteTopic>``)
LMQ_NAME_PATTERN = re.compile(r"^[%|$a-zA-Z0-9_-]+$")
LMQ_NAME_MAX_LENGTH = 255  # a path component on Linux (NAME_MAX)


def is_lmq(name: str) -> bool:
    """``name`` names a light message queue (Apache's MixAll.isLmq: the ``%LMQ%`` prefix)."""
    return name.startswith(LMQ_PREFIX)


def lmq_name_problem(name: str) -> str | None:
    """Why ``name`` (``%LMQ%...``) cannot name an LMQ queue, or None.

    Apache RocketMQ checks no LMQ name on the read side; its dispatch skips a name with a path separator, and
    its Java client refuses one in INNER_MULTI_DISPATCH.  The name becomes a directory here, so anything outside
    one path component of topic characters (``$`` included, for lite queues) is refused."""
    rest = name[len(LMQ_PREFIX):]
    if not rest:
        return f"LMQ queue name {name!r} names no queue after {LMQ_PREFIX}"
    if len(name) > LMQ_NAME_MAX_LENGTH:
        return f"LMQ queue name is longer than {LMQ_NAME_MAX_LENGTH} characters"
    if not LMQ_NAME_PATTERN.match(rest):
        return f"LMQ queue name {name[:200]!r} has characters outside [%|$a-zA-Z0-9_-]"
    return None


def eligible(topic: str) -> bool:
    """A record of ``topic`` may be multi-dispatched (not a retry, dead-letter or LMQ copy)."""
    return not topic.startswith("%")


def queues_of(props: Mapping[str, str]) -> list[str]:
    """The LMQ queues a record names in ``INNER_MULTI_DISPATCH``.  Names without the prefix are ignored, as
    Apache does; so are names ``lmq_name_problem`` refuses: Apache's dispatch skips a name with a path
    separator (ConsumeQueue.multiDispatchLmqQueue), which would put a consume queue outside consumequeue/."""
    raw = props.get(MULTI_DISPATCH, "")
    return [q for q in raw.split(SEPARATOR) if is_lmq(q) and lmq_name_problem(q) is None] if raw else []


def assign(topic: str, props: MutableMapping[str, str], queue_next: Mapping[tuple[str, int], int]
           ) -> list[tuple[str, int]]:
    """Write into ``props`` the record's offset in each of its LMQ queues (their next offsets in ``queue_next``);
    return the queue keys, whose next offsets the caller moves once the record is accepted.  A record of a
    topic that is not eligible loses any offsets copied from its original."""
    queues = queues_of(props) if eligible(topic) else []
    if not queues:
        props.pop(MULTI_QUEUE_OFFSET, None)
        return []
    keys = [(q, LMQ_QUEUE_ID) for q in queues]
    props[MULTI_QUEUE_OFFSET] = SEPARATOR.join(str(queue_next.get(k, 0)) for k in keys)
    return keys


def entries(topic: str, props: Mapping[str, str]) -> list[tuple[str, int]]:
    """The (LMQ queue, offset) entries a record's properties give it; none for a record whose offsets are
    absent or malformed (a record written with multi-dispatch off, or by another writer)."""
    raw = props.get(MULTI_QUEUE_OFFSET)
    if not raw or not eligible(topic):
        return []
    queues = queues_of(props)
    try:
        offsets = [int(x) for x in raw.split(SEPARATOR)]
    except ValueError:
        return []
    if len(offsets) != len(queues):
        return []
    return list(zip(queues, offsets, strict=True))
