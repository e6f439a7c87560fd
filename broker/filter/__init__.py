"""Consumer-side message filters: RocketMQ's TAG expressions and SQL92 expressions, one type for every consume path.

A filter is ``None`` (every message), a set of tags (``TagA || TagB``) or a :class:`SqlFilter`.
Tag sets stay plain sets so the store keeps skipping non-matching consume-queue entries by their
tag hash without reading the commit log; a SQL filter needs the message's properties, so the store
is asked for every message and :func:`accepts` decides.  A message a filter rejects is consumed as
far as offsets go (RocketMQ moves the consumer's offset past filtered messages on every path: a
pull answers NO_MATCHED_MESSAGE with the next offset, POP commits past them), so filtered messages
never count as lag.

SQL92 needs the broker key ``enablePropertyFilter`` (RocketMQ's default: false), as in RocketMQ.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from enum import StrEnum
from typing import Protocol, TypeVar

from .sql92 import SqlParseError, compile_sql92

__all__ = [
    "SQL92",
    "TAG",
    "FilterProblem",
    "FilterRefused",
    "MessageFilter",
    "SqlFilter",
    "accepts",
    "compile_filter",
    "keep",
    "parse_tag_expression",
    "store_tags",
]

TAG, SQL92 = "TAG", "SQL92"


class _HasProperties(Protocol):
    properties: dict[str, str]

    @property
    def tags(self) -> str: ...


M = TypeVar("M", bound=_HasProperties)


class SqlFilter:
    """A compiled SQL92 subscription; matches a message by its stored properties (TAGS included)."""

    __slots__ = ("_matches", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._matches = compile_sql92(text).matches

    def accepts(self, msg: _HasProperties) -> bool:
        return self._matches(msg.properties)

    def __repr__(self) -> str:
        return f"SqlFilter({self.text!r})"


MessageFilter = set[str] | frozenset[str] | SqlFilter | None


class FilterProblem(StrEnum):
    """Why a subscription is refused; each front door answers each with its protocol's code (the gRPC door in
    broker/validation.py, the remoting door in broker/remoting/broker_handlers.py and client_config.py)."""

    DISABLED = "disabled"  # SQL92 while enablePropertyFilter is false
    EMPTY = "empty"  # SQL92 with no text
    INVALID = "invalid"  # not a valid SQL92 expression
    TYPE = "type"  # an expression type other than TAG and SQL92


class FilterRefused(ValueError):
    """A subscription the broker cannot serve; ``kind`` (a :class:`FilterProblem`) says why."""

    def __init__(self, kind: FilterProblem, message: str) -> None:
        super().__init__(message)
        self.kind = FilterProblem(kind)
        self.message = message


def parse_tag_expression(text: str) -> set[str] | None:
    """RocketMQ's tag expression: ``*`` or blank is every tag, ``a || b`` the tags a and b."""
    text = (text or "").strip()
    if not text or text == "*":
        return None
    return {t.strip() for t in text.split("||") if t.strip()} or None


@functools.lru_cache(maxsize=1024)
def compile_filter(expression_type: str, text: str, property_filter_enabled: bool) -> MessageFilter:
    """The filter of a subscription, as RocketMQ's FilterAPI and the broker's checks build it.

    ``expression_type`` is RocketMQ's ExpressionType name (TAG or SQL92; blank is TAG).  Raises
    FilterRefused where RocketMQ refuses the subscription.
    """
    kind = (expression_type or TAG).upper()
    if kind == TAG:
        tags = parse_tag_expression(text)
        return None if tags is None else frozenset(tags)  # cached: shared by every caller, so immutable
    if kind != SQL92:
        raise FilterRefused(FilterProblem.TYPE, f"expression type {expression_type!r} is not TAG or SQL92")
    if not property_filter_enabled:
        raise FilterRefused(FilterProblem.DISABLED, "The broker does not support consumer to filter message by SQL92 "
                                        "(enablePropertyFilter is false)")
    if not text or not text.strip():
        raise FilterRefused(FilterProblem.EMPTY, "Expression can't be null! SQL92")
    try:
        return SqlFilter(text)
    except SqlParseError as exc:
        raise FilterRefused(FilterProblem.INVALID, f"SQL92 expression {text!r} is invalid: {exc}") from None


def store_tags(f: MessageFilter) -> set[str] | frozenset[str] | None:
    """What the store's own tag filter takes: the tag set, or None (every message) for SQL."""
    return None if isinstance(f, SqlFilter) else f


def accepts(f: MessageFilter, msg: _HasProperties) -> bool:
    if f is None:
        return True
    if isinstance(f, SqlFilter):
        return f.accepts(msg)
    return msg.tags in f


def keep(f: MessageFilter, msgs: Iterable[M]) -> list[M]:
    """The messages ``f`` accepts (for paths where the store already applied the tag part)."""
    if isinstance(f, SqlFilter):
        return [m for m in msgs if f.accepts(m)]
    return list(msgs)

