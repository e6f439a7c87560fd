"""The instruments components hold: base labels added, cardinality capped, no-ops when off.

Why wrappers rather than raw OpenTelemetry instruments:
- every data point must carry cluster/node_type/node_id (+ metricsLabel, + aggregation=delta);
  the merged attribute dict is built once per label set and cached, and counters add into a
  cached cell, so the hot path (one call per message) is a frozenset hash and a dict lookup
  (about 2 us here, against 30-40 us for the SDK's synchronous counter with these attributes);
- the cap on label sets per instrument (metricsOtelCardinalityLimit) is enforced here, so
  folding into the overflow series is visible (``otel.metric.overflow=true``, the SDK's own
  marker) and *counted* (``rocketscope_metrics_overflow_total{metric=...}``) without reaching
  into SDK internals; the SDK's own limit is set one above ours as a backstop;
- histograms are accumulated here too (bucket counts, sum, count, min, max per label set): the
  SDK's ``Histogram.record`` cost ~25 us per call with our attributes, on the send path of every
  message; PROM renders the cells directly and OTLP/LOG exports them beside the SDK's data;
- ``bind(labels)`` resolves a label set once (admission, attribute merge) so that a component
  that records the same label set over and over (per topic, per RPC method) pays an attribute
  add under a lock and nothing else;
- with metricsExporterType=DISABLE components get shared no-op objects: no dicts, no locks.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from .catalogue import Instrument, Kind

log = logging.getLogger(__name__)

OVERFLOW_ATTRIBUTE = "otel.metric.overflow"
Labels = Mapping[str, Any]
GaugeCallback = Callable[[], Iterable[tuple[float, Labels]]]


# the SDK's default explicit-bucket boundaries, for catalogue histograms that declare none
DEFAULT_BUCKETS = (0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 7500.0,
                   10000.0)


class Bound(Protocol):
    """One label set of one instrument, resolved once: ``add(n)`` or ``record(v)``."""

    def add(self, amount: float) -> None: ...

    def record(self, value: float) -> None: ...


class Recorder(Protocol):
    """What a component calls: ``add`` on counters, ``record`` on histograms, ``bind`` to resolve a
    label set once when it is used again and again."""

    def add(self, amount: float, labels: Labels | None = None) -> None: ...

    def record(self, value: float, labels: Labels | None = None) -> None: ...

    def bind(self, labels: Labels | None = None) -> Bound: ...


class NoopInstrument:
    """Returned when telemetry is disabled (or an opt-in instrument is off): does nothing."""

    __slots__ = ()

    def add(self, amount: float, labels: Labels | None = None) -> None:
        return None

    def record(self, value: float, labels: Labels | None = None) -> None:
        return None

    def bind(self, labels: Labels | None = None) -> NoopInstrument:
        return self


NOOP = NoopInstrument()


class OverflowCounter(Protocol):
    def __call__(self, metric: str, base: Mapping[str, Any], count: int) -> None: ...


class Cell:
    """One admitted series: its full attributes and, for counters, its running total.
    ``text`` caches the rendered Prometheus label text (cells live as long as the process)."""

    __slots__ = ("attrs", "overflow", "text", "value")

    def __init__(self, attrs: dict[str, Any], overflow: bool = False) -> None:
        self.attrs = attrs
        self.overflow = overflow
        self.text: str | None = None
        self.value: float = 0  # int until a float is added: RocketMQ counters are long-valued


class HistogramCell(Cell):
    """One histogram series: OTLP per-bucket counts (bucket i holds (bounds[i-1], bounds[i]], as in
    the SDK), sum and count since start, and min/max since start or, with delta temporality, since
    the last export (the exporter resets them)."""

    __slots__ = ("bounds", "count", "counts", "max", "min", "start_ns", "sum")

    def __init__(self, attrs: dict[str, Any], bounds: tuple[float, ...], overflow: bool = False) -> None:
        super().__init__(attrs, overflow)
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum: float = 0
        self.min = float("inf")
        self.max = float("-inf")
        self.start_ns = time.time_ns()

    def observe(self, value: float) -> None:
        """Caller holds the guard's lock."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value


