"""``Telemetry``: the one MeterProvider of a process and the instruments components use.

Start it once per process from the properties dict::

    config = TelemetryConfig.from_properties(props)
    telemetry = Telemetry.start(config, node_type="broker", cluster="DefaultCluster", node_id="broker-a-0")
    messages_in = telemetry.counter("rocketmq_messages_in_total")
    messages_in.add(1, {"topic": "orders", "message_type": "normal", "is_system": False})
    telemetry.gauge("rocketmq_consumer_lag_messages", lambda: [(12, {"consumer_group": "g", "topic": "orders",
                                                                      "is_retry": False, "is_system": False})])
    telemetry.stop()

Why node identity is attributes and not the OTel resource: RocketMQ does it this way and its
dashboards group by ``cluster``/``node_id`` labels; it also lets one provider serve the
several brokers of a BrokerContainer (``for_node``). Instruments are looked up by catalogue
name so no component can invent an undocumented metric.
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
from .instruments import (
    NOOP,
    CardinalityGuard,
    CounterInstrument,
    GaugeCallback,
    GaugeRegistration,
    GaugeSet,
    HistogramCell,
    HistogramInstrument,
    NoopRegistration,
    Recorder,
)
from .promtext import Prerenderer, PromText

log = logging.getLogger(__name__)

OVERFLOW_METRIC = "rocketscope_metrics_overflow_total"
# room above our own cap for the overflow series of each node in the process (SDK backstop)
SDK_LIMIT_MARGIN = 32
METER_NAMES = {"broker": "broker-meter", "proxy": "broker-meter", "controller": "controller"}


def base_labels(config: TelemetryConfig, node_type: str, cluster: str, node_id: str,
                extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """RocketMQ's order: metricsLabel pairs, then aggregation=delta, then the identity (which wins)."""
    labels: dict[str, str] = dict(config.labels)
    if extra:
        labels.update(extra)
    if config.delta:
        labels["aggregation"] = "delta"
    labels.update({"cluster": cluster, "node_type": node_type, "node_id": node_id})
    return labels


def views(limit: int) -> list[View]:
    """One view per catalogue instrument: its bucket layout and the cardinality backstop."""
    out = []
    for spec in catalogue.CATALOGUE:
        aggregation = ExplicitBucketHistogramAggregation(boundaries=spec.buckets) if spec.buckets else None
        out.append(View(instrument_name=spec.name, aggregation=aggregation,
                        aggregation_cardinality_limit=limit + SDK_LIMIT_MARGIN))
    return out


class _Core:
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


