"""Topic configurations of one broker: validation, system topics, auto-creation."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rocketscope.names import is_retry_or_dlq, is_system_topic

from .persistence import load_json, save_json
from .store.multi_dispatch import is_lmq, lmq_name_problem

log = logging.getLogger(__name__)

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127
PERM_READ, PERM_WRITE = 4, 2
MESSAGE_TYPE_ATTRIBUTE = "message.type"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE", "MIXED")
# a LITE topic's lite topics expire after this many minutes idle: -1 (never, the default) up to 30 days, as
# Apache RocketMQ 5.5's topic attribute (accepted and kept; RocketScope deletes no lite queue: COMPATIBILITY.md P9)
LITE_EXPIRATION_ATTRIBUTE = "lite.topic.expiration"
LITE_EXPIRATION_MAX_MINUTES = 30 * 24 * 60


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid topic name, or None."""
    if not name or not name.strip():
        return "topic name is blank"
    if len(name) > TOPIC_MAX_LENGTH:
        return f"topic name is longer than {TOPIC_MAX_LENGTH} characters"
    if not TOPIC_PATTERN.match(name):
        return f"topic name {name!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


def read_topic_problem(name: str) -> str | None:
    """Why ``name`` cannot be the topic of a read request (pull, offsets), or None: an LMQ queue's name
    (``%LMQ%...``) by the LMQ rule, which allows lite queues' ``$`` (broker/store/multi_dispatch.py), any other by
    the topic rule."""
    return lmq_name_problem(name) if is_lmq(name) else topic_name_problem(name)


@dataclass
class TopicConfig:
    name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = 6
    order: bool = False
    system: bool = False
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def message_type(self) -> str:
        return self.attributes.get(MESSAGE_TYPE_ATTRIBUTE, "MIXED").upper()

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


class TopicManager:
    def __init__(self, path: Path, default_queue_nums: int, broker_perm: int = 6) -> None:
        self.path = Path(path)
        self.default_queue_nums = default_queue_nums
        self.broker_perm = broker_perm
        raw = load_json(self.path, {"topics": {}, "dataVersion": [0, 0]})
        self.topics: dict[str, TopicConfig] = {
            name: TopicConfig(**cfg) for name, cfg in raw.get("topics", {}).items()
        }
        ts, counter = raw.get("dataVersion", [0, 0])
        self.data_version = (int(ts), int(counter))

    def _changed(self) -> None:
        self.data_version = (int(time.time() * 1000), self.data_version[1] + 1)
        save_json(self.path, {"topics": {n: asdict(c) for n, c in self.topics.items()},
                              "dataVersion": list(self.data_version)})

    def get(self, name: str) -> TopicConfig | None:
        return self.topics.get(name)

    lmq_enabled: bool = False
    """The broker key enableLmq (set by the broker at start): ``select`` serves LMQ queues."""

    def select(self, name: str) -> TopicConfig | None:
        """The config a read of ``name`` is served by: Apache RocketMQ's ``selectTopicConfig``.

        Why: with enableLmq, Apache's broker uses LmqTopicConfigManager, which answers every ``%LMQ%`` name
        with a one-queue, read-write config made on the fly and stored nowhere (an LMQ queue has no topic
        config of its own: it is filled by multi-dispatch, broker/store/multi_dispatch.py), so pulls and offset
        commits of an LMQ queue are served.  Off, an LMQ name is looked up like any topic."""
        if self.lmq_enabled and is_lmq(name):
            return TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE)  # one queue: LMQ_QUEUE_ID
        return self.topics.get(name)

    def all(self) -> list[TopicConfig]:
        return [self.topics[n] for n in sorted(self.topics)]

    on_created: Callable[[str, bool, float, bool], None] | None = None
    """Called with (topic, system, elapsed ms, ok) after an attempt to create a topic (the broker's metrics)."""

    def update(self, cfg: TopicConfig) -> TopicConfig:
        if cfg.name in self.topics or self.on_created is None:
            return self._update(cfg)
        started, ok = time.perf_counter(), False
        try:
            out = self._update(cfg)
            ok = True
            return out
        finally:
            self.on_created(cfg.name, cfg.system, (time.perf_counter() - started) * 1000, ok)

    def _update(self, cfg: TopicConfig) -> TopicConfig:
        problem = topic_name_problem(cfg.name)
        if problem:
            raise ValueError(problem)
        if cfg.read_queue_nums <= 0 or cfg.write_queue_nums <= 0:
            raise ValueError("readQueueNums and writeQueueNums must be positive")
        if cfg.message_type not in MESSAGE_TYPES:
            raise ValueError(f"attribute message.type must be one of {', '.join(MESSAGE_TYPES)}")
        expiration = cfg.attributes.get(LITE_EXPIRATION_ATTRIBUTE)
        if expiration is not None and not (expiration.lstrip("-").isdigit()
                                           and -1 <= int(expiration) <= LITE_EXPIRATION_MAX_MINUTES):
            raise ValueError(f"attribute {LITE_EXPIRATION_ATTRIBUTE} must be minutes from -1 to "
                             f"{LITE_EXPIRATION_MAX_MINUTES}, not {expiration!r}")
        old = self.topics.get(cfg.name)
        self.topics[cfg.name] = cfg
        self._changed()
        log.info("topic %s %s: read=%d write=%d perm=%d type=%s", cfg.name, "updated" if old else "created",
                 cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm, cfg.message_type)
        return cfg

    def create_if_absent(self, name: str, queue_nums: int | None = None, system: bool = False,
                         attributes: dict[str, str] | None = None) -> TopicConfig:
        cfg = self.topics.get(name)
        if cfg is not None:
            return cfg
        n = queue_nums or self.default_queue_nums
        return self.update(TopicConfig(name, n, n, 6, system=system or is_system_topic(name) or is_retry_or_dlq(name),
                                       attributes=dict(attributes or {})))

    def delete(self, name: str) -> bool:
        if self.topics.pop(name, None) is None:
            return False
        self._changed()
        log.info("topic %s deleted", name)
        return True


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, as a signed 32-bit int)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash(long, int): a bucket that changes for few keys when buckets change.

    Apache RocketMQ's proxy picks a FIFO message group's queue with
    ``consistentHash(messageGroup.hashCode(), writeQueues.size())``; RocketScope does the same so a
    message group lands in the queue Apache would put it in (tests/test_sql92.py checks the
    formula against queues observed on Apache RocketMQ 5.3.3).
    """
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        nxt = int((candidate + 1) / (((state >> 33) + 1) / 2.0 ** 31))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def group_queue(message_group: str, write_queue_nums: int) -> int:
    """The write queue of a FIFO message group, as Apache RocketMQ's proxy selects it."""
    return consistent_hash(java_string_hash(message_group), write_queue_nums)
