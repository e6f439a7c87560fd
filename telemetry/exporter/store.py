"""The exporter's memory: every node's series, kept apart, cumulative, expiring.

Why this shape (each point answers a known rocketmq-exporter bug):
- series are keyed by node (cluster, node_type, node_id attributes) and by their full label
  set, and a push *updates* its node's series: a second broker no longer replaces the first;
- delta sums and histograms are added up into cumulative ones, so Prometheus' ``rate()``
  and ``histogram_quantile()`` work whatever temporality a node pushes;
- a node that stops pushing is dropped after 3 of its push intervals (learnt from the
  collection timestamps it sends, which stay equal across the batches of one split export;
  the longest of the last few intervals, so that a manual flush right after a periodic push
  does not shrink it), never sooner than ``min_expiry``; or after a fixed time when
  configured or before its interval is known. A series the node no longer sends (a deleted
  topic's gauge) expires the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..otlp import CUMULATIVE, DELTA, Point

log = logging.getLogger(__name__)

NodeKey = tuple[str, str, str]
MIN_EXPIRY_S = 60.0
"""A node's last push stays at least this long: long enough for one scrape at Prometheus' default
1-minute interval.  A node's learnt interval can be tiny when its last pushes were flushes fractions
of a second apart (a client's or broker's shutdown push right after a flush): with 5 s, a client's
final trace-drop counters left the broker's /metrics before a test, or a 15 s scraper, read them."""


def _hashable(value: Any) -> Any:
    return value if not isinstance(value, list) else tuple(value)


@dataclass(slots=True)
class Series:
    point: Point  # cumulative value (or last gauge value) with the node's attributes
    seen: float  # monotonic clock of the last update
    prev_value: float | None = None  # previous cumulative value and its time, for legacy *_tps
    prev_time_ns: int = 0

    def rate(self) -> float | None:
        """Per-second increase between the last two collections of a counter."""
        if self.prev_value is None or self.point.time_ns <= self.prev_time_ns:
            return None
        increase = self.point.value - self.prev_value
        if increase < 0:  # counter reset
            return None
        return increase / ((self.point.time_ns - self.prev_time_ns) / 1e9)


@dataclass
class Node:
    key: NodeKey
    peer: str
    seen: float
    last_collection_ns: int = 0
    recent_intervals: deque[float] = field(default_factory=lambda: deque(maxlen=4))
    series: dict[tuple[str, tuple[tuple[str, Any], ...]], Series] = field(default_factory=dict)

    @property
    def interval_s(self) -> float | None:
        return max(self.recent_intervals) if self.recent_intervals else None


def node_key(attributes: dict[str, Any], peer: str) -> NodeKey:
    """Identity of the pushing node; a point without node_id is keyed by the peer address so
    anonymous pushers still stay apart."""
    node_id = attributes.get("node_id")
    return (str(attributes.get("cluster", "")), str(attributes.get("node_type", "")),
            str(node_id) if node_id not in (None, "") else f"peer:{peer}")


class SeriesStore:
    """Thread-safe: gRPC and HTTP receivers ingest, the scrape and the sweeper read."""

    def __init__(self, expire_after: float | None = None, expire_intervals: float = 3.0,
                 default_expiry: float = 300.0, min_expiry: float = MIN_EXPIRY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.expire_after = expire_after
        self.min_expiry = min_expiry
        self.expire_intervals = expire_intervals
        self.default_expiry = default_expiry
        self._clock = clock
        self._nodes: dict[NodeKey, Node] = {}
        self._lock = threading.Lock()

    # ---- writing
    def ingest(self, pts: Iterable[Point], peer: str = "") -> int:
        now = self._clock()
        count = 0
        with self._lock:
            for point in pts:
                key = node_key(point.attributes, peer)
                node = self._nodes.get(key)
                if node is None:
                    node = self._nodes[key] = Node(key, peer, now)
                    log.info("exporter: node appeared: cluster=%s node_type=%s node_id=%s from %s", *key, peer)
                node.seen = now
                self._note_collection(node, point.time_ns)
                self._update(node, point, now)
                count += 1
        return count

    @staticmethod
    def _note_collection(node: Node, time_ns: int) -> None:
        if time_ns > node.last_collection_ns:
            if node.last_collection_ns:
                node.recent_intervals.append((time_ns - node.last_collection_ns) / 1e9)
            node.last_collection_ns = time_ns

    @staticmethod
    def _update(node: Node, point: Point, now: float) -> None:
        skey = (point.name, tuple(sorted((k, _hashable(v)) for k, v in point.attributes.items())))
        old = node.series.get(skey)
        if old is None or old.point.kind != point.kind:
            node.series[skey] = Series(point, now)
            return
        old.seen = now
        if point.temporality == DELTA:
            point = _add(old.point, point)
        if point.kind == "counter" and point.time_ns > old.point.time_ns:
            old.prev_value, old.prev_time_ns = old.point.value, old.point.time_ns
        old.point = point

    # ---- reading
    def expiry_of(self, node: Node) -> float:
        if self.expire_after is not None:
            return self.expire_after
        interval = node.interval_s
        if interval:
            return max(self.expire_intervals * interval, self.min_expiry)
        return self.default_expiry

    def expire(self) -> list[NodeKey]:
        """Drop nodes (and series) not updated within their expiry; returns dropped nodes."""
        now = self._clock()
        gone: list[NodeKey] = []
        with self._lock:
            for key, node in list(self._nodes.items()):
                horizon = self.expiry_of(node)
                if now - node.seen > horizon:
                    del self._nodes[key]
                    gone.append(key)
                    log.info("exporter: node expired: cluster=%s node_type=%s node_id=%s (no push for %.1f s)",
                             *key, now - node.seen)
                    continue
                for skey, series in list(node.series.items()):
                    if now - series.seen > horizon:
                        del node.series[skey]
        return gone

    def nodes(self) -> list[NodeKey]:
        with self._lock:
            return list(self._nodes)

    def intervals(self) -> dict[NodeKey, float | None]:
        """Each node's learnt push interval in seconds (None until two collections arrived)."""
        with self._lock:
            return {key: node.interval_s for key, node in self._nodes.items()}

    def snapshot(self) -> list[tuple[NodeKey, Series]]:
        """Copies of every live series (points are replaced, never mutated, so sharing is safe)."""
        self.expire()
        with self._lock:
            return [(key, Series(s.point, s.seen, s.prev_value, s.prev_time_ns))
                    for key, node in self._nodes.items() for s in node.series.values()]


def _add(old: Point, new: Point) -> Point:
    """Delta ``new`` on top of cumulative ``old`` (bucket layout change: start again)."""
    if new.kind == "histogram":
        if old.bounds != new.bounds or len(old.counts) != len(new.counts):
            return _as_cumulative(new)
        counts = tuple(a + b for a, b in zip(old.counts, new.counts, strict=True))
        return Point(new.name, new.description, new.unit, new.kind, CUMULATIVE, new.attributes, old.start_ns,
                     new.time_ns, bounds=new.bounds, counts=counts, total=old.total + new.total,
                     count=old.count + new.count)
    return Point(new.name, new.description, new.unit, new.kind, CUMULATIVE, new.attributes, old.start_ns,
                 new.time_ns, value=old.value + new.value)


def _as_cumulative(point: Point) -> Point:
    point.temporality = CUMULATIVE
    return point
