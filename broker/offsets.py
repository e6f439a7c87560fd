"""Committed consumer offsets per group, topic and queue, persisted periodically.

A committed offset means "everything below has been acknowledged".  It is flushed every
``consumerOffsetFlushInterval`` and at shutdown; after a crash consumers resume from the
last flushed value, so a few messages may be delivered again (at-least-once), never lost.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from .persistence import load_json, save_json

log = logging.getLogger(__name__)

Key = tuple[str, str, int]  # group, topic, queue id


class OffsetManager:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        raw = load_json(self.path, {"offsets": []})
        self.offsets: dict[Key, int] = {(g, t, int(q)): int(o) for g, t, q, o in raw.get("offsets", [])}
        self.dirty = False

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get((group, topic, queue_id))

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = (group, topic, queue_id)
        if self.offsets.get(key) != offset:
            self.offsets[key] = offset
            self.dirty = True

    def groups(self) -> set[str]:
        return {g for g, _, _ in self.offsets}

    def of_group(self, group: str) -> dict[tuple[str, int], int]:
        return {(t, q): o for (g, t, q), o in self.offsets.items() if g == group}

    def delete_group(self, group: str) -> None:
        for key in [k for k in self.offsets if k[0] == group]:
            del self.offsets[key]
        self.dirty = True

    def flush(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        save_json(self.path, {"offsets": [[g, t, q, o] for (g, t, q), o in sorted(self.offsets.items())]})

    async def flush_loop(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.flush()
            except OSError as exc:
                log.error("cannot persist consumer offsets: %s", exc)
