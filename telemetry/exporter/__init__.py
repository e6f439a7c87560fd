"""Exporter mode: receive OTLP metrics from many nodes, serve them on one /metrics.

The names are imported on first use: a broker imports ``exporter.store`` for its client-metrics
proxy, and importing the package must not pull the server's prometheus_client and HTTP modules into
every broker process (telemetry/core.py says why start-up imports matter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import ExporterConfig, ExporterServer

__all__ = ["ExporterConfig", "ExporterServer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import server

        return getattr(server, name)
    raise AttributeError(name)
