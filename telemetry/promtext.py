"""PROM mode's /metrics text, rendered straight from our own accumulators and gauge callbacks.

Why not the SDK and prometheus_client's families any more: a broker with 1,000 topics and 10
groups each has ~61,000 samples, and the path SDK collection (Observation objects, one
aggregation per attribute set, data points) then our Points, then prometheus_client families
and ``generate_latest`` (labels sorted and escaped again for every sample) took ~4 s per
scrape. Every value already lives in our cells (counters, histograms) or comes from a gauge
callback, so this module writes the text format itself:

- a counter's or histogram's label text is rendered once per series and kept on its cell;
- a gauge registration's base labels (cluster, node_type, node_id, metricsLabel) are rendered
  once, and the label text of each observed label dict is cached per registration by the
  dict's identity (the cache holds the dict, so an id cannot be reused while cached; entries
  not seen in a scrape are dropped). The broker reuses its label dicts between snapshots, so a
  scrape mostly formats numbers;
- tests/test_telemetry_promtext_equivalence.py checks that the text holds exactly the samples
  prometheus_client's ``generate_latest`` writes for the same data (awkward label values too);
- same names, types, label keys and values as before: names from the catalogue
  (``Instrument.prometheus_name``), booleans ``true``/``false``, ``le`` as ``repr(float)``,
  histogram buckets cumulative, ``otel_metric_overflow="true"`` on overflow series, the
  gauge cardinality cap applied per collection as ``GaugeSet.observe`` does for OTLP.

Why ``prepare`` (issue #6, second round): rendering a label set's text for the first time is
most of a scrape's cost (the first scrape of a 1000 x 10 broker took 0.6-0.9 s, later ones
~0.1-0.2 s). The broker calls ``Telemetry.gauges_changed()`` after each snapshot and a
background thread (``Prerenderer``) renders the text of new label sets, new counter and
histogram cells included, so no scrape pays for it, and records per registration the exact
observation it prepared: a scrape of that observation needs no cache lookups that can miss and
no cache writes. Steady state it costs a pass over the observations per snapshot (a dict lookup
each); label text is only rendered for label sets that are new.

Why ``body``: between two snapshots the gauge callbacks return the same tuples, so a
registration's lines are the same too; they are kept with the observation they came from and
reused while the callback returns that very tuple (and the cap's room and the series already
written are as they were). Counters and histograms move between scrapes and are always
formatted again (their label text is cached on the cell).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .catalogue import Kind
from .instruments import OVERFLOW_ATTRIBUTE, CardinalityGuard, Cell, GaugeRegistration, GaugeSet, HistogramCell
from .naming import render_bound, render_value, sanitize_label

if TYPE_CHECKING:
    from .core import MeterCore

log = logging.getLogger(__name__)


def escape_value(text: str) -> str:
    if "\\" in text or "\n" in text or '"' in text:
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return text


_PAIRS: dict[tuple[Any, ...], str] = {}  # rendered ``k="v"`` per (key, value): label values repeat a lot
_PAIRS_MAX = 200_000


def _pair(key: str, value: Any) -> str:
    cache_key = (key, value) if type(value) is str else (key, type(value), value)  # True == 1, "true" != "1"
    try:
        text = _PAIRS.get(cache_key)
    except TypeError:  # unhashable (a sequence attribute)
        return f'{sanitize_label(key)}="{escape_value(render_value(value))}"'
    if text is None:
        if len(_PAIRS) >= _PAIRS_MAX:
            _PAIRS.clear()
        text = _PAIRS[cache_key] = f'{sanitize_label(key)}="{escape_value(render_value(value))}"'
    return text


def label_text(attrs: Mapping[str, Any], skip: Iterable[str] = ()) -> str:
    """``k="v",...`` in the dict's order (Prometheus does not care about label order)."""
    return ",".join([_pair(k, v) for k, v in attrs.items() if k not in skip])


def number(value: Any) -> str:
    if type(value) is int:
        return str(value)
    if type(value) is bool:
        return "1" if value else "0"
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _help(name: str, doc: str, kind: str) -> str:
    doc = doc.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


def _braced(text: str) -> str:
    return "{" + text + "}" if text else ""


def _cell_text(cell: Cell) -> str:
    text = cell.text
    if text is None:
        text = cell.text = label_text(cell.attrs)
    return text


