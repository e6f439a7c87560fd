"""An Apache RocketMQ reference cluster (name server + broker + proxy) on loopback: 5.3.3 by default,
or 5.5.0 (``version="5.5.0"``, ``--version 5.5.0``), the second reference for priority messages and Lite mode.

Built from the jars ``make peers`` caches (peers/setup.sh).  Each process is one JVM with its own
``user.home`` (logs and stores land under it), its own logback file from inside the jars, small
heaps for a 2-core machine, and ports chosen by the caller or picked free.  ``start()`` returns
when the cluster answers: the broker is in the name server's route of ``TBW102`` and a gRPC
QueryRoute through the proxy returns the queues of a probe topic.  ``stop()`` sends SIGTERM (the
JVMs' shutdown hooks unregister and flush) and SIGKILLs whatever is left, so no process outlives it.

As a command (see docs/PEERS.md)::

    python peers/reference_cluster.py start --dir /tmp/rmq [--grpc-port 18081 ...]   # detached
    python peers/reference_cluster.py start --dir /tmp/rmq55 --version 5.5.0          # the second reference
    python peers/reference_cluster.py stop --dir /tmp/rmq
    python peers/reference_cluster.py run  --dir /tmp/rmq                             # until Ctrl-C
    python peers/reference_cluster.py mqadmin --dir /tmp/rmq clusterList

From pytest: tests/peers_support.py has the session-scoped fixture.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import remoting  # a sibling module: peers/ is not a package

VERSION = "5.3.3"  # the default reference, which every comparison uses unless it names another
# 5.5.0: priority messages (Apache 5.4.0) and Lite mode (5.5.0); 5.5.1 is not resolvable from Maven Central here
# (rocketmq-all:pom:5.5.1 and rocketmq-proxy:jar:5.5.1 are not found; docs/PEERS.md)
VERSIONS = ("5.3.3", "5.5.0")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rocketscope" / "peers"
LIB = CACHE / f"rocketmq-{VERSION}" / "lib"


def lib_of(version: str) -> Path:
    """The jars of one Apache RocketMQ release as `make peers` caches them (peers/setup.sh)."""
    return CACHE / f"rocketmq-{version}" / "lib"

GRPC_CLIENT_LIB = CACHE / "java-clients" / "lib"
CLASSES = CACHE / "classes"
RMQGO = CACHE / "bin" / "rmqgo"
CLUSTER = "DefaultCluster"
BROKER = "broker-a"
PROBE_TOPIC = "RS_PEERS_READY"
# the proxy exits when its start-up call creating DefaultHeartBeatSyncerTopic times out (its name-server
# calls wait under a second): at a load average of 30 with four JVMs starting, three attempts were not enough
PROXY_START_ATTEMPTS = 6
# Settings of the test clusters (--test-conf); the differential tests give RocketScope the same keys
# (tests/test_diff_grpc.py), so both sides are compared under one configuration.
TEST_PROXY_CONF = {"minInvisibleTimeMillsForRecv": 1000}
TEST_BROKER_CONF = {"defaultTopicQueueNums": 4, "transactionTimeOut": 3000, "transactionCheckInterval": 2000}

# JDK 17 and RocketMQ 5.3 (compiled for Java 8): the opens the reference cluster needs or may reach
JDK17_OPENS = ["--add-opens", "java.base/java.lang=ALL-UNNAMED", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
               "--add-opens", "java.base/java.util=ALL-UNNAMED",
               "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
               "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"]
MAIN = {"namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
        "broker": "org.apache.rocketmq.broker.BrokerStartup",
        "slave": "org.apache.rocketmq.broker.BrokerStartup",
        "broker-n1": "org.apache.rocketmq.broker.BrokerStartup",
        "broker-n2": "org.apache.rocketmq.broker.BrokerStartup",
        "proxy": "org.apache.rocketmq.proxy.ProxyStartup"}
# the members of a DLedger group (``dledger=True``): role, dLegerSelfId
DLEDGER_MEMBERS = (("broker", "n0"), ("broker-n1", "n1"), ("broker-n2", "n2"))


def missing(version: str = VERSION) -> str | None:
    """Why the reference cluster cannot run here, or None: `make peers` has not run, or no java."""
    if not any(CACHE.glob(".ready-*")) or not lib_of(version).is_dir():
        return f"Apache RocketMQ {version} is not in {CACHE}: run `make peers`"
    if not _which("java"):
        return "java is not installed: run `make peers` as root"
    return None


def _which(name: str) -> str | None:
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    try:  # the project's picker: below the ephemeral range, never twice in one process
        from rocketscope.ports import free_port
        return free_port()
    except ImportError:  # pragma: no cover - the CLI outside the venv
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])


def _broker_port() -> int:
    """A listenPort whose neighbours are free too: the broker binds listenPort-2 (its fast channel)
    and listenPort+1 (HA)."""
    for _ in range(100):
        port = _free_port()
        if _bindable(port - 2) and _bindable(port + 1):
            return port
    raise RuntimeError("no free broker port range on 127.0.0.1")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until(cond: Callable[[], Any], timeout: float, what: str, alive: Callable[[], str | None] | None = None,
               interval: float = 0.25) -> Any:
    """Poll ``cond`` until truthy; fail after ``timeout`` or as soon as ``alive()`` names a dead process."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        dead = alive() if alive else None
        if dead:
            raise RuntimeError(f"{dead} exited while waiting for {what}")
        try:
            value = cond()
            if value:
                return value
        except Exception as exc:  # the server may refuse or fail while it starts
            last = exc
        time.sleep(interval)
    detail = f" (last error: {last})" if last else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")


