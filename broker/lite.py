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
client is a POP of the lite queues it subscribed, each in order (as Apache 5.5.0 pops a lite queue: nothing more
of it while a hand-out is in flight, a redelivery in place; broker/pop.py ``pop_lite``), so acks and invisible
times are POP's.  Apache's broker keeps a per-client event set fed by its dispatcher
(LiteEventDispatcher) to find the queues with news; here a receive reads the client's queues in turn, which
answers the same messages (an empty queue costs one offset comparison).

The checks and their codes are those of Apache's proxy (GrpcValidator, ClientActivity, ClientProcessor) and
broker (SendMessageProcessor, LiteSubscriptionRegistryImpl), read from the 5.5.0 jars: ILLEGAL_LITE_TOPIC for a
blank, too long (``maxLiteTopicSize`` bytes) or non ``[A-Za-z0-9_-]`` lite topic (of a PARTIAL_ADD); ILLEGAL_TOPIC
when the group's bind topic is not the request's; LITE_SUBSCRIPTION_QUOTA_EXCEEDED when the request's set is larger
than the group's ``lite.sub.client.quota`` (2000) plus 300, or the broker holds ``maxLiteSubscriptionCount``
subscriptions; TOO_MANY_REQUESTS past ``maxSyncLiteSubscriptionRate`` PARTIAL_ADDs a second;
LITE_TOPIC_QUOTA_EXCEEDED when a message would open more than ``maxLmqConsumeQueueNum`` lite queues.  In an
Exclusive group (``lite.sub.model``) a PARTIAL_ADD takes the lite topic from the group's other clients, each told
by a NotifyUnsubscribeLite command on its Telemetry stream; a PARTIAL_ADD's OffsetOption and the
``lite.sub.reset.offset.*`` attributes move the group's offset in a lite queue.  Expiry: broker/lite_expiry.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from .errors import BrokerError, ErrorKind
from .group_attributes import LITE_CLIENT_QUOTA_DEFAULT
from .groups import GroupManager
from .priority import LITE_TOPIC_PROPERTY
from .rate_limiter import RateLimiter
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


@dataclass(frozen=True)
class LiteUnsubscribed:
    """For a client's Telemetry outbox: the broker took ``lite_topic`` away from it (an Exclusive group's newer
    subscriber won it); the gRPC door sends it as the v2 NotifyUnsubscribeLiteCommand, as Apache 5.5.0's proxy."""

    group: str
    lite_topic: str


class OffsetKind(StrEnum):
    """SyncLiteSubscription's OffsetOption cases (Apache's common.lite.OffsetOption.Type)."""

    POLICY = "POLICY"
    OFFSET = "OFFSET"
    TAIL_N = "TAIL_N"
    TIMESTAMP = "TIMESTAMP"


POLICY_LAST, POLICY_MIN, POLICY_MAX = 0, 1, 2  # OffsetOption.Policy's values
QUOTA_SLACK = 300  # Apache's proxy refuses a request's set only past the group's quota plus this


@dataclass(frozen=True)
class OffsetOption:
    """Where a PARTIAL_ADD starts the group on the lite topics it names."""

    kind: OffsetKind
    value: int


