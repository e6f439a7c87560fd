"""Subscription-group (consumer group) configurations of one broker."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .group_attributes import (
    LITE_BIND_TOPIC,
    LITE_CLIENT_QUOTA,
    LITE_CLIENT_QUOTA_DEFAULT,
    LITE_RESET_OFFSET_EXCLUSIVE,
    LITE_RESET_OFFSET_UNSUBSCRIBE,
    LITE_SUB_MODEL,
    AttributeRefused,
    verify,
)
from .persistence import load_json, save_json

log = logging.getLogger(__name__)

GROUP_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
GROUP_MAX_LENGTH = 255
DEFAULT_RETRY_MAX_TIMES = 16


def attribute_problem(key: str, value: str) -> str | None:
    """Why a stored group attribute is refused (Apache 5.5.0's SubscriptionGroupAttributes), or None."""
    try:
        verify(key, value)
    except AttributeRefused as exc:
        return f"attribute {key}={value}: {exc}"
    return None


def group_name_problem(name: str) -> str | None:
    if not name or not name.strip():
        return "consumer group name is blank"
    if len(name) > GROUP_MAX_LENGTH:
        return f"consumer group name is longer than {GROUP_MAX_LENGTH} characters"
    if not GROUP_PATTERN.match(name):
        return f"consumer group name {name!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


@dataclass
class GroupConfig:
    name: str
    consume_enable: bool = True
    consume_message_orderly: bool = False
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES
    retry_queue_nums: int = 1
    consume_broadcast_enable: bool = False
    which_broker_when_consume_slowly: int = 1
    retry_policy: dict[str, Any] | None = None
    """groupRetryPolicy in Apache's JSON shape (broker/retry_policy.py); None: the default customized levels."""
    attributes: dict[str, str] = field(default_factory=dict)
    """Apache RocketMQ 5.5's group attributes (broker/group_attributes.py): a lite group's bind topic, sub model,
    client quota and offset resets (broker/lite.py)."""
    # kept and answered as Apache's SubscriptionGroupConfig carries them (mqadmin updateSubGroup / getConsumerConfig)
    consume_from_min_enable: bool = True
    broker_id: int = 0
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15

    @property
    def lite_bind_topic(self) -> str:
        return self.attributes.get(LITE_BIND_TOPIC, "")

    @property
    def lite_client_quota(self) -> int:
        return int(self.attributes.get(LITE_CLIENT_QUOTA, LITE_CLIENT_QUOTA_DEFAULT))

    @property
    def lite_exclusive(self) -> bool:
        """``lite.sub.model=Exclusive``: one client of the group per lite topic (broker/lite.py)."""
        return self.attributes.get(LITE_SUB_MODEL) == "Exclusive"

    @property
    def reset_offset_exclusive(self) -> bool:
        return self.attributes.get(LITE_RESET_OFFSET_EXCLUSIVE, "").lower() == "true"

    @property
    def reset_offset_unsubscribe(self) -> bool:
        return self.attributes.get(LITE_RESET_OFFSET_UNSUBSCRIBE, "").lower() == "true"


class GroupManager:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        raw = load_json(self.path, {"groups": {}})
        self.groups: dict[str, GroupConfig] = {n: GroupConfig(**c) for n, c in raw.get("groups", {}).items()}
        self.data_version = (int(time.time() * 1000), 0)
        """(timestamp ms, counter) of the last change, as Apache's DataVersion (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""

    def _changed(self) -> None:
        self.data_version = (int(time.time() * 1000), self.data_version[1] + 1)
        self._save()

    def _save(self) -> None:
        save_json(self.path, {"groups": {n: asdict(c) for n, c in self.groups.items()}})

    def get(self, name: str) -> GroupConfig | None:
        return self.groups.get(name)

    def all(self) -> list[GroupConfig]:
        return [self.groups[n] for n in sorted(self.groups)]

    on_created: Callable[[str, float, bool], None] | None = None
    """Called with (group, elapsed ms, ok) after an attempt to create a group (the broker's metrics)."""

    def update(self, cfg: GroupConfig) -> GroupConfig:
        if cfg.name in self.groups or self.on_created is None:
            return self._update(cfg)
        started, ok = time.perf_counter(), False
        try:
            out = self._update(cfg)
            ok = True
            return out
        finally:
            self.on_created(cfg.name, (time.perf_counter() - started) * 1000, ok)

    def _update(self, cfg: GroupConfig) -> GroupConfig:
        problem = group_name_problem(cfg.name)
        if problem:
            raise ValueError(problem)
        if cfg.retry_max_times < 0:
            raise ValueError("retryMaxTimes must not be negative")
        for key, value in cfg.attributes.items():
            if problem := attribute_problem(key, value):
                raise ValueError(problem)
        old = self.groups.get(cfg.name)
        self.groups[cfg.name] = cfg
        self._changed()
        log.info("consumer group %s %s: orderly=%s retryMaxTimes=%d groupRetryPolicy=%s attributes=%s", cfg.name,
                 "updated" if old else "created", cfg.consume_message_orderly, cfg.retry_max_times,
                 cfg.retry_policy.get("type") if cfg.retry_policy else "default", cfg.attributes or "{}")
        return cfg

    def create_if_absent(self, name: str) -> GroupConfig:
        cfg = self.groups.get(name)
        return cfg if cfg is not None else self.update(GroupConfig(name))

    def delete(self, name: str) -> bool:
        if self.groups.pop(name, None) is None:
            return False
        self._changed()
        log.info("consumer group %s deleted", name)
        return True
