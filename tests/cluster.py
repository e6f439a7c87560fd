"""Real RocketScope processes on free loopback ports, for end-to-end tests.

Every process is a `rocketscope ...` subprocess with its own log file (printed when a
test fails), started and waited for by polling a condition with a timeout, and always
stopped (SIGTERM, then SIGKILL) so no process outlives a test.  A cluster's processes are
stopped together (:func:`stop_together`), not one after the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from conftest import free_port

from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2
from rocketscope.ports import port_open

BIN = Path(sys.executable).parent / "rocketscope"


def ha_status(admin_addr: str, timeout: float = 5.0) -> dict[str, Any]:
    """A broker's replication state over its admin port: what ``rocketscope admin haStatus -b ADDR``
    prints for it, asked in-process.  Tests poll roles many times a second; through the CLI each poll
    started a Python process (about 1 s of CPU), which on a loaded machine slowed the very cluster
    being polled (tests/test_e2e_dledger.py timed out waiting for it, session 10).  Raises
    AssertionError when the broker does not answer, as a failed CLI call does."""
    with grpc.insecure_channel(admin_addr) as ch:
        try:
            resp = admin_pb2_grpc.BrokerAdminStub(ch).HaStatus(common_pb2.Empty(), timeout=timeout)
        except grpc.RpcError as exc:
            raise AssertionError(f"haStatus of {admin_addr}: {exc.code().name} {exc.details()}") from None
    status: dict[str, Any] = json.loads(resp.json)
    return status


def broker_has_topic(admin_addr: str, topic: str) -> bool:
    """Whether the broker at ``admin_addr`` holds ``topic``'s config: a slave copies it from its master every
    few seconds (broker/ha/slave.py), and serves only topics it has the config of."""
    with grpc.insecure_channel(admin_addr) as ch:
        topics = admin_pb2_grpc.BrokerAdminStub(ch).GetTopicConfigs(common_pb2.Empty(), timeout=5)
    return any(t.topic_name == topic for t in topics.topics)


def wait_until(cond: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = cond()
            if value:
                return value
        except Exception as exc:  # a condition may fail while a server is still starting
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc})"
                                                                              if last_exc else ""))


@dataclass
class Proc:
    name: str
    args: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as fh:
            self.popen = subprocess.Popen(self.args, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True)
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()

    def kill9(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)

    def pause(self, paused: bool) -> None:
        """SIGSTOP / SIGCONT the process group: a process that is alive but does nothing."""
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def stop_together(procs: Iterable[Proc | None], timeout: float = 10.0) -> None:
    """SIGTERM every running process first, then wait for each (SIGKILL what is left after ``timeout``):
    the graceful shutdowns overlap instead of adding up.

    Why: a broker took 1-4 s from SIGTERM to exit (its gRPC servers' 1 s grace while clients are
    connected, the interpreter's exit: 0.6-1.3 s, gone since rocketscope/fast_exit.py) and a name server
    0.5-2.5 s; one after the other, a name server and a DLedger group took
    11.9 s to stop, together 5.9 s (scripted, load ~30; the brokers' part 10.2 -> 3.3 s).  Each
    process still gets the same SIGTERM and the same ``timeout`` as :meth:`Proc.stop`.
    """
    running = [p for p in procs if p is not None and p.alive]
    for p in running:
        assert p.popen is not None
        with contextlib.suppress(ProcessLookupError):
            p.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in running:
        assert p.popen is not None
        try:
            p.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill9()


@dataclass
class BrokerNode:
    name: str
    conf: Path
    grpc_port: int
    listen_port: int
    store: Path
    proc: Proc

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def admin_addr(self) -> str:
        return f"127.0.0.1:{self.listen_port}"


@dataclass
class LocalCluster:
    root: Path
    namesrv_ports: list[int] = field(default_factory=list)
    namesrvs: list[Proc] = field(default_factory=list)
    brokers: dict[str, BrokerNode] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return ";".join(f"127.0.0.1:{p}" for p in self.namesrv_ports)

    def start_namesrv(self, count: int = 1, conf: Callable[[int], dict[str, Any]] | None = None) -> None:
        """``count`` name servers; ``conf(i)`` gives extra keys of the i-th (written to its own file)."""
        for i in range(count):
            port = free_port()
            args = [str(BIN), "namesrv", "-p", str(port)]
            if conf is not None:
                path = self.root / f"namesrv{i}.conf"
                path.write_text("".join(f"{k}={v}\n" for k, v in conf(i).items()))
                args += ["-c", str(path)]
            proc = Proc(f"namesrv{i}", args, self.root / f"namesrv{i}.log").start()
            self.namesrv_ports.append(port)
            self.namesrvs.append(proc)
        for port in self.namesrv_ports:
            wait_until(lambda p=port: _port_open(p), what=f"name server on port {port}")

    def start_broker(self, name: str = "broker-a", **conf: Any) -> BrokerNode:
        node = self.brokers.get(name)
        if node is None:
            grpc_port, listen_port = free_port(), free_port()
            store = self.root / f"store-{name}"
            values = {"brokerName": name, "namesrvAddr": self.namesrv_addr, "grpcServerPort": grpc_port,
                      "listenPort": listen_port, "storePathRootDir": store, "mappedFileSizeCommitLog": 1 << 20,
                      "mappedFileSizeConsumeQueue": 20 * 1000, "maxHashSlotNum": 1000, "maxIndexNum": 10000,
                      "minInvisibleTimeMillsForRecv": 1000, "defaultTopicQueueNums": 4}
            values.update(conf)
            path = self.root / f"{name}.conf"
            path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
            node = BrokerNode(name, path, grpc_port, listen_port, store,
                              Proc(name, [str(BIN), "broker", "-c", str(path)], self.root / f"{name}.log"))
            self.brokers[name] = node
        node.proc.start()
        # 60 s: a broker's start (imports, store recovery) took over 20 s on a 2-core machine at load 30+
        wait_until(lambda: _port_open(node.grpc_port) and _port_open(node.listen_port), timeout=60,
                   what=f"broker {name} ports")
        if self.namesrv_ports:
            wait_until(lambda: node.endpoint in self.registered_grpc_addrs(), timeout=60, what=f"{name} registered")
        return node

    def registered_grpc_addrs(self) -> set[str]:
        """Client addresses of the brokers registered at the first name server: what `admin clusterList` asks,
        asked in-process (each CLI process took tens of seconds to start on a loaded 2-core machine)."""
        import grpc

        from rocketscope.broker.protocol import common_pb2, namesrv_pb2_grpc

        with grpc.insecure_channel(f"127.0.0.1:{self.namesrv_ports[0]}") as ch:
            info = namesrv_pb2_grpc.NameServerStub(ch).GetClusterInfo(common_pb2.Empty(), timeout=10)
        return {b.registration.grpc_addr for b in info.brokers}

    def admin(self, *args: str, check: bool = True, namesrv: bool = True) -> subprocess.CompletedProcess[str]:
        """``rocketscope admin ARGS`` (with ``-n`` unless ``namesrv`` is false: controller commands take ``-a``)."""
        ns = ["-n", self.namesrv_addr] if namesrv else []
        res = subprocess.run([str(BIN), "admin", *args, *ns], capture_output=True, text=True, timeout=60)
        if check and res.returncode != 0:
            raise AssertionError(f"admin {' '.join(args)} failed ({res.returncode}): {res.stderr}{res.stdout}")
        return res

    def admin_json(self, *args: str) -> Any:
        import json

        return json.loads(self.admin(*args, "--json").stdout)

    def stop(self) -> None:
        """The brokers together, then the name servers together (a broker unregisters from them as it stops)."""
        stop_together(node.proc for node in self.brokers.values())
        stop_together(self.namesrvs)

    def logs(self) -> str:
        parts = [f"----- {p.name} -----\n{p.log()[-6000:]}" for p in self.namesrvs]
        parts += [f"----- {n.name} -----\n{n.proc.log()[-6000:]}" for n in self.brokers.values()]
        return "\n".join(parts)


@contextmanager
def cluster_with_namesrv(root: Path, test_failed: Callable[[], bool]) -> Iterator[LocalCluster]:
    """A LocalCluster with one name server, always stopped; its process logs printed when the
    set-up or the test (``test_failed()``, read after the test) failed. The fixture of the
    e2e tests that build their own brokers on it."""
    c = LocalCluster(root)
    try:
        c.start_namesrv()
        yield c
        if test_failed():
            print(c.logs())
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def commitlog_bytes(store: Path, end: int) -> bytes:
    """A broker's commit log below ``end``, its segments joined (to compare replicas byte for byte)."""
    out = b""
    for seg in sorted((store / "commitlog").iterdir()):
        out += seg.read_bytes()
    return out[:end]


def _port_open(port: int) -> bool:
    return port_open(port)


def start_dledger_group(c: LocalCluster, name: str = "broker-d", size: int = 3, **conf: Any) -> list[BrokerNode]:
    """``size`` brokers forming one DLedger group (members ``<name>-n0`` …), all registered."""
    peer_ports = [free_port() for _ in range(size)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(peer_ports))
    nodes = []
    for i in range(size):
        nodes.append(c.start_broker(f"{name}-n{i}", brokerName=name, enableDLegerCommitLog="true",
                                    dLegerGroup=name, dLegerPeers=peers, dLegerSelfId=f"n{i}", **conf))
    wait_until(lambda: leader_held(nodes, STABLE_LEADER_S), timeout=60, interval=0.2,
               what=f"a leader of {name} holding for {STABLE_LEADER_S} s")
    return nodes


# The group's first leader may be deposed within a second while the last member is still starting (its
# check-quorum window, 0.6 s, finds too few answers): seen in CI, where a test then created its topic on the
# deposed leader and its producer's route had no writable queue.  The group counts as started once a leader
# has held longer than two such windows.
STABLE_LEADER_S = 1.5


def leader_held(nodes: list[BrokerNode], seconds: float) -> bool:
    """The member that logged "leader of term T" for the highest T still leads (its last leadership line is that
    one) and has for at least ``seconds``.

    By term, not by the newest line across members: a deposed leader may log "no longer leader" a few
    milliseconds after its successor logged "leader of term" (seen in CI: n0 led term 2 for a minute while
    n1's later "no longer leader" line kept the old check false); a killed leader never logs that line at all."""
    import datetime
    import re

    best: tuple[int, datetime.datetime, bool] | None = None  # (term, since, still its last leadership line)
    for n in nodes:
        mine: tuple[int, datetime.datetime] | None = None
        still = False
        for line in n.proc.log_path.read_text(errors="replace").splitlines():
            if "dledger.node: dledger" not in line or not (": leader of term" in line or "no longer leader" in line):
                continue
            try:
                at = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            except ValueError:
                continue
            m = re.search(r": leader of term (\d+)", line)
            if m:
                mine, still = (int(m.group(1)), at), True
            else:
                still = False
        if mine is not None and (best is None or mine[0] > best[0]):
            best = (mine[0], mine[1], still)
    return best is not None and best[2] and (datetime.datetime.now() - best[1]).total_seconds() >= seconds


def endpoints_of(nodes: list[BrokerNode]) -> str:
    return ";".join(n.endpoint for n in nodes)
