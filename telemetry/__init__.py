"""RocketScope telemetry: metric catalogue, meter provider set-up, exposure modes, exporter.

Components use::

    from rocketscope.telemetry import Telemetry, TelemetryConfig
    telemetry = Telemetry.start(TelemetryConfig.from_properties(props), "broker", cluster, node_id)
    telemetry.counter("rocketmq_messages_in_total").add(1, {"topic": "t", ...})

Names are imported lazily so that ``python -m rocketscope.telemetry.catalogue`` does not
import the catalogue twice (and the package stays cheap to import for the CLI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import ExporterType, TelemetryConfig, TelemetryConfigError, keys_table
    from .provider import Telemetry

__all__ = ["ExporterType", "Telemetry", "TelemetryConfig", "TelemetryConfigError", "keys_table"]


def __getattr__(name: str) -> Any:
    if name == "Telemetry":
        from .provider import Telemetry

        return Telemetry
    if name in ("ExporterType", "TelemetryConfig", "TelemetryConfigError", "keys_table"):
        from . import config

        return getattr(config, name)
    raise AttributeError(name)