class CardinalityGuard:
    """Admits up to ``limit`` distinct label sets for one instrument (all nodes of the process
    together, as the SDK counts them); later new sets map to the node's overflow cell."""

    def __init__(self, spec: Instrument, limit: int, on_overflow: OverflowCounter) -> None:
        self.spec = spec
        self.limit = limit
        self.lock = threading.Lock()
        self.on_overflow = on_overflow
        self._cells: dict[tuple[int, frozenset[tuple[str, Any]]], Cell] = {}
        self._overflow: dict[int, Cell] = {}
        self._allowed = frozenset(spec.labels)
        self._warned = False
        self._bounds = (spec.buckets or DEFAULT_BUCKETS) if spec.kind is Kind.HISTOGRAM else None

    def __len__(self) -> int:
        return len(self._cells)

    def _new(self, attrs: dict[str, Any], overflow: bool = False) -> Cell:
        if self._bounds is not None:
            return HistogramCell(attrs, self._bounds, overflow)
        return Cell(attrs, overflow)

    def cell(self, node: int, base: Mapping[str, Any], labels: Labels | None) -> Cell:
        """The label set's cell; a measurement landing in the overflow cell is counted."""
        cell = self.admit(node, base, labels)
        if cell.overflow:
            self.on_overflow(self.spec.name, base, 1)
        return cell

    def admit(self, node: int, base: Mapping[str, Any], labels: Labels | None) -> Cell:
        """The label set's cell, or the node's overflow cell past the limit (not counted here)."""
        key = (node, frozenset(labels.items()) if labels else frozenset())
        cell = self._cells.get(key)
        if cell is not None:
            return cell
        with self.lock:
            cell = self._cells.get(key)
            if cell is not None:
                return cell
            if len(self._cells) >= self.limit:
                overflow = self._overflow.get(node)
                if overflow is None:
                    overflow = self._overflow[node] = self._new({**base, OVERFLOW_ATTRIBUTE: True}, overflow=True)
                return overflow
            if labels:
                self._check_keys(labels)
            cell = self._cells[key] = self._new({**(labels or {}), **base})
            return cell

    def cells(self) -> list[Cell]:
        with self.lock:
            return [*self._cells.values(), *self._overflow.values()]

    def _check_keys(self, labels: Labels) -> None:
        unknown = set(labels) - self._allowed
        if unknown and not self._warned:
            self._warned = True
            log.warning("instrument %s got label keys %s that the catalogue does not declare (declared: %s)",
                        self.spec.name, sorted(unknown), ", ".join(self.spec.labels) or "none")


class CounterInstrument:
    """A counter or up-down counter of one node, pre-aggregated in process.

    Why: the SDK's synchronous ``add`` costs tens of microseconds with our seven attributes
    (it re-validates and re-hashes them on every call); here ``add`` is a dict lookup and a
    float add under a lock, and the totals reach the SDK through an observable counter at
    collection time (same OTLP Sum, same temporality handling)."""

    __slots__ = ("_base", "_guard", "_lock", "_monotonic", "_node")

    def __init__(self, guard: CardinalityGuard, node: int, base: Mapping[str, Any], monotonic: bool) -> None:
        self._guard = guard
        self._lock = guard.lock
        self._node = node
        self._base = base
        self._monotonic = monotonic

    def add(self, amount: float, labels: Labels | None = None) -> None:
        if self._monotonic and amount < 0:
            log.debug("negative add to counter %s ignored", self._guard.spec.name)
            return
        cell = self._guard.cell(self._node, self._base, labels)
        with self._lock:
            cell.value += amount

    def record(self, value: float, labels: Labels | None = None) -> None:
        raise TypeError(f"{self._guard.spec.name} is a counter: use add()")

    def bind(self, labels: Labels | None = None) -> BoundCounter:
        return BoundCounter(self._guard, self._guard.admit(self._node, self._base, labels), self._base,
                            self._monotonic)


class BoundCounter:
    """A counter's label set resolved by ``bind``: ``add`` is a float add under the guard's lock.
    Called once or twice per message on the send path, so the checks are ordered to cost one
    comparison in the common case (non-negative amount, admitted cell)."""

    __slots__ = ("_base", "_cell", "_guard", "_lock", "_monotonic", "_overflow")

    def __init__(self, guard: CardinalityGuard, cell: Cell, base: Mapping[str, Any], monotonic: bool) -> None:
        self._guard = guard
        self._lock = guard.lock
        self._cell = cell
        self._base = base
        self._monotonic = monotonic
        self._overflow = cell.overflow

    def add(self, amount: float) -> None:
        if amount < 0 and self._monotonic:
            log.debug("negative add to counter %s ignored", self._guard.spec.name)
            return
        if self._overflow:
            self._guard.on_overflow(self._guard.spec.name, self._base, 1)
        cell = self._cell
        with self._lock:
            cell.value += amount

    def record(self, value: float) -> None:
        raise TypeError(f"{self._guard.spec.name} is a counter: use add()")


