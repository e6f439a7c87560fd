"""One controller: the shared Raft driver over its own log, the state machine, the client service.

The Raft driver (broker/raft/driver.py) is DLedger mode's and the simulator's: it persists
each Ready's entries and hard state (fsync when it says so, in a worker thread; a leader's
appends leave before it), sends the votes and acknowledgements after the fsync, then applies
the committed entries and answers the proposals.  This class injects the controller's log
file (broker/controller/raft_log.py) and the peer links; applying here means decoding a
controller event and feeding it to ``ControllerState.apply``.  Raft messages travel on
DLedger's framed TCP transport (broker/dledger/peer_link.py to the other controllers'
``PeerPort``, broker/dledger/peer_port.py: same frames, TLS and ``internalPeerSecret`` rules),
with the controller's client address in each batch's header so that a follower can tell a
broker where the leader is.

Requests are decided one at a time (``_decide_lock``) against the applied state, and the
events are proposed and awaited before the next request is decided, as RocketMQ's
controller serializes them in its event scheduler.  A new leader answers only once it
has applied an entry of its own term (its no-op), so it never decides on a state older
than what the previous leader acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from rocketscope.broker.protocol import controller_pb2 as cpb
from rocketscope.broker.protocol import controller_pb2_grpc, dledger_pb2
from rocketscope.broker.raft import Entry, Message, ProposalDropped, RaftConfig, RaftNode, Role
from rocketscope.broker.raft.aio import AsyncioClock, ThreadSyncer
from rocketscope.broker.raft.driver import DrivenMember, RaftDriver
from rocketscope.telemetry import Telemetry
from rocketscope.tls import TlsClientConfig

from ..dledger.peer_link import PeerLink
from ..dledger.raft_codec import Batch
from .raft_log import ControllerLog
from .state import NO_MASTER, Code, ControllerState, Decision, LiveInfo, LiveTable, decode_event, encode_event

log = logging.getLogger(__name__)
ROLE_VALUES = {Role.LEADER: 3, Role.FOLLOWER: 2, Role.CANDIDATE: 1, Role.PRE_CANDIDATE: 1}
COMMIT_TIMEOUT_S = 5.0  # ControllerRequestProcessor waits up to 5 s on each future


@dataclass
class ControllerOptions:
    group: str
    self_id: str
    peers: dict[str, str]
    store_path: Path
    client_addr: str
    tick_ms: int = 50
    heartbeat_ticks: int = 2
    election_ticks_min: int = 6
    election_ticks_max: int = 12
    scan_interval_ms: int = 100  # config.SCAN_MS
    scan_master_interval_ms: int = 100
    elect_retries: int = 3
    unclean: bool = False
    notify: bool = True

    @classmethod
    def from_settings(cls, s: Any, client_addr: str) -> ControllerOptions:
        from .config import SCAN_MS, parse_peers

        return cls(group=s.controllerDLegerGroup or "DefaultControllerGroup", self_id=s.controllerDLegerSelfId,
                   peers=parse_peers(s.controllerDLegerPeers),
                   store_path=Path(s.controllerStorePath).expanduser(), client_addr=client_addr,
                   tick_ms=s.controllerTickMillis, heartbeat_ticks=s.controllerHeartbeatTicks,
                   election_ticks_min=s.controllerElectionTicksMin, election_ticks_max=s.controllerElectionTicksMax,
                   scan_interval_ms=s.get("scanNotActiveBrokerInterval", SCAN_MS),
                   scan_master_interval_ms=s.scanInactiveMasterInterval, elect_retries=s.electMasterMaxRetryCount,
                   unclean=s.enableElectUncleanMaster, notify=s.notifyBrokerRoleChanged)


def now_ms() -> int:
    return int(time.time() * 1000)


class ControllerNode(DrivenMember):
    def __init__(self, opts: ControllerOptions, telemetry: Telemetry | None = None,
                 channel: Callable[..., grpc.aio.Channel] = grpc.aio.insecure_channel,
                 tls: TlsClientConfig | None = None) -> None:
        """``channel`` builds the gRPC channels of role-change notifications to brokers; ``tls`` (TLS and
        ``internalPeerSecret``) is for the Raft links to the other controllers."""
        self.opts = opts
        self.make_channel = channel
        self.tls = tls
        self.config = RaftConfig(node_id=opts.self_id, peers=tuple(opts.peers), heartbeat_ticks=opts.heartbeat_ticks,
                                 election_ticks_min=opts.election_ticks_min,
                                 election_ticks_max=opts.election_ticks_max)
        self.state = ControllerState()
        self.live = LiveTable()
        self.log: ControllerLog | None = None
        self.driver: RaftDriver | None = None
        self.syncer = ThreadSyncer(f"controller {opts.group}/{opts.self_id}")
        self.links: dict[str, PeerLink] = {}
        self.peer_client_addrs: dict[str, str] = {opts.self_id: opts.client_addr}
        self.applied_index = 0
        self.leader_ready = False
        self._tasks: list[asyncio.Task[None]] = []
        self._decide_lock = asyncio.Lock()
        self.telemetry = telemetry or Telemetry.disabled()
        self._role_value = 0
        self._m_role = self.telemetry.up_down_counter("rocketmq_controller_role")
        self._m_requests = self.telemetry.counter("rocketmq_controller_request_total")
        self._m_latency = self.telemetry.histogram("rocketmq_controller_request_latency")
        self._m_elections = self.telemetry.counter("rocketmq_controller_election_total")
        self._gauges = [
            self.telemetry.gauge("rocketmq_controller_active_broker_num", self._active_gauge),
            self.telemetry.gauge("rocketmq_controller_term", lambda: [(self.term, {})]),
            self.telemetry.gauge("rocketmq_controller_sync_state_set_size", self._sss_gauge),
        ]

    # the driver's view, for requests, status and metrics
    # ------------------------------------------------------------- metrics
    def _active_gauge(self) -> list[tuple[float, dict[str, str]]]:
        t = now_ms()
        return [(self.live.active(t, name), {"broker_cluster": bs.cluster, "broker_set": name})
                for name, bs in list(self.state.sets.items())]

    def _sss_gauge(self) -> list[tuple[float, dict[str, str]]]:
        return [(len(bs.sync_state_set), {"broker_cluster": bs.cluster, "broker_set": name})
                for name, bs in list(self.state.sets.items())]

    def _set_role_metric(self) -> None:
        value = ROLE_VALUES.get(self.role, 0)
        if value != self._role_value:
            self._m_role.add(value - self._role_value, {})
            self._role_value = value

    # ----------------------------------------------------------- lifecycle
    def open(self) -> None:
        self.log = ControllerLog(self.opts.store_path)
        hs = self.log.hard_state
        # applied=0: the state machine lives in memory, so the committed prefix is replayed on start
        node = RaftNode(self.config, self.log, hs, rng_seed=random.randrange(2**63), applied=0)
        self.driver = RaftDriver(node, self.log, self, AsyncioClock(), self.syncer, self.opts.tick_ms / 1000,
                                 apply=self._apply, on_append=self._on_append, on_role=self._on_role)
        log.info("controller %s/%s: log has %d entries, commit %d, term %d; peers %s", self.opts.group,
                 self.opts.self_id, self.log.last_index(), hs.commit, hs.term, self.opts.peers)

    def header(self) -> dledger_pb2.RaftBatch:
        return dledger_pb2.RaftBatch(group=self.opts.group, sender=self.opts.self_id,
                                     sender_grpc_addr=self.opts.client_addr)

    def start(self) -> None:
        for pid, addr in self.opts.peers.items():
            if pid != self.opts.self_id:
                link = PeerLink(pid, addr, self.header, tls=self.tls, name="controller")
                self.links[pid] = link
                link.start()
        assert self.driver is not None
        self.driver.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._scan_loop(), name="controller-scan")]
        self._set_role_metric()

    async def stop(self) -> None:
        if self.driver is not None:
            self.driver.stop("the controller is shutting down")
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self.syncer.drain()
        for link in self.links.values():
            await link.stop()
        for g in self._gauges:
            with contextlib.suppress(Exception):
                g.unregister()  # type: ignore[union-attr]
        if self.log:
            self.log.sync()
            self.log.close()

    # ------------------------------------------------------------- raft I/O
    def on_batch(self, batch: Batch) -> None:
        if batch.sender_grpc_addr:
            self.peer_client_addrs[batch.sender] = batch.sender_grpc_addr
        driver = self.driver
        assert driver is not None
        for why in batch.bad:
            log.warning("controller: a message from %s left out: %s", batch.sender, why)
        for m in batch.messages:
            try:
                driver.step(m)
            except Exception:
                log.exception("controller: bad message from %s", batch.sender)

    def send(self, m: Message) -> None:
        """The driver's transport: the link to the peer's Raft port (dropped when the peer is unknown)."""
        link = self.links.get(m.to)
        if link is not None:
            link.send(m)

    def _on_append(self, entries: list[Entry], dropped: int) -> None:
        if dropped:
            log.warning("controller %s: replaced a divergent log tail from index %d", self.opts.self_id,
                        entries[0].index)

    def _on_role(self, role: Role, leader: str | None, was_leader: bool) -> None:
        if role != Role.LEADER:
            self.leader_ready = False
        self._set_role_metric()
        log.info("controller %s: role %s, leader %s, term %d", self.opts.self_id, role, leader, self.term)

    def _apply(self, entries: list[Entry]) -> None:
        for e in entries:
            if e.data:
                try:
                    self.state.apply(decode_event(e.data))
                except (ValueError, KeyError, TypeError):
                    log.exception("controller: cannot apply entry %d", e.index)
            self.applied_index = e.index
            if self.role == Role.LEADER and e.term == self.term and not self.leader_ready:
                self.leader_ready = True
                log.info("controller %s: leader of term %d is ready at index %d", self.opts.self_id, self.term,
                         e.index)

    async def _propose(self, events: list[dict[str, Any]]) -> bool:
        driver = self.driver
        assert driver is not None
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[bool]] = [loop.create_future() for _ in events]

        def answer(pos: int, ok: bool) -> None:
            if not futures[pos].done():
                futures[pos].set_result(ok)

        try:
            driver.propose([encode_event(e) for e in events], answer)
        except ProposalDropped:
            return False
        done, _ = await asyncio.wait(futures, timeout=COMMIT_TIMEOUT_S)
        return len(done) == len(futures) and all(f.result() for f in futures)

    # ----------------------------------------------------------- requests
    def not_leader(self) -> cpb.ControllerStatus | None:
        """None when this controller may answer; else CONTROLLER_NOT_LEADER naming the leader."""
        if self.role == Role.LEADER and self.leader_ready:
            return None
        leader = self.leader_id or ""
        addr = self.peer_client_addrs.get(leader, "") if leader else ""
        remark = (f"controller {self.opts.self_id} is not the leader" + (f"; leader {leader} at {addr}" if leader
                                                                          else "; no leader yet"))
        if self.role == Role.LEADER:
            remark = f"controller {self.opts.self_id} was just elected and is replaying the log; retry"
            addr, leader = self.opts.client_addr, self.opts.self_id
        return cpb.ControllerStatus(code=Code.CONTROLLER_NOT_LEADER, remark=remark, leader_id=leader,
                                    leader_addr=addr)

    def leader_status(self, code: Code = Code.SUCCESS, remark: str = "") -> cpb.ControllerStatus:
        return cpb.ControllerStatus(code=int(code), remark=remark, leader_id=self.opts.self_id,
                                    leader_addr=self.opts.client_addr)

    async def decide(self, request_type: str, fn: Callable[[], Decision]) -> Decision:
        """Decide on the applied state, replicate the events, answer once they are applied."""
        started = time.perf_counter()
        async with self._decide_lock:
            if self.not_leader() is not None:
                d = Decision(Code.CONTROLLER_NOT_LEADER, "leadership changed")
            else:
                d = fn()
                if d.events and not await self._propose(d.events):
                    d = Decision(Code.CONTROLLER_NOT_LEADER if self.role != Role.LEADER else Code.SYSTEM_ERROR,
                                 "the controller group did not commit the change (leadership changed or no "
                                 "majority); retry")
        ok = d.code in (Code.SUCCESS, Code.CONTROLLER_MASTER_STILL_EXIST)
        self._m_requests.add(1, {"request_type": request_type, "request_handle_status": "success" if ok else "failed"})
        self._m_latency.record((time.perf_counter() - started) * 1000, {"request_type": request_type})
        return d

    def alive_lookup(self, name: str) -> Callable[[int], LiveInfo | None]:
        t = now_ms()

        def lookup(broker_id: int) -> LiveInfo | None:
            return self.live.get(name, broker_id) if self.live.alive(name, broker_id, t) else None
        return lookup

    def replica_info(self, name: str) -> cpb.ReplicaInfo:
        bs = self.state.sets.get(name)
        if bs is None:
            return cpb.ReplicaInfo(broker_name=name, master_broker_id=NO_MASTER)
        info = cpb.ReplicaInfo(cluster_name=bs.cluster, broker_name=name, master_broker_id=bs.master_id,
                               master_epoch=bs.master_epoch, sync_state_set_epoch=bs.sync_state_set_epoch,
                               sync_state_set=list(bs.sync_state_set))
        t = now_ms()
        for bid, rec in sorted(bs.replicas.items()):
            li = self.live.get(name, bid)
            r = info.replicas.add(broker_id=bid, address=rec.address, ha_address=rec.ha_address,
                                  grpc_address=rec.grpc_address, alive=self.live.alive(name, bid, t))
            if li is not None:
                r.epoch, r.max_offset, r.confirm_offset = li.epoch, li.max_offset, li.confirm_offset
                r.election_priority = li.priority
        return info

    async def elect(self, name: str, broker_id: int, designate: bool, trigger: str) -> Decision:
        d = await self.decide("controller_elect_master", lambda: self.state.decide_elect(
            name, broker_id, designate, self.alive_lookup(name), self.opts.unclean))
        bs = self.state.sets.get(name)
        cluster = bs.cluster if bs else ""
        result = {Code.SUCCESS: "new_master_elected", Code.CONTROLLER_MASTER_STILL_EXIST: "keep_current_master"
                  }.get(d.code, "no_master_elected")
        if d.code != Code.CONTROLLER_NOT_LEADER:
            self._m_elections.add(1, {"broker_cluster": cluster, "broker_set": name, "election_result": result})
        if d.code == Code.SUCCESS:
            log.info("controller %s: %s (%s)", self.opts.self_id, d.remark, trigger)
            if self.opts.notify:
                asyncio.get_running_loop().create_task(self._notify(name))
        elif d.code != Code.CONTROLLER_MASTER_STILL_EXIST:
            log.warning("controller %s: election of %s (%s): %s %s", self.opts.self_id, name, trigger, d.code.name,
                        d.remark)
        return d

    async def _notify(self, name: str) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED to every live member (oneway in RocketMQ: 3 s, no retry)."""
        info = self.replica_info(name)
        targets = [r.address for r in info.replicas if r.alive and r.address]

        async def one(addr: str) -> None:
            try:
                async with self.make_channel(addr) as ch:
                    await controller_pb2_grpc.BrokerReplicaStub(ch).NotifyBrokerRoleChanged(info, timeout=3)
            except (grpc.aio.AioRpcError, OSError) as exc:
                log.debug("notify %s failed: %s", addr, exc)
        await asyncio.gather(*(one(a) for a in targets))

    async def _scan_loop(self) -> None:
        """Expire silent brokers; the leader re-elects sets whose master is gone."""
        interval = min(self.opts.scan_interval_ms, self.opts.scan_master_interval_ms) / 1000
        while True:
            await asyncio.sleep(interval)
            t = now_ms()
            for gone in self.live.expire(t):
                log.info("controller %s: broker %s#%d inactive (no heartbeat for %d ms)", self.opts.self_id,
                         gone.name, gone.broker_id, gone.timeout_ms)
            if self.not_leader() is not None:
                continue
            for name in self.state.masters_to_reelect(lambda n, b: self.live.alive(n, b, now_ms())):
                for _ in range(self.opts.elect_retries):
                    d = await self.elect(name, NO_MASTER, False, "master inactive")
                    if d.code != Code.SYSTEM_ERROR:
                        break

    def metadata(self) -> cpb.ControllerMetaData:
        leader = self.leader_id or ""
        return cpb.ControllerMetaData(
            status=cpb.ControllerStatus(code=0), group=self.opts.group, self_id=self.opts.self_id,
            self_addr=self.opts.client_addr, leader_id=leader,
            leader_addr=self.peer_client_addrs.get(leader, "") if leader else "",
            is_leader=self.role == Role.LEADER and self.leader_ready, role=str(self.role).upper(), term=self.term,
            commit_index=self.commit_index, peers=self.opts.peers, elections=self.elections,
            active_brokers=self.live.active(now_ms()))


