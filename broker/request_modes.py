"""Per topic and consumer group: whether Apache's remoting push consumers pull or pop (SET_MESSAGE_REQUEST_MODE).

Apache RocketMQ 5's broker keeps what ``mqadmin setConsumeMode`` set for each topic@group and
answers QUERY_ASSIGNMENT with it; a push consumer with ``setClientRebalance(false)`` then pulls
(PULL) or pops (POP) the queues it is given.  The modes survive a restart: they are kept in
``<storePathRootDir>/config/messageRequestMode.json`` in the layout Apache's
MessageRequestModeManager writes (``messageRequestModeMap``: topic -> group -> the request body),
so an operator reads the same file on both.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .persistence import load_json, save_json

log = logging.getLogger(__name__)

PULL, POP = "PULL", "POP"
MODES = (PULL, POP)


class ModeError(ValueError):
    """A SetMessageRequestModeRequestBody that cannot be stored; the message names the field."""


@dataclass(frozen=True)
class RequestMode:
    topic: str
    group: str
    mode: str = PULL
    pop_share_queue_num: int = 0

    def body(self) -> dict[str, Any]:
        """Apache's SetMessageRequestModeRequestBody as fastjson writes it."""
        return {"consumerGroup": self.group, "mode": self.mode, "popShareQueueNum": self.pop_share_queue_num,
                "topic": self.topic}

    @classmethod
    def parse(cls, data: Any) -> RequestMode:
        if not isinstance(data, dict):
            raise ModeError("SetMessageRequestModeRequestBody is not a JSON object")
        topic, group, mode = data.get("topic"), data.get("consumerGroup"), data.get("mode")
        if not isinstance(topic, str) or not topic:
            raise ModeError("SetMessageRequestModeRequestBody.topic is missing")
        if not isinstance(group, str) or not group:
            raise ModeError("SetMessageRequestModeRequestBody.consumerGroup is missing")
        if mode not in MODES:
            raise ModeError(f"SetMessageRequestModeRequestBody.mode {str(mode)[:40]!r} is not PULL or POP")
        share = data.get("popShareQueueNum", 0)
        if isinstance(share, bool) or not isinstance(share, int):
            raise ModeError("SetMessageRequestModeRequestBody.popShareQueueNum is not a number")
        return cls(topic, group, str(mode), share)


class RequestModes:
    """The modes set on this broker, persisted on every change (changes are rare: an operator's command)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        raw = load_json(self.path, {})
        table = raw.get("messageRequestModeMap") if isinstance(raw, dict) else None
        self.modes: dict[tuple[str, str], RequestMode] = {}
        for groups in (table or {}).values():
            for body in (groups or {}).values():
                try:
                    m = RequestMode.parse(body)
                except ModeError as exc:
                    log.error("%s: entry skipped: %s", self.path, exc)
                    continue
                self.modes[(m.topic, m.group)] = m

    def get(self, topic: str, group: str) -> RequestMode | None:
        return self.modes.get((topic, group))

    def set(self, m: RequestMode) -> None:
        self.modes[(m.topic, m.group)] = m
        self._save()
        log.info("consume mode of %s@%s set to %s (popShareQueueNum %d)", m.topic, m.group, m.mode,
                 m.pop_share_queue_num)

    def all(self) -> list[RequestMode]:
        return [self.modes[k] for k in sorted(self.modes)]

    def replace(self, modes: list[RequestMode]) -> bool:
        """Make the table ``modes`` (a slave copying its master's); True when that changed it."""
        new = {(m.topic, m.group): m for m in modes}
        if new == self.modes:
            return False
        self.modes = new
        self._save()
        log.info("consume modes copied from the master: %d topic@group entries", len(new))
        return True

    def encode(self) -> dict[str, Any]:
        """The table in Apache's MessageRequestModeManager layout: the file's content, and the body of
        GET_ALL_MESSAGE_REQUEST_MODE (402), which Apache's slaves ask their master for."""
        table: dict[str, dict[str, Any]] = {}
        for (topic, group), mode in sorted(self.modes.items()):
            table.setdefault(topic, {})[group] = mode.body()
        return {"messageRequestModeMap": table}

    def _save(self) -> None:
        save_json(self.path, self.encode())

    def pops(self, group: str) -> bool:
        """Whether some topic of ``group`` is in POP mode here."""
        return any(m.mode == POP for (_, g), m in self.modes.items() if g == group)
