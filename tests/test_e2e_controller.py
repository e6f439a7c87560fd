"""Controller mode with real processes: three controllers, a three-broker set, kill -9 and isolation under load."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster import (
    BIN,
    BrokerNode,
    LocalCluster,
    Proc,
    _port_open,
    commitlog_bytes,
    ha_status,
    stop_together,
    wait_until,
)
from conftest import failed_call, free_port
from netproxy import LinkLoop, LinkProxy, link_loop
from rmq import AckedLoad, drain, drain_ids, message, producer, simple_consumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from telemetry_support import find, scrape

pytestmark = pytest.mark.e2e
SIZE = 3
TOPIC = "TopicCtl"

# Fast timing for loopback; the defaults (1 s heartbeats, 10 s timeout) are RocketMQ's.
BROKER_TIMING = {"brokerHeartbeatInterval": 200, "controllerHeartBeatTimeoutMills": 1500,
                 "syncBrokerMetadataPeriod": 1000, "checkSyncStateSetPeriod": 500, "haMaxTimeSlaveNotCatchup": 3000,
                 "slaveTimeout": 2000, "sendHeartbeatTimeoutMillis": 500}


def start_controllers(root: Path, n: int = 3, per_node: dict[int, dict[str, Any]] | None = None,
                      **extra: Any) -> tuple[list[Proc], list[int]]:
    """``extra`` goes into every controller's file, ``per_node[i]`` into controller i's only."""
    raft_ports = [free_port() for _ in range(n)]
    client_ports = [free_port() for _ in range(n)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(raft_ports))
    procs = []
    for i in range(n):
        conf = root / f"controller-n{i}.conf"
        values = {"controllerDLegerGroup": "ctl", "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}",
                  "controllerStorePath": root / f"controller-n{i}", "listenPort": client_ports[i],
                  "scanNotActiveBrokerInterval": 200, "scanInactiveMasterInterval": 200, **extra,
                  **(per_node or {}).get(i, {})}
        conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        procs.append(Proc(f"controller-n{i}", [str(BIN), "controller", "-c", str(conf)],
                          root / f"controller-n{i}.log").start())
    for p in client_ports:
        wait_until(lambda p=p: _port_open(p), what=f"controller on {p}")
    return procs, client_ports


class ControllerGroup:
    def __init__(self, c: LocalCluster, pl: LinkLoop) -> None:
        self.c = c
        self.pl = pl
        self.controllers, self.ctl_ports = start_controllers(c.root)
        # proxies[(i, k)]: how broker i reaches controller k (cut to isolate broker i)
        self.proxies: dict[tuple[int, int], LinkProxy] = {
            (i, k): pl.proxy(self.ctl_ports[k]) for i in range(SIZE) for k in range(SIZE)}
        self.nodes: list[BrokerNode] = []
        for i in range(SIZE):
            addrs = ";".join(f"127.0.0.1:{self.proxies[(i, k)].port}" for k in range(SIZE))
            self.nodes.append(c.start_broker(f"c{i}", brokerName="broker-c", enableControllerMode="true",
                                             controllerAddr=addrs, allAckInSyncStateSet="true",
                                             minInSyncReplicas=1, flushDiskType="SYNC_FLUSH", **BROKER_TIMING))

    @property
    def endpoint(self) -> str:
        return ";".join(n.endpoint for n in self.nodes)

    def status(self, i: int) -> dict[str, Any]:
        addr = self.nodes[i].admin_addr
        return ha_status(addr)

    def master(self, exclude: int | None = None) -> int | None:
        for i, n in enumerate(self.nodes):
            if i == exclude or not n.proc.alive:
                continue
            try:
                if self.status(i)["role"] == "MASTER":
                    return i
            except (AssertionError, KeyError):
                continue
        return None

    def wait_master(self, exclude: int | None, what: str) -> int:
        """The index of the master (index 0 is falsy, so wait on a tuple); roles are shown on time-out."""
        def found() -> tuple[int] | None:
            m = self.master(exclude)
            if m is None:
                roles = {}
                for i, n in enumerate(self.nodes):
                    try:
                        roles[i] = self.status(i)["role"] if n.proc.alive else "dead"
                    except (AssertionError, KeyError) as exc:
                        roles[i] = f"no status ({exc})"
                raise AssertionError(f"no master yet (excluding {exclude}): {roles}")
            return (m,)
        return wait_until(found, timeout=30, what=what)[0]

    def isolate(self, i: int, cut: bool) -> None:
        for k in range(SIZE):
            p = self.proxies[(i, k)]
            self.pl.cut(p, cut)

    def ctl(self, *args: str) -> Any:
        addrs = ";".join(f"127.0.0.1:{p}" for p in self.ctl_ports)
        return json.loads(self.c.admin(*args, "-a", addrs, "--json", namesrv=False).stdout)

    def stop(self) -> None:
        stop_together(self.controllers)

    def logs(self) -> str:
        return "\n".join(f"----- {p.name} -----\n{p.log()[-5000:]}" for p in self.controllers)


@pytest.fixture()
def group(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ControllerGroup]:
    c = LocalCluster(tmp_path_factory.mktemp("controller"))
    g: ControllerGroup | None = None
    with link_loop() as pl:
        try:
            c.start_namesrv()
            g = ControllerGroup(c, pl)
            wait_until(lambda: g.master() is not None, timeout=30, what="a master")
            c.admin("updateTopic", "-b", g.nodes[g.master()].admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
            wait_until(lambda: len(g.status(g.master())["syncStateSet"]) == SIZE, timeout=30,
                       what="all brokers in the SyncStateSet")
            yield g
            if failed_call(request):
                print(c.logs())
                print(g.logs())
        except BaseException:
            print(c.logs())
            if g is not None:
                print(g.logs())
            raise
        finally:
            c.stop()
            if g is not None:
                g.stop()


def unacknowledged_send(endpoint: str, body: bytes) -> None:
    """One SendMessage straight to ``endpoint``, its answer ignored (the broker is killed meanwhile)."""
    req = svc.SendMessageRequest()
    m = req.messages.add(body=body)
    m.topic.name = TOPIC
    m.system_properties.message_id = uuid.uuid4().hex.upper()
    m.system_properties.message_type = pb.NORMAL
    with contextlib.suppress(grpc.RpcError), grpc.insecure_channel(endpoint) as ch:
        svc_grpc.MessagingServiceStub(ch).SendMessage(req, metadata=(("x-mq-client-id", "tail"),), timeout=10)


TAIL_BYTES = 6_000_000  # more than a paused slave's socket buffers and HTTP/2 window take in


def where_are(g: ControllerGroup, bodies: list[bytes], statuses: list[dict[str, Any]]) -> str:
    """For a failure message: which nodes' commit logs hold the missing bodies, and where."""
    out = []
    for i, n in enumerate(g.nodes):
        log = commitlog_bytes(n.store, 1 << 40)
        found = [log.find(len(b).to_bytes(4, "big") + b) for b in bodies]  # the record's body length + body
        held = [f for f in found if f >= 0]
        out.append(f"node {i} (status {statuses[i]['role']}, max {statuses[i]['maxOffset']}, confirm "
                   f"{statuses[i]['confirmOffset']}, epochs {statuses[i]['epochs']}): holds {len(held)} of "
                   f"{len(bodies)} in its commit log, at offsets {min(held) if held else '-'}.."
                   f"{max(held) if held else '-'}")
    return "; ".join(out)


