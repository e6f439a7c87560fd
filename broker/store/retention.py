"""Retention: delete commit-log segments by age (fileReservedTime) and by disk ratio.

Age-based deletion happens only in the hours listed by ``deleteWhen`` (RocketMQ's
"04" default: at 4 a.m., when traffic is low); deletion because the disk is fuller
than ``diskMaxUsedSpaceRatio`` happens at any time.  The segment being written is never
deleted.
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

    def hours(self) -> set[int]:
        out = set()
        for part in self.delete_when.split(";"):
            part = part.strip()
            if part.isdigit():
                out.add(int(part))
        return out

    def select(self, seglog: SegmentedLog, disk_ratio: Callable[[], float], now: float | None = None) -> int:
        """Delete what the policy says may go; return the number of segments deleted."""
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
            log.info("retention deletes %s (age %.1f h, %s)", oldest.path, age_h,
                     "expired" if expired else "disk over quota")
            seglog.delete_segment(oldest)
            deleted += 1
        return deleted