class Telemetry:
    """A node's handle on the process's telemetry. Cheap to call on hot paths: get instruments
    once (at component start) and keep them; ``add``/``record`` cost a dict lookup."""

    def __init__(self, core: _Core | None, config: TelemetryConfig, labels: Mapping[str, str]) -> None:
        self._core = core
        self.config = config
        self.labels: dict[str, str] = dict(labels)
        self._node = id(self)

    # ---- lifecycle
    @classmethod
    def start(cls, config: TelemetryConfig, node_type: str, cluster: str, node_id: str,
              extra_labels: Mapping[str, str] | None = None, serve: MetricsServe | None = None) -> Telemetry:
        """Build the process's MeterProvider with views and the configured exposure.
        ``node_id`` must be unique per process across the cluster (e.g. ``broker-a-0`` for
        brokerName-brokerId): master and slave of one group are different nodes."""
        labels = base_labels(config, node_type, cluster, node_id, extra_labels)
        if not config.enabled:
            return cls(None, config, labels)
        core = _Core(config, node_type, serve, instance_id=f"{cluster}/{node_id}")
        log.info("metrics: %s telemetry started for %s/%s/%s", config.exporter_type.name, cluster, node_type, node_id)
        return cls(core, config, labels)

    @classmethod
    def disabled(cls) -> Telemetry:
        """A telemetry whose instruments do nothing (tests, tools)."""
        return cls(None, TelemetryConfig(), {})

    def for_node(self, node_type: str, cluster: str, node_id: str,
                 extra_labels: Mapping[str, str] | None = None) -> Telemetry:
        """Another node in the same process (BrokerContainer): same provider, its own labels."""
        return Telemetry(self._core, self.config, base_labels(self.config, node_type, cluster, node_id, extra_labels))

    def flush(self, timeout_millis: float = 10_000) -> bool:
        """Push now (OTLP/LOG); a no-op for PROM and DISABLE."""
        if self._core is None or self._core.stopped:
            return True
        return bool(self._core.provider.force_flush(timeout_millis=timeout_millis))

    def stop(self) -> None:
        """Flush, shut the provider down and free the /metrics port. Blocks up to the export
        timeout: from asyncio call it as ``await asyncio.to_thread(telemetry.stop)``."""
        if self._core is not None:
            self._core.stop()

    @property
    def enabled(self) -> bool:
        return self._core is not None

    def register_collector(self, collector: Any) -> bool:
        """Serve another prometheus_client collector on this node's /metrics (PROM mode only).

        The broker uses it to re-export the metrics its clients push to it
        (metricCollectorMode=proxy).  Returns False when there is no /metrics to add to.
        """
        if self._core is None or self._core.endpoint is None:
            return False
        self._core.endpoint.registry.register(collector)
        return True

    @property
    def prometheus_port(self) -> int | None:
        """The bound /metrics port in PROM mode (useful with metricsPromExporterPort=0)."""
        if self._core is None or self._core.endpoint is None:
            return None
        return self._core.endpoint.port

    # ---- instruments
    def _spec(self, name: str, kinds: tuple[Kind, ...]) -> Instrument:
        spec = catalogue.get(name)
        if spec.kind not in kinds:
            raise ValueError(f"instrument {name} is a {spec.kind.value}, not a {' or '.join(k.value for k in kinds)}")
        return spec

    def _wanted(self, spec: Instrument) -> bool:
        return self._core is not None and (spec.opt_in is None or self.config.opt_in(spec.opt_in))

    def _bound(self, name: str, kind: Kind) -> Recorder:
        spec = self._spec(name, (kind,))
        if not self._wanted(spec):
            return NOOP
        core = self._core
        assert core is not None
        core.sdk_instrument(spec)
        if kind is Kind.HISTOGRAM:
            return HistogramInstrument(core.guard(spec), self._node, self.labels)
        return CounterInstrument(core.guard(spec), self._node, self.labels, monotonic=kind is Kind.COUNTER)

    def counter(self, name: str) -> Recorder:
        """A monotonic counter: ``.add(n, labels)``, or ``.bind(labels).add(n)`` on hot paths."""
        return self._bound(name, Kind.COUNTER)

    def up_down_counter(self, name: str) -> Recorder:
        """An up-down counter: ``.add(+n or -n, labels)``."""
        return self._bound(name, Kind.UP_DOWN_COUNTER)

    def histogram(self, name: str) -> Recorder:
        """A histogram with the catalogue's buckets: ``.record(value, labels)`` or ``.bind(labels).record(v)``."""
        return self._bound(name, Kind.HISTOGRAM)

    def gauge(self, name: str, callback: GaugeCallback) -> GaugeRegistration | NoopRegistration:
        """Register ``callback() -> iterable of (value, labels)`` for an observable gauge (or
        observable counter). It runs on the collection thread (export timer or scrape), not on
        the event loop: read a snapshot (``list(d.items())``), never await, never block."""
        spec = self._spec(name, (Kind.OBSERVABLE_GAUGE, Kind.OBSERVABLE_COUNTER))
        if not self._wanted(spec):
            return NoopRegistration()
        core = self._core
        assert core is not None
        core.sdk_instrument(spec)
        return core.gauges[spec.name].add(callback, self.labels)

    observable_counter = gauge

    def gauges_changed(self) -> None:
        """Tell telemetry that gauge callbacks now return new observations (the broker calls it
        after each snapshot). In PROM mode a background thread then renders the label text of
        new series, so the next scrape only formats numbers; elsewhere a no-op. Cheap and
        non-blocking: safe on the event loop."""
        core = self._core
        if core is not None and core.prerender is not None:
            core.prerender.request()

    def wants(self, name: str) -> bool:
        """Whether ``name`` is emitted (telemetry on and its opt-in key, if any, true): lets a
        component skip computing e.g. per-queue lag entirely."""
        return self._wanted(catalogue.get(name))
