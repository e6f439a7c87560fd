"""The demo's cluster: a name server and a three-node DLedger group on loopback, plus Prometheus if installed.

Every process is a child in its own process group (rocketscope.procs), so Ctrl-C or the
end of the demo stops all of them.  Ports are picked free at start; configuration files
and logs live in the demo's work directory, printed at the start.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketscope.procs import free_port, kill9, port_open, spawn, spawn_exe, wait_for

GROUP = "broker-d"
CLUSTER = "DemoCluster"
ADMIN = [str(Path(sys.executable).parent / "rocketscope"), "admin"]


@dataclass
class Node:
    self_id: str
    conf: Path
    grpc_port: int
    listen_port: int
    metrics_port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def admin_addr(self) -> str:
        return f"127.0.0.1:{self.listen_port}"


@dataclass
class DemoCluster:
    work: Path
    ns_port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)
    prometheus_url: str = ""
    ns_metrics_port: int = field(default_factory=free_port)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def endpoints(self) -> str:
        """The multi-address endpoint the official client takes: any member serves (followers forward)."""
        return ";".join(n.endpoint for n in self.nodes)

    # ------------------------------------------------------------------ start
    def start_namesrv(self) -> None:
        conf = self.work / "namesrv.conf"
        conf.write_text(f"listenPort={self.ns_port}\nmetricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\n"
                        f"metricsPromExporterPort={self.ns_metrics_port}\n")
        spawn(["namesrv", "-c", str(conf)], self.work / "namesrv.log")
        wait_for(lambda: port_open(self.ns_port), 30, "the name server")

    def start_group(self, size: int = 3) -> None:
        peer_ports = [free_port() for _ in range(size)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(peer_ports))
        for i in range(size):
            node = Node(f"n{i}", self.work / f"broker-n{i}.conf", free_port(), free_port(), free_port())
            values = {
                "brokerClusterName": CLUSTER, "brokerName": GROUP, "namesrvAddr": self.namesrv,
                "grpcServerPort": node.grpc_port, "listenPort": node.listen_port, "haListenPort": free_port(),
                "storePathRootDir": self.work / f"store-n{i}", "enableDLegerCommitLog": "true",
                "dLegerGroup": GROUP, "dLegerPeers": peers, "dLegerSelfId": node.self_id,
                "mappedFileSizeCommitLog": 16 << 20, "defaultTopicQueueNums": 4,
                "traceTopicEnable": "true", "brokerTraceEnable": "true",
                "metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1",
                "metricsPromExporterPort": node.metrics_port, "minInvisibleTimeMillsForRecv": 1000,
            }
            node.conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
            self.nodes.append(node)
        for node in self.nodes:
            self.start_node(node)

    def start_node(self, node: Node, wait: bool = True) -> None:
        """Start a member; ``wait=False`` returns at once (:meth:`wait_node` later), so a restart overlaps a wait."""
        node.proc = spawn(["broker", "-c", str(node.conf)], self.work / f"broker-{node.self_id}.log")
        if wait:
            self.wait_node(node)

    def wait_node(self, node: Node, timeout: float = 60) -> None:
        wait_for(lambda: port_open(node.grpc_port) and port_open(node.listen_port), timeout, f"broker {node.self_id}")

    def start_prometheus(self) -> bool:
        """A real Prometheus scraping every node each second, when the Debian package is installed."""
        binary = shutil.which("prometheus")
        if not binary:
            return False
        port = free_port()
        config = {"global": {"scrape_interval": "2s"}, "scrape_configs": [
            {"job_name": "rocketscope-broker",
             "static_configs": [{"targets": [f"127.0.0.1:{n.metrics_port}" for n in self.nodes]}]},
            {"job_name": "rocketscope-namesrv", "static_configs": [{"targets": [f"127.0.0.1:{self.ns_metrics_port}"]}]},
        ]}
        path = self.work / "prometheus.yml"
        path.write_text(json.dumps(config, indent=2))
        spawn_exe([binary, f"--config.file={path}", f"--storage.tsdb.path={self.work / 'prometheus-data'}",
                   f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], self.work / "prometheus.log")
        self.prometheus_url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _http_ok(f"{self.prometheus_url}/-/ready"), 30, "Prometheus")
        return True

    # ------------------------------------------------------------------ admin
    def admin(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([*ADMIN, *args, "-n", self.namesrv], capture_output=True, text=True, timeout=60)
        if check and res.returncode != 0:
            raise RuntimeError(f"rocketscope admin {' '.join(args)} failed: {res.stderr.strip()}")
        return res

    def status(self, node: Node) -> dict[str, Any] | None:
        """The node's HaStatus (role, term), or None when it does not answer.

        In-process rather than `rocketscope admin haStatus`: the demo polls this while waiting for a leader,
        and a Python start-up per poll and node cost seconds on a loaded machine."""
        from rocketscope.admin_client import AdminClient
        from rocketscope.broker.protocol import common_pb2

        async def go() -> dict[str, Any]:
            client = AdminClient(self.namesrv, timeout_s=3.0)
            try:
                resp = await client.broker_call(node.admin_addr, "HaStatus", common_pb2.Empty())
                return json.loads(resp.json)  # type: ignore[attr-defined, no-any-return]
            finally:
                await client.close()
        try:
            return asyncio.run(go())
        except Exception:  # a killed or starting node: no status yet
            return None

    def leader(self, exclude: Node | None = None) -> Node | None:
        for node in self.nodes:
            if node is exclude or node.proc is None or node.proc.poll() is not None:
                continue
            st = self.status(node)
            if st and st.get("role") == "LEADER":
                return node
        return None

    def wait_leader(self, timeout: float = 60, exclude: Node | None = None) -> Node:
        found: list[Node] = []

        def check() -> bool:
            node = self.leader(exclude)
            if node is not None:
                found.append(node)
            return node is not None
        wait_for(check, timeout, "a DLedger leader")
        return found[-1]

    def term(self) -> int:
        terms = [int(st.get("term", 0)) for n in self.nodes if (st := self.status(n))]
        return max(terms, default=0)

    def kill9(self, node: Node) -> None:
        assert node.proc is not None
        kill9(node.proc)
        node.proc = None


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