class HistogramInstrument:
    """A histogram of one node, accumulated in process (see the module docstring for why)."""

    __slots__ = ("_base", "_guard", "_lock", "_node")

    def __init__(self, guard: CardinalityGuard, node: int, base: Mapping[str, Any]) -> None:
        self._guard = guard
        self._lock = guard.lock
        self._node = node
        self._base = base

    def add(self, amount: float, labels: Labels | None = None) -> None:
        raise TypeError(f"{self._guard.spec.name} is a histogram: use record()")

    def record(self, value: float, labels: Labels | None = None) -> None:
        cell = self._guard.cell(self._node, self._base, labels)
        with self._lock:
            cell.observe(value)  # type: ignore[attr-defined]

    def bind(self, labels: Labels | None = None) -> BoundHistogram:
        return BoundHistogram(self._guard, self._guard.admit(self._node, self._base, labels), self._base)


class BoundHistogram:
    """A histogram's label set resolved by ``bind``. ``record`` inlines ``HistogramCell.observe``
    (one call less per message on the send path; the bucket index is found outside the lock)."""

    __slots__ = ("_base", "_bounds", "_cell", "_guard", "_lock", "_overflow")

    def __init__(self, guard: CardinalityGuard, cell: Cell, base: Mapping[str, Any]) -> None:
        self._guard = guard
        self._lock = guard.lock
        self._cell = cell
        self._base = base
        self._overflow = cell.overflow
        self._bounds = cell.bounds  # type: ignore[attr-defined]

    def add(self, amount: float) -> None:
        raise TypeError(f"{self._guard.spec.name} is a histogram: use record()")

    def record(self, value: float) -> None:
        if self._overflow:
            self._guard.on_overflow(self._guard.spec.name, self._base, 1)
        cell: HistogramCell = self._cell  # type: ignore[assignment]
        i = bisect_left(self._bounds, value)
        with self._lock:
            cell.counts[i] += 1
            cell.count += 1
            cell.sum += value
            if value < cell.min:
                cell.min = value
            if value > cell.max:
                cell.max = value


class GaugeRegistration:
    """Handle returned by ``Telemetry.gauge``; ``unregister()`` stops the callback being read.

    ``render_cache``, ``base_text``, ``prepared`` and ``body`` belong to the PROM renderer
    (``promtext.PromText``): label text per observed label dict, the base labels' text, the
    observation whose label text was rendered ahead of the scrape (with its series' own label
    texts), and the last rendered lines with the observation they were rendered from. A callback
    that returns the very same *tuple* object again promises the same observations (the broker's
    snapshot does, between refreshes), which is what lets the renderer reuse those lines."""

    def __init__(self, owner: GaugeSet, callback: GaugeCallback, base: Mapping[str, Any]) -> None:
        self._owner = owner
        self.callback = callback
        self.base = base
        self.render_cache: dict[int, tuple[Any, str, str]] = {}
        self.base_text: str | None = None
        self.prepared: tuple[Any, frozenset[str] | None] | None = None
        self.body: tuple[Any, ...] | None = None

    def unregister(self) -> None:
        self._owner.remove(self)


class NoopRegistration:
    def unregister(self) -> None:
        return None


class GaugeSet:
    """All callbacks registered under one observable instrument name (several components or
    several nodes of a BrokerContainer may register the same name).

    Observations past the cardinality limit within one collection are summed into a single
    overflow observation (for lag gauges: the lag of everything not shown) and counted.
    """

    def __init__(self, spec: Instrument, limit: int, on_overflow: OverflowCounter) -> None:
        self.spec = spec
        self.limit = limit
        self.on_overflow = on_overflow
        self._regs: list[GaugeRegistration] = []
        self._lock = threading.Lock()
        self._failed: set[int] = set()

    def add(self, callback: GaugeCallback, base: Mapping[str, Any]) -> GaugeRegistration:
        reg = GaugeRegistration(self, callback, base)
        with self._lock:
            self._regs = [*self._regs, reg]
        return reg

    def remove(self, reg: GaugeRegistration) -> None:
        with self._lock:
            self._regs = [r for r in self._regs if r is not reg]

    def registrations(self) -> list[GaugeRegistration]:
        return self._regs

    def failed(self, reg: GaugeRegistration) -> None:
        """Log a callback's exception once per registration (the caller is in an except block)."""
        if id(reg) not in self._failed:
            self._failed.add(id(reg))
            log.exception("gauge callback for %s failed (logged once)", self.spec.name)

    def observe(self) -> list[tuple[float, dict[str, Any]]]:
        """Called by the SDK's collection thread: never raises."""
        out: list[tuple[float, dict[str, Any]]] = []
        for reg in self._regs:
            folded = 0
            overflow_sum = 0.0
            try:
                for value, labels in reg.callback():
                    if len(out) < self.limit:
                        out.append((value, {**labels, **reg.base}))
                    else:
                        folded += 1
                        overflow_sum += value
            except Exception:  # a component's bug must not stop the other metrics
                self.failed(reg)
                continue
            if folded:
                out.append((overflow_sum, {**reg.base, OVERFLOW_ATTRIBUTE: True}))
                self.on_overflow(self.spec.name, reg.base, folded)
        return out
