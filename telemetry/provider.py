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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import catalogue
from .catalogue import Instrument, Kind
from .config import TelemetryConfig
from .instruments import (
    NOOP,
    CounterInstrument,
    GaugeCallback,
    GaugeRegistration,
    HistogramInstrument,
    NoopRegistration,
    Recorder,
)

if TYPE_CHECKING:
    from .core import MeterCore
    from .exposure import MetricsServe

log = logging.getLogger(__name__)


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


class Telemetry:
    """A node's handle on the process's telemetry. Cheap to call on hot paths: get instruments
    once (at component start) and keep them; ``add``/``record`` cost a dict lookup."""

    def __init__(self, core: MeterCore | None, config: TelemetryConfig, labels: Mapping[str, str]) -> None:
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
        from .core import MeterCore  # the OpenTelemetry SDK: imported only when telemetry is on (core.py)

        core = MeterCore(config, node_type, serve, instance_id=f"{cluster}/{node_id}")
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
