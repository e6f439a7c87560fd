"""The OpenTelemetry SDK side of a process's telemetry: the MeterProvider, its views and readers.

Why a module of its own: ``Telemetry`` (provider.py) is built by every broker, name server and
controller, but with ``metricsExporterType=DISABLE`` (the default) it never needs the SDK, its
exporters or prometheus_client.  Those imports cost a process about 0.3 CPU s at start; provider.py
imports this module only when telemetry is on (tests/test_lazy_imports.py checks a default server
never loads it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, Histogram, HistogramDataPoint, Metric
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from . import catalogue
from .catalogue import Instrument, Kind
from .config import ExporterType, TelemetryConfig
from .exposure import MetricsServe, PrometheusEndpoint, build_reader
from .instruments import CardinalityGuard, GaugeSet, HistogramCell
from .promtext import Prerenderer, PromText

log = logging.getLogger(__name__)

OVERFLOW_METRIC = "rocketscope_metrics_overflow_total"
# room above our own cap for the overflow series of each node in the process (SDK backstop)
SDK_LIMIT_MARGIN = 32
METER_NAMES = {"broker": "broker-meter", "proxy": "broker-meter", "controller": "controller"}


def views(limit: int) -> list[View]:
    """One view per catalogue instrument: its bucket layout and the cardinality backstop."""
    out = []
    for spec in catalogue.CATALOGUE:
        aggregation = ExplicitBucketHistogramAggregation(boundaries=spec.buckets) if spec.buckets else None
        out.append(View(instrument_name=spec.name, aggregation=aggregation,
                        aggregation_cardinality_limit=limit + SDK_LIMIT_MARGIN))
    return out


class MeterCore:
    """What the nodes of one process share: provider, SDK instruments, guards, endpoint."""

    def __init__(self, config: TelemetryConfig, node_type: str, serve: MetricsServe | None = None,
                 instance_id: str = "") -> None:
        self.config = config
        self.lock = threading.Lock()
        self.guards: dict[str, CardinalityGuard] = {}
        self.sdk: dict[str, Any] = {}
        self.gauges: dict[str, GaugeSet] = {}
        self.endpoint: PrometheusEndpoint | None = None
        self.stopped = False
        # delta export state of each histogram cell: (bucket counts, count, sum, time) last sent
        self._sent: dict[HistogramCell, tuple[list[int], int, float, int]] = {}
        meter_name = METER_NAMES.get(node_type, f"rocketscope-{node_type}")
        # service.instance.id is the process's stable identity (cluster/node_id of the node that
        # started it), not the SDK's random per-start UUID: a collector turns it into the series'
        # `instance` label, and a restarted node must continue its series, not start new ones.
        attributes = {"service.name": f"rocketscope-{node_type}"}
        if instance_id:
            attributes["service.instance.id"] = instance_id
        resource = Resource.create(attributes)
        reader, exporter = build_reader(config, meter_name, resource)
        if exporter is not None:
            exporter.histograms = self.histogram_metrics
        self.provider = MeterProvider(
            metric_readers=[reader] if reader is not None else [],
            resource=resource,
            views=views(config.cardinality_limit),
            exemplar_filter=AlwaysOffExemplarFilter(),  # unused; saves memory and time per series
        )
        self.meter = self.provider.get_meter(meter_name)
        self.prerender: Prerenderer | None = None
        try:
            if config.exporter_type is ExporterType.PROM:
                text = PromText(self)
                self.endpoint = PrometheusEndpoint(text.render, config.prom_host, config.prom_port, serve)
                self.prerender = Prerenderer(text.prepare)
        except OSError as exc:
            self.provider.shutdown()
            raise OSError(exc.errno, f"metrics: cannot listen on {config.prom_host or '0.0.0.0'}:"
                                     f"{config.prom_port} (metricsPromExporterPort): {exc.strerror}") from exc
        # the overflow counter itself is never capped (its series: instruments x nodes)
        spec = catalogue.get(OVERFLOW_METRIC)
        self.overflow_guard = self.guards[spec.name] = CardinalityGuard(spec, 2**62, lambda *args: None)
        self.sdk_instrument(spec)

    def sdk_instrument(self, spec: Instrument) -> Any:
        with self.lock:
            inst = self.sdk.get(spec.name)
            if inst is not None:
                return inst
            if spec.kind in (Kind.COUNTER, Kind.UP_DOWN_COUNTER):
                guard = self._guard_locked(spec)

                def totals(options: CallbackOptions, guard: CardinalityGuard = guard) -> list[Observation]:
                    return [Observation(c.value, c.attrs) for c in guard.cells()]

                create: Callable[..., Any] = (self.meter.create_observable_counter if spec.kind is Kind.COUNTER
                          else self.meter.create_observable_up_down_counter)
                inst = create(spec.name, callbacks=[totals], unit=spec.unit, description=spec.description)
            elif spec.kind is Kind.HISTOGRAM:
                inst = self._guard_locked(spec)  # accumulated by us: see histogram_metrics
            else:
                gauge_set = GaugeSet(spec, self.config.cardinality_limit, self.count_overflow)
                self.gauges[spec.name] = gauge_set

                def callback(options: CallbackOptions, gauge_set: GaugeSet = gauge_set) -> list[Observation]:
                    return [Observation(v, a) for v, a in gauge_set.observe()]

                create = (self.meter.create_observable_gauge if spec.kind is Kind.OBSERVABLE_GAUGE
                          else self.meter.create_observable_counter)
                inst = create(spec.name, callbacks=[callback], unit=spec.unit, description=spec.description)
            self.sdk[spec.name] = inst
            return inst

    def guard(self, spec: Instrument) -> CardinalityGuard:
        with self.lock:
            return self._guard_locked(spec)

    def _guard_locked(self, spec: Instrument) -> CardinalityGuard:
        guard = self.guards.get(spec.name)
        if guard is None:
            guard = self.guards[spec.name] = CardinalityGuard(spec, self.config.cardinality_limit,
                                                              self.count_overflow)
        return guard

    def histogram_metrics(self) -> list[Metric]:
        """Our histograms as SDK export data for the OTLP/LOG exporter (called on its thread).
        Temporality follows the SDK's rule for histograms: delta iff metricsInDelta (push modes)."""
        delta = self.config.delta
        now = time.time_ns()
        out: list[Metric] = []
        with self.lock:
            guards = [g for g in self.guards.values() if g.spec.kind is Kind.HISTOGRAM]
        for guard in guards:
            points: list[HistogramDataPoint] = []
            cells = guard.cells()
            with guard.lock:
                for cell in cells:
                    if not isinstance(cell, HistogramCell) or not cell.count:
                        continue
                    counts, count, total = list(cell.counts), cell.count, cell.sum
                    low, high = cell.min, cell.max
                    start = cell.start_ns
                    if delta:
                        cell.min, cell.max = float("inf"), float("-inf")
                        before = self._sent.get(cell)
                        self._sent[cell] = (counts, count, total, now)
                        if before is not None:
                            if count == before[1]:
                                continue
                            counts = [a - b for a, b in zip(counts, before[0], strict=True)]
                            count, total, start = count - before[1], total - before[2], before[3]
                    points.append(HistogramDataPoint(attributes=cell.attrs, start_time_unix_nano=start,
                                                     time_unix_nano=now, count=count, sum=total, bucket_counts=counts,
                                                     explicit_bounds=list(cell.bounds), min=low, max=high))
            if points:
                temporality = AggregationTemporality.DELTA if delta else AggregationTemporality.CUMULATIVE
                out.append(Metric(name=guard.spec.name, description=guard.spec.description, unit=guard.spec.unit,
                                  data=Histogram(data_points=points, aggregation_temporality=temporality)))
        return out

    def count_overflow(self, metric: str, base: Mapping[str, Any], count: int) -> None:
        """Count measurements folded into ``metric``'s overflow series of the node ``base``
        (a node's base-label dict lives as long as its Telemetry, so its id keys the node)."""
        cell = self.overflow_guard.cell(id(base), base, {"metric": metric})
        with self.overflow_guard.lock:
            cell.value += count

    def stop(self) -> None:
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
        try:
            self.provider.force_flush(timeout_millis=self.config.export_timeout_ms)
        finally:
            self.provider.shutdown()
            if self.prerender is not None:
                self.prerender.stop()
            if self.endpoint is not None:
                self.endpoint.close()