@dataclass
class ReferenceCluster:
    """One Apache RocketMQ name server, one broker (``broker-a`` of ``DefaultCluster``) and one proxy
    in cluster mode, under ``root``.  A port left at 0 is picked free at :meth:`start`.

    ``slave``: also a slave of ``broker-a`` (brokerId 1, brokerRole SLAVE, replicating from the master's
    HA port), for the replication benchmarks; give the master ``brokerRole=SYNC_MASTER`` in
    ``broker_conf`` to have sends wait for it.

    ``dledger``: ``broker-a`` is a DLedger group of three brokers instead (roles ``broker``,
    ``broker-n1``, ``broker-n2``; dLegerSelfId n0-n2; the elected leader registers as brokerId 0), for
    the failover benchmark (bench/failover_bench.py): :meth:`master_role`, :meth:`kill`, :meth:`relaunch`."""

    root: Path
    namesrv_port: int = 0
    broker_port: int = 0
    grpc_port: int = 0
    proxy_remoting_port: int = 0
    prom_port: int = 0
    heap: str = "512m"
    broker_conf: dict[str, Any] = field(default_factory=dict)
    proxy_conf: dict[str, Any] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    slave: bool = False
    slave_port: int = 0
    dledger: bool = False
    member_ports: dict[str, int] = field(default_factory=dict)  # DLedger: role -> listenPort (broker: broker_port)
    dledger_ports: dict[str, int] = field(default_factory=dict)  # DLedger: role -> its DLedger port
    version: str = VERSION  # which release's jars (VERSIONS)

    @property
    def lib(self) -> Path:
        return lib_of(self.version)

    # ------------------------------------------------------------------ addresses
    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def slave_addr(self) -> str:
        return f"127.0.0.1:{self.slave_port}"

    @property
    def endpoint(self) -> str:
        """The proxy's gRPC endpoint, for RocketMQ 5 gRPC clients."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def proxy_remoting_addr(self) -> str:
        return f"127.0.0.1:{self.proxy_remoting_port}"

    @property
    def metrics_url(self) -> str:
        """The broker's Prometheus endpoint (metricsExporterType=PROM)."""
        return f"http://127.0.0.1:{self.prom_port}/metrics"

    def describe(self) -> dict[str, Any]:
        return {"root": str(self.root), "namesrv": self.namesrv_addr, "broker": self.broker_addr,
                "grpc": self.endpoint, "proxyRemoting": self.proxy_remoting_addr, "metrics": self.metrics_url,
                "cluster": CLUSTER, "brokerName": BROKER, "pids": self.pids, "version": self.version,
                **({"slave": self.slave_addr} if self.slave else {}),
                **({"members": {r: f"127.0.0.1:{p}" for r, p in self.member_ports.items()},
                    "dledgerPorts": self.dledger_ports} if self.dledger else {})}

    # ------------------------------------------------------------------ life cycle
    def start(self, timeout: float = 240.0, detach: bool = False) -> ReferenceCluster:
        """Start the three JVMs and wait until the cluster serves routes; stop them on failure.

        ``detach`` keeps the JVMs running after this Python process exits (the CLI's ``start``).
        """
        why = missing(self.version)
        if why:
            raise RuntimeError(why)
        self.root.mkdir(parents=True, exist_ok=True)
        self.namesrv_port = self.namesrv_port or _free_port()
        self.broker_port = self.broker_port or _broker_port()
        self.grpc_port = self.grpc_port or _free_port()
        self.proxy_remoting_port = self.proxy_remoting_port or _free_port()
        self.prom_port = self.prom_port or _free_port()
        if self.slave:
            self.slave_port = self.slave_port or _broker_port()
        if self.dledger:
            self.member_ports = {"broker": self.broker_port, **{
                role: self.member_ports.get(role) or _broker_port() for role, _ in DLEDGER_MEMBERS[1:]}}
            self.dledger_ports = {role: self.dledger_ports.get(role) or _free_port() for role, _ in DLEDGER_MEMBERS}
        deadline = time.monotonic() + timeout
        left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
        try:
            self._write_confs()
            self._launch("namesrv", ["-c", str(self.root / "namesrv.conf")], heap="256m", detach=detach)
            wait_until(lambda: _port_open(self.namesrv_port), left(), "the name server's port", self._dead)
            for role in [r for r, _ in DLEDGER_MEMBERS] if self.dledger else ["broker"]:
                self.relaunch(role, detach=detach)
            wait_until(self._broker_routed, left(), "the broker in the name server's route of TBW102", self._dead)
            if self.slave:
                self._launch("slave", ["-c", str(self.root / "broker-slave.conf")], heap=self.heap, detach=detach,
                             extra=[f"-XX:MaxDirectMemorySize={self.heap}"])
                wait_until(self._slave_routed, left(), "the slave in the name server's route of TBW102", self._dead)
            # a DLedger group's probe topic has no message.type attribute: see _create_topic_on_brokers
            self._create_topic_on_brokers(PROBE_TOPIC, **({"message_type": None} if self.dledger else {}))
            for attempt in range(1, PROXY_START_ATTEMPTS + 1):
                # under a heavy load the proxy's start-up call that creates its system topic
                # (DefaultHeartBeatSyncerTopic) on the brokers can time out, and the proxy exits: start it again
                self._launch("proxy", ["-pm", "cluster", "-pc", str(self.root / "rmq-proxy.json")], heap=self.heap,
                             detach=detach)
                try:
                    wait_until(lambda: _port_open(self.grpc_port), left(), "the proxy's gRPC port", self._dead)
                    break
                except RuntimeError:
                    if attempt == PROXY_START_ATTEMPTS or self.procs["proxy"].poll() is None:
                        raise
                    print(f"Apache RocketMQ proxy exited during start-up (attempt {attempt}): starting it again",
                          file=sys.stderr)
            wait_until(lambda: self.grpc_route(PROBE_TOPIC), left(), f"a gRPC QueryRoute of {PROBE_TOPIC}",
                       self._dead)
        except BaseException:
            self.stop()
            raise
        self._save()
        return self

    def _slave_routed(self) -> bool:
        data = remoting.route(self.namesrv_addr, "TBW102")
        return any(b.get("brokerName") == BROKER and "1" in {str(k) for k in b.get("brokerAddrs", {})}
                   for b in data.get("brokerDatas", []))

    def _broker_routed(self) -> bool:
        """The broker (DLedger: the group's elected leader, as brokerId 0) is in the route of TBW102."""
        data = remoting.route(self.namesrv_addr, "TBW102")
        return any(b.get("brokerName") == BROKER and (not self.dledger or "0" in {str(k) for k in b["brokerAddrs"]})
                   for b in data.get("brokerDatas", []))

    def master_addr(self) -> str | None:
        """The address registered as brokerId 0 of broker-a (DLedger: the leader), or None."""
        try:
            data = remoting.route(self.namesrv_addr, "TBW102")
        except (OSError, remoting.RemotingError):
            return None
        for b in data.get("brokerDatas", []):
            if b.get("brokerName") == BROKER:
                return {str(k): v for k, v in b.get("brokerAddrs", {}).items()}.get("0")
        return None

    def master_role(self) -> str | None:
        """The role (``broker``, ``broker-n1``, ``broker-n2``) whose JVM is broker-a's master now: it is in the
        route as brokerId 0 and alive (a killed leader stays in the route until the name server notices)."""
        addr = self.master_addr()
        for role, port in (self.member_ports or {"broker": self.broker_port}).items():
            if addr == f"127.0.0.1:{port}" and self.alive(role):
                return role
        return None

    def alive(self, role: str) -> bool:
        proc = self.procs.get(role)
        return proc.poll() is None if proc is not None else role in self.pids and _is_ours(self.pids[role], MAIN[role])

    def kill(self, role: str) -> None:
        """kill -9 of one JVM (its process group), waited for."""
        pid = self.pids[role]
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if role in self.procs:
            self.procs[role].wait(30)

    def relaunch(self, role: str, detach: bool = False) -> None:
        """Start one broker JVM (again) with its config; the store it left is reused."""
        conf = "broker.conf" if role == "broker" else f"{role}.conf"
        self._launch(role, ["-c", str(self.root / conf)], heap=self.heap, detach=detach,
                     extra=[f"-XX:MaxDirectMemorySize={self.heap}"])

    def _create_topic_on_brokers(self, topic: str, **kw: Any) -> None:
        """On the broker, or on every live DLedger member: a new leader then has the topic at once (topic
        configs are not in the replicated commit log; followers copy them from the master every 10 s).

        Apache 5.3.3's followers fail that copy on any topic with a ``message.type`` attribute
        (SlaveSynchronize.syncTopicConfig: RuntimeException "only add attribute is supported while creating
        topic. key: essage.type", logged every pass) and are left without the topics the pass did not reach,
        so after a leader's kill -9 the new leader answers "topic[T] not exist" (seen in a DLedger group with
        broker-a's topics created with ``+message.type=NORMAL``).  On a DLedger group, create topics with
        ``message_type=None``: the proxy accepts NORMAL messages for a topic without the attribute."""
        if not self.dledger:
            remoting.create_topic(self.broker_addr, topic, **kw)
            return
        for role, port in self.member_ports.items():
            if self.alive(role):  # a member still starting may take its time to answer: asked again
                wait_until(lambda p=port: remoting.create_topic(f"127.0.0.1:{p}", topic, **kw) or True, 180,
                           f"{role} creating {topic}", lambda r=role: None if self.alive(r) else f"{r} died")

    def grpc_route(self, topic: str) -> list[Any]:
        """The message queues of a gRPC QueryRoute through the proxy; LookupError when not OK."""
        import grpc
        from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

        with grpc.insecure_channel(self.endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            req = service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name=topic),
                endpoints=definition_pb2.Endpoints(scheme=definition_pb2.IPv4, addresses=[
                    definition_pb2.Address(host="127.0.0.1", port=self.grpc_port)]))
            # the proxy refuses a request without a client id (CLIENT_ID_REQUIRED)
            resp = stub.QueryRoute(req, timeout=10, metadata=[("x-mq-client-id", "rocketscope-peers-probe"),
                                                              ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2")])
        if resp.status.code != definition_pb2.OK:
            raise LookupError(f"QueryRoute {topic}: {definition_pb2.Code.Name(resp.status.code)} {resp.status.message}")
        return list(resp.message_queues)

    def _dead(self) -> str | None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return f"Apache RocketMQ {name} (exit code {proc.returncode}; log {self.root / (name + '.out')})"
        return None

    def _write_confs(self) -> None:
        props = lambda d: "".join(f"{k}={v}\n" for k, v in d.items())  # noqa: E731
        (self.root / "namesrv.conf").write_text(props({"listenPort": self.namesrv_port, "bindAddress": "127.0.0.1"}))
        broker = {
            "brokerClusterName": CLUSTER, "brokerName": BROKER, "brokerId": 0, "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH", "namesrvAddr": self.namesrv_addr,
            # loopback only: the default is the host's first non-loopback address
            "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1", "bindAddress": "127.0.0.1",
            "listenPort": self.broker_port, "haListenPort": self.broker_port + 1,
            "storePathRootDir": self.root / "broker" / "store",
            "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true",
            "traceTopicEnable": "true", "enablePropertyFilter": "true",
            "metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1",
            "metricsPromExporterPort": self.prom_port,
            "mappedFileSizeCommitLog": 128 << 20,
        }
        broker.update(self.broker_conf)
        if self.dledger:
            peers = ";".join(f"{sid}-127.0.0.1:{self.dledger_ports[role]}" for role, sid in DLEDGER_MEMBERS)
            for role, sid in DLEDGER_MEMBERS:
                port = self.member_ports[role]
                member = dict(broker, listenPort=port, haListenPort=port + 1,
                              storePathRootDir=self.root / role / "store", enableDLegerCommitLog="true",
                              dLegerGroup=BROKER, dLegerPeers=peers, dLegerSelfId=sid,
                              **({} if role == "broker" else {"metricsExporterType": "DISABLE"}))
                member.update(self.broker_conf)
                (self.root / ("broker.conf" if role == "broker" else f"{role}.conf")).write_text(props(member))
        else:
            (self.root / "broker.conf").write_text(props(broker))
        if self.slave:
            slave = dict(broker, brokerId=1, brokerRole="SLAVE", listenPort=self.slave_port,
                         haListenPort=self.slave_port + 1, storePathRootDir=self.root / "slave" / "store",
                         metricsExporterType="DISABLE")
            (self.root / "broker-slave.conf").write_text(props(slave))
        proxy = {
            "rocketMQClusterName": CLUSTER, "proxyMode": "cluster", "namesrvAddr": self.namesrv_addr,
            "grpcServerPort": self.grpc_port, "remotingListenPort": self.proxy_remoting_port,
            # the proxy caches "no such topic" for this long (default 20 s): short for tests
            "topicRouteServiceCacheRefreshSeconds": 1, "topicConfigCacheRefreshSeconds": 1,
            "subscriptionGroupConfigCacheRefreshSeconds": 1,
            "metricsExporterType": "DISABLE",
        }
        proxy.update(self.proxy_conf)
        (self.root / "rmq-proxy.json").write_text(json.dumps(proxy, indent=2))

    def _launch(self, role: str, args: list[str], heap: str, detach: bool, extra: list[str] | None = None) -> None:
        home = self.root / role
        home.mkdir(parents=True, exist_ok=True)
        cmd = ["java", "-server", f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseSerialGC", *JDK17_OPENS, *(extra or []),
               f"-Duser.home={home}",
               f"-Drmq.logback.configurationFile=rmq.{'broker' if MAIN[role] == MAIN['broker'] else role}.logback.xml",
               "-cp", f"{self.lib}/*", MAIN[role], *args]
        env = dict(os.environ, ROCKETMQ_HOME=str(self.root), RMQ_PROXY_HOME=str(self.root))
        with open(self.root / f"{role}.out", "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=home, start_new_session=True)
        self.procs[role] = proc
        self.pids[role] = proc.pid
        if detach:
            self._save()

    def _save(self) -> None:
        (self.root / "cluster.json").write_text(json.dumps(self.describe(), indent=2))

    def stop(self, timeout: float = 30.0, graceful: bool = True) -> None:
        """SIGTERM proxy, broker, name server (in that order), then SIGKILL any that did not exit.

        ``graceful=False`` sends SIGKILL at once: for a throwaway cluster (the tests' session fixture,
        tests/peers_support.py), whose shutdown nobody observes.  Apache's graceful shutdown took
        27 s (proxy 12.8 s, broker 13.2 s, name server 1.3 s), the last 30 s of every test run."""
        for role in ("proxy", "slave", "broker-n1", "broker-n2", "broker", "namesrv"):
            pid = self.pids.get(role)
            if pid is None or not _is_ours(pid, MAIN[role]):
                continue
            try:
                os.killpg(pid, signal.SIGTERM if graceful else signal.SIGKILL)
            except ProcessLookupError:
                continue
            end = time.monotonic() + timeout
            while time.monotonic() < end and _is_ours(pid, MAIN[role]):
                if role in self.procs and self.procs[role].poll() is not None:
                    break
                time.sleep(0.1)
            if _is_ours(pid, MAIN[role]) and (role not in self.procs or self.procs[role].poll() is None):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if role in self.procs:
                self.procs[role].wait(10)
        self.pids.clear()
        self.procs.clear()
        if (self.root / "cluster.json").exists():
            (self.root / "cluster.json").unlink()

    @classmethod
    def attach(cls, root: Path) -> ReferenceCluster:
        """The cluster a detached ``start`` left under ``root`` (from its cluster.json)."""
        data = json.loads((root / "cluster.json").read_text())
        port = lambda key: int(data[key].rsplit(":", 1)[1])  # noqa: E731
        c = cls(root, namesrv_port=port("namesrv"), broker_port=port("broker"), grpc_port=port("grpc"),
                proxy_remoting_port=port("proxyRemoting"), prom_port=int(data["metrics"].split(":")[2].split("/")[0]))
        c.pids = {k: int(v) for k, v in data["pids"].items()}
        c.version = data.get("version", VERSION)
        if "slave" in data:
            c.slave, c.slave_port = True, port("slave")
        if "members" in data:
            c.dledger = True
            c.member_ports = {r: int(a.rsplit(":", 1)[1]) for r, a in data["members"].items()}
            c.dledger_ports = {r: int(p) for r, p in data["dledgerPorts"].items()}
        return c

    # ------------------------------------------------------------------ admin
    def mqadmin(self, *args: str, timeout: float = 120.0) -> str:
        """Apache's MQAdminStartup with ``-n`` added; returns its output.  It exits 0 even when the
        command fails, so a stack trace in the output raises instead."""
        code, out, stdout = run_mqadmin(self.lib, self.namesrv_addr, self.root, *args, timeout=timeout,
                                        home=self.root / "mqadmin")
        if code != 0 or "Exception" in out:
            raise RuntimeError(f"mqadmin {' '.join(args)} failed ({code}):\n{out}")
        return stdout

    def create_topic(self, topic: str, message_type: str | None = "NORMAL", queues: int = 4) -> None:
        """Create a topic with its 5.x message type (None: no attribute, for DLedger groups, see
        :meth:`_create_topic_on_brokers`) and wait until the proxy routes it."""
        self._create_topic_on_brokers(topic, queues=queues, message_type=message_type, order=message_type == "FIFO")
        wait_until(lambda: self.grpc_route(topic), 60, f"the proxy's route of {topic}")

    def create_group(self, group: str, orderly: bool = False, retry_max_times: int = 16) -> None:
        remoting.create_group(self.master_addr() if self.dledger else self.broker_addr, group, orderly=orderly,
                              retry_max_times=retry_max_times)

    def logs(self, tail: int = 4000) -> str:
        parts = []
        for role in ("namesrv", "broker", "slave", "broker-n1", "broker-n2", "proxy"):
            log = "broker" if MAIN[role] == MAIN["broker"] else role
            for path in (self.root / f"{role}.out", self.root / role / "logs" / "rocketmqlogs" / f"{log}.log"):
                if path.exists():
                    parts.append(f"----- {path} -----\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)


def run_mqadmin(lib: Path, namesrv: str, rocketmq_home: Path, *args: str, timeout: float = 180.0,
                home: Path | None = None) -> tuple[int, str, str]:
    """Apache's mqadmin (MQAdminStartup from the jars in ``lib``), unchanged, against any name server:
    (exit code, stdout + stderr, stdout).  It exits 0 even when a command fails, printing the exception, so
    callers read the output.  A run whose remoting call timed out while its JVM warmed up (2-3 s on a
    loaded machine) is run again, three runs at most."""
    cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *JDK17_OPENS,
           f"-Duser.home={home or rocketmq_home}", "-Drmq.logback.configurationFile=rmq.tools.logback.xml",
           "-cp", f"{lib}/*", "org.apache.rocketmq.tools.command.MQAdminStartup", *args, "-n", namesrv]
    env = dict(os.environ, ROCKETMQ_HOME=str(rocketmq_home))
    for _ in range(3):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
        out = res.stdout + res.stderr
        if "TimeoutException" not in out:
            break
    return res.returncode, out, res.stdout


def _is_ours(pid: int, main_class: str) -> bool:
    """The pid is alive and still runs our JVM (a saved pid may have been reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return main_class.encode() in cmdline


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="reference_cluster.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["start", "stop", "run", "mqadmin", "status"])
    ap.add_argument("--dir", required=True, type=Path, help="working directory: confs, logs, stores, cluster.json")
    for name in ("namesrv-port", "broker-port", "grpc-port", "proxy-remoting-port", "prom-port"):
        ap.add_argument(f"--{name}", type=int, default=0, help="default: a free port")
    ap.add_argument("--heap", default="512m", help="-Xms/-Xmx of the broker and the proxy (name server: 256m)")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for readiness")
    ap.add_argument("--slave", action="store_true", help="also start a SLAVE of broker-a (brokerId 1)")
    ap.add_argument("--dledger", action="store_true",
                    help="broker-a as a DLedger group of three brokers (n0-n2) instead of one broker")
    ap.add_argument("--version", choices=VERSIONS, default=VERSION,
                    help=f"which Apache RocketMQ (default {VERSION}; 5.5.0 has priority messages and Lite mode)")
    ap.add_argument("--broker-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra broker key, repeatable (Lite mode on 5.5.0: enableLmq=true, "
                         "enableMultiDispatch=true)")
    ap.add_argument("--test-conf", action="store_true",
                    help="the settings of the test clusters (TEST_BROKER_CONF, TEST_PROXY_CONF)")
    args, rest = ap.parse_known_args(argv)
    root = args.dir.resolve()
    if args.command in ("start", "run"):
        c = ReferenceCluster(root, args.namesrv_port, args.broker_port, args.grpc_port, args.proxy_remoting_port,
                             args.prom_port, heap=args.heap, slave=args.slave, dledger=args.dledger,
                             version=args.version)
        if args.test_conf:
            c.broker_conf, c.proxy_conf = dict(TEST_BROKER_CONF), dict(TEST_PROXY_CONF)
        c.broker_conf.update(kv.split("=", 1) for kv in args.broker_conf)
        t0 = time.monotonic()
        c.start(timeout=args.timeout, detach=args.command == "start")
        print(json.dumps(dict(c.describe(), readySeconds=round(time.monotonic() - t0, 1)), indent=2), flush=True)
        if args.command == "start":
            return 0
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
        try:
            while not stop["now"] and not c._dead():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        c.stop()
        return 0
    c = ReferenceCluster.attach(root)
    if args.command == "stop":
        c.stop()
        print("stopped")
    elif args.command == "status":
        alive = {role: _is_ours(pid, MAIN[role]) for role, pid in c.pids.items()}
        print(json.dumps(dict(c.describe(), alive=alive), indent=2))
        return 0 if all(alive.values()) else 1
    else:
        print(c.mqadmin(*[a for a in rest if a != "--"]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
