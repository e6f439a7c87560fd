"""Test helpers for telemetry: OTLP receivers, /metrics scraping, and a real Prometheus.

Reusable by end-to-end tests of the broker::

    from telemetry_support import PrometheusServer, scrape, wait_until
    with PrometheusServer({"brokers": [f"127.0.0.1:{port}"]}) as prom:
        prom.wait_healthy("brokers")
        value = prom.wait_value('sum(rocketmq_messages_in_total)', lambda v: v >= 10)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import grpc
from conftest import free_port, missing_install
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")
MAKE_SETUP_HINT = "run `make setup` as root (it installs the Debian package prometheus)"


def wait_until(probe: Callable[[], T], timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = probe()
            if result:
                return result
        except Exception as exc:  # the probe may fail until the system is up
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{detail}")
        time.sleep(interval)


# ---------------------------------------------------------------------------- /metrics
def scrape(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of every sample in a Prometheus text exposition."""
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append((s.name, dict(s.labels), s.value))
    return out


def find(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [(lab, val) for n, lab, val in samples(text)
            if n == name and all(lab.get(k) == v for k, v in labels.items())]


# ---------------------------------------------------------------------------- OTLP receivers
class OtlpGrpcReceiver:
    """An OTLP/gRPC MetricsService on a free loopback port recording requests and metadata."""

    def __init__(self, max_receive_bytes: int | None = None) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        self.metadata: list[dict[str, str]] = []
        self.rejected = 0
        self._lock = threading.Lock()
        options = [("grpc.max_receive_message_length", max_receive_bytes)] if max_receive_bytes else []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=options)
        receiver = self

        class Servicer(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: ExportMetricsServiceRequest, context: grpc.ServicerContext) -> Any:
                with receiver._lock:
                    receiver.requests.append(request)
                    receiver.metadata.append({k: v for k, v in context.invocation_metadata()})
                return ExportMetricsServiceResponse()

        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Servicer(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def target(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def snapshot(self) -> list[ExportMetricsServiceRequest]:
        with self._lock:
            return list(self.requests)

    def close(self) -> None:
        self._server.stop(grace=None).wait(5)

    def __enter__(self) -> OtlpGrpcReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OtlpHttpReceiver:
    """A minimal OTLP/HTTP endpoint (POST /v1/metrics, protobuf) recording requests and headers."""

    def __init__(self) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                receiver.paths.append(self.path)
                payload = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OtlpHttpReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def otlp_metrics(requests: Sequence[ExportMetricsServiceRequest]) -> Iterator[Any]:
    """Every Metric message of the requests."""
    for request in requests:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                yield from sm.metrics


def otlp_attributes(point: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in point.attributes:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


def data_points(metric: Any) -> Sequence[Any]:
    return getattr(metric, metric.WhichOneof("data")).data_points


# ---------------------------------------------------------------------------- Prometheus
def prometheus_binary(name: str = "prometheus") -> str:
    """Path of the Debian package's binary. Missing: a failure that says what to run when we
    could have installed it (CI, or root); a visible skip for an unprivileged local run."""
    path = shutil.which(name)
    if path:
        return path
    missing_install(f"{name} is not installed: {MAKE_SETUP_HINT}")


class PrometheusServer:
    """A real Prometheus on a free loopback port with a generated config and a temp TSDB.

    ``jobs`` maps job name to targets (``host:port``); every target is scraped each second.
    """

    def __init__(self, jobs: Mapping[str, Sequence[str]], scrape_interval: str = "1s",
                 rule_files: Sequence[str | Path] = ()) -> None:
        self.binary = prometheus_binary()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = tempfile.mkdtemp(prefix="rocketscope-prom-")
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}
                               for job, targets in jobs.items()],
        }
        self.config_path = Path(self._dir, "prometheus.yml")
        self.config_path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        self._log = open(Path(self._dir, "prometheus.log"), "wb")  # noqa: SIM115 - closed in stop()
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        self._proc = subprocess.Popen(
            [self.binary, f"--config.file={self.config_path}", f"--storage.tsdb.path={self._dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT)
        wait_until(self._ready, timeout=15, what=f"Prometheus ready on {self.url} (log: {self._dir}/prometheus.log)")
        return self

    def _ready(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise AssertionError(f"prometheus exited: {Path(self._dir, 'prometheus.log').read_text()[-2000:]}")
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
            return resp.status == 200

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=5) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus API {path} failed: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]

    def wait_healthy(self, job: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        def healthy() -> list[dict[str, Any]] | None:
            mine = [t for t in self.targets() if t["labels"].get("job") == job]
            return mine if mine and all(t["health"] == "up" for t in mine) else None

        return wait_until(healthy, timeout=timeout, interval=0.25, what=f"all targets of job {job} healthy")

    def wait_value(self, expr: str, accept: Callable[[float], bool] = lambda v: True,
                   timeout: float = 30.0) -> float:
        """The first value of ``expr`` that ``accept`` accepts (polls; the first sample takes ~6 s)."""

        seen: list[Any] = []

        def probe() -> tuple[float] | None:
            result = self.query(expr)
            seen[:] = [result]
            if result:
                value = float(result[0]["value"][1])
                if accept(value):
                    return (value,)
            return None

        try:
            return wait_until(probe, timeout=timeout, interval=0.25, what=f"Prometheus query {expr!r}")[0]
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last result: {seen}") from None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