@pytest.mark.long  # ~100 s; controller failover stays in make test (test_failover_*, the live alerts)
@pytest.mark.timeout(600)
def test_controller_failover_kill_isolate_truncate(group: ControllerGroup) -> None:
    g = group
    # failures during a failover are allowed, losing acked ones is not; steady, not flat out (at most ~80 msg/s):
    # every acked message is drained at the end, and an unthrottled client sent 20,000 in one round, more than the
    # drain could take in time
    load = AckedLoad(g.endpoint, TOPIC, "ctl-", pause=0.1).start()
    acked, sent, send_errors = load.acked, load.sent, load.errors

    def acked_more_than(count: int) -> bool:
        if len(acked) > count:
            return True
        if send_errors:  # shown by wait_until when it times out
            raise AssertionError(f"{len(send_errors)} sends failed, the last with {send_errors[-1]!r}")
        return False

    wait_until(lambda: acked_more_than(99), timeout=60, what="load running")
    truncations: list[dict[str, Any]] = []  # haStatus of a returning old master that truncated, when it did
    def one_round(round_: int) -> None:
        # 1. kill -9 the master; a new one is elected from the SyncStateSet; restart the old one
        old = g.master()
        assert old is not None
        epoch = g.status(old)["masterEpoch"]
        # give the master a tail no replica has: with both slaves paused it appends ~8 MB of sends it cannot
        # get acknowledged, more than reaches the paused slaves' sockets; it dies before they resume, so it
        # must truncate that tail when it returns (what the kernel had already delivered may survive: it
        # was sent, so it may be consumed)
        slaves = [i for i in range(SIZE) if i != old]
        end_before = g.status(old)["maxOffset"]
        bodies = [f"tail-{round_}-{k}-".encode() + b"t" * 500_000 for k in range(16)]
        sent.update(bodies)
        for i in slaves:
            g.nodes[i].proc.pause(True)
        try:
            for body in bodies:
                threading.Thread(target=unacknowledged_send, args=(g.nodes[old].endpoint, body), daemon=True).start()
            wait_until(lambda: g.status(old)["maxOffset"] > end_before + TAIL_BYTES, timeout=30,
                       what="the master appending alone")
            g.nodes[old].proc.kill9()
        finally:
            for i in slaves:
                g.nodes[i].proc.pause(False)
        new = g.wait_master(exclude=old, what="a new master after kill -9")
        assert g.status(new)["masterEpoch"] > epoch
        count = len(acked)
        wait_until(lambda: acked_more_than(count + 50), timeout=60, what="sends succeed after the failover")
        g.c.start_broker(f"c{old}")
        wait_until(lambda: g.status(old)["role"] == "SLAVE" and g.status(old)["connected"], timeout=30,
                   what="the old master back as a slave")
        st_old = g.status(old)
        assert st_old["truncations"], "the killed master did not truncate its tail"
        truncations.append(st_old)
        old_id = g.status(old)["brokerId"]
        wait_until(lambda: old_id in g.status(new)["syncStateSet"], timeout=30, what="old master back in the set")
        # 2. cut the master off from the controllers: it keeps taking writes it cannot get acknowledged
        cut = new
        g.isolate(cut, True)
        newer = g.wait_master(exclude=cut, what="a master while the old one is cut off")
        count = len(acked)
        wait_until(lambda: acked_more_than(count + 50), timeout=60, what="sends succeed during the isolation")
        g.isolate(cut, False)
        wait_until(lambda: g.status(cut)["role"] == "SLAVE" and g.status(cut)["connected"], timeout=30,
                   what="the cut-off master rejoins as a slave")
        st_cut = g.status(cut)
        if st_cut["truncations"]:
            truncations.append(st_cut)
        wait_until(lambda: len(g.status(newer)["syncStateSet"]) == SIZE, timeout=30, what="set complete again")
        print(f"round {round_}: killed {old}, isolated {cut}, master now {newer}, acked {len(acked)}")

    for round_ in range(2):
        one_round(round_)
    load.stop()

    # replicas agree up to the confirmed offset
    m = g.master()
    assert m is not None

    def caught_up() -> list[dict[str, Any]] | None:
        sts = [g.status(i) for i in range(SIZE)]
        confirm = sts[m]["confirmOffset"]
        return sts if all(s["maxOffset"] >= confirm for s in sts) and confirm == sts[m]["maxOffset"] else None
    statuses = wait_until(caught_up, timeout=30, what="all replicas at the confirm offset")
    end = statuses[m]["confirmOffset"]
    logs = [commitlog_bytes(n.store, end) for n in g.nodes]
    assert logs[0] == logs[1] == logs[2], "replicas disagree below the confirmed offset"
    # a returning old master (killed or cut off) cut its unconfirmed tail (recorded in its status and epoch file)
    assert truncations, "no returning old master had an unconfirmed tail to truncate"
    for st in truncations:
        assert st["lastTruncation"]["toOffset"] > st["lastTruncation"]["fromOffset"]
        assert [e[0] for e in st["epochs"]] == [e[0] for e in statuses[m]["epochs"]][:len(st["epochs"])]

    with simple_consumer(g.endpoint, "GroupCtl", TOPIC) as c:
        got = drain_ids(c, set(acked), timeout=120)
    consumed = {x.message_id: x.body for x in got}
    missing = set(acked) - set(consumed)
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages not consumed; " + where_are(
        g, [acked[x] for x in sorted(missing)], statuses)
    assert all(body in sent for body in consumed.values()), "consumed a message that was never sent"
    data = g.ctl("getSyncStateSet", "-b", "broker-c")
    assert data[0]["masterBrokerId"] >= 1 and data[0]["masterEpoch"] >= 4
    meta = g.ctl("getControllerMetaData")
    assert sum(1 for x in meta if x.get("isLeader")) == 1
    events = g.c.admin_json("haEvents", "--max", "2000")
    kinds = {e["type"] for e in events}
    assert {"master_elected", "sync_state_set_changed", "role_change"} <= kinds, kinds


