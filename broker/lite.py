"""Lite mode as Apache RocketMQ 5.5 does it (docs/COMPATIBILITY.md P9): many light topics inside one LITE topic.

Why this shape: a LITE topic (``message.type=LITE``) carries messages each naming a lite topic
(``system_properties.lite_topic``, the property ``__LITE_TOPIC``).  Apache stores such a message once, in its
topic, and lists the lite topic's light message queue ``%LMQ%$<topic>$<liteTopic>`` in the record's
``INNER_MULTI_DISPATCH`` property; with the broker keys ``enableLmq`` and ``enableMultiDispatch`` on, the store
also indexes the record in that queue (broker/store/multi_dispatch.py: one commit-log record, one more
consume-queue entry, derived from the log on every member).  With the keys off (Apache's default) nothing reads
the lite queues, and a subscribed lite consumer receives nothing, as 5.5.0 was observed to do.

A lite consumer group names its topic in the group attribute ``lite.bind.topic``.  Its LitePushConsumers tell
the broker which lite topics they want with ``SyncLiteSubscription`` (PARTIAL_ADD, PARTIAL_REMOVE, COMPLETE_ADD,
COMPLETE_REMOVE), and receive from the bind topic's queues as any push consumer does; a receive of such a
client is a POP of the lite queues it subscribed (and of the group's retries of the topic), so acks and
invisible times are POP's.  Apache's broker keeps a per-client event set fed by its dispatcher
(LiteEventDispatcher) to find the queues with news; here a receive reads the client's queues in turn, which
answers the same messages (an empty queue costs one offset comparison).

The checks and their codes are those of Apache's proxy (GrpcValidator, ClientProcessor) and broker
(SendMessageProcessor): ILLEGAL_LITE_TOPIC for a blank, too long (``maxLiteTopicSize`` bytes) or non
``[A-Za-z0-9_-]`` lite topic; ILLEGAL_TOPIC when the group's bind topic is not the request's;
LITE_SUBSCRIPTION_QUOTA_EXCEEDED past the group's ``lite.sub.client.quota`` (2000); LITE_TOPIC_QUOTA_EXCEEDED
when a message would open more than ``maxLmqConsumeQueueNum`` lite queues.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, MutableMapping
from enum import StrEnum
from typing import TYPE_CHECKING

from .errors import BrokerError, ErrorKind
from .group_attributes import LITE_CLIENT_QUOTA_DEFAULT
from .groups import GroupManager
from .priority import LITE_TOPIC_PROPERTY
from .store.multi_dispatch import LMQ_PREFIX, LMQ_QUEUE_ID, MULTI_DISPATCH

if TYPE_CHECKING:
    from rocketscope.config import Settings

    from .pop import Delivery, PopService
    from .store.message_store import MessageStore

log = logging.getLogger(__name__)
LITE_QUEUE_PREFIX = LMQ_PREFIX + "$"


class Action(StrEnum):
    """SyncLiteSubscription's actions (the v2 protocol's LiteSubscriptionAction, by name)."""

    PARTIAL_ADD = "PARTIAL_ADD"
    PARTIAL_REMOVE = "PARTIAL_REMOVE"
    COMPLETE_ADD = "COMPLETE_ADD"
    COMPLETE_REMOVE = "COMPLETE_REMOVE"


def lmq_name(topic: str, lite_topic: str) -> str:
    """The light message queue of ``lite_topic`` in LITE topic ``topic``: ``%LMQ%$<topic>$<liteTopic>``."""
    return f"{LITE_QUEUE_PREFIX}{topic}${lite_topic}"


def split_lmq(name: str) -> tuple[str, str] | None:
    """(topic, lite topic) of a lite queue name, or None for any other name."""
    if not name.startswith(LITE_QUEUE_PREFIX):
        return None
    topic, sep, lite = name[len(LITE_QUEUE_PREFIX):].partition("$")
    return (topic, lite) if sep and topic and lite and "$" not in lite else None


def lite_topic_problem(lite_topic: str, max_size: int) -> str | None:
    """Why a lite topic is refused (Apache 5.5's GrpcValidator.validateLiteTopic), or None."""
    if not lite_topic.strip():
        return "is blank"
    size = len(lite_topic.encode())
    if size > max_size:
        return f"is {size} bytes, more than maxLiteTopicSize ({max_size})"
    if not all(c.isascii() and (c.isalnum() or c in "-_") for c in lite_topic):
        return "may contain only letters, digits, hyphens (-) and underscores (_)"
    return None


class LiteService:
    """Lite subscriptions of this broker's clients and the lite side of sends and receives."""

    def __init__(self, settings: Callable[[], Settings], store: MessageStore, groups: GroupManager,
                 pop: PopService) -> None:
        self._settings = settings
        self.store = store
        self.groups = groups
        self.pop = pop
        # (group, bind topic) -> client id -> its lite topics
        self.subscriptions: dict[tuple[str, str], dict[str, set[str]]] = {}

    # ------------------------------------------------------------------ checks
    def check_lite_topic(self, lite_topic: str, where: str) -> None:
        problem = lite_topic_problem(lite_topic, self._settings().maxLiteTopicSize)
        if problem:
            raise BrokerError(ErrorKind.ILLEGAL_LITE_TOPIC, f"{where} {lite_topic!r} {problem}")

    def quota(self, group: str) -> int:
        """The group's lite subscription quota per client (``lite.sub.client.quota``; -1: no limit)."""
        cfg = self.groups.get(group)
        return cfg.lite_client_quota if cfg is not None else LITE_CLIENT_QUOTA_DEFAULT

    # -------------------------------------------------------------------- send
    def prepare_send(self, topic: str, props: MutableMapping[str, str], where: str) -> None:
        """A lite message (``__LITE_TOPIC`` set): check its lite topic and name its lite queue for the store's
        multi-dispatch, as Apache's SendMessageProcessor does for any message carrying a lite topic."""
        lite = props.get(LITE_TOPIC_PROPERTY)
        if lite is None:
            return
        self.check_lite_topic(lite, f"{where}.lite_topic")
        lmq = lmq_name(topic, lite)
        props[MULTI_DISPATCH] = lmq
        s = self._settings()
        if s.enableLmq and s.enableMultiDispatch and self.store.max_offset(lmq, LMQ_QUEUE_ID) == 0 \
                and (lmq, LMQ_QUEUE_ID) not in self.store.queue_next:
            count = sum(1 for (name, _) in self.store.queue_next if name.startswith(LITE_QUEUE_PREFIX))
            if count >= s.maxLmqConsumeQueueNum:
                raise BrokerError(ErrorKind.LITE_TOPIC_QUOTA_EXCEEDED,
                                   f"{where}.lite_topic {lite!r}: this broker holds {count} lite queues, "
                                   f"maxLmqConsumeQueueNum ({s.maxLmqConsumeQueueNum})")

    # ------------------------------------------------------------ subscription
    def sync(self, client_id: str, group: str, topic: str, action: Action, lite_topics: Iterable[str]) -> set[str]:
        """SyncLiteSubscription: apply ``action`` to the client's lite topics of ``topic``; return them."""
        cfg = self.groups.get(group)
        bind = cfg.lite_bind_topic if cfg is not None else ""
        if bind != topic:
            raise BrokerError(ErrorKind.ILLEGAL_TOPIC, f"lite group {group} is expected to bind topic "
                                                   f"{bind or 'null'}, but actual is {topic}")
        wanted = list(lite_topics)
        for i, lite in enumerate(wanted):
            self.check_lite_topic(lite, f"lite_topic_set[{i}]")
        clients = self.subscriptions.setdefault((group, topic), {})
        mine = clients.get(client_id, set())
        if action == Action.PARTIAL_ADD:
            new = mine | set(wanted)
        elif action == Action.PARTIAL_REMOVE:
            new = mine - set(wanted)
        elif action == Action.COMPLETE_ADD:
            new = set(wanted)
        else:
            new = set()
        quota = self.quota(group)
        if 0 <= quota < len(new) and len(new) > len(mine):
            raise BrokerError(ErrorKind.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                               f"lite_topic_set: client {client_id} would subscribe {len(new)} lite topics of "
                               f"{topic}; the quota of group {group} (lite.sub.client.quota) is {quota}")
        if new:
            clients[client_id] = new
        else:
            clients.pop(client_id, None)
        if new != mine:
            log.info("lite subscription of client %s (group %s, topic %s): %s %s -> %d lite topics", client_id,
                     group, topic, action.value, sorted(wanted)[:8], len(new))
            self.pop.wake(topic)  # a long poll of this client may now find messages
        return new

    def forget(self, client_id: str) -> None:
        """A client that ended (NotifyClientTermination) subscribes to nothing any more."""
        for (group, topic), clients in self.subscriptions.items():
            if clients.pop(client_id, None) is not None:
                log.info("lite subscriptions of client %s (group %s, topic %s) removed: client ended", client_id,
                         group, topic)

    def lite_queues(self, client_id: str, group: str, topic: str) -> list[str]:
        return [lmq_name(topic, lite) for lite in sorted(self.subscriptions.get((group, topic), {}).get(client_id, ()))]

    # ----------------------------------------------------------------- receive
    async def receive(self, client_id: str, group: str, topic: str, batch: int, invisible_ms: int,
                      poll_s: float) -> list[Delivery]:
        """A LitePushConsumer's receive: POP of its lite queues, long polling up to ``poll_s``."""
        deadline = time.monotonic() + max(poll_s, 0.0)
        while True:
            out = self.pop.pop_lite(group, topic, self.lite_queues(client_id, group, topic), batch, invisible_ms)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            await self.pop.wait_dispatch(group, topic, remaining)