class LiteService:
    """Lite subscriptions of this broker's clients and the lite side of sends and receives."""

    def __init__(self, settings: Callable[[], Settings], store: MessageStore, groups: GroupManager,
                 pop: PopService, notify: Callable[[str, LiteUnsubscribed], bool] | None = None) -> None:
        self._settings = settings
        self.store = store
        self.groups = groups
        self.pop = pop
        self._notify = notify
        # (group, bind topic) -> client id -> its lite topics
        self.subscriptions: dict[tuple[str, str], dict[str, set[str]]] = {}
        self.expired: set[str] = set()
        """Lite queues cleared by expiry (broker/lite_expiry.py): not counted against maxLmqConsumeQueueNum until a
        new message opens them again."""
        self._limiter: RateLimiter | None = None
        self.synced_ms: dict[str, int] = {}
        """client id -> when its subscription last changed or was synced (Apache's LiteSubscription.updateTime)."""

    # ------------------------------------------------------------------ checks
    def check_lite_topic(self, lite_topic: str, where: str) -> None:
        problem = lite_topic_problem(lite_topic, self._settings().maxLiteTopicSize)
        if problem:
            raise BrokerError(ErrorKind.ILLEGAL_LITE_TOPIC, f"{where} {lite_topic!r} {problem}")

    def quota(self, group: str) -> int:
        """The group's lite subscription quota per client (``lite.sub.client.quota``)."""
        cfg = self.groups.get(group)
        return cfg.lite_client_quota if cfg is not None else LITE_CLIENT_QUOTA_DEFAULT

    def _rate_limiter(self) -> RateLimiter:
        rate = self._settings().maxSyncLiteSubscriptionRate
        if self._limiter is None or self._limiter.rate != rate:
            self._limiter = RateLimiter(rate)
        return self._limiter

    @property
    def active(self) -> int:
        """(client, lite topic) subscriptions held: what ``maxLiteSubscriptionCount`` bounds."""
        return sum(len(lites) for clients in self.subscriptions.values() for lites in clients.values())

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
        if not (s.enableLmq and s.enableMultiDispatch):
            return
        if lmq in self.expired or (self.store.max_offset(lmq, LMQ_QUEUE_ID) == 0
                                   and (lmq, LMQ_QUEUE_ID) not in self.store.queue_next):
            count = sum(1 for (name, _) in self.store.queue_next if name.startswith(LITE_QUEUE_PREFIX)) \
                - len(self.expired)
            if count >= s.maxLmqConsumeQueueNum:
                raise BrokerError(ErrorKind.LITE_TOPIC_QUOTA_EXCEEDED,
                                   f"{where}.lite_topic {lite!r}: this broker holds {count} lite queues, "
                                   f"maxLmqConsumeQueueNum ({s.maxLmqConsumeQueueNum})")
            self.expired.discard(lmq)

    # ------------------------------------------------------------ subscription
    def sync(self, client_id: str, group: str, topic: str, action: Action, lite_topics: Iterable[str],
             offset: OffsetOption | None = None) -> set[str]:
        """SyncLiteSubscription: apply ``action`` to the client's lite topics of ``topic``; return them.

        The checks in Apache 5.5.0's order (its proxy's ClientActivity and ClientProcessor, then its broker's
        LiteSubscriptionRegistryImpl): the lite topics of a PARTIAL_ADD, the group's bind topic, the request's
        set against the group's quota (plus Apache's slack of 300), the rate of PARTIAL_ADDs
        (``maxSyncLiteSubscriptionRate``), the broker's ``maxLiteSubscriptionCount``."""
        wanted = list(dict.fromkeys(lite_topics))
        if action == Action.PARTIAL_ADD:
            for i, lite in enumerate(wanted):
                self.check_lite_topic(lite, f"lite_topic_set[{i}]")
        cfg = self.groups.get(group)
        bind = cfg.lite_bind_topic if cfg is not None else ""
        if bind != topic:
            raise BrokerError(ErrorKind.ILLEGAL_TOPIC, f"lite group {group} is expected to bind topic "
                                                   f"{bind or 'null'}, but actual is {topic}")
        quota = self.quota(group)
        if wanted and len(wanted) > quota + QUOTA_SLACK:
            raise BrokerError(ErrorKind.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                               f"lite subscription quota exceeded: {quota} (lite_topic_set names {len(wanted)} lite "
                               f"topics; group {group}'s lite.sub.client.quota {quota} plus {QUOTA_SLACK})")
        if action == Action.PARTIAL_ADD and not self._rate_limiter().try_acquire():
            raise BrokerError(ErrorKind.TOO_MANY_REQUESTS, f"Too many syncLiteSubscription requests, topic={topic}, "
                                                         f"group={group}, clientId={client_id}")
        clients = self.subscriptions.setdefault((group, topic), {})
        mine = set(clients.get(client_id, ()))
        if action == Action.PARTIAL_ADD:
            limit = self._settings().maxLiteSubscriptionCount
            if self.active >= limit:
                raise BrokerError(ErrorKind.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                                   f"lite subscription quota exceeded {limit} (maxLiteSubscriptionCount: this broker "
                                   f"holds {self.active} lite subscriptions)")
            new = mine | set(wanted)
            for lite in wanted:
                if cfg is not None and cfg.lite_exclusive:
                    self._evict_others(client_id, group, topic, lite, cfg.reset_offset_exclusive)
                if offset is not None:
                    self._reset(group, lmq_name(topic, lite), client_id, offset)
        elif action == Action.PARTIAL_REMOVE:
            new = mine - set(wanted)
            if cfg is not None and cfg.reset_offset_unsubscribe:
                for lite in mine & set(wanted):
                    self._reset(group, lmq_name(topic, lite), client_id, OffsetOption(OffsetKind.POLICY, POLICY_MIN))
        elif action == Action.COMPLETE_ADD:
            new = set(wanted)
        else:
            new = set()
        if new:
            clients[client_id] = new
            self.synced_ms[client_id] = int(time.time() * 1000)
        else:
            clients.pop(client_id, None)
        if new != mine:
            log.info("lite subscription of client %s (group %s, topic %s): %s %s -> %d lite topics", client_id,
                     group, topic, action.value, sorted(wanted)[:8], len(new))
            self.pop.wake(topic)  # a long poll of this client may now find messages
        return new

    def _evict_others(self, client_id: str, group: str, topic: str, lite: str, reset: bool) -> None:
        """``lite.sub.model=Exclusive``: the newest subscriber of a lite topic takes it from the group's others,
        each told by NotifyUnsubscribeLite (Apache's excludeClientByLmqName); with
        ``lite.sub.reset.offset.exclusive`` the group starts the lite topic over from its first message."""
        for other, lites in list(self.subscriptions.get((group, topic), {}).items()):
            if other == client_id or lite not in lites:
                continue
            lites.discard(lite)
            if not lites:
                del self.subscriptions[(group, topic)][other]
            told = self._notify(other, LiteUnsubscribed(group, lite)) if self._notify is not None else False
            log.info("lite topic %s of group %s (Exclusive) taken from client %s by %s; told: %s, offset reset: %s",
                     lite, group, other, client_id, told, reset)
            if reset:
                self._reset(group, lmq_name(topic, lite), other, OffsetOption(OffsetKind.POLICY, POLICY_MIN))

    def _reset(self, group: str, lmq: str, client_id: str, option: OffsetOption) -> None:
        """Move the group's offset in one lite queue as Apache's registry resets it for an OffsetOption: MIN the
        first message, MAX past the last, OFFSET that offset, TAIL_N n messages back from the group's offset (only
        when it has one); LAST and TIMESTAMP (disabled in Apache 5.5.0) leave it."""
        current = self.pop.offsets.get(group, lmq, LMQ_QUEUE_ID)
        target: int | None = None
        if option.kind == OffsetKind.POLICY:
            target = 0 if option.value == POLICY_MIN else \
                self.store.max_offset(lmq, LMQ_QUEUE_ID) if option.value == POLICY_MAX else None
        elif option.kind == OffsetKind.OFFSET:
            target = option.value
        elif option.kind == OffsetKind.TAIL_N and current is not None:
            target = max(0, current - option.value)
        log.info("lite offset of group %s in %s (client %s): %s %d, current %s, target %s", group, lmq, client_id,
                 option.kind.value, option.value, current, target)
        if target is not None and target != current:
            self.pop.reset_offset(group, lmq, LMQ_QUEUE_ID, max(target, 0))

    def forget(self, client_id: str, why: str = "client ended") -> None:
        """A client that ended (NotifyClientTermination) subscribes to nothing any more."""
        self.synced_ms.pop(client_id, None)
        for (group, topic), clients in self.subscriptions.items():
            if clients.pop(client_id, None) is not None:
                log.info("lite subscriptions of client %s (group %s, topic %s) removed: %s", client_id, group, topic,
                         why)

    def drop_idle(self, now_ms: int, timeout_ms: int) -> list[str]:
        """Forget the subscriptions of clients that synced nothing for ``timeout_ms`` (Apache's registry does so
        after ``liteSubscriptionCheckTimeoutMills``: a LitePushConsumer syncs its whole set every 30 s, so only a
        client gone without NotifyClientTermination is dropped)."""
        idle = [cid for cid, at in self.synced_ms.items() if now_ms - at > timeout_ms]
        for cid in idle:
            self.forget(cid, f"no SyncLiteSubscription for {timeout_ms} ms")
        return idle

    def lite_topics(self, client_id: str, group: str, topic: str) -> list[str]:
        return sorted(self.subscriptions.get((group, topic), {}).get(client_id, ()))

    def lite_queues(self, client_id: str, group: str, topic: str) -> list[str]:
        return [lmq_name(topic, lite) for lite in self.lite_topics(client_id, group, topic)]

    # ----------------------------------------------------------------- receive
    async def receive(self, client_id: str, group: str, topic: str, batch: int, invisible_ms: int,
                      poll_s: float) -> list[Delivery]:
        """A LitePushConsumer's receive: POP of its lite queues, long polling up to ``poll_s``."""
        deadline = time.monotonic() + max(poll_s, 0.0)
        while True:
            lites = self.lite_topics(client_id, group, topic)
            out = self.pop.pop_lite(group, topic, lites, [lmq_name(topic, lite) for lite in lites], batch,
                                    invisible_ms)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            await self.pop.wait_dispatch(group, topic, remaining)