def test_controller_raft_port_checks_the_peer_secret(tmp_path: Path) -> None:
    """The controllers' Raft runs on DLedger's framed Raft port (broker/dledger/peer_port.py) with its
    internalPeerSecret check: n0 and n1 share the secret and elect a leader; n2 carries another one, so each
    side's port refuses the other's links, and n2 never learns a leader (it cannot vote or be counted)."""
    procs, _ = start_controllers(tmp_path, internalPeerSecret="right-secret",
                                 per_node={2: {"internalPeerSecret": "wrong-secret"}})
    try:
        wait_until(lambda: any("role leader, leader n" in p.log() for p in procs[:2]), what="a leader of n0, n1")
        wait_until(lambda: all("refused with a wrong peer secret" in p.log() for p in procs),
                   what="every Raft port refusing the other side's hello")
        leader_logs = [p.log() for p in procs[:2]]
        n2 = procs[2].log()
    finally:
        stop_together(procs)
    assert "Raft port on" in n2 and "peer secret required" in n2
    assert "leader n0" not in n2 and "leader n1" not in n2 and "role leader" not in n2
    # each port refuses exactly the member with the other secret
    assert "(n2): refused with a wrong peer secret" in leader_logs[0] and "(n1): refused" not in leader_logs[0]
    assert "(n2): refused with a wrong peer secret" in leader_logs[1] and "(n0): refused" not in leader_logs[1]
    assert "(n0): refused with a wrong peer secret" in n2 and "(n1): refused with a wrong peer secret" in n2


