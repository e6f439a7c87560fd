"""Lite-topic expiry as Apache RocketMQ 5.5.0's lite lifecycle manager decides it (docs/COMPATIBILITY.md P9).

A LITE topic's attribute ``lite.topic.expiration`` (minutes; -1, the default, never) bounds how long one of its
lite topics lives without a new message.  Every ``liteTtlCheckInterval`` ms the writer of the broker group
looks at each lite queue ``%LMQ%$<topic>$<liteTopic>``: the store time of its last message is its last activity;
one idle longer than the topic's expiration, and at least ``minLiteTTl`` ms, is removed.  No scan runs in the
broker's first ``minLiteTTl`` ms (Apache's protection of a restarted broker, whose clients have not yet synced
their subscriptions).  Removing it, as Apache does: its subscriptions go away *silently* (Apache 5.5.0's
``cleanSubscription(lmq, false)``: no NotifyUnsubscribeLite is sent on expiry; a LitePushConsumer's periodic
COMPLETE_ADD subscribes it again), and its queue is emptied, so a group that subscribes to it later finds no
old message.  The same task drops the subscriptions of a client that synced nothing for
``liteSubscriptionCheckTimeoutMills`` (a client gone without saying so), as Apache's registry does.

How RocketScope empties it: the lite queue's entries are overwritten with gap entries (broker/store/
consume_queue.py ``blank``) instead of its files being deleted, and the groups' offsets in it move to its end;
its queue offsets go on where they were.  Apache deletes the queue and starts it again at offset 0 with the
groups' offsets removed: the same for a client, but a replica (a slave, a DLedger follower) builds its lite
queues from the commit log alone, and a queue numbered from 0 again would collide there with the entries it
already has.  Replicas keep the old entries (only the writer expires), so after a failover the new writer
expires the lite topic again at its next scan.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .lite import LITE_QUEUE_PREFIX, LiteService, split_lmq
from .store.multi_dispatch import LMQ_QUEUE_ID
from .topics import LITE_EXPIRATION_ATTRIBUTE

if TYPE_CHECKING:
    from rocketscope.config import Settings

    from .topics import TopicManager

log = logging.getLogger(__name__)


class LiteExpiry:
    def __init__(self, settings: Callable[[], Settings], lite: LiteService, topics: TopicManager,
                 is_writer: Callable[[], bool], clock_ms: Callable[[], int] | None = None) -> None:
        self._settings = settings
        self.lite = lite
        self.topics = topics
        self._is_writer = is_writer
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.started_ms = self._clock_ms()

    def expiration_minutes(self, topic: str) -> int | None:
        """The LITE topic's ``lite.topic.expiration``, or None for a topic that is not LITE (never expires)."""
        cfg = self.topics.get(topic)
        if cfg is None or cfg.message_type != "LITE":
            return None
        try:
            return int(cfg.attributes.get(LITE_EXPIRATION_ATTRIBUTE, "-1"))
        except ValueError:
            return None

    def scan(self) -> list[str]:
        """One pass: remove the expired lite topics; return their lite queues."""
        s = self._settings()
        now = self._clock_ms()
        if now - self.started_ms < s.minLiteTTl or not self._is_writer():
            return []
        store = self.lite.store
        removed = []
        for name, qid in list(store.cqs):
            parts = split_lmq(name) if qid == LMQ_QUEUE_ID and name.startswith(LITE_QUEUE_PREFIX) else None
            if parts is None or name in self.lite.expired:
                continue
            cq = store.cqs[(name, qid)]
            last = cq.max_offset - 1
            if last < cq.min_offset or cq.entry(last) is None:  # emptied before (a restart forgot it)
                self.lite.expired.add(name)
                continue
            minutes = self.expiration_minutes(parts[0])
            stored = store.store_time(name, qid, last)
            if minutes is None or minutes <= 0 or stored is None:
                continue
            idle = now - stored
            if idle >= s.minLiteTTl and idle > minutes * 60_000:
                self.remove(name, parts[0], parts[1], idle)
                removed.append(name)
        return removed

    def remove(self, lmq: str, topic: str, lite: str, idle_ms: int) -> None:
        lite_service = self.lite
        end = lite_service.store.max_offset(lmq, LMQ_QUEUE_ID)
        cleared = lite_service.store.clear_queue(lmq, LMQ_QUEUE_ID)
        lite_service.expired.add(lmq)
        subscribers = 0
        for (_, bind), clients in list(lite_service.subscriptions.items()):
            if bind != topic:
                continue
            for cid, lites in list(clients.items()):
                if lite in lites:
                    lites.discard(lite)
                    subscribers += 1
                    if not lites:
                        del clients[cid]
        pop = lite_service.pop
        groups = {g for (g, t, _) in pop.offsets.offsets if t == lmq} | {g for (g, t, _) in pop.states if t == lmq}
        for group in groups:
            pop.reset_offset(group, lmq, LMQ_QUEUE_ID, end)
        log.info("lite topic %s of %s expired: no message for %d s (lite.topic.expiration); %d entries cleared, "
                 "%d subscriptions removed, %d groups' offsets moved to %d", lite, topic, idle_ms // 1000, cleared,
                 subscribers, len(groups), end)

    async def run(self) -> None:
        """The broker's task: a lite-topic scan every ``liteTtlCheckInterval`` ms and a check of idle
        subscriptions every ``liteSubscriptionCheckInterval`` ms."""
        await asyncio.gather(self._every(lambda s: s.liteTtlCheckInterval, self.scan, "lite topic expiry"),
                             self._every(lambda s: s.liteSubscriptionCheckInterval, self.drop_idle,
                                         "lite subscription check"))

    def drop_idle(self) -> list[str]:
        return self.lite.drop_idle(self._clock_ms(), self._settings().liteSubscriptionCheckTimeoutMills)

    async def _every(self, interval_ms: Callable[[Settings], int], job: Callable[[], object], what: str) -> None:
        while True:
            await asyncio.sleep(interval_ms(self._settings()) / 1000)
            try:
                job()
            except Exception:  # a failed pass must not end the job for good
                log.exception("%s failed", what)
