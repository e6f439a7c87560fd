"""Priority messages as Apache RocketMQ 5.4+ does them (RIP-80; observed on 5.5.0, docs/COMPATIBILITY.md P1-P9).

Why a queue per priority: Apache does not reorder anything.  A message carrying the property
``_SYS_MSG_PRIORITY_`` (the v2 protocol's ``system_properties.priority``; the remoting client's
``Message.setPriority``) is stored in queue ``min(priority, writeQueueNums - 1)`` of its topic, and a
POP of a topic whose ``message.type`` is PRIORITY reads the queues from the highest id down (with
``priorityOrderAsc`` true, the default: a larger number is more urgent), so a backlog drains
highest priority first.  Within a queue, and therefore among messages whose priorities fall in one
queue, the order is the store's.  Priority only shows when messages wait: a consumer that keeps up
gets them as they come.

Where it applies: the queue rule runs on every send whose properties make it a PRIORITY message
(Apache's ``TopicMessageType.parseFromMessageProperty``: not a transaction, not delayed, no message
group); a priority on any other message is dropped.  The ordered pop runs only for topics of type
PRIORITY and only for non-orderly POPs.  The retry topic is read after the topic's queues, unless a
random draw below ``popFromRetryProbabilityForPriority`` (percent, default 0) reads it first.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

PRIORITY_PROPERTY = "_SYS_MSG_PRIORITY_"
LITE_TOPIC_PROPERTY = "__LITE_TOPIC"
PRIORITY_TOPIC_TYPE = "PRIORITY"
_DELAY_PROPERTIES = ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME")


def priority_of(props: Mapping[str, str]) -> int | None:
    """The message's priority, or None (absent or not a number: Apache reads such a value as -1)."""
    raw = props.get(PRIORITY_PROPERTY)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def type_from_properties(props: Mapping[str, str]) -> str:
    """The message type Apache derives from a message's properties, in its precedence: a transaction,
    then a delay, then a message group, then a priority, then a lite topic; otherwise NORMAL."""
    if props.get("TRAN_MSG", "").lower() == "true":
        return "TRANSACTION"
    if any(k in props for k in _DELAY_PROPERTIES):
        return "DELAY"
    if "__SHARDINGKEY" in props:
        return "FIFO"
    if PRIORITY_PROPERTY in props:
        return "PRIORITY"
    if LITE_TOPIC_PROPERTY in props:
        return "LITE"
    return "NORMAL"


def place(props: MutableMapping[str, str], write_queue_nums: int, queue_id: int) -> int:
    """The queue a send stores a message in: ``min(priority, writeQueueNums - 1)`` for a PRIORITY message,
    else ``queue_id`` (the one already chosen); a priority on a message of another type is removed."""
    priority = priority_of(props)
    if priority is None or priority < 0:
        return queue_id
    if type_from_properties(props) == "PRIORITY":
        return min(priority, max(write_queue_nums, 1) - 1)
    del props[PRIORITY_PROPERTY]
    return queue_id


def pop_order(queue_ids: list[int], highest_first: bool) -> list[int]:
    """The queues of a PRIORITY topic in the order a POP reads them: the highest id first when a larger
    priority is more urgent (``priorityOrderAsc`` true), the lowest first otherwise."""
    return sorted(queue_ids, reverse=highest_first)
