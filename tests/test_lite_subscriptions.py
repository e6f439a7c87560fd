"""Lite subscriptions and lite-topic expiry as Apache RocketMQ 5.5.0 decides them (broker/lite.py,
broker/lite_expiry.py, broker/rate_limiter.py), on a real store without processes.

Ground truth: the lite messages written (their lite topics and store times, which the tests choose), what a
subscribed client's POP then hands out, and Apache 5.5.0's rules read from its jars (ClientProcessor,
LiteSubscriptionRegistryImpl, AbstractLiteLifecycleManager, Guava's RateLimiter).  The e2e runs with the official
client are in tests/test_lite.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketscope.broker.broker_config import load_broker_config
from rocketscope.broker.errors import BrokerError, ErrorKind
from rocketscope.broker.groups import GroupConfig, GroupManager
from rocketscope.broker.lite import (
    POLICY_MAX,
    POLICY_MIN,
    Action,
    LiteService,
    LiteUnsubscribed,
    OffsetKind,
    OffsetOption,
    lmq_name,
)
from rocketscope.broker.lite_expiry import LiteExpiry
from rocketscope.broker.offsets import OffsetManager
from rocketscope.broker.pop import PopService, retry_topic
from rocketscope.broker.rate_limiter import RateLimiter
from rocketscope.broker.store.message_store import MessageStore, PutStatus, StoreConfig
from rocketscope.broker.store.multi_dispatch import MULTI_DISPATCH
from rocketscope.broker.store.record import StoredMessage
from rocketscope.broker.topics import TopicConfig, TopicManager

TOPIC, GROUP = "LT", "GL"


class Rig:
    """A store with multi-dispatch, the POP engine and the lite service over it, with a settable clock."""

    def __init__(self, root: Path, **conf: str) -> None:
        # a rate far above the test's calls (Guava's limiter lets one through per 1/rate s from the start)
        self.settings = load_broker_config({"enableLmq": "true", "enableMultiDispatch": "true",
                                            "maxSyncLiteSubscriptionRate": "1000000000",
                                            "storePathRootDir": str(root), **conf})
        self.store = MessageStore(StoreConfig(root=root / "store", multi_dispatch=True,
                                              commitlog_segment_size=1 << 16, checkpoint_interval_s=3600))
        self.topics = TopicManager(root / "topics.json", 4, 6)
        self.groups = GroupManager(root / "groups.json")
        self.pop = PopService(self.store, OffsetManager(root / "offsets.json"), self.groups, self.topics, "b")
        self.told: list[tuple[str, LiteUnsubscribed]] = []
        self.lite = LiteService(lambda: self.settings, self.store, self.groups, self.pop, notify=self.tell)
        self.now_ms = 0
        self.expiry = LiteExpiry(lambda: self.settings, self.lite, self.topics, lambda: True, lambda: self.now_ms)
        self.topics.update(TopicConfig(TOPIC, 4, 4, 6, attributes={"message.type": "LITE",
                                                                     "lite.topic.expiration": "2"}))
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.store.start())
        self.sent = 0

    def tell(self, cid: str, cmd: LiteUnsubscribed) -> bool:
        self.told.append((cid, cmd))
        return True

    def group(self, **attrs: str) -> None:
        self.groups.update(GroupConfig(GROUP, attributes={"lite.bind.topic": TOPIC, **attrs}))

    def send(self, lite: str, stored_at_ms: int | None = None) -> None:
        props = {"UNIQ_KEY": f"ID{self.sent}", "__LITE_TOPIC": lite}
        self.lite.prepare_send(TOPIC, props, "m")
        assert props[MULTI_DISPATCH] == lmq_name(TOPIC, lite)
        msg = StoredMessage(topic=TOPIC, queue_id=0, body=f"{lite}{self.sent}".encode(), properties=props,
                            born_timestamp=1, born_host="10.0.0.1:5000")
        if stored_at_ms is not None:
            msg.store_timestamp = stored_at_ms
        (res,) = self.loop.run_until_complete(self.store.put([msg]))
        assert res.status is PutStatus.PUT_OK
        self.sent += 1

    def receive(self, cid: str) -> list[str]:
        """What one POP of client ``cid`` hands out, each message acked (a lite queue is popped in order: the next
        ones come only after these are acked)."""
        got = self.deliveries(cid)
        for d in got:
            self.pop.ack(GROUP, d.handle)
        return sorted(d.message.body.decode() for d in got)

    def deliveries(self, cid: str, invisible_ms: int = 60_000) -> list[Any]:
        return self.pop.pop_lite(GROUP, TOPIC, self.lite.lite_topics(cid, GROUP, TOPIC),
                                 self.lite.lite_queues(cid, GROUP, TOPIC), 32, invisible_ms)

    def sync(self, cid: str, action: str, lites: list[str], offset: OffsetOption | None = None) -> set[str]:
        return self.lite.sync(cid, GROUP, TOPIC, Action(action), lites, offset)

    def close(self) -> None:
        self.loop.run_until_complete(self.store.shutdown())
        self.loop.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.close()


def refused(fn: Any, *args: Any) -> tuple[ErrorKind, str]:
    with pytest.raises(BrokerError) as err:
        fn(*args)
    return err.value.kind, str(err.value)


# ------------------------------------------------------------------------------------------- rate limit
def test_rate_limiter_is_guava_smooth_bursty() -> None:
    now = [100.0]
    lim = RateLimiter(5, clock=lambda: now[0])
    assert [lim.try_acquire() for _ in range(3)] == [True, False, False]  # no stored permit at start
    now[0] += 0.2
    assert lim.try_acquire() and not lim.try_acquire()  # one interval later: one more
    now[0] += 10  # a long quiet time stores one second's worth (5), and the next may still borrow one
    assert sum(lim.try_acquire() for _ in range(10)) == 6


def test_sync_rate_limit_answers_too_many_requests(tmp_path: Path) -> None:
    r = Rig(tmp_path, maxSyncLiteSubscriptionRate="1")
    try:
        r.group()
        assert r.sync("c1", "PARTIAL_ADD", ["a"]) == {"a"}
        kind, text = refused(r.sync, "c1", "PARTIAL_ADD", ["b"])
        assert kind is ErrorKind.TOO_MANY_REQUESTS
        assert text == f"Too many syncLiteSubscription requests, topic={TOPIC}, group={GROUP}, clientId=c1"
        # only PARTIAL_ADD is limited (Apache's ClientProcessor)
        assert r.sync("c1", "PARTIAL_REMOVE", ["a"]) == set()
        assert r.sync("c1", "COMPLETE_ADD", ["a", "b"]) == {"a", "b"}
    finally:
        r.close()


# ----------------------------------------------------------------------------------------------- quotas
def test_quota_is_checked_against_the_request_set_plus_300(rig: Rig) -> None:
    rig.group(**{"lite.sub.client.quota": "2"})
    many = [f"t{i}" for i in range(302)]
    assert len(rig.sync("c1", "COMPLETE_ADD", many)) == 302  # 302 <= 2 + 300: Apache's proxy lets it through
    kind, text = refused(rig.sync, "c1", "PARTIAL_ADD", [*many, "x"])
    assert kind is ErrorKind.LITE_SUBSCRIPTION_QUOTA_EXCEEDED and text.startswith("lite subscription quota "
                                                                                   "exceeded: 2")
    assert rig.sync("c1", "PARTIAL_ADD", ["y"]) == {*many, "y"}  # a set of one, whatever the client holds


def test_broker_subscription_count(tmp_path: Path) -> None:
    r = Rig(tmp_path, maxLiteSubscriptionCount="2")
    try:
        r.group()
        r.sync("c1", "PARTIAL_ADD", ["a"])
        r.sync("c2", "PARTIAL_ADD", ["a"])
        assert refused(r.sync, "c3", "PARTIAL_ADD", ["b"])[0] is ErrorKind.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    finally:
        r.close()


def test_lite_topics_are_checked_for_partial_add_only(rig: Rig) -> None:
    rig.group()
    assert refused(rig.sync, "c1", "PARTIAL_ADD", ["a.b"])[0] is ErrorKind.ILLEGAL_LITE_TOPIC
    assert rig.sync("c1", "PARTIAL_REMOVE", ["a.b"]) == set()  # as Apache's ClientActivity: nothing to check


# -------------------------------------------------------------------------------------------- exclusive
def test_shared_group_every_subscriber_shares_a_lite_topic(rig: Rig) -> None:
    rig.group()
    rig.sync("c1", "PARTIAL_ADD", ["a"])
    rig.sync("c2", "PARTIAL_ADD", ["a"])
    assert rig.told == [] and rig.lite.lite_queues("c1", GROUP, TOPIC) == [lmq_name(TOPIC, "a")]


def test_exclusive_group_the_newest_subscriber_takes_the_lite_topic(rig: Rig) -> None:
    rig.group(**{"lite.sub.model": "Exclusive"})
    rig.sync("c1", "PARTIAL_ADD", ["a", "b"])
    rig.send("a")
    assert rig.receive("c1") == ["a0"]
    rig.sync("c2", "PARTIAL_ADD", ["a"])
    assert rig.told == [("c1", LiteUnsubscribed(GROUP, "a"))]
    assert rig.lite.lite_queues("c1", GROUP, TOPIC) == [lmq_name(TOPIC, "b")]
    rig.send("a")
    rig.send("b")
    assert rig.receive("c1") == ["b2"] and rig.receive("c2") == ["a1"]  # the group's offset stays where it was
    # a COMPLETE_ADD (the client's periodic sync) takes nothing from others, as Apache 5.5.0's registry
    rig.sync("c1", "COMPLETE_ADD", ["a", "b"])
    assert len(rig.told) == 1 and lmq_name(TOPIC, "a") in rig.lite.lite_queues("c2", GROUP, TOPIC)


def test_exclusive_eviction_may_reset_the_offset(rig: Rig) -> None:
    rig.group(**{"lite.sub.model": "Exclusive", "lite.sub.reset.offset.exclusive": "true"})
    rig.sync("c1", "PARTIAL_ADD", ["a"])
    rig.send("a")
    assert rig.receive("c1") == ["a0"]
    rig.pop.reset_offset(GROUP, lmq_name(TOPIC, "a"), 0, 1)  # as if a0 were acknowledged
    rig.sync("c2", "PARTIAL_ADD", ["a"])
    assert rig.receive("c2") == ["a0"]  # the group starts the lite topic over


# ------------------------------------------------------------------------------------------ offset option
def test_offset_options(rig: Rig) -> None:
    rig.group()
    for _ in range(5):
        rig.send("a")
    lmq = lmq_name(TOPIC, "a")
    rig.sync("c1", "PARTIAL_ADD", ["a"], OffsetOption(OffsetKind.POLICY, POLICY_MAX))
    assert rig.receive("c1") == []  # from the end
    rig.sync("c1", "PARTIAL_ADD", ["a"], OffsetOption(OffsetKind.OFFSET, 3))
    assert rig.receive("c1") == ["a3", "a4"]
    rig.pop.reset_offset(GROUP, lmq, 0, 4)
    rig.sync("c1", "PARTIAL_ADD", ["a"], OffsetOption(OffsetKind.TAIL_N, 2))
    assert rig.receive("c1") == ["a2", "a3", "a4"]  # two back from the group's offset 4
    rig.sync("c1", "PARTIAL_ADD", ["a"], OffsetOption(OffsetKind.POLICY, POLICY_MIN))
    assert rig.receive("c1") == ["a0", "a1", "a2", "a3", "a4"]
    rig.pop.reset_offset(GROUP, lmq, 0, 5)
    rig.sync("c1", "PARTIAL_ADD", ["a"], OffsetOption(OffsetKind.TIMESTAMP, 0))  # disabled in Apache 5.5.0
    assert rig.receive("c1") == []


def test_reset_offset_on_unsubscribe(rig: Rig) -> None:
    rig.group(**{"lite.sub.reset.offset.unsubscribe": "true"})
    rig.send("a")
    rig.sync("c1", "PARTIAL_ADD", ["a"])
    assert rig.receive("c1") == ["a0"]
    rig.pop.reset_offset(GROUP, lmq_name(TOPIC, "a"), 0, 1)
    rig.sync("c1", "PARTIAL_REMOVE", ["a"])
    rig.sync("c1", "PARTIAL_ADD", ["a"])
    assert rig.receive("c1") == ["a0"]


# ---------------------------------------------------------------------------------------------- retries
def test_a_lite_topic_is_popped_in_order_and_redelivered_in_place(rig: Rig) -> None:
    """As Apache 5.5.0 pops a lite queue (observed: tests/diff_lite.py scenario_lite_order): while a hand-out of lite
    topic a is in flight, a's next messages wait; when its invisible time ends it comes again, in place (not
    through the retry topic), with the messages after it, and only to a subscriber of a."""
    rig.group()
    rig.sync("ca", "PARTIAL_ADD", ["a"])
    rig.sync("cb", "PARTIAL_ADD", ["b"])
    for _ in range(3):
        rig.send("a")
    first = rig.pop.pop_lite(GROUP, TOPIC, ["a"], [lmq_name(TOPIC, "a")], 1, 1)
    assert [d.message.body for d in first] == [b"a0"]
    assert rig.deliveries("ca") == []  # a0 in flight: a is blocked
    rig.pop.clock = lambda: 10**10  # a0's invisible time is long over
    rig.loop.run_until_complete(rig.pop.revive_due())
    assert rig.store.max_offset(retry_topic(GROUP), 0) == 0 and rig.deliveries("cb") == []
    again = rig.deliveries("ca")
    # the attempt a client is told stays 1, as Apache 5.5.0 answers a lite message redelivered in place (observed)
    assert [(d.message.body, d.attempt) for d in again] == [(b"a0", 1), (b"a1", 1), (b"a2", 1)]


# --------------------------------------------------------------------------------------------- expiry
MIN = 60_000


def test_expiry_after_the_topic_expiration_and_min_lite_ttl(tmp_path: Path) -> None:
    r = Rig(tmp_path, minLiteTTl=str(MIN))  # lite.topic.expiration of the topic: 2 minutes
    try:
        r.group()
        r.sync("c1", "PARTIAL_ADD", ["a", "b"])
        t0 = 10 * MIN
        r.send("a", stored_at_ms=t0)
        r.send("b", stored_at_ms=t0 + 2 * MIN)
        r.now_ms = r.expiry.started_ms + MIN // 2
        assert r.expiry.scan() == []  # the broker's first minLiteTTl: no scan
        r.expiry.started_ms = 0
        r.now_ms = t0 + 2 * MIN  # a idle 2 min: not more than its expiration
        assert r.expiry.scan() == []
        r.now_ms = t0 + 2 * MIN + 1
        assert r.expiry.scan() == [lmq_name(TOPIC, "a")]
        assert r.receive("c1") == ["b1"]  # a's subscription removed (silently: no notify on expiry)
        assert r.told == [] and r.lite.lite_queues("c1", GROUP, TOPIC) == [lmq_name(TOPIC, "b")]
        # a group subscribing later finds nothing old; a new message of a is delivered
        r.sync("c2", "PARTIAL_ADD", ["a"])
        assert r.receive("c2") == []
        r.send("a", stored_at_ms=r.now_ms)
        assert r.receive("c2") == ["a2"]
        assert r.expiry.scan() == []
    finally:
        r.close()


def test_no_expiry_without_an_expiration(tmp_path: Path) -> None:
    r = Rig(tmp_path, minLiteTTl="0")
    try:
        r.topics.update(TopicConfig(TOPIC, 4, 4, 6, attributes={"message.type": "LITE"}))  # -1: never
        r.group()
        r.send("a", stored_at_ms=1)
        r.now_ms = 10**12
        assert r.expiry.scan() == []
    finally:
        r.close()


def test_an_expired_lite_queue_does_not_count_against_the_quota(tmp_path: Path) -> None:
    r = Rig(tmp_path, minLiteTTl="0", maxLmqConsumeQueueNum="2")
    try:
        r.group()
        r.send("a", stored_at_ms=1)
        r.send("b", stored_at_ms=1)
        assert refused(r.send, "c")[0] is ErrorKind.LITE_TOPIC_QUOTA_EXCEEDED
        r.expiry.started_ms = 0
        r.now_ms = 10 * MIN
        assert len(r.expiry.scan()) == 2
        r.send("c")  # the two expired ones no longer count
        r.send("a")  # an expired lite topic comes back with a new message, counted again
        assert refused(r.send, "d")[0] is ErrorKind.LITE_TOPIC_QUOTA_EXCEEDED
    finally:
        r.close()


def test_a_cleared_lite_queue_stays_empty_after_a_restart(tmp_path: Path) -> None:
    r = Rig(tmp_path, minLiteTTl="0")
    r.group()
    r.send("a", stored_at_ms=1)
    r.expiry.started_ms = 0
    r.now_ms = 10 * MIN
    assert r.expiry.scan() == [lmq_name(TOPIC, "a")]
    r.close()
    again = Rig(tmp_path, minLiteTTl="0")  # the same store: recovered from disk
    try:
        again.group()
        again.sync("c9", "PARTIAL_ADD", ["a"], OffsetOption(OffsetKind.POLICY, POLICY_MIN))
        assert again.receive("c9") == []
        again.expiry.started_ms = 0
        assert again.expiry.scan() == [] and lmq_name(TOPIC, "a") in again.lite.expired
    finally:
        again.close()


def test_a_client_that_stops_syncing_loses_its_subscriptions(rig: Rig) -> None:
    """Apache's registry drops a client's lite subscriptions after liteSubscriptionCheckTimeoutMills without a sync
    (a LitePushConsumer syncs its whole set every 30 s)."""
    rig.group()
    rig.sync("gone", "PARTIAL_ADD", ["a"])
    rig.sync("alive", "PARTIAL_ADD", ["a"])
    synced = rig.lite.synced_ms["gone"]
    rig.lite.synced_ms["alive"] = synced + 100_000  # its periodic COMPLETE_ADD came later
    assert rig.lite.drop_idle(synced + 180_001, 180_000) == ["gone"]
    assert rig.lite.lite_queues("gone", GROUP, TOPIC) == [] and rig.lite.lite_queues("alive", GROUP, TOPIC)