class PromText:
    """Renders the process's instruments (all nodes) as Prometheus text format 0.0.4."""

    def __init__(self, core: MeterCore) -> None:
        self._core = core
        # render and prepare share the caches kept on registrations and cells: one at a time
        # (a second concurrent scrape waits and then mostly reuses what the first rendered)
        self._lock = threading.Lock()

    def render(self) -> str:
        core = self._core
        guards = list(core.guards.values())
        gauges = list(core.gauges.values())
        out: list[str] = []
        with self._lock:
            # counters first: the overflow counter then shows what earlier collections folded, as
            # the SDK path did (gauge observations folded in this scrape are counted for the next)
            for guard in guards:
                if guard.spec.kind is Kind.HISTOGRAM:
                    self._histogram(guard, out)
                else:
                    self._counter(guard, out)
            # label text of a dict seen under several gauges (the five lag gauges share theirs), for
            # this render only; holding the dicts keeps their ids from being reused meanwhile
            shared: dict[tuple[int, str], tuple[Any, str]] = {}
            for gauge_set in gauges:
                self._gauges(gauge_set, out, shared)
        return "".join(out)

    def prepare(self) -> None:
        """Render the label text of every series not rendered yet, ahead of the next scrape.
        Runs on the ``Prerenderer`` thread, never on the event loop; never raises."""
        core = self._core
        guards = list(core.guards.values())
        gauges = list(core.gauges.values())
        with self._lock:
            for guard in guards:
                for cell in guard.cells():
                    if cell.text is None:
                        cell.text = label_text(cell.attrs)
            shared: dict[tuple[int, str], tuple[Any, str]] = {}
            for gauge_set in gauges:
                name = gauge_set.spec.prometheus_name
                for reg in gauge_set.registrations():
                    try:
                        observed = reg.callback()
                        if type(observed) is not tuple:
                            observed = tuple(observed)  # a one-shot iterable: prepare its label dicts anyway
                        self._prepare(reg, observed, name, _base_text(reg), shared)
                    except Exception:  # a component's bug must not stop the other metrics
                        gauge_set.failed(reg)

    @staticmethod
    def _prepare(reg: GaugeRegistration, observed: tuple[tuple[float, Mapping[str, Any]], ...], name: str,
                 base_text: str, shared: dict[tuple[int, str], tuple[Any, str]]) -> None:
        old = reg.render_cache
        if reg.prepared is not None and reg.prepared[0] is observed:
            return
        cache: dict[int, tuple[Any, str, str]] = {}
        base = reg.base
        for _value, labels in observed:
            key = id(labels)
            hit = old.get(key)
            if hit is None or hit[0] is not labels:
                hit = _line_head(labels, base, name, base_text, shared)
            cache[key] = hit
        owns = frozenset(hit[1] for hit in cache.values())
        # the scrape's fast path needs one series per observation: no two dicts with one text
        reg.render_cache = cache
        reg.prepared = (observed, owns if len(owns) == len(observed) else None)

    def _counter(self, guard: CardinalityGuard, out: list[str]) -> None:
        cells = guard.cells()
        if not cells:
            return
        spec = guard.spec
        name = spec.prometheus_name
        out.append(_help(name, spec.description, spec.kind.prometheus_type))
        out.extend(f"{name}{_braced(_cell_text(c))} {number(c.value)}\n" for c in cells)

    def _histogram(self, guard: CardinalityGuard, out: list[str]) -> None:
        cells = guard.cells()
        rows: list[tuple[HistogramCell, list[int], float]] = []
        with guard.lock:
            for c in cells:
                if isinstance(c, HistogramCell) and c.count:
                    rows.append((c, list(c.counts), c.sum))
        if not rows:
            return
        spec = guard.spec
        name = spec.prometheus_name
        out.append(_help(name, spec.description, "histogram"))
        les = [f'le="{render_bound(b)}"' for b in rows[0][0].bounds] + ['le="+Inf"']
        for cell, counts, total in rows:
            text = _cell_text(cell)
            sep = text + "," if text else ""
            running = 0
            for le, n in zip(les, counts, strict=True):
                running += n
                out.append(f"{name}_bucket{{{sep}{le}}} {running}\n")
            out.append(f"{name}_count{_braced(text)} {running}\n")
            out.append(f"{name}_sum{_braced(text)} {number(total)}\n")

    def _gauges(self, gauge_set: GaugeSet, out: list[str], shared: dict[tuple[int, str], tuple[Any, str]]) -> None:
        spec = gauge_set.spec
        name = spec.prometheus_name
        lines: list[str] = []
        seen: dict[str, set[str]] = {}  # base label text -> own label texts already written
        admitted = 0
        for reg in gauge_set.registrations():
            base_text = _base_text(reg)
            room = gauge_set.limit - admitted
            try:
                observed = reg.callback()
                written = seen.setdefault(base_text, set())
                body = reg.body
                if (body is not None and body[0] is observed and body[1] == room and not written):
                    # the same tuple as last time, rendered under the same conditions: same lines
                    _, _, text, count, folded, overflow_sum, owns = body
                    lines.append(text)
                    written.update(owns)
                else:
                    fresh = not written
                    start = len(lines)
                    count, folded, overflow_sum = self._registration(
                        reg, observed, name, base_text, room, lines, written, shared)
                    if fresh and type(observed) is tuple:
                        text = "".join(lines[start:])
                        del lines[start:]
                        lines.append(text)
                        reg.body = (observed, room, text, count, folded, overflow_sum, frozenset(written))
                    else:
                        reg.body = None
            except Exception:  # a component's bug must not stop the other metrics
                gauge_set.failed(reg)
                continue
            admitted += count
            if folded:
                text = label_text({**reg.base, OVERFLOW_ATTRIBUTE: True})
                lines.append(f"{name}{{{text}}} {number(overflow_sum)}\n")
                gauge_set.on_overflow(spec.name, reg.base, folded)
        if lines:
            out.append(_help(name, spec.description, spec.kind.prometheus_type))
            out.extend(lines)

    @staticmethod
    def _registration(reg: GaugeRegistration, observed: Iterable[tuple[float, Mapping[str, Any]]], name: str,
                      base_text: str, room: int, lines: list[str], seen: set[str],
                      shared: dict[tuple[int, str], tuple[Any, str]]) -> tuple[int, int, float]:
        """Append one registration's lines; returns (lines admitted, observations folded, their sum).
        The hot loop of a large scrape. Fast path: ``prepare`` rendered this very observation,
        it has one series per observation, all fit and none was written before: one comprehension
        that formats values. Otherwise one dict lookup and one string concatenation per sample."""
        prepared = reg.prepared
        if prepared is not None and prepared[0] is observed and type(observed) is tuple \
                and prepared[1] is not None and not seen and len(observed) <= room:
            cache = reg.render_cache
            lines.append("".join([f"{cache[id(labels)][2]}{value if type(value) is int else number(value)}\n"
                                  for value, labels in observed]))
            seen.update(prepared[1])
            return len(observed), 0, 0.0
        old = reg.render_cache
        cache = {}
        base = reg.base
        append = lines.append
        admitted = folded = 0
        overflow_sum = 0.0
        for value, labels in observed:
            if admitted >= room:
                folded += 1
                overflow_sum += value
                continue
            key = id(labels)
            hit = old.get(key)
            if hit is None or hit[0] is not labels:
                hit = _line_head(labels, base, name, base_text, shared)
            cache[key] = hit
            own = hit[1]
            if own in seen:  # Prometheus rejects a series twice in one scrape: keep the first
                continue
            seen.add(own)
            admitted += 1
            append(f"{hit[2]}{value if type(value) is int else number(value)}\n")
        reg.render_cache = cache
        reg.prepared = None
        return admitted, folded, overflow_sum


