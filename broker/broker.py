"""The broker process: store, metadata, POP engine, gRPC services, name-server link.

`rocketscope broker -c broker.conf` builds one Broker from RocketMQ's keys.  Listeners:
grpcServerPort for the RocketMQ 5 clients, listenPort for the internal admin service.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2, namesrv_pb2
from rocketscope.config import ConfigError, Settings
from rocketscope.ha_events import ROLE_CHANGE, HaEvent
from rocketscope.names import HA_EVENTS_TOPIC, TIMER_TOPIC, is_system_topic
from rocketscope.telemetry import Telemetry, TelemetryConfig

from .admin_service import BrokerAdminService
from .broker_config import implied_ha_port, namesrv_addresses
from .client_metrics import ClientMetricsProxy
from .clients import ClientRegistry
from .errors import BrokerError, ErrorKind
from .filter import MessageFilter
from .forwarding import LeaderForwarder
from .groups import GroupManager
from .grpc_options import server_options
from .grpc_registration import add_messaging_service
from .grpc_service import MessagingService
from .ha import wire as ha_wire
from .ha.event_log import HaEventLog
from .ha.event_relay import SPOOL_NAME, EventRelay
from .ha.master import ReplicationMaster
from .ha.slave import ReplicationSlave
from .lite import LiteService
from .lite_expiry import LiteExpiry
from .loop_lag import LoopLagMonitor
from .metrics import BrokerMetrics
from .namesrv_client import NamesrvClient, NamesrvUnavailable
from .offset_log import OffsetLog
from .offsets import OffsetManager
from .peer_frames.port import FramedPort
from .pop import Delivery, PopService, request_id
from .pop_log import PopStateLog
from .pull import PullService
from .remoting.broker_handlers import RemotingBroker, bind_broker_port
from .request_modes import RequestModes
from .security import AclGuard, AclInterceptor, FileWatcher, SecurityConfig, bind_listener
from .sends import PLAIN, SendKind
from .slave_read import SlaveReader
from .store.message_store import MessageStore, PutResult, PutStatus, StoreConfig, StoreHooks
from .store.record import StoredMessage
from .store.retention import RetentionPolicy
from .timer import TimerService
from .topics import TopicConfig, TopicManager, group_queue
from .trace_hooks import NoTrace, TraceHooks
from .transaction import HALF_TOPIC, TransactionService

if TYPE_CHECKING:
    from .dledger.node import DLedgerNode
    from .dledger.retention import DLedgerRetention

log = logging.getLogger(__name__)


def store_config(s: Settings, store_host: str) -> StoreConfig:
    return StoreConfig(
        root=Path(s.storePathRootDir).expanduser(),
        commitlog_segment_size=s.mappedFileSizeCommitLog,
        cq_entries_per_segment=s.mappedFileSizeConsumeQueue // 20,
        sync_flush=s.flushDiskType == "SYNC_FLUSH",
        sync_flush_timeout_s=s.syncFlushTimeout / 1000,
        flush_interval_s=s.flushIntervalCommitLog / 1000,
        max_message_size=s.maxMessageSize,
        index_slot_num=s.maxHashSlotNum,
        index_num=s.maxIndexNum,
        store_host=store_host,
        multi_dispatch=s.enableLmq and s.enableMultiDispatch,
        retention=RetentionPolicy(file_reserved_hours=s.fileReservedTime, delete_when=s.deleteWhen,
                                  disk_max_used_ratio=s.diskMaxUsedSpaceRatio / 100,
                                  interval_s=s.cleanResourceInterval / 1000),
    )


class Broker:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        s = settings
        self.security = SecurityConfig.from_properties(s.raw)
        self.acl_guard: AclGuard | None = None
        self.remoting: RemotingBroker | None = None  # the remoting front door, with enableRemoting
        self._listeners: list[Any] = []  # security/listener.py's and remoting/server.py's, started after the servers
        self._acl_watcher: FileWatcher | None = None
        self.dledger: DLedgerNode | None = None
        self.dledger_retention: DLedgerRetention | None = None
        self.cluster = s.brokerClusterName
        self.broker_name = s.brokerName
        self._broker_id = s.brokerId
        self._role = str(s.brokerRole)
        self.grpc_addr = f"{s.brokerIP1}:{s.grpcServerPort}"
        self.internal_addr = f"{s.brokerIP1}:{s.listenPort}"
        self.ha_port = implied_ha_port(s)
        self.ha_addr = f"{s.brokerIP2 or s.brokerIP1}:{self.ha_port}"  # the bound port once bound (ephemeral: 0)
        # listeners bind the advertised address unless bindAddress / haBindAddress say otherwise
        self.bind_host = s.bindAddress or s.brokerIP1
        self.ha_bind_host = s.haBindAddress or s.brokerIP2 or s.brokerIP1
        root = Path(s.storePathRootDir).expanduser()
        self.store = MessageStore(store_config(s, self.grpc_addr), self._store_hooks(s))
        self.topics = TopicManager(root / "config" / "topics.json", s.defaultTopicQueueNums, s.brokerPermission)
        self.topics.lmq_enabled = s.enableLmq  # a store key: read at start, as Apache's broker does
        self.groups = GroupManager(root / "config" / "subscriptionGroup.json")
        # mqadmin setConsumeMode's table (remoting QUERY_ASSIGNMENT answers it; a slave copies it from its master)
        self.request_modes = RequestModes(root / "config" / "messageRequestMode.json")
        self.offsets = OffsetManager(root / "config" / "consumerOffset.json")
        self.clients = ClientRegistry()
        self.pop = PopService(self.store, self.offsets, self.groups, self.topics, self.broker_name)
        self.lite = LiteService(lambda: self.settings, self.store, self.groups, self.pop,  # broker/lite.py
                                notify=self._tell_client)
        self.lite_expiry = LiteExpiry(lambda: self.settings, self.lite, self.topics, lambda: self.is_master)
        self.pop.priority_conf = lambda: (self.settings.priorityOrderAsc,
                                          self.settings.popFromRetryProbabilityForPriority)
        self.pull = PullService(self)
        self.timer = TimerService(self)
        self.transactions = TransactionService(self)
        self.trace_hooks: TraceHooks = NoTrace()
        self.telemetry_config = TelemetryConfig.from_properties(settings.raw)
        self.telemetry = Telemetry.disabled()
        self.metrics = BrokerMetrics(self, self.telemetry)
        self.client_metrics = ClientMetricsProxy(self)
        relay = EventRelay(self)
        self.ha_events = HaEventLog(self.cluster, self.broker_name, self.node_id, self.grpc_addr,
                                    self._append_ha_events, lambda: self.is_master, s.haEventAckIntervalMillis,
                                    commit_interval_ms=s.haEventCommitIntervalMillis, forward=relay.forward,
                                    context=relay.context, on_throttled=relay.on_throttled,
                                    spool=self.store.root / SPOOL_NAME)
        self.replication_master: ReplicationMaster = ReplicationMaster(self)
        self.replication_slave: ReplicationSlave = ReplicationSlave(self)
        self.pop.writable = lambda: self.is_master
        self.pop.hands_out = lambda: self.is_master or self.slave_reader.acting.acting
        self.forwarder: LeaderForwarder = LeaderForwarder(self)
        self.slave_reader: SlaveReader = SlaveReader(self)
        if s.enableDLegerCommitLog:
            # imported here: the Raft core and DLedger's log are ~20 modules a broker without DLedger never
            # uses, and every broker process paid for them at start (tests/test_lazy_imports.py)
            from .dledger.node import DLedgerConfig, DLedgerNode
            from .dledger.retention import DLedgerRetention

            self.dledger = DLedgerNode(DLedgerConfig.from_settings(s), self.store, self.ha_events,
                                       on_role_change=self.on_dledger_role_change, metrics=lambda: self.metrics,
                                       addresses=(self.grpc_addr, self.internal_addr),
                                       tls=self.security.client_tls)
            # retention only below the point every member has applied (no snapshots to send a lagging one)
            self.dledger_retention = DLedgerRetention(self.dledger, self.store, self.security)
        self.replicas = None  # controller mode (broker/controller/replicas.py)
        if s.enableControllerMode:
            from .controller.replicas import ReplicasManager

            self._role = "SLAVE"  # nothing is writable until the controller names a master
            self.replicas = ReplicasManager(self)
            self._broker_id = max(self.replicas.my_id, 1)
        self.namesrv = NamesrvClient(namesrv_addresses(s), self.registration, s.registerNameServerPeriod / 1000,
                                     channel=self.security.client_tls.channel)
        self.topics_on_change = self.namesrv.register_now
        self._rr = itertools.count()
        self._servers: list[grpc.aio.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.loop_lag: LoopLagMonitor | None = None  # started with the broker
        self._route_cache: dict[str, tuple[float, namesrv_pb2.TopicRouteData | None]] = {}
        self.started_at = time.time()

    def _store_hooks(self, s: Settings) -> StoreHooks:
        """The store's hooks for this HA mode.  They call objects built after the store (the HA master, the
        event log, the DLedger member, the controller-mode replicas), so each looks its object up when called."""
        dledger, controller = bool(s.enableDLegerCommitLog), bool(s.enableControllerMode)
        return StoreHooks(
            # DLedger: nothing is visible until Raft says what is committed; controller mode: only up to
            # what the SyncStateSet acknowledged
            confirm_offset=0 if dledger or controller else None,
            replication_waiter=self._replicas_wait if controller else self._wait_replicated,
            on_append=lambda: self.replication_master.notify_appended(),
            on_data=lambda end: self.ha_events.note_data(end),
            replicated_writer=self._dledger_propose if dledger else None,
            retention_floor=(lambda: self._dledger_retention().floor()) if dledger else None,
            on_retention_deleted=(lambda end: self._dledger_retention().on_deleted(end)) if dledger else None)

    def _dledger_retention(self) -> DLedgerRetention:
        assert self.dledger_retention is not None
        return self.dledger_retention

    async def _dledger_propose(self, messages: list[StoredMessage]) -> list[PutResult]:
        assert self.dledger is not None
        return await self.dledger.propose(messages)

    async def _replicas_wait(self, end_offset: int) -> PutStatus:
        assert self.replicas is not None
        return await self.replicas.wait_replicated(end_offset)

    def _register_created_topics(self) -> None:
        """Send the registration as soon as the broker creates a topic itself (the retry and DLQ topics of
        broker/pop.py), as Apache RocketMQ registers a new topic at once: otherwise the name servers'
        topic list lacks them until the next periodic registration (registerNameServerPeriod)."""
        metrics_hook = self.topics.on_created

        def on_created(name: str, system: bool, elapsed_ms: float, ok: bool) -> None:
            if metrics_hook is not None:
                metrics_hook(name, system, elapsed_ms, ok)
            if ok:
                self.topics_on_change()

        self.topics.on_created = on_created

    def _tell_client(self, client_id: str, command: object) -> bool:
        """Put a server-to-client command in the client's newest Telemetry stream; False when it has none."""
        info = self.clients.clients.get(client_id)
        if info is None or info.outbox is None:
            return False
        info.outbox.put_nowait(command)
        return True

    # ----------------------------------------------------------- properties
    @property
    def writable(self) -> bool:
        return self.is_master and bool(self.settings.brokerPermission & 2)

    @property
    def role(self) -> str:
        if self.dledger is not None:
            return str(self.dledger.role).upper()
        return self._role

    @property
    def is_master(self) -> bool:
        """Only a master (or Raft leader) appends to its own commit log; a slave only copies."""
        if self.dledger is not None:
            return self.dledger.is_leader
        return self._role != "SLAVE"

    def writer_lease_held(self) -> bool:
        """Whether this node's writer role is still certain (the timer's deliveries, transaction
        check-backs and POP hand-outs need it): a DLedger leader resumed after a pause may be deposed
        without knowing it yet (broker/dledger/node.py lease_valid); a controller-mode master cut off
        from the controllers may have been replaced (broker/controller/replicas.py lease_expired)."""
        if self.dledger is not None:
            return self.dledger.lease_valid()
        rm = getattr(self, "replicas", None)
        return rm is None or not rm.lease_expired

    @property
    def broker_id(self) -> int:
        return self.dledger.broker_id if self.dledger is not None else self._broker_id

    @property
    def own_broker_id(self) -> int:
        """The id this broker keeps outside DLedger (brokerId, or what a switch-over or the controller assigned)."""
        return self._broker_id

    def set_broker_id(self, broker_id: int) -> None:
        """Controller mode: the controller assigned this broker an id (broker/controller/replicas.py)."""
        self._broker_id = broker_id

    @property
    def node_id(self) -> str:
        if self.dledger is not None:
            return f"{self.broker_name}-{self.dledger.self_id}"
        return f"{self.broker_name}-{self.broker_id}"

    @property
    def metrics_addr(self) -> str:
        port = self.telemetry.prometheus_port
        return f"{self.settings.brokerIP1}:{port}" if port else ""

    def registration(self) -> namesrv_pb2.BrokerRegistration:
        reg = namesrv_pb2.BrokerRegistration(
            cluster_name=self.cluster, broker_name=self.broker_name, broker_id=self.broker_id,
            broker_addr=self.internal_addr, grpc_addr=self.grpc_addr, role=self.role,
            epoch=self.replicas.master_epoch if self.replicas is not None else -1,
            term=self.dledger.term if self.dledger is not None else -1,
            metrics_addr=self.metrics_addr, ha_server_addr=self.ha_addr,
            data_version=common_pb2.DataVersion(timestamp=self.topics.data_version[0],
                                                counter=self.topics.data_version[1]))
        if self.dledger is not None:
            reg.extras.update({"dledger": "true", "anyNodeServes": "true", "dLegerSelfId": self.dledger.self_id,
                               "dLegerGroup": self.dledger.group, "leader": self.dledger.leader_id or ""})
        if self.replicas is not None:
            reg.extras.update(self.replicas.registration_extras())
        for cfg in self.topics.all():
            perm = cfg.perm & self.settings.brokerPermission
            tc = reg.topics.add(topic_name=cfg.name, read_queue_nums=cfg.read_queue_nums,
                                write_queue_nums=cfg.write_queue_nums, perm=perm, order=cfg.order)
            tc.attributes.update(cfg.attributes)
        return reg

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        s = self.settings
        # node_id must name this process for its whole life; in controller mode the broker id is assigned by the
        # controller after start (every fresh member starts as 1) and changes with the role, so the address does
        metrics_node = self.node_id if self.replicas is None else f"{self.broker_name}@{self.internal_addr}"
        self.telemetry = Telemetry.start(self.telemetry_config, "broker", self.cluster, metrics_node,
                                         serve=self.security.metrics_serve())
        self.metrics = BrokerMetrics(self, self.telemetry)
        self.pop.on_dead_letter = self.metrics.on_dead_lettered
        self._register_created_topics()
        await self.store.start()
        if self.dledger is not None:
            self.dledger.open()
        self._create_system_topics()
        self.timer.recover()
        self.transactions.recover()
        self.pop.start()
        self.timer.start()
        self.transactions.start()
        if self.dledger is not None or self.replicas is not None:  # offsets through the replicated log
            task = OffsetLog(self.store, self.topics, self.offsets, self.pop, lambda: self.is_master,
                             s.consumerOffsetReplicateInterval / 1000).start()
            if task is not None:
                self._tasks.append(task)
        if s.popStateReplicate:  # hand-outs and acks through the log: every mode, so they survive a restart too
            self._tasks.append(PopStateLog(self.store, self.topics, self.pop, lambda: self.is_master,
                                           self.writer_lease_held, self.dledger is None and self.replicas is None,
                                           s.popStateSnapshotInterval / 1000).start())
        sec = self.security
        self.acl_guard = sec.guard(s.msgTraceTopicName, self.telemetry.counter("rocketmq_acl_denied_total"))
        interceptors: list[grpc.aio.ServerInterceptor] = [AclInterceptor(self.acl_guard)] if self.acl_guard else []
        self.client_server = grpc.aio.server(interceptors=interceptors,
                                             options=server_options(("grpc.max_receive_message_length", 64 << 20),
                                                                    ("grpc.max_send_message_length", 64 << 20)))
        add_messaging_service(MessagingService(self), self.client_server, self)
        self.client_metrics.register(self.client_server)
        self._listeners.append(bind_listener(self.client_server, "grpcServerPort", self.bind_host, s.grpcServerPort,
                                             sec.server_tls))
        self.admin_server = grpc.aio.server(interceptors=interceptors, options=server_options())
        admin_pb2_grpc.add_BrokerAdminServicer_to_server(BrokerAdminService(self), self.admin_server)
        if self.replicas is not None:
            self.replicas.register_services(self.admin_server)
        internal = sec.server_tls.for_internal()
        # listenPort: internal gRPC and RocketMQ's remoting protocol on one port (docs/REMOTING.md)
        listener, self.remoting = bind_broker_port(self, self.admin_server, self.bind_host, s.listenPort, internal)
        self._listeners.append(listener)
        # haListenPort: Master/Slave replication as framed TCP (broker/ha/wire.py), TLS and internalPeerSecret
        # enforced by the port (broker/peer_frames/port.py)
        self.ha_listener = FramedPort("HA", ha_wire.MAGIC, ha_wire.PROTOCOL, self.broker_name,
                                      self.replication_master.open_session, who="slave", key="haListenPort",
                                      secret=sec.client_tls.peer_secret, tls=internal)
        self.ha_listener.bind(self.ha_bind_host, self.ha_port)
        if not self.ha_port:  # an ephemeral port (listenPort 0): advertise the one the kernel gave
            self.ha_port = self.ha_listener.port
            self.ha_addr = f"{s.brokerIP2 or s.brokerIP1}:{self.ha_port}"
        self._listeners.append(self.ha_listener)
        self._servers = [self.client_server, self.admin_server]
        if self.dledger is not None:
            from .dledger.peer_port import PeerPort

            # the Raft port: framed TCP, TLS and internalPeerSecret of its own (broker/dledger/peer_port.py)
            self.peer_port = PeerPort(self.dledger.group, self.dledger.on_batch, secret=sec.client_tls.peer_secret,
                                      tls=internal)
            peer_host, _, peer_port = self.dledger.peers[self.dledger.self_id].rpartition(":")
            self.peer_port.bind(s.haBindAddress or peer_host, int(peer_port))
            self._listeners.append(self.peer_port)
        for server in self._servers:
            await server.start()
        for listener in self._listeners:
            try:
                await listener.start()
            except OSError as exc:  # a front end (permissive TLS, remoting) binds only now
                where = getattr(listener, "address", "")
                raise OSError(f"cannot listen on {where}: {exc.strerror or exc}") from None
        if self.acl_guard is not None:
            self._acl_watcher = sec.watcher(self.acl_guard)
            self._acl_watcher.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.offsets.flush_loop(s.consumerOffsetFlushInterval / 1000)))
        self._tasks.append(loop.create_task(self._housekeeping()))
        self._tasks.append(loop.create_task(self.lite_expiry.run(), name="lite-expiry"))
        if s.brokerTraceEnable:
            await self._start_broker_trace()
        if s.traceStore.lower() == "elasticsearch":
            await self._start_trace_indexer()
        self.metrics.start()
        self.client_metrics.start()
        self.loop_lag = LoopLagMonitor(self.metrics.on_loop_lag, what=f"broker {self.node_id} event loop")
        self.loop_lag.start()
        self.ha_events.node = self.node_id  # the HA mode is known now (DLedger names nodes by dLegerSelfId)
        self.ha_events.start()
        self.ha_events.emit(ROLE_CHANGE, role=self.role)
        if self.dledger is not None:
            self.dledger.start()
            self._tasks.append(loop.create_task(self._follower_metadata_sync()))
        elif not self.is_master:
            self.replication_slave.start()
        self.slave_reader.acting.start()  # slaveReadEnable: ReceiveMessage on a slave while its master is down
        if self.replicas is not None:
            self.replicas.start()  # starts the name-server link once the controller gave a role
        else:
            self.namesrv.start()
        log.info("broker %s (cluster %s, id %d, role %s) serving clients on %s and admin on %s; store %s",
                 self.broker_name, self.cluster, self.broker_id, self.role, self.grpc_addr, self.internal_addr,
                 s.storePathRootDir)

    def _create_system_topics(self) -> None:
        s = self.settings
        if s.traceTopicEnable:
            self.topics.create_if_absent(s.msgTraceTopicName, 1, system=True)
        self.topics.create_if_absent(HA_EVENTS_TOPIC, 1, system=True)

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(5)
            self.clients.expire()

    async def stop(self) -> None:
        """Stop serving clients first, then every service, each step bounded in time.

        Why this order and the bounds: a step that waited on something gone (a peer, a replica) used
        to keep the broker answering clients until its supervisor's SIGKILL 10 s later, with the
        state it takes (acks, commits) handled by services already half stopped (bench/chaos_bench.py,
        Master/Slave restarts, session 12).  Clients in the middle of a call get it finished within
        the gRPC grace; new calls are refused, so the clients retry at the other members.
        """
        log.info("broker %s shutting down", self.broker_name)
        # while clients are still served: the new writer takes over at once, without a timeout waited out
        if self.dledger is not None:
            await self._stop_step("DLedger leadership hand-off", self.dledger.hand_off())
        if self.replicas is not None:
            await self._stop_step("controller-mode master hand-off", self.replicas.hand_off())
        client_server = getattr(self, "client_server", None)
        if client_server is not None:
            await self._stop_step("client gRPC server", client_server.stop(grace=1))
        if self.replicas is not None:
            await self._stop_step("controller-mode replicas", self.replicas.stop())
        await self._stop_step("replication from the master", self.replication_slave.stop())
        await self._stop_step("slave acting", self.slave_reader.acting.stop())
        if hasattr(self.trace_hooks, "stop"):
            await self._stop_step("broker-side trace", self.trace_hooks.stop())  # type: ignore[attr-defined]
        if getattr(self, "trace_indexer", None) is not None:
            await self._stop_step("trace indexer", self.trace_indexer.stop())
        await self._stop_step("HA event log", self.ha_events.stop())
        if self.dledger is not None:
            await self._stop_step("DLedger member", self.dledger.stop())
        await self._stop_step("leader forwarding", self.forwarder.close())
        await self._stop_step("name-server registration", self.namesrv.stop())
        if self._acl_watcher is not None:
            await self._stop_step("ACL file watcher", self._acl_watcher.stop())
        for listener in self._listeners:
            await self._stop_step("listener", listener.stop())
        for server in self._servers:
            if server is not client_server:
                await self._stop_step("gRPC server", server.stop(grace=1))
        for t in self._tasks:
            t.cancel()
        if self.loop_lag is not None:
            await self._stop_step("event-loop monitor", self.loop_lag.stop())
        await self._stop_step("POP service", self.pop.stop())
        await self._stop_step("timer", self.timer.stop())
        await self._stop_step("transactions", self.transactions.stop())
        await self._stop_step("metrics", self.metrics.stop())
        self.offsets.flush()
        await self._stop_step("store", self.store.shutdown(), timeout_s=30.0)
        await asyncio.to_thread(self.telemetry.stop)
        log.info("broker %s stopped", self.broker_name)

    @staticmethod
    async def _stop_step(what: str, step: Any, timeout_s: float = 3.0) -> None:
        """One step of ``stop``: a step that hangs or fails is logged by name and the shutdown goes on."""
        try:
            await asyncio.wait_for(step, timeout_s)
        except TimeoutError:
            log.warning("stopping: %s did not stop within %.0f s; going on", what, timeout_s)
        except Exception:
            log.exception("stopping: %s failed; going on", what)

    # ----------------------------------------------------------- replication
    async def _wait_replicated(self, end_offset: int) -> PutStatus:
        if self._role != "SYNC_MASTER":
            return PutStatus.PUT_OK
        return await self.replication_master.wait_replicated(end_offset)

    async def _append_ha_events(self, events: list[HaEvent]) -> bool:
        msgs = [StoredMessage(topic=HA_EVENTS_TOPIC, queue_id=0, body=e.to_json().encode(),
                              properties={"KEYS": " ".join(e.keys()), "TAGS": e.type}) for e in events]
        results = await self.store.put(msgs)
        # only stored-and-replicated counts: an entry a leader change threw away is written again
        return all(r.message is not None and r.status == PutStatus.PUT_OK for r in results)

    async def change_role(self, role: str, broker_id: int) -> None:
        """Manual switch-over (Master/Slave mode): promote a slave or demote a master."""
        old_role, old_id = self._role, self.broker_id
        if role != "SLAVE" and not self.is_master:
            await self.replication_slave.stop()
            self.store.trim_torn_tail()  # the copy may end inside a record or a segment's filler
            self._role, self._broker_id = role, 0
            self.pop.take_over()
            self.timer.recover()
            self.transactions.recover()
        elif role == "SLAVE" and self.is_master:
            self._role, self._broker_id = role, broker_id
            self.replication_slave.start()
        else:
            self._role, self._broker_id = role, broker_id
        self.ha_events.node = self.node_id
        log.info("role changed: %s#%d -> %s#%d", old_role, old_id, role, self.broker_id)
        self.ha_events.emit(ROLE_CHANGE, role=role)
        self.namesrv.register_now()

    async def _start_broker_trace(self) -> None:
        """brokerTraceEnable: the broker writes trace records for clients that write none."""
        try:
            from rocketscope.trace.broker_side import BrokerTracer
        except ImportError as exc:
            raise ConfigError(f"config key brokerTraceEnable has bad value 'true': broker-side trace is not "
                              f"available in this build ({exc})") from exc
        s = self.settings
        self.topics.create_if_absent(s.msgTraceTopicName, 1, system=True)

        async def append(topic: str, body: str, keys: list[str], tag: str = "") -> None:
            props = {"KEYS": " ".join(keys), "UNIQ_KEY": uuid.uuid4().hex.upper()}
            if tag:
                props["TAGS"] = tag
            msg = StoredMessage(topic=topic, queue_id=0, body=body.encode("utf-8"), properties=props)
            await self.store.put([msg])

        tracer = BrokerTracer(append=append, region_id=s.regionId, store_host=self.grpc_addr,
                              trace_topic=s.msgTraceTopicName, queue_size=s.brokerTraceQueueSize,
                              telemetry=self.telemetry)
        await tracer.start()
        self.trace_hooks = tracer
        self.pop.trace = tracer
        log.info("broker-side trace on: records go to %s", s.msgTraceTopicName)

    async def _start_trace_indexer(self) -> None:
        """traceStore=elasticsearch: every record reaching the trace topic is also bulk-indexed there."""
        try:
            from rocketscope.trace.es_indexer import TraceIndexer, store_from_settings
        except ImportError as exc:  # the `es` extra is not installed (a broker-only install)
            raise ConfigError("config key traceStore=elasticsearch needs the Elasticsearch client: "
                              f"pip install 'rocketscope[es]' ({exc})") from exc

        s = self.settings
        try:
            store = store_from_settings(s)
        except ValueError as exc:
            raise ConfigError(f"config key traceStore has bad value 'elasticsearch': {exc}") from exc
        self.trace_indexer = TraceIndexer(store, s.msgTraceTopicName, active=lambda: self.is_master)
        self.store.add_topic_listener(s.msgTraceTopicName, self.trace_indexer.on_dispatch)
        await self.trace_indexer.start()
        log.info("trace records on %s are indexed into Elasticsearch %s", s.msgTraceTopicName,
                 s.traceElasticsearchHosts)

    def on_dledger_role_change(self) -> None:
        """Raft role or leader changed: re-register, and a new leader takes over the write-side services."""
        self.ha_events.node = self.node_id
        if self.is_master:
            self.pop.take_over()  # POP state from the replicated log (or the offsets synced from the old leader)
            self.timer.recover()
            self.transactions.recover()
        self.namesrv.register_now()

    async def _follower_metadata_sync(self) -> None:
        """A follower copies topics, groups and consumer offsets from the leader, like a slave."""
        while True:
            await asyncio.sleep(3)
            addr = self.dledger.leader_admin_addr() if self.dledger is not None else None
            if not addr:
                continue
            try:
                await self.replication_slave.sync_metadata_once(addr)
            except grpc.aio.AioRpcError as exc:
                log.debug("metadata sync from leader %s failed: %s", addr, exc.code().name)

    def ha_status(self) -> dict[str, Any]:
        if self.replicas is not None:
            return self.replicas.status()
        if self.dledger is not None:
            return {**self.dledger.status(), "node": self.node_id, "maxOffset": self.store.commit_log.max_offset,
                    "confirmOffset": self.store.confirm_offset, "dispatched": self.store.dispatched}
        status: dict[str, Any] = {"mode": "master_slave", "role": self.role, "brokerId": self.broker_id,
                                  "node": self.node_id, "maxOffset": self.store.commit_log.max_offset,
                                  "confirmOffset": self.store.confirm_offset}
        if self.is_master:
            status["slaves"] = self.replication_master.status()
            status["inSyncReplicas"] = self.settings.inSyncReplicas if self.role == "SYNC_MASTER" else 1
            status["slaveReadsRelayed"] = self.slave_reader.relayed
        else:
            status["master"] = self.replication_slave.master_ha_addr
            status["connected"] = self.replication_slave.connected
            status["lagBytes"] = self.replication_slave.lag_bytes
            status.update(self.slave_reader.acting.status())
        return status

    # --------------------------------------------------------------- routes
    def local_route(self, topic: str) -> namesrv_pb2.TopicRouteData | None:
        cfg = self.topics.get(topic)
        if cfg is None:
            return None
        route = namesrv_pb2.TopicRouteData(order=cfg.order)
        route.attributes.update(cfg.attributes)
        route.queue_datas.add(broker_name=self.broker_name, read_queue_nums=cfg.read_queue_nums,
                              write_queue_nums=cfg.write_queue_nums, perm=cfg.perm & self.settings.brokerPermission)
        bd = route.broker_datas.add(cluster=self.cluster, broker_name=self.broker_name)
        bd.broker_addrs[self.broker_id] = self.internal_addr
        bd.grpc_addrs[self.broker_id] = self.grpc_addr
        return route

    async def route_for(self, topic: str) -> namesrv_pb2.TopicRouteData | None:
        """The cluster-wide route of ``topic``; creates it here when auto-creation is on."""
        cached = self._route_cache.get(topic)
        if cached and time.monotonic() - cached[0] < 1.0:
            return cached[1]
        try:
            route = await self.namesrv.get_route(topic) if self.namesrv.addresses else self.local_route(topic)
        except NamesrvUnavailable as exc:
            log.warning("answering the route of %s from local topics only: %s", topic, exc)
            route = self.local_route(topic)
        if route is None and self.topics.get(topic) is not None:
            route = self.local_route(topic)  # created here but not registered yet
        if route is None and self.settings.autoCreateTopicEnable and not is_system_topic(topic):
            self.topics.create_if_absent(topic)
            self.topics_on_change()
            route = self.local_route(topic)
        self._route_cache[topic] = (time.monotonic(), route)
        return route

    def writable_topic(self, name: str) -> TopicConfig | None:
        """The config ``topic_for_send`` returns for ``name`` when it returns one without creating the topic; None
        when it would create it or refuse the send (the caller then asks ``topic_for_send``, which says why)."""
        cfg = self.topics.get(name)
        if cfg is None or not (self.is_master and cfg.writable and self.writable):
            return None
        return cfg

    async def topic_for_send(self, name: str) -> TopicConfig:
        """The topic a send writes to, created when autoCreateTopicEnable allows; a BrokerError (NOT_WRITER,
        TOPIC_NOT_FOUND, FORBIDDEN) when this broker cannot take the send, which each front door maps."""
        if not self.is_master:
            raise BrokerError(ErrorKind.NOT_WRITER, f"broker {self.node_id} is a slave: send to the master of "
                                                    f"{self.broker_name}")
        cfg = self.topics.get(name)
        if cfg is None:
            if self.settings.autoCreateTopicEnable and not is_system_topic(name):
                cfg = self.topics.create_if_absent(name)
                self.topics_on_change()
            else:
                raise BrokerError(ErrorKind.TOPIC_NOT_FOUND,
                                  f"topic.name: topic {name} does not exist on broker {self.broker_name}")
        if not (cfg.writable and self.writable):
            raise BrokerError(ErrorKind.FORBIDDEN, f"topic.name: topic {name} is not writable on broker "
                                                   f"{self.broker_name}")
        return cfg

    def select_queue(self, cfg: TopicConfig, message_group: str, client_queue: int | None = None) -> int:
        """A send's queue, as Apache RocketMQ's proxy picks it: a message group's consistent hash, otherwise round
        robin; with sendMessageQueueSelection=CLIENT, the queue the client named (``client_queue``) when it exists."""
        if client_queue is not None and self.settings.sendMessageQueueSelection == "CLIENT" \
                and 0 <= client_queue < cfg.write_queue_nums:
            return client_queue
        if message_group:
            return group_queue(message_group, cfg.write_queue_nums)
        return next(self._rr) % cfg.write_queue_nums

    # ---------------------------------------------------------- produce path
    async def put_messages(self, stored: list[StoredMessage], kinds: list[SendKind],
                           client_id: str = "") -> list[PutResult]:
        """Store one group of messages; ``kinds`` (one per message) turns a message into a transaction half or a
        timer record (a delivery time in the future)."""
        s = self.settings
        now_ms = time.time() * 1000
        region, trace_on = s.regionId, "true" if s.traceOn else "false"  # read once per group, not per message
        for m, kind in zip(stored, kinds, strict=True):
            props = m.properties
            if "MSG_REGION" not in props:
                props["MSG_REGION"] = region
            if "TRACE_ON" not in props:
                props["TRACE_ON"] = trace_on
            if kind is PLAIN:
                continue
            if kind.transaction:
                self.transactions.wrap(m, client_id)
            elif kind.deliver_at_ms is not None and kind.deliver_at_ms > now_ms:
                self.timer.wrap(m, kind.deliver_at_ms)
        results = await self.store.put(stored)
        self.metrics.on_put(results)
        for res in results:
            msg = res.message
            if msg is None:
                continue
            if msg.topic == HALF_TOPIC:
                self.transactions.accepted(msg)
            elif msg.topic == TIMER_TOPIC:
                self.timer.accepted(msg)
        return results

    @property
    def stores_plain_runs(self) -> bool:
        """Whether ``put_plain_run`` can store a run here: a put that waits for no fsync and no replica."""
        return self.store.takes_plain_runs and self.replicas is None and self._role != "SYNC_MASTER"

    @property
    def replicates_plain_runs(self) -> bool:
        """Whether ``put_plain_run_replicated`` can store a run here: a SYNC_MASTER of Master/Slave (not controller
        mode) whose store waits for no fsync."""
        return self.store.takes_plain_runs and self.replicas is None and self._role == "SYNC_MASTER"

    def put_plain_run(self, stored: list[StoredMessage]) -> bool:
        """Store a run of plain messages (no transaction, no delivery time) without waiting: True when all are
        stored (``put_messages``'s PUT_OK for each, their offsets set on them), False when the store declined
        the run (a store that waits for flush or replicas, a message it would refuse): nothing was stored, and
        ``put_messages`` does it.  The remoting front door's run of single sends (issue 20): no ``PutResult``
        per message and no await."""
        if not self.stores_plain_runs or not self._append_plain_run(stored):
            return False  # a put that waits (fsync, replicas): put_messages, whose one future serves the run
        self.metrics.on_stored(stored)
        return True

    def put_plain_run_replicated(self, stored: list[StoredMessage], done: Callable[[bool], None]) -> bool:
        """``put_plain_run`` on a SYNC_MASTER: store the run now, then ``done(True)`` once ``inSyncReplicas`` copies
        hold it or ``done(False)`` after ``slaveTimeout`` (each message's FLUSH_SLAVE_TIMEOUT, as ``put_messages``
        would say); False, nothing stored and ``done`` never called, when the store declined the run.  The
        messages count as stored (the metrics) when their copies are in, as ``put_messages`` counts PUT_OK only."""
        if not self.replicates_plain_runs or not self._append_plain_run(stored):
            return False
        last = stored[-1]

        def replicated(ok: bool) -> None:
            if ok:
                self.metrics.on_stored(stored)
            done(ok)

        self.replication_master.when_replicated(last.physical_offset + last.size, replicated)
        return True

    @property
    def proposes_plain_runs(self) -> bool:
        """Whether ``propose_plain_run`` can take a run here: a DLedger member whose puts are plain proposals (no
        LMQ dispatch)."""
        return self.dledger is not None and not self.store.config.multi_dispatch

    def propose_plain_run(self, stored: list[StoredMessage], done: Callable[[list[PutResult]], None]) -> None:
        """``put_messages`` for a run of plain messages on a DLedger member, its results handed to ``done`` once
        the group's entries are answered (``DLedgerNode.propose_then``) instead of awaited: the same properties set,
        the same proposal, the same metrics, the same results."""
        assert self.dledger is not None
        self._mark_region(stored)

        def proposed(results: list[PutResult]) -> None:
            self.metrics.on_put(results)
            done(results)

        self.dledger.propose_then(stored, proposed)

    def _append_plain_run(self, stored: list[StoredMessage]) -> bool:
        self._mark_region(stored)
        return self.store.append_plain_run(stored)

    def _mark_region(self, stored: list[StoredMessage]) -> None:
        """MSG_REGION and TRACE_ON on every message that lacks them, as ``put_messages`` sets them."""
        s = self.settings
        region, trace_on = s.regionId, "true" if s.traceOn else "false"
        for m in stored:
            props = m.properties
            if "MSG_REGION" not in props:
                props["MSG_REGION"] = region
            if "TRACE_ON" not in props:
                props["TRACE_ON"] = trace_on

    # ---------------------------------------------------------- consume path
    async def receive(self, group: str, topic: str, queue_id: int, batch: int, invisible_ms: int,
                      tags: MessageFilter, poll_s: float) -> list[Delivery]:
        cfg = self.topics.get(topic)
        queue_ids = list(range(cfg.read_queue_nums)) if cfg is not None else [queue_id]
        deliveries = await self.pop.receive(group, topic, queue_ids, batch, invisible_ms, tags, poll_s)
        self.metrics.on_delivered(group, deliveries)
        return deliveries

    def ack(self, group: str, handle: str, message_id: str, client_id: str = "", traced: bool = False) -> None:
        receipt, handed_ms = self.pop.ack(group, handle)
        if not isinstance(self.trace_hooks, NoTrace):
            self.trace_hooks.on_acked(
                group, lambda: self.store.message_at(receipt.topic, receipt.queue_id, receipt.offset),
                request_id=request_id(receipt.seq), cost_ms=self.pop.now_ms() - handed_ms if handed_ms else 0,
                client_id=client_id, client_traced=traced)

    def change_invisible(self, group: str, handle: str, invisible_ms: int, message_id: str) -> str:
        return self.pop.change_invisible(group, handle, invisible_ms)

    async def forward_to_dlq(self, group: str, handle: str, message_id: str) -> None:
        await self.pop.forward_to_dlq(group, handle)

    # ------------------------------------------------- hooks for later layers
    def record_rpc(self, method: str, response_code: str, served: bool, seconds: float,
                   long_polling: bool = False) -> None:
        self.metrics.on_rpc(method, response_code, served, seconds, long_polling)

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Recall a delayed message before its time (RecallError when it cannot); returns its message id."""
        msg_id = await self.timer.recall(topic, recall_handle)
        self.trace_hooks.on_recalled(topic, msg_id, success=True)
        return msg_id

    def on_delay_delivered(self, msg: StoredMessage, late_ms: int) -> None:
        """A delayed message reached its topic ``late_ms`` after its time."""
        self.metrics.on_delay_delivered(msg.topic, late_ms)
        self.trace_hooks.on_delay_delivered(msg, late_ms=late_ms)

    def on_transaction_committed(self, msg: StoredMessage) -> None:
        """Hook for metrics and trace: a half message was committed to its topic."""

    def on_transaction_resolved(self, topic: str, committed: bool, latency_s: float) -> None:
        self.metrics.on_transaction(topic, committed, latency_s)


async def run_broker(settings: Settings) -> None:
    broker = Broker(settings)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await broker.stop()
