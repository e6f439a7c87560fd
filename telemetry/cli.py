"""``rocketscope exporter``: a click command the top-level CLI mounts.

Mount it with ``main.add_command(rocketscope.telemetry.cli.exporter)``.
"""

from __future__ import annotations

import logging
import signal

import click

from .exporter import ExporterConfig, ExporterServer


@click.command("exporter")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address all three listeners bind.")
@click.option("--grpc-port", default=5559, show_default=True, type=click.IntRange(0, 65535),
              help="OTLP/gRPC receiver (point metricsGrpcExporterTarget=http://HOST:PORT here).")
@click.option("--http-port", default=5560, show_default=True, type=click.IntRange(0, 65535),
              help="OTLP/HTTP receiver, POST /v1/metrics (metricsHttpExporterTarget).")
@click.option("--metrics-port", default=5558, show_default=True, type=click.IntRange(0, 65535),
              help="Prometheus /metrics with the series of every node.")
@click.option("--expire-after", type=click.FloatRange(min=0.1), default=None,
              help="Seconds without a push after which a node is dropped [default: 3 push intervals].")
@click.option("--default-expiry", type=click.FloatRange(min=0.1), default=300.0, show_default=True,
              help="Expiry while a node's push interval is not yet known.")
@click.option("--min-expiry", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Never expire a node sooner than this, whatever its push interval.")
@click.option("--no-legacy-names", is_flag=True, help="Do not serve the rocketmq-exporter gauge names.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def exporter(host: str, grpc_port: int, http_port: int, metrics_port: int, expire_after: float | None,
             default_expiry: float, min_expiry: float, no_legacy_names: bool, log_level: str) -> None:
    """Receive OTLP metrics from brokers, name servers and controllers; serve one /metrics."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ExporterConfig(host=host, grpc_port=grpc_port, http_port=http_port, metrics_port=metrics_port,
                            expire_after=expire_after, default_expiry=default_expiry, min_expiry=min_expiry,
                            legacy_names=not no_legacy_names)
    try:
        server = ExporterServer(config).start()
    except OSError as exc:
        raise click.ClickException(f"{exc} (is another exporter running? choose other ports)") from exc

    def stop(signum: int, frame: object) -> None:
        server.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.wait()