def _base_text(reg: GaugeRegistration) -> str:
    text = reg.base_text
    if text is None:
        text = reg.base_text = label_text(reg.base)
    return text


def _line_head(labels: Mapping[str, Any], base: Mapping[str, Any], name: str, base_text: str,
               shared: dict[tuple[int, str], tuple[Any, str]]) -> tuple[Any, str, str]:
    """(labels, own label text, ``name{labels} ``) for one observed label dict."""
    key = (id(labels), base_text)
    known = shared.get(key)
    if known is not None and known[0] is labels:
        own = known[1]
    else:
        own = label_text(labels, base)
        shared[key] = (labels, own)
    text = f"{own},{base_text}" if own and base_text else own or base_text
    return labels, own, f"{name}{{{text}}} " if text else f"{name} "


class Prerenderer:
    """A daemon thread that runs ``PromText.prepare`` when asked (``request``), off the event
    loop; requests made while it works are coalesced into one more pass."""

    def __init__(self, prepare: Callable[[], None]) -> None:
        self._prepare = prepare
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.passes = 0

    def request(self) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None and not self._stopped:
                    self._thread = threading.Thread(target=self._run, name="metrics-prerender", daemon=True)
                    self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stopped:
                return
            self._wake.clear()
            try:
                self._prepare()
            except Exception:
                log.exception("metrics: pre-rendering label text failed")
            self.passes += 1

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
