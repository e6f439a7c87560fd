"""Exporter mode: receive OTLP metrics from many nodes, serve them on one /metrics."""

from .server import ExporterConfig, ExporterServer

__all__ = ["ExporterConfig", "ExporterServer"]