def test_controller_embedded_in_the_name_servers(tmp_path: Path) -> None:
    """enableControllerInNamesrv: three name servers are also the controller group; kill -9 of the master fails over."""
    c = LocalCluster(tmp_path)
    raft_ports = [free_port() for _ in range(SIZE)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(raft_ports))
    try:
        c.start_namesrv(SIZE, conf=lambda i: {
            "enableControllerInNamesrv": "true", "controllerDLegerGroup": "ctl", "controllerDLegerPeers": peers,
            "controllerDLegerSelfId": f"n{i}", "controllerStorePath": tmp_path / f"controller-n{i}",
            "scanInactiveMasterInterval": 200, "scanNotActiveBrokerInterval": 200})
        prom_ports = [free_port() for _ in range(SIZE)]
        nodes = [c.start_broker(f"e{i}", brokerName="broker-e", enableControllerMode="true",
                                controllerAddr=c.namesrv_addr, minInSyncReplicas=1, metricsExporterType="PROM",
                                metricsPromExporterHost="127.0.0.1", metricsPromExporterPort=prom_ports[i],
                                **BROKER_TIMING)
                 for i in range(SIZE)]

        def role(i: int) -> str:
            return str(ha_status(nodes[i].admin_addr)["role"])

        def master(exclude: int | None = None) -> tuple[int] | None:
            alive = [i for i in range(SIZE) if i != exclude and nodes[i].proc.alive]
            return next(((i,) for i in alive if role(i) == "MASTER"), None)

        (m,) = wait_until(master, timeout=30, what="a master elected by the embedded controllers")
        c.admin("updateTopic", "-b", nodes[m].admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")

        def ha_gauges(i: int) -> tuple[float, float] | None:
            """(SyncStateSet size, master epoch) on node i's /metrics once the set is complete."""
            text = scrape(f"http://127.0.0.1:{prom_ports[i]}/metrics")
            size = find(text, "rocketmq_ha_sync_state_set_size", broker_group="broker-e")
            epoch = find(text, "rocketmq_ha_master_epoch", broker_group="broker-e")
            return (size[0][1], epoch[0][1]) if size and epoch and size[0][1] == SIZE else None
        _size, epoch = wait_until(lambda: ha_gauges(m), timeout=30, what="the master's SyncStateSet gauges")
        assert epoch >= 1
        assert not find(scrape(f"http://127.0.0.1:{prom_ports[(m + 1) % SIZE]}/metrics"),
                        "rocketmq_ha_sync_state_set_size"), "only the master writes the group's set size"
        meta = json.loads(c.admin("getControllerMetaData", "-a", c.namesrv_addr, "--json", namesrv=False).stdout)
        assert sum(1 for x in meta if x.get("isLeader")) == 1
        endpoint = ";".join(n.endpoint for n in nodes)
        with producer(endpoint, TOPIC) as p:
            before = {p.send(message(TOPIC, f"e-{i}".encode())).message_id for i in range(20)}
            nodes[m].proc.kill9()
            (new,) = wait_until(lambda: master(exclude=m), timeout=30, what="a new master after kill -9")
            assert new != m

            def send_one() -> str:
                return p.send(message(TOPIC, b"after")).message_id
            after = wait_until(send_one, timeout=60, what="a send acknowledged after the failover")
        with simple_consumer(";".join(n.endpoint for i, n in enumerate(nodes) if i != m), "GroupE", TOPIC) as con:
            got = {x.message_id for x in drain(con, len(before) + 1, timeout=60)}
        assert before | {after} <= got
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()
