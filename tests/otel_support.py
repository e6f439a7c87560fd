"""Peers built from Go modules for Push-mode tests: the OpenTelemetry Collector and Prometheus 3.

Both are built into the user's cache directory by ``make otelcol`` / ``make prometheus3``
(peers/otelcol/build.sh, peers/prometheus3/build.sh); ``make setup`` runs the first. A test that
needs the collector and does not find it fails when setup could have built it (CI, or root) and is
skipped with the make target's name otherwise: the rule of ``telemetry_support.prometheus_binary``.
A test that needs Prometheus 3 is skipped when it is missing.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import tempfile
import threading
import urllib.request
import zlib
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import free_port, missing_install
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from telemetry_support import PrometheusServer, wait_until

from rocketscope.ports import port_open

ROOT = Path(__file__).resolve().parents[1]
COLLECTOR_CONFIG = ROOT / "deploy" / "otel-collector" / "config.yaml"


def built_binary(script: str, target: str, in_setup: bool) -> str:
    """Path of the binary that ``peers/<script>`` builds, or a failure/skip naming ``make target``.

    ``in_setup``: whether ``make setup`` builds it; only then is a missing binary a failure (CI, root).
    """
    path = subprocess.run(["bash", str(ROOT / "peers" / script), "--path"], capture_output=True, text=True,
                          check=True).stdout.strip()
    if os.access(path, os.X_OK):
        return path
    message = f"{path} is missing: run `make {target}` (it builds it from Go modules; needs go and the Go module proxy)"
    if in_setup:
        missing_install(message)
    pytest.skip(message + " (not part of `make setup`)")


def collector_binary() -> str:
    return built_binary("otelcol/build.sh", "otelcol", in_setup=True)


def prometheus3_binary() -> str:
    # not built by `make setup`: its cold build took over 10 minutes here (docs/PUSH.md)
    return built_binary("prometheus3/build.sh", "prometheus3", in_setup=False)


class Collector:
    """The built collector running ``config`` (deploy/'s by default) on free loopback ports.

    The file runs unchanged; ``--set`` overrides only the listen addresses, the forward target of
    the ``otlphttp/backend`` exporter and the collector's own telemetry (off: it would take :8888).
    """

    def __init__(self, backend: str, config: Path = COLLECTOR_CONFIG, extra: Sequence[str] = ()) -> None:
        self.binary = collector_binary()
        self.grpc_port, self.http_port, self.prom_port = free_port(), free_port(), free_port()
        self._dir = tempfile.mkdtemp(prefix="rocketscope-otelcol-")
        self.log_path = Path(self._dir, "collector.log")
        self.args = [self.binary, f"--config={config}",
                     f"--set=receivers::otlp::protocols::grpc::endpoint=127.0.0.1:{self.grpc_port}",
                     f"--set=receivers::otlp::protocols::http::endpoint=127.0.0.1:{self.http_port}",
                     f"--set=exporters::prometheus::endpoint=127.0.0.1:{self.prom_port}",
                     f"--set=exporters::otlp_http/backend::endpoint={backend}",
                     "--set=service::telemetry::metrics::level=none", *extra]
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def grpc_target(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}/metrics"

    def start(self) -> Collector:
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._ready, timeout=30, interval=0.1, what=f"collector listening (log: {self.log_path})")
        return self

    def _ready(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise AssertionError(f"collector exited {self._proc.returncode}: {self.log()[-3000:]}")
        return port_open(self.grpc_port) and port_open(self.prom_port)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class OtlpHttpSink:
    """OTLP/HTTP metrics endpoint (protobuf; gzip, deflate or plain, as the collector's otlphttp
    exporter sends gzip by default) that keeps every request."""

    def __init__(self) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                with sink._lock:
                    sink.requests.append(request)
                    sink.paths.append(self.path)
                payload = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def snapshot(self) -> list[ExportMetricsServiceRequest]:
        with self._lock:
            return list(self.requests)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Prometheus3Server(PrometheusServer):
    """Prometheus 3 (built from Go modules) with its OTLP receiver on; scrapes ``jobs`` if any.

    Reuses PrometheusServer's query helpers; only the binary, the flags and the config differ.
    """

    def __init__(self, jobs: Mapping[str, Sequence[str]] | None = None, scrape_interval: str = "1s") -> None:
        self.binary = prometheus3_binary()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = tempfile.mkdtemp(prefix="rocketscope-prom3-")
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}
                               for job, targets in (jobs or {}).items()],
            # pushed samples carry the sender's timestamps; tolerate slightly late ones
            "storage": {"tsdb": {"out_of_order_time_window": "10m"}},
        }
        self.config_path = Path(self._dir, "prometheus.yml")
        self.config_path.write_text(json.dumps(config, indent=2))
        self._log = open(Path(self._dir, "prometheus.log"), "wb")  # noqa: SIM115 - closed in stop()
        self._proc = None

    @property
    def otlp_url(self) -> str:
        """Where OTLP/HTTP metrics go (POST); an OTLP exporter given ``.../api/v1/otlp`` appends /v1/metrics."""
        return f"{self.url}/api/v1/otlp/v1/metrics"

    def start(self) -> Prometheus3Server:
        self._proc = subprocess.Popen(
            [self.binary, f"--config.file={self.config_path}", f"--storage.tsdb.path={self._dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-otlp-receiver", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT)
        wait_until(self._ready, timeout=30, what=f"Prometheus 3 ready on {self.url} (log: {self._dir}/prometheus.log)")
        return self

    def version(self) -> str:
        with urllib.request.urlopen(f"{self.url}/api/v1/status/buildinfo", timeout=5) as resp:
            return str(json.loads(resp.read())["data"]["version"])
