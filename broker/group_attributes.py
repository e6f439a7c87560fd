"""Consumer-group attributes as Apache RocketMQ 5.5.0 keeps them (SubscriptionGroupAttributes, AttributeUtil).

Why a module of its own: both front doors change a group's attributes (Apache's ``mqadmin updateSubGroup
--attributes +k=v,-k`` over remoting, ``rocketscope admin updateSubGroup -a`` over the admin service), and
Apache's rules are not a plain replacement: a request names *changes* (``+key`` adds or updates, ``-key``
deletes) applied to the group's current attributes, so an update that names none keeps a lite group's
``lite.bind.topic``.  A new group may only add.  Every key must be one Apache 5.5.0 knows and every value must
pass its attribute's check; the texts of the refusals are Apache's (read from the 5.5.0 jars), which its
remoting answers as SYSTEM_ERROR with the exception's text (docs/COMPATIBILITY.md P9).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

LONG_MAX = 2**63 - 1
_LONG = re.compile(r"^[+-]?[0-9]+$")


class AttributeRefused(ValueError):
    """A refused attribute change; the message is Apache's RuntimeException text."""


@dataclass(frozen=True)
class Attribute:
    name: str
    default: str
    verify: Callable[[str], None]


def _long_range(lo: int, hi: int) -> Callable[[str], None]:
    def verify(value: str) -> None:
        if not _LONG.match(value) or not -LONG_MAX - 1 <= int(value) <= LONG_MAX:
            raise AttributeRefused(f'For input string: "{value}"')  # Long.parseLong's NumberFormatException
        n = int(value)
        if not lo <= n <= hi:
            raise AttributeRefused(f"value is not in range({lo}, {hi})")
    return verify


def _enum(*universe: str) -> Callable[[str], None]:
    def verify(value: str) -> None:
        if value not in universe:
            raise AttributeRefused(f"value is not in set: [{', '.join(universe)}]")
    return verify


def _boolean(value: str) -> None:
    if value.lower() not in ("true", "false"):
        raise AttributeRefused("boolean attribute format is wrong.")


def _any(value: str) -> None:
    return None


LITE_BIND_TOPIC = "lite.bind.topic"
LITE_SUB_MODEL = "lite.sub.model"
LITE_CLIENT_QUOTA = "lite.sub.client.quota"
LITE_RESET_OFFSET_EXCLUSIVE = "lite.sub.reset.offset.exclusive"
LITE_RESET_OFFSET_UNSUBSCRIBE = "lite.sub.reset.offset.unsubscribe"
LITE_MAX_EVENT_COUNT = "lite.sub.client.max.event.cnt"
LITE_WILDCARD = "lite.sub.wildcard"
PRIORITY_FACTOR = "priority.factor"
LITE_SUB_MODELS = ("Shared", "Exclusive")  # the order Apache's refusal prints them in
LITE_CLIENT_QUOTA_DEFAULT = 2000

# Apache 5.5.0's SubscriptionGroupAttributes.ALL (every one changeable); default values as there
ATTRIBUTES: dict[str, Attribute] = {a.name: a for a in (
    Attribute(PRIORITY_FACTOR, "100", _long_range(0, 100)),
    Attribute(LITE_BIND_TOPIC, "", _any),
    Attribute(LITE_SUB_MODEL, "Shared", _enum(*LITE_SUB_MODELS)),
    Attribute(LITE_RESET_OFFSET_EXCLUSIVE, "false", _boolean),
    Attribute(LITE_RESET_OFFSET_UNSUBSCRIBE, "false", _boolean),
    Attribute(LITE_CLIENT_QUOTA, str(LITE_CLIENT_QUOTA_DEFAULT), _long_range(-1, LONG_MAX)),
    Attribute(LITE_MAX_EVENT_COUNT, "400", _long_range(10, LONG_MAX)),
    Attribute(LITE_WILDCARD, "", _any),
)}


def verify(key: str, value: str) -> None:
    """Apache's check of one stored attribute: an unknown key or a value its attribute refuses."""
    attr = ATTRIBUTES.get(key)
    if attr is None:
        raise AttributeRefused(f"unsupported key: {key}")
    attr.verify(value)


def alter(create: bool, current: Mapping[str, str], requested: Mapping[str, str]) -> dict[str, str]:
    """The group's attributes after ``requested`` (``+key``: add or update, ``-key``: delete) is applied to
    ``current``, by Apache's AttributeUtil.alterCurrentAttributes: a new group (``create``) may only add; a
    key without a sign, or a sign without a key, is refused, as is deleting a key the group does not have."""
    add: dict[str, str] = {}
    update: dict[str, str] = {}
    delete: set[str] = set()
    seen: set[str] = set()
    for key, value in requested.items():
        real = key[1:]
        if not real or "+" in real or "-" in real:
            raise AttributeRefused("kv string format wrong.")
        if real in seen:
            raise AttributeRefused(f"alter duplication key. key: {real}")
        seen.add(real)
        if create:
            if not key.startswith("+"):
                raise AttributeRefused(f"only add attribute is supported while creating topic. key: {real}")
            add[real] = value
        elif key.startswith("+"):
            (update if real in current else add)[real] = value
        elif key.startswith("-"):
            if real not in current:
                raise AttributeRefused(f"attempt to delete a nonexistent key: {real}")
            delete.add(real)
        else:
            raise AttributeRefused(f"wrong format key: {real}")
    for k, v in (add | update).items():
        verify(k, v)
    for k in delete:
        if k not in ATTRIBUTES:
            raise AttributeRefused(f"unsupported key: {k}")
    out = {**current, **add, **update}
    for k in delete:
        out.pop(k, None)
    return out


def signed(requested: Mapping[str, str]) -> dict[str, str]:
    """``rocketscope admin``'s attributes: a key without a sign adds (``k=v`` is ``+k=v``); signed keys as given."""
    return {k if k[:1] in "+-" else f"+{k}": v for k, v in requested.items()}
