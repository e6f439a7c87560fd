"""The broker's statistics counters as Apache RocketMQ names them (BrokerStatsManager), for mqadmin statsAll.

Apache's ``mqadmin statsAll`` asks each master VIEW_BROKER_STATS_DATA (code 315) for
``TOPIC_PUT_NUMS <topic>`` and ``GROUP_GET_NUMS <topic>@<group>`` and prints the minute's TPS and
the day's sum. These counters are always on (the OpenTelemetry ones in broker/metrics.py follow
the telemetry switch) and count what the broker really stored and handed out: puts that the store
accepted (retry and DLQ topics under their own names, timer messages under their real topic), and
messages a group received over gRPC (receive) or pulled over remoting or gRPC (pull), under the
topic they were read from (a retry under ``%RETRY%<group>``, as Apache counts it).

Each item keeps counts in time buckets: 10 s buckets for the last minute, minute buckets for the
last hour and hour buckets for the last day, so memory per item is bounded (at most 6 + 60 + 24
buckets) whatever the traffic. A window's ``sum`` is what was counted in its last 60 s / 60 min /
24 h and ``tps`` is that sum over the window's length (Apache divides by the span between its
samples, which is shorter than the window while the broker is young; see docs/ADMIN.md).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .pop import Delivery
    from .store.message_store import PutResult
    from .store.record import StoredMessage

TOPIC_PUT_NUMS, TOPIC_PUT_SIZE = "TOPIC_PUT_NUMS", "TOPIC_PUT_SIZE"
GROUP_GET_NUMS, GROUP_GET_SIZE = "GROUP_GET_NUMS", "GROUP_GET_SIZE"
BROKER_PUT_NUMS, BROKER_GET_NUMS = "BROKER_PUT_NUMS", "BROKER_GET_NUMS"
STATS_NAMES = (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE, BROKER_PUT_NUMS, BROKER_GET_NUMS)

# (bucket width in seconds, window length in seconds) of Apache's three snapshots
WINDOWS = {"statsMinute": (10, 60), "statsHour": (60, 3600), "statsDay": (3600, 86400)}
MAX_ITEMS = 100_000  # keys per stats name; beyond it the least recently added item is dropped


class StatsItem:
    """Counts and calls of one key, in buckets per window: ``deque[[bucket_index, value, times]]``."""

    __slots__ = ("buckets", "current", "tick")

    def __init__(self) -> None:
        self.buckets: dict[str, deque[list[int]]] = {w: deque() for w in WINDOWS}
        self.tick = -1  # the 10 s bucket of the last add: within it, every window's newest bucket is current
        self.current: tuple[list[int], ...] = ()

    def add(self, value: int, now: float) -> None:
        tick = int(now // 10)
        if tick == self.tick:  # the send path's common case: three increments
            for b in self.current:
                b[1] += value
                b[2] += 1
            return
        for window, (width, length) in WINDOWS.items():
            idx = int(now // width)
            q = self.buckets[window]
            if q and q[-1][0] == idx:
                q[-1][1] += value
                q[-1][2] += 1
            else:
                q.append([idx, value, 1])
                while q and q[0][0] <= idx - length // width:
                    q.popleft()
        self.tick = tick
        self.current = tuple(q[-1] for q in self.buckets.values())

    def snapshot(self, now: float) -> dict[str, dict[str, float | int]]:
        """Apache's BrokerStatsData: per window ``sum``, ``tps`` and ``avgpt`` (value per call)."""
        out: dict[str, dict[str, float | int]] = {}
        for window, (width, length) in WINDOWS.items():
            first = int(now // width) - length // width + 1
            total = times = 0
            for idx, value, n in self.buckets[window]:
                if idx >= first:
                    total += value
                    times += n
            out[window] = {"sum": total, "tps": total / length, "avgpt": total / times if times else 0.0}
        return out


class BrokerStats:
    """``(stats name, key) -> StatsItem``; the broker's put and get paths feed it (broker/metrics.py)."""

    def __init__(self, cluster: str, clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.clock = clock
        self.items: dict[str, dict[str, StatsItem]] = {name: {} for name in STATS_NAMES}

    def add(self, name: str, key: str, value: int, now: float) -> None:
        table = self.items[name]
        item = table.get(key)
        if item is None:
            if len(table) >= MAX_ITEMS:
                del table[next(iter(table))]
            item = table[key] = StatsItem()
        item.add(value, now)

    def get(self, name: str, key: str) -> dict[str, dict[str, float | int]] | None:
        item = self.items.get(name, {}).get(key)
        return None if item is None else item.snapshot(self.clock())

    def on_put(self, topic: str, count: int, size: int) -> None:
        now = self.clock()
        self.add(TOPIC_PUT_NUMS, topic, count, now)
        self.add(TOPIC_PUT_SIZE, topic, size, now)
        self.add(BROKER_PUT_NUMS, self.cluster, count, now)

    def on_get(self, topic: str, group: str, count: int, size: int) -> None:
        now = self.clock()
        key = f"{topic}@{group}"
        self.add(GROUP_GET_NUMS, key, count, now)
        self.add(GROUP_GET_SIZE, key, size, now)
        self.add(BROKER_GET_NUMS, self.cluster, count, now)

    def on_put_results(self, results: Iterable[PutResult], ok: object) -> None:
        """Stored messages per topic (``REAL_TOPIC`` for a timer or transaction message), one call per topic."""
        self.on_stored([res.message for res in results if res.message is not None and res.status is ok])

    def on_stored(self, messages: Iterable[StoredMessage]) -> None:
        """``on_put_results`` for messages known to be stored: per topic, one counter update each.  A run of
        one topic (a producer's singles, the common case) is counted without a dict or a call per message."""
        topic = None
        n = size = 0
        per: dict[str, list[int]] | None = None
        for m in messages:
            t = m.properties.get("REAL_TOPIC", m.topic)
            if per is None:
                if topic is None or t == topic:
                    topic = t
                    n += 1
                    size += m.size
                    continue
                per = {topic: [n, size]}
            c = per.setdefault(t, [0, 0])
            c[0] += 1
            c[1] += m.size
        if per is None:
            if topic is not None:
                self.on_put(topic, n, size)
            return
        for t, (count, total) in per.items():
            self.on_put(t, count, total)

    def on_delivered(self, group: str, deliveries: Iterable[Delivery]) -> None:
        # under the topic read, as Apache: a retry under %RETRY%<group>
        self.on_pulled(group, (d.message for d in deliveries))

    def on_pulled(self, group: str, messages: Iterable[StoredMessage]) -> None:
        for topic, (n, size) in _per_topic(messages, lambda m: m.topic).items():
            self.on_get(topic, group, n, size)


def _per_topic(messages: Iterable[StoredMessage], topic_of: Callable[[StoredMessage], str]) -> dict[str, list[int]]:
    """(messages, bytes) per topic: one counter update per topic of a batch, not per message."""
    out: dict[str, list[int]] = {}
    for m in messages:
        c = out.setdefault(topic_of(m), [0, 0])
        c[0] += 1
        c[1] += m.size
    return out
