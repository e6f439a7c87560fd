"""The clusters the nemesis works on: real name server, broker and controller processes on loopback.

Three modes, all built with tests/cluster.py (one ``rocketscope`` process per node, its own
log file) and with every node-to-node link going through a tests/netproxy.py proxy,
so a node can be isolated, cut one way or slowed without touching the kernel:

* ``dledger``: three brokers in one DLedger group, Raft traffic proxied per directed pair,
  ``preferredLeaderId=n0`` so the "preferred leader returns" fault exists;
* ``controller``: three controllers and a three-broker set; each broker reaches each
  controller through its own proxy (the HA data links between brokers are not proxied:
  the controller advertises the brokers' own HA addresses);
* ``masterslave``: a SYNC_MASTER and one SLAVE whose HA link (``haMasterAddress``) is proxied.

Node 0 is the preferred leader / initial master.  Every method that waits does so on a
condition with a timeout (tests/cluster.py ``wait_until``).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from cluster import BIN, BrokerNode, LocalCluster, Proc, stop_together, wait_until
from cluster import ha_status as cluster_ha_status
from conftest import free_port
from netproxy import LinkLoop, LinkProxy

from chaos.sockets import connections_to
from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2
from rocketscope.ports import port_open

MODES = ("dledger", "controller", "masterslave")
TOPICS = ("ChaosNormal", "ChaosFifo", "ChaosDelay", "ChaosTx")
FIFO_GROUP = "ChaosSimpleA"  # orderly; the other groups are orderly too (see ``ChaosCluster.create_resources``)
GROUPS = ("ChaosSimpleA", "ChaosSimpleB", "ChaosPush")

# Transactions must be checked back within a short test: first check 2 s after the half
# message, then every second (defaults: 6 s and 30 s).  minInvisibleTimeMillsForRecv comes
# from tests/cluster.py (1 s) so a consumer that fails to ack sees the message again soon.
COMMON = {"transactionTimeOut": 2000, "transactionCheckInterval": 1000, "transactionCheckMax": 30,
          "flushDiskType": "SYNC_FLUSH"}
# Controller mode runs with the product's default timing (no timing keys set: issue 15 asks for
# failover clients do not feel *with default settings*; broker/controller/config.py has them, e.g.
# heartbeats every 200 ms and a broker deemed dead after 800 ms without one).  Until session 11 the
# harness set tests/test_e2e_controller.py's keys, whose 1.5 s heartbeat timeout is slower than that.


def ha_status(node: BrokerNode, timeout: float = 2.0) -> dict[str, Any] | None:
    """The node's ``HaStatus`` over its admin port, or None when it does not answer (dead, paused)."""
    if not node.proc.alive:
        return None
    try:
        return cluster_ha_status(node.admin_addr, timeout)
    except AssertionError:
        return None


def commitlog_bytes(store: Path, end: int) -> bytes:
    out = b""
    for seg in sorted((store / "commitlog").iterdir()):
        out += seg.read_bytes()
        if len(out) >= end:
            break
    return out[:end]