class ControllerService(controller_pb2_grpc.ControllerServicer):
    """The client-facing API; every method answers CONTROLLER_NOT_LEADER (with the leader) off the leader."""

    def __init__(self, node: ControllerNode) -> None:
        self.node = node

    def _resp(self, d: Decision, name: str = "") -> cpb.ControllerResponse:
        n = self.node
        if d.code == Code.CONTROLLER_NOT_LEADER:
            st = n.not_leader() or n.leader_status(d.code, d.remark)
            return cpb.ControllerResponse(status=st)
        resp = cpb.ControllerResponse(status=n.leader_status(d.code, d.remark), broker_id=d.broker_id)
        if name:
            resp.info.CopyFrom(n.replica_info(name))
        return resp

    async def GetMetaData(self, request: cpb.MetaDataRequest, context: Any) -> cpb.ControllerMetaData:
        return self.node.metadata()

    async def GetNextBrokerId(self, request: cpb.BrokerSetRequest, context: Any) -> cpb.ControllerResponse:
        st = self.node.not_leader()
        if st is not None:
            return cpb.ControllerResponse(status=st)
        return cpb.ControllerResponse(status=self.node.leader_status(),
                                      broker_id=self.node.state.next_broker_id(request.broker_name))

    async def ApplyBrokerId(self, request: cpb.ApplyBrokerIdRequest, context: Any) -> cpb.ControllerResponse:
        d = await self.node.decide("controller_apply_broker_id", lambda: self.node.state.decide_apply_broker_id(
            request.cluster_name, request.broker_name, request.broker_id, request.register_check_code))
        return self._resp(d)

    async def RegisterBroker(self, request: cpb.RegisterBrokerRequest, context: Any) -> cpb.ControllerResponse:
        d = await self.node.decide("controller_register_broker", lambda: self.node.state.decide_register(
            request.broker_name, request.broker_id, request.address, request.ha_address, request.grpc_address))
        return self._resp(d, request.broker_name)

    async def Heartbeat(self, request: cpb.BrokerHeartbeat, context: Any) -> cpb.ControllerResponse:
        n = self.node
        n.live.heartbeat(LiveInfo(request.cluster_name, request.broker_name, request.broker_id, request.address,
                                  now_ms(), request.heartbeat_timeout_ms or 10_000, request.epoch,
                                  request.max_offset, request.confirm_offset, request.election_priority))
        st = n.not_leader()
        if st is not None:
            return cpb.ControllerResponse(status=st)
        return cpb.ControllerResponse(status=n.leader_status(), info=n.replica_info(request.broker_name))

    async def GetReplicaInfo(self, request: cpb.BrokerSetRequest, context: Any) -> cpb.ControllerResponse:
        st = self.node.not_leader()
        if st is not None:
            return cpb.ControllerResponse(status=st)
        if request.broker_name not in self.node.state.sets:
            return cpb.ControllerResponse(status=self.node.leader_status(
                Code.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker set {request.broker_name} is unknown"))
        return cpb.ControllerResponse(status=self.node.leader_status(),
                                      info=self.node.replica_info(request.broker_name))

    async def AlterSyncStateSet(self, request: cpb.AlterSyncStateSetRequest, context: Any) -> cpb.ControllerResponse:
        n = self.node
        name = request.broker_name
        d = await n.decide("controller_alter_sync_state_set", lambda: n.state.decide_alter_sync_state_set(
            name, request.master_broker_id, request.master_epoch, request.sync_state_set,
            request.sync_state_set_epoch, lambda b: n.alive_lookup(name)(b) is not None))
        if d.ok:
            log.info("controller %s: SyncStateSet of %s is now %s (epoch %d)", n.opts.self_id, name,
                     list(n.state.sets[name].sync_state_set), n.state.sets[name].sync_state_set_epoch)
        return self._resp(d, name)

    async def ElectMaster(self, request: cpb.ElectMasterRequest, context: Any) -> cpb.ControllerResponse:
        trigger = "admin" if request.designate_elect or request.broker_id < 0 else f"broker {request.broker_id}"
        d = await self.node.elect(request.broker_name, request.broker_id, request.designate_elect, trigger)
        return self._resp(d, request.broker_name)

    async def GetSyncStateData(self, request: cpb.SyncStateDataRequest, context: Any) -> cpb.ControllerResponse:
        st = self.node.not_leader()
        if st is not None:
            return cpb.ControllerResponse(status=st)
        names = list(request.broker_names) or sorted(self.node.state.sets)
        return cpb.ControllerResponse(status=self.node.leader_status(),
                                      infos=[self.node.replica_info(n) for n in names])


class ControllerRuntime:
    """One controller's node, client service and Raft peer listener: standalone or inside a name server.

    ``client_server``: a gRPC server of the host process (the name server's, when embedded) that
    also carries the controller's client service; None starts one on ``listenHost:listenPort``.
    """

    def __init__(self, settings: Any, client_addr: str, telemetry: Telemetry,
                 client_server: grpc.aio.Server | None = None) -> None:
        from ..security import SecurityConfig

        self.settings = settings
        self.security = SecurityConfig.from_properties(settings.raw)
        self.options = ControllerOptions.from_settings(settings, client_addr)
        self.telemetry = telemetry
        self.node = ControllerNode(self.options, telemetry, channel=self.security.client_tls.channel,
                                   tls=self.security.client_tls)
        self._own_client_server = client_server is None
        self.client_server = client_server
        self._servers: list[grpc.aio.Server] = []
        self._listeners: list[Any] = []

    def add_client_service(self, server: grpc.aio.Server) -> None:
        controller_pb2_grpc.add_ControllerServicer_to_server(ControllerService(self.node), server)

    async def start(self) -> None:
        from ..dledger.peer_port import PeerPort
        from ..grpc_options import server_options
        from ..security import bind_server

        s, opts = self.settings, self.options
        self.node.open()
        internal = self.security.server_tls.for_internal()
        if self._own_client_server:
            self.client_server = grpc.aio.server(options=server_options())
            self.add_client_service(self.client_server)
            self._servers.append(self.client_server)
            self._listeners.append(bind_server(self.client_server, f"{s.listenHost}:{s.listenPort}", internal))
        # the Raft port binds the address the other controllers reach it at (controllerDLegerPeers): DLedger's
        # framed TCP port, with its TLS and internalPeerSecret checks (broker/dledger/peer_port.py)
        peer_port = PeerPort(opts.group, self.node.on_batch, secret=self.security.client_tls.peer_secret,
                             tls=internal, key="controllerDLegerPeers")
        peer_host, _, port = opts.peers[opts.self_id].rpartition(":")
        peer_port.bind(peer_host, int(port))
        self._listeners.append(peer_port)
        for server in self._servers:
            await server.start()
        for listener in self._listeners:
            await listener.start()
        self.node.start()
        log.info("controller %s of group %s serving brokers on %s; Raft on %s; store %s", opts.self_id, opts.group,
                 opts.client_addr, opts.peers[opts.self_id], opts.store_path)

    async def stop(self) -> None:
        await self.node.stop()
        for listener in self._listeners:
            await listener.stop()
        for server in self._servers:
            await server.stop(grace=1)


async def run_controller(settings: Any) -> None:
    """`rocketscope controller -c controller.conf`: one standalone controller until SIGTERM."""
    import signal

    from rocketscope.telemetry import TelemetryConfig

    from ..loop_lag import LoopLagMonitor
    from ..security import SecurityConfig

    s = settings
    client_addr = s.controllerAdvertisedAddr or f"127.0.0.1:{s.listenPort}"
    # its cluster label is the cluster it serves (brokerClusterName), as for the name server, so that a Grafana
    # cluster filter keeps the controller panels (the Raft group name used to be the label: no cluster has it)
    telemetry = Telemetry.start(TelemetryConfig.from_properties(s.raw), "controller", s.brokerClusterName,
                                f"controller-{s.controllerDLegerSelfId}",
                                serve=SecurityConfig.from_properties(s.raw).metrics_serve())
    runtime = ControllerRuntime(s, client_addr, telemetry)
    await runtime.start()
    lag_histogram = telemetry.histogram("rocketscope_event_loop_lag").bind({})
    loop_lag = LoopLagMonitor(lambda lag_s: lag_histogram.record(lag_s * 1000.0),
                              what=f"controller {s.controllerDLegerSelfId} event loop")
    loop_lag.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await loop_lag.stop()
    await runtime.stop()
    await asyncio.to_thread(telemetry.stop)
