"""``rocketscope exporter``: a click command the top-level CLI mounts.

Mount it with ``main.add_command(rocketscope.telemetry.cli.exporter)``.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

import click

from .exporter import ExporterConfig, ExporterServer


def _tls(cert: str, key: str, trust: str, client_auth: str) -> Any:
    """The exporter's TLS settings from the CLI, validated now so a bad file is reported before binding."""
    if not cert and not key:
        return None
    from rocketscope.config import ConfigError
    from rocketscope.tls import server_config

    raw = {"tls.server.mode": "enforcing", "tls.server.certPath": cert, "tls.server.keyPath": key,
           "tls.server.trustCertPath": trust, "tls.server.need.client.auth": client_auth}
    try:
        tls = server_config(raw)
        tls.validate()
    except ConfigError as exc:
        raise click.UsageError(str(exc).replace("tls.server.", "--tls-")) from None
    return tls


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
@click.option("--min-expiry", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="Never expire a node sooner than this, whatever its push interval (one scrape at "
                   "Prometheus' default 1 min interval must see a node's last push).")
@click.option("--no-legacy-names", is_flag=True, help="Do not serve the rocketmq-exporter gauge names.")
@click.option("--tls-cert", default="", help="PEM certificate: serve all three listeners with TLS (HTTPS).")
@click.option("--tls-key", default="", help="PEM private key of --tls-cert.")
@click.option("--tls-trust", default="", help="PEM CA that client certificates must chain to.")
@click.option("--tls-client-auth", type=click.Choice(["none", "optional", "require"]), default="none",
              show_default=True, help="Client certificates on the three listeners.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def exporter(host: str, grpc_port: int, http_port: int, metrics_port: int, expire_after: float | None,
             default_expiry: float, min_expiry: float, no_legacy_names: bool, tls_cert: str, tls_key: str,
             tls_trust: str, tls_client_auth: str, log_level: str) -> None:
    """Receive OTLP metrics from brokers, name servers and controllers; serve one /metrics."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ExporterConfig(host=host, grpc_port=grpc_port, http_port=http_port, metrics_port=metrics_port,
                            expire_after=expire_after, default_expiry=default_expiry, min_expiry=min_expiry,
                            legacy_names=not no_legacy_names, tls=_tls(tls_cert, tls_key, tls_trust, tls_client_auth))
    try:
        server = ExporterServer(config).start()
    except OSError as exc:
        raise click.ClickException(f"{exc} (is another exporter running? choose other ports)") from exc

    def stop(signum: int, frame: object) -> None:
        server.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.wait()
