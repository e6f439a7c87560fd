"""Retention: delete commit-log segments by age (fileReservedTime) and by disk ratio.

Age-based deletion happens only in the hours listed by ``deleteWhen`` (RocketMQ's
"04" default: at 4 a.m., when traffic is low); deletion because the disk is fuller
than ``diskMaxUsedSpaceRatio`` happens at any time.  The segment being written is never
deleted.

A replicated log adds a floor (``floor``, the store's ``StoreHooks.retention_floor``): a segment
goes only when it lies wholly below the offset every replica has applied (DLedger mode,
broker/dledger/retention.py), however old it is or however full the disk; ``on_deleted``
(``StoreHooks.on_retention_deleted``) then lets the replication layer drop its own prefix (the
Raft index).  A floor that holds an expired segment back is logged once per value.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from .segments import SegmentedLog

log = logging.getLogger(__name__)


@dataclass
class RetentionPolicy:
    file_reserved_hours: float = 72.0
    delete_when: str = "04"
    disk_max_used_ratio: float = 0.75
    interval_s: float = 10.0
    max_deletes_per_run: int = 10
    _held_at: int = -1

    def hours(self) -> set[int]:
        out = set()
        for part in self.delete_when.split(";"):
            part = part.strip()
            if part.isdigit():
                out.add(int(part))
        return out

    def select(self, seglog: SegmentedLog, disk_ratio: Callable[[], float], now: float | None = None,
               floor: Callable[[], int] | None = None, on_deleted: Callable[[int], None] | None = None) -> int:
        """Delete what the policy says may go; return the number of segments deleted.  ``floor()``: the offset
        below which a replicated log may lose segments; ``on_deleted(min_offset)`` runs after deletions."""
        now = time.time() if now is None else now
        in_window = time.localtime(now).tm_hour in self.hours()
        deleted = 0
        while len(seglog.segments) > 1 and deleted < self.max_deletes_per_run:
            oldest = seglog.segments[0]
            age_h = (now - os.stat(oldest.path).st_mtime) / 3600.0
            expired = in_window and age_h >= self.file_reserved_hours
            over_quota = disk_ratio() > self.disk_max_used_ratio
            if not (expired or over_quota):
                break
            if floor is not None:
                held = floor()
                if seglog.segments[1].start > held:
                    if held != self._held_at:
                        self._held_at = held
                        log.info("retention keeps %s (%s): not every replica has applied past it (floor %d)",
                                 oldest.path, "expired" if expired else "disk over quota", held)
                    break
            log.info("retention deletes %s (age %.1f h, %s)", oldest.path, age_h,
                     "expired" if expired else "disk over quota")
            seglog.delete_segment(oldest)
            deleted += 1
        if deleted and on_deleted is not None:
            on_deleted(seglog.min_offset)
        return deleted
