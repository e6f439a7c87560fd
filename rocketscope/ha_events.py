"""Replication events: the structured record every HA layer emits (docs/STORAGE.md, docs/TRACE.md).

One schema serves DLedger, Master/Slave and controller mode so that the Spark join,
the trace lookup and the dashboards read a single shape.  Events are written as JSON
message bodies to the system topic ``RMQ_SYS_HA_EVENTS`` (one event per message, the
message KEYS hold ``<group>`` and ``<group>#<type>``), and mirrored in metrics.

Offsets are commit-log physical byte offsets.  ``replica_ack.offset`` and
``commit_advanced.offset`` are *end-exclusive*: the replica (or the quorum) holds every
byte below it.  Replication always moves whole records, so an ack offset is always a
record boundary: a message stored at physical offset ``p`` is held by a replica as soon
as that replica acks an offset ``> p``.  This is what lets the Spark job as-of join a
message to the first ack past its offset without knowing the record's stored size.

``replica_ack`` and ``commit_advanced`` come once per round trip, so they are throttled
(broker/ha/event_log.py): at most one event per interval, but no advance is lost.  The
event written at the end of an interval carries, in ``steps``, the ``(offset, ts)`` of every
earlier advance of that interval that it folds in, oldest first; its own ``offset`` and
``ts`` are the newest.  ``expand()`` turns such an event back into one event per advance, so
a reader joining a message to "the first ack past its offset" gets the time that ack really
happened, not the end of the interval (an upper bound off by up to the interval).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

ROLE_CHANGE = "role_change"
ELECTION_STARTED = "election_started"
ELECTION_WON = "election_won"
ELECTION_LOST = "election_lost"
LEADER_ELECTED = "leader_elected"
MASTER_ELECTED = "master_elected"
SYNC_STATE_SET_CHANGED = "sync_state_set_changed"
REPLICA_ACK = "replica_ack"
COMMIT_ADVANCED = "commit_advanced"
TRUNCATION = "truncation"

EVENT_TYPES = (
    ROLE_CHANGE,
    ELECTION_STARTED,
    ELECTION_WON,
    ELECTION_LOST,
    LEADER_ELECTED,
    MASTER_ELECTED,
    SYNC_STATE_SET_CHANGED,
    REPLICA_ACK,
    COMMIT_ADVANCED,
    TRUNCATION,
)
"""Every event type, in one fixed order (the Spark and DuckDB jobs build their filters from it)."""


class HaEventError(ValueError):
    """A replication event that cannot be decoded; the message names the field."""


@dataclass(frozen=True)
class HaEvent:
    """One replication event.

    ``address`` is the emitting node's client-facing ``ip:port`` (the store host that
    Pub trace records and offsetMsgIds carry), so consumers of the events can map a
    message's store host to its broker group.  ``term`` is the DLedger/Raft term and
    ``epoch`` the controller-mode master epoch; the one that does not apply is -1.
    Type-specific fields keep their empty default when they do not apply to the type.
    """

    type: str
    cluster: str
    group: str
    node: str
    ts: int
    address: str = ""
    term: int = -1
    epoch: int = -1
    replica: str = ""
    offset: int = -1
    from_offset: int = -1
    to_offset: int = -1
    role: str = ""
    leader: str = ""
    members: tuple[str, ...] = field(default_factory=tuple)
    steps: tuple[tuple[int, int], ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        """The event's message body; computed once (an event is spooled, re-spooled and appended).

        Built from the fields directly rather than with ``dataclasses.asdict``, which deep-copies
        every ``steps`` pair and was a visible share of a DLedger leader's CPU (docs/BENCHMARKS.md,
        issue 20); the text is the same.
        """
        cached = self.__dict__.get("_json")
        if cached is not None:
            return cached
        data = {name: getattr(self, name) for name in _FIELD_KINDS}
        data["members"] = list(self.members)
        if self.steps:
            data["steps"] = [list(step) for step in self.steps]
        else:
            del data["steps"]  # most events have none: keep their bodies as before
        text = json.dumps(data, separators=(",", ":"), sort_keys=True)
        self.__dict__["_json"] = text  # frozen: not through __setattr__; not a field (eq, hash, replace ignore it)
        return text

    def expand(self) -> list[HaEvent]:
        """One event per advance this event stands for: its folded ``steps`` (oldest first), then itself."""
        if not self.steps:
            return [self]
        earlier = [replace(self, offset=offset, ts=ts, steps=()) for offset, ts in self.steps]
        return [*earlier, replace(self, steps=())]

    @classmethod
    def from_json(cls, text: str | bytes) -> HaEvent:
        try:
            data: Any = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HaEventError(f"replication event body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise HaEventError("replication event body must be a JSON object")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HaEvent:
        kwargs: dict[str, Any] = {}
        for name, kind in _FIELD_KINDS.items():
            if name not in data:
                if name in _REQUIRED:
                    raise HaEventError(f"replication event field '{name}' is missing")
                continue
            value = data[name]
            if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
                raise HaEventError(f"replication event field '{name}' must be an integer, got {value!r}")
            if kind is str and not isinstance(value, str):
                raise HaEventError(f"replication event field '{name}' must be a string, got {value!r}")
            if kind is tuple and name == "steps":
                if not isinstance(value, list) or not all(
                        isinstance(v, list) and len(v) == 2 and all(type(x) is int for x in v) for v in value):
                    raise HaEventError(f"replication event field '{name}' must be a list of [offset, ts] pairs")
                value = tuple((v[0], v[1]) for v in value)
            elif kind is tuple:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise HaEventError(f"replication event field '{name}' must be a list of strings")
                value = tuple(value)
            kwargs[name] = value
        if kwargs["type"] not in EVENT_TYPES:
            raise HaEventError(f"replication event field 'type' has unknown value {kwargs['type']!r}")
        return cls(**kwargs)

    def keys(self) -> list[str]:
        """Index keys of the event message: lookup by group, and by group and type."""
        return [self.group, f"{self.group}#{self.type}"]


_REQUIRED = ("type", "cluster", "group", "node", "ts")
_FIELD_KINDS: dict[str, type] = {
    "type": str,
    "cluster": str,
    "group": str,
    "node": str,
    "ts": int,
    "address": str,
    "term": int,
    "epoch": int,
    "replica": str,
    "offset": int,
    "from_offset": int,
    "to_offset": int,
    "role": str,
    "leader": str,
    "members": tuple,
    "steps": tuple,
}