@dataclass
class ChaosCluster:
    """One mode's processes and proxies; ``links[(i, j)]`` is how node i reaches node j (or controller j)."""

    mode: str
    c: LocalCluster
    ll: LinkLoop
    nodes: list[BrokerNode] = field(default_factory=list)
    links: dict[tuple[int, int], LinkProxy] = field(default_factory=dict)
    controllers: list[Proc] = field(default_factory=list)
    paused: set[int] = field(default_factory=set)
    # DLedger: (leader, term, lastIndex) the leader reported at the previous ``settled`` poll
    _leader_seen: tuple[int, int, int] | None = None

    # ------------------------------------------------------------ build
    @classmethod
    def start(cls, mode: str, root: Path, ll: LinkLoop) -> ChaosCluster:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        cc = cls(mode, LocalCluster(root), ll)
        try:
            cc.c.start_namesrv()
            getattr(cc, f"_start_{mode}")()
            cc.wait_writer(timeout=90)
            cc.create_resources()
            cc.wait_settled(timeout=90)
        except BaseException:
            print(cc.logs())
            cc.stop()  # no process outlives a failed start
            raise
        return cc

    def _broker(self, name: str, **conf: Any) -> BrokerNode:
        """tests/cluster.py's start_broker, with a longer wait when a loaded machine starts it slowly."""
        try:
            return self.c.start_broker(name, **conf)
        except AssertionError:
            node = self.c.brokers.get(name)
            if node is None or not node.proc.alive:
                raise
            wait_until(lambda: ha_status(node) is not None and any(
                b["grpcAddr"] == node.endpoint for b in self.c.admin_json("clusterList")),
                timeout=120, interval=0.5, what=f"{name} up and registered")
            return node

    def admin(self, *args: str) -> None:
        """``rocketscope admin ARGS -n …`` with a time-out a loaded machine can meet (tests/cluster.py: 60 s)."""
        res = subprocess.run([str(BIN), "admin", *args, "-n", self.c.namesrv_addr], capture_output=True, text=True,
                             timeout=240)
        if res.returncode != 0:
            raise AssertionError(f"admin {' '.join(args)} failed ({res.returncode}): {res.stderr}{res.stdout}")

    def _start_dledger(self) -> None:
        ports = [free_port() for _ in range(3)]
        self.links = {(i, j): self.ll.proxy(ports[j]) for i in range(3) for j in range(3) if i != j}
        for i in range(3):
            peers = ";".join(f"n{j}-127.0.0.1:{ports[j] if j == i else self.links[(i, j)].port}" for j in range(3))
            self.nodes.append(self._broker(
                f"d{i}", brokerName="broker-d", enableDLegerCommitLog="true", dLegerGroup="broker-d",
                dLegerPeers=peers, dLegerSelfId=f"n{i}", preferredLeaderId="n0", **COMMON))

    def _start_controller(self) -> None:
        ctl_ports = self._start_controllers()
        self.links = {(i, k): self.ll.proxy(ctl_ports[k]) for i in range(3) for k in range(3)}
        for i in range(3):
            addrs = ";".join(f"127.0.0.1:{self.links[(i, k)].port}" for k in range(3))
            self.nodes.append(self._broker(
                f"c{i}", brokerName="broker-c", enableControllerMode="true", controllerAddr=addrs,
                allAckInSyncStateSet="true", minInSyncReplicas=1, **COMMON))
            if i == 0:  # the first broker to register becomes master: node 0, as in the other modes
                wait_until(lambda: self.writer() == 0, timeout=90, what="c0 master")

    def _start_controllers(self) -> list[int]:
        """Three controllers as tests/test_e2e_controller.py starts them, each kept in
        ``self.controllers`` as soon as it runs (so a failed start still stops them)."""
        raft_ports = [free_port() for _ in range(3)]
        client_ports = [free_port() for _ in range(3)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(raft_ports))
        root = self.c.root
        for i in range(3):
            conf = root / f"controller-n{i}.conf"
            values = {"controllerDLegerGroup": "ctl", "controllerDLegerPeers": peers,
                      "controllerDLegerSelfId": f"n{i}", "controllerStorePath": root / f"controller-n{i}",
                      "listenPort": client_ports[i]}
            conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
            self.controllers.append(Proc(f"controller-n{i}", [str(BIN), "controller", "-c", str(conf)],
                                         root / f"controller-n{i}.log").start())
        for p in client_ports:
            wait_until(lambda p=p: port_open(p), timeout=90, what=f"controller on {p}")
        return client_ports

    def _start_masterslave(self) -> None:
        ha_master = free_port()
        self.links = {(1, 0): self.ll.proxy(ha_master)}
        self.nodes.append(self._broker("master", brokerName="broker-a", brokerRole="SYNC_MASTER",
                                              haListenPort=ha_master, **COMMON))
        self.nodes.append(self._broker("slave", brokerName="broker-a", brokerRole="SLAVE", brokerId=1,
                                              haListenPort=free_port(),
                                              haMasterAddress=f"127.0.0.1:{self.links[(1, 0)].port}", **COMMON))

    def create_resources(self) -> None:
        """Topics on every broker, and orderly consumer groups (FIFO per message group).

        What ``admin updateTopic/updateSubGroup -c DefaultCluster`` sends, sent in-process: on a
        loaded machine each CLI process takes tens of seconds to start.
        """
        for node in self.nodes:
            with grpc.insecure_channel(node.admin_addr) as ch:
                stub = admin_pb2_grpc.BrokerAdminStub(ch)
                for topic in TOPICS:
                    cfg = common_pb2.TopicConfig(topic_name=topic, read_queue_nums=4, write_queue_nums=4, perm=6)
                    st = stub.UpdateTopic(admin_pb2.UpdateTopicRequest(config=cfg), timeout=60)
                    assert st.code == 0, f"UpdateTopic {topic} at {node.name}: {st.remark}"
                for group in GROUPS:
                    gcfg = common_pb2.SubscriptionGroupConfig(group_name=group, consume_enable=True,
                                                              consume_message_orderly=True, retry_max_times=16,
                                                              retry_queue_nums=1)
                    st = stub.UpdateSubGroup(admin_pb2.UpdateSubGroupRequest(config=gcfg), timeout=60)
                    assert st.code == 0, f"UpdateSubGroup {group} at {node.name}: {st.remark}"

    # ------------------------------------------------------------ state
    @property
    def endpoint(self) -> str:
        return ";".join(n.endpoint for n in self.nodes)

    def status(self, i: int) -> dict[str, Any] | None:
        return None if i in self.paused else ha_status(self.nodes[i])

    def role(self, i: int) -> str:
        st = self.status(i)
        return "DOWN" if st is None else str(st.get("role", "?")).upper()

    def writer(self, exclude: int | None = None) -> int | None:
        """The node that takes writes now: the Raft leader, the controller's master, the master."""
        for i in range(len(self.nodes)):
            if i != exclude and self.role(i) in ("LEADER", "MASTER", "SYNC_MASTER", "ASYNC_MASTER"):
                return i
        return None

    def access_point(self) -> int | None:
        """The node this process's clients hold the most connections to (their access point), or None.

        Observed from /proc (tests/chaos/sockets.py), not derived from the client's internals."""
        by_port = connections_to({n.grpc_port for n in self.nodes})
        if not by_port:
            return None
        port = by_port.most_common(1)[0][0]
        return next(i for i, n in enumerate(self.nodes) if n.grpc_port == port)

    def wait_writer(self, exclude: int | None = None, timeout: float = 30) -> int:
        return wait_until(lambda: (w,) if (w := self.writer(exclude)) is not None else None, timeout=timeout,
                          what=f"a writer in {self.mode} (excluding {exclude}); roles "
                               f"{[self.role(i) for i in range(len(self.nodes))]}")[0]

    def settled(self) -> bool:
        """Every node up, one writer, every replica caught up with it (after a heal or restart)."""
        sts = [self.status(i) for i in range(len(self.nodes))]
        if any(s is None for s in sts):
            return False
        if self.mode == "dledger":
            return self._dledger_caught_up(sts)  # type: ignore[arg-type]
        if self.mode == "controller":
            masters = [s for s in sts if s["role"] == "MASTER"]  # type: ignore[index]
            return len(masters) == 1 and len(masters[0]["syncStateSet"]) == len(self.nodes)
        return bool(sts[1]["connected"]) and sts[0]["slaves"] and all(  # type: ignore[index]
            s["connected"] for s in sts[0]["slaves"])  # type: ignore[index]

    def _dledger_caught_up(self, sts: list[dict[str, Any]]) -> bool:
        """One leader, the rest followers of its term, and every member holding what the leader held one poll ago.

        The workload keeps writing while the harness waits, so equal ``lastIndex`` values across three
        status calls made one after another are a race, not a property: session 20's CI waited 90 s for
        it on a healthy group. Instead the leader's own view is used: its ``peers[*].match`` (the index
        each member acknowledged, consistent with the leader's log) must reach the ``lastIndex`` the same
        leader reported at the previous poll (``interval`` earlier), in the same term.
        """
        leaders = [i for i, s in enumerate(sts) if s["role"] == "LEADER"]
        if len(leaders) != 1 or not all(s["role"] in ("LEADER", "FOLLOWER") for s in sts):
            self._leader_seen = None
            return False
        lead = leaders[0]
        term = sts[lead]["term"]
        seen, self._leader_seen = self._leader_seen, (lead, term, sts[lead]["lastIndex"])
        if any(s["term"] != term for s in sts) or seen is None or seen[:2] != (lead, term):
            return False
        peers = sts[lead].get("peers") or {}
        matches = [p.get("match") for p in peers.values()]
        return len(matches) == len(self.nodes) and all(m is not None and m >= seen[2] for m in matches)

    def wait_settled(self, timeout: float = 60) -> None:
        self._leader_seen = None
        try:
            wait_until(self.settled, timeout=timeout, interval=0.2, what=f"{self.mode} settled")
        except AssertionError as exc:  # the statuses when it gave up, not when it started waiting
            raise AssertionError(f"{exc}; statuses {[self.status(i) for i in range(len(self.nodes))]}") from None

    def preferred_leader(self) -> int:
        return 0

    # ------------------------------------------------------------ faults
    def kill(self, i: int) -> None:
        self.paused.discard(i)
        self.nodes[i].proc.kill9()

    def restart(self, i: int) -> None:
        """Start node i again (after kill -9 or stop) with the same configuration and store.

        tests/cluster.py waits 20 s for the ports and 20 s for the registration; a loaded
        machine can need more, so a time-out there turns into a longer wait here.
        """
        self._broker(self.nodes[i].name)

    def stop_node(self, i: int) -> None:
        self.nodes[i].proc.stop()

    def pause(self, i: int, paused: bool) -> None:
        self.nodes[i].proc.pause(paused)
        (self.paused.add if paused else self.paused.discard)(i)

    def _touching(self, i: int) -> list[tuple[LinkProxy, bool]]:
        """Each proxy that carries node i's traffic, with True when node i is its connecting side."""
        out = []
        for (a, b), p in self.links.items():
            if a == i:
                out.append((p, True))
            elif b == i and self.mode != "controller":  # controller links end at controllers, not brokers
                out.append((p, False))
        return out

    def isolate(self, i: int, cut: bool) -> None:
        for p, _ in self._touching(i):
            self.ll.set(p, refuse=cut) if cut else self.ll.heal(p)

    def cut_outgoing(self, i: int, cut: bool) -> None:
        """One-way: node i still hears its peers, but nothing it sends reaches them."""
        for p, connecting in self._touching(i):
            if not cut:
                self.ll.heal(p)
            elif connecting:
                self.ll.set(p, block_up=True)  # i's requests
            else:
                self.ll.set(p, block_down=True)  # i's answers to requests of its peers

    def slow(self, i: int, delay: float) -> None:
        """Add ``delay`` seconds to every link of node i, both ways (0 restores)."""
        for p, _ in self._touching(i):
            self.ll.set(p, delay=delay)

    def heal_all(self) -> None:
        for i in list(self.paused):
            self.pause(i, False)
        for p in self.links.values():
            self.ll.heal(p)
        for i, n in enumerate(self.nodes):
            if not n.proc.alive:
                self.restart(i)

    # ------------------------------------------------------------ end of run
    def logs_equal(self, timeout: float = 60) -> tuple[bool, str]:
        """Wait until no replica moves and all hold the same log end, then compare the bytes up to the committed point.

        The committed point is DLedger's commit offset, or the smallest confirm offset of the
        replicas in the other modes (what every copy has and the writer acknowledged).
        """
        last: list[Any] = []

        def quiet() -> list[dict[str, Any]] | None:
            sts = [self.status(i) for i in range(len(self.nodes))]
            if any(s is None for s in sts):
                return None
            key = [(s.get("commitIndex"), s["maxOffset"]) for s in sts]  # type: ignore[index]
            same = len({k for k in key}) == 1
            stable = key == last[-1] if last else False
            last.append(key)
            return sts if same and stable else None  # type: ignore[return-value]

        sts = wait_until(quiet, timeout=timeout, interval=0.5, what=f"replicas of {self.mode} at one log end")
        end = min(s["commitOffset"] for s in sts) if self.mode == "dledger" else min(s["maxOffset"] for s in sts)
        logs = [commitlog_bytes(n.store, end) for n in self.nodes]
        if all(log == logs[0] for log in logs) and len(logs[0]) == end:
            return True, f"{len(self.nodes)} replicas equal over {end} bytes"
        first = next((k for k in range(end) if len({log[k:k + 1] for log in logs}) > 1), end)
        return False, f"replicas differ below the committed offset {end}: first difference at byte {first}"

    def stop(self) -> None:
        try:
            for i in list(self.paused):
                self.pause(i, False)
        finally:
            self.c.stop()
            stop_together(self.controllers)

    def logs(self) -> str:
        return self.c.logs() + "\n".join(f"----- {p.name} -----\n{p.log()[-4000:]}" for p in self.controllers)


def wait_for(cond: Any, timeout: float, what: str) -> Any:
    """``wait_until`` with the chaos module's polling interval."""
    return wait_until(cond, timeout=timeout, interval=0.1, what=what)


def now() -> float:
    return time.monotonic()
