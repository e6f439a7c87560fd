"""The broker side of controller mode (RocketMQ's ReplicasManager + AutoSwitchHAService).

A broker with ``enableControllerMode=true`` starts as a non-writable slave, gets a
broker id from the controller (persisted in ``brokerIdentity``), registers, heartbeats
to every controller, and takes the role the controller leader states: a newer master
epoch naming this broker makes it master, naming another makes it a slave of that one.

Replication reuses the Master/Slave stream (broker/ha) unchanged; this module adds what
controller mode needs around it:

* the epoch file, and the truncation to the last shared epoch before a slave follows
  a master (``_before_session``, run before *every* replication session);
* the SyncStateSet: the master shrinks it (a member without a connection, or still
  behind the master's log end of ``haMaxTimeSlaveNotCatchup`` ago) and expands it (a
  connected slave at or past the confirm offset and the start of the current epoch),
  and uses a new set only once the controller committed it;
* the ack rule: fewer members than ``minInSyncReplicas`` fails at once
  (IN_SYNC_REPLICAS_NOT_ENOUGH); otherwise a send waits for every member
  (``allAckInSyncStateSet``) or for ``inSyncReplicas`` copies *among the members*, else
  FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``;
* the confirm offset: the smallest ack of the members (the log end when the master is
  alone), never moving back; consumers are dispatched only up to it.  Because an
  election only picks a SyncStateSet member, a confirmed message is on every candidate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from rocketscope import ha_events as ev
from rocketscope.broker.protocol import controller_pb2 as cpb
from rocketscope.broker.protocol import controller_pb2_grpc
from rocketscope.broker.store.message_store import PutStatus

from .client import ControllerClient, ControllerUnavailable
from .config import controller_addresses
from .epoch import EpochEntry, EpochFile, find_consistent_point
from .state import NO_MASTER, Code

if TYPE_CHECKING:
    from rocketscope.broker.ha.event_log import HaEventLog
    from rocketscope.broker.ha.master import ReplicationMaster
    from rocketscope.broker.ha.slave import ReplicationSlave
    from rocketscope.broker.namesrv_client import NamesrvClient
    from rocketscope.broker.security import SecurityConfig
    from rocketscope.broker.store.message_store import MessageStore
    from rocketscope.config import Settings

log = logging.getLogger(__name__)


class SlaveReadCount(Protocol):
    relayed: int  # pulls served through a slave (broker/slave_read.py), for the status page


class ReplicasHost(Protocol):
    """What controller mode uses of its broker (issue 17: this, not the whole Broker)."""

    store: MessageStore
    settings: Settings
    security: SecurityConfig
    namesrv: NamesrvClient
    ha_events: HaEventLog
    replication_master: ReplicationMaster
    replication_slave: ReplicationSlave
    cluster: str
    broker_name: str
    grpc_addr: str
    internal_addr: str
    ha_addr: str

    @property
    def slave_reader(self) -> SlaveReadCount: ...

    @property
    def is_master(self) -> bool: ...

    @property
    def node_id(self) -> str: ...

    def set_broker_id(self, broker_id: int) -> None: ...

    async def change_role(self, role: str, broker_id: int) -> None: ...


class ReplicasManager(controller_pb2_grpc.BrokerReplicaServicer):
    def __init__(self, broker: ReplicasHost) -> None:
        self.broker = broker
        s = broker.settings
        root = Path(s.storePathRootDir).expanduser()
        self.identity_path = Path(s.storePathBrokerIdentity or root / "brokerIdentity").expanduser()
        self.epochs = EpochFile(Path(s.storePathEpochFile or root / "epochFileCheckpoint").expanduser())
        self.client = ControllerClient(controller_addresses(s.controllerAddr),
                                       channel=broker.security.client_tls.channel)
        self.my_id = self._load_identity()
        self.master_epoch = 0
        self.master_id = NO_MASTER
        self.master_addr = ""
        self.master_ha_addr = ""
        self.master_grpc_addr = ""
        self.sync_state_set: tuple[int, ...] = ()
        self.sync_state_set_epoch = 0
        self.registered = False
        self.last_truncation: dict[str, int] | None = None
        self.truncations = 0
        self._pending_epochs: list[EpochEntry] = []
        self._max_samples: deque[tuple[float, int]] = deque()
        self._role_lock = asyncio.Lock()
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._acked_end = 0  # the highest end offset a put was answered PUT_OK for (hand_off's floor)
        self._handing_off = False  # while set, a put is answered only once every SyncStateSet member has it
        self._tasks: list[asyncio.Task[None]] = []
        self._namesrv_started = False
        # when the controller leader last answered a heartbeat: a master that has not heard from it for a
        # heartbeat timeout may have been replaced (the controllers saw it as dead), see ``lease_expired``
        self.last_leader_contact = time.monotonic()
        broker.replication_master.on_ack.append(lambda _st: self._on_ack())
        broker.replication_slave.before_session = self._before_session
        broker.replication_slave.follow_confirm = True
        broker.replication_slave.address_override = lambda: (self.master_ha_addr, self.master_addr)

    # ---------------------------------------------------------- identity
    def _load_identity(self) -> int:
        try:
            d = json.loads(self.identity_path.read_text())
            if d.get("brokerName") == self.broker.broker_name:
                return int(d["brokerId"])
        except (OSError, ValueError, KeyError):
            pass
        return NO_MASTER

    def _save_identity(self, broker_id: int, check_code: str) -> None:
        tmp = self.identity_path.with_name(self.identity_path.name + "-temp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"clusterName": self.broker.cluster, "brokerName": self.broker.broker_name,
                                   "brokerId": broker_id, "registerCheckCode": check_code}))
        os.replace(tmp, self.identity_path)

    @property
    def sync_state_set_size(self) -> int:
        """Members of the SyncStateSet, this broker (the master) included."""
        return len(set(self.sync_state_set) | {self.my_id})

    @property
    def is_master(self) -> bool:
        return self.master_id == self.my_id and self.my_id != NO_MASTER and self.broker.is_master

    # ----------------------------------------------------------- lifecycle
    def register_services(self, server: grpc.aio.Server) -> None:
        controller_pb2_grpc.add_BrokerReplicaServicer_to_server(self, server)

    def start(self) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(self._run(), name="controller-replicas"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self.client.close()

    async def _run(self) -> None:
        s = self.broker.settings
        while not self.registered:
            try:
                await self._register()
            except ControllerUnavailable as exc:
                log.warning("controller mode: cannot register yet: %s", exc)
                await asyncio.sleep(0.5 + random.random() * 0.5)
        loop = asyncio.get_running_loop()
        self._tasks += [loop.create_task(self._every(s.brokerHeartbeatInterval, self._heartbeat), name="ctl-hb"),
                        loop.create_task(self._every(s.syncBrokerMetadataPeriod, self._poll), name="ctl-poll"),
                        loop.create_task(self._every(s.checkSyncStateSetPeriod, self._check_sync_state_set),
                                         name="ctl-sss")]
        await self._poll()

    async def _every(self, period_ms: int, fn: Any) -> None:
        while True:
            try:
                await fn()
            except ControllerUnavailable as exc:
                log.debug("controller unavailable: %s", exc)
            except Exception:
                log.exception("controller-mode task %s failed", getattr(fn, "__name__", fn))
            await asyncio.sleep(period_ms / 1000)

    async def _register(self) -> None:
        b = self.broker
        if self.my_id == NO_MASTER:
            resp = await self.client.call("GetNextBrokerId", cpb.BrokerSetRequest(
                cluster_name=b.cluster, broker_name=b.broker_name))
            check = f"{b.internal_addr};{int(time.time() * 1000)}"
            applied = await self.client.call("ApplyBrokerId", cpb.ApplyBrokerIdRequest(
                cluster_name=b.cluster, broker_name=b.broker_name, broker_id=resp.broker_id,
                register_check_code=check))
            if applied.status.code != Code.SUCCESS:
                log.warning("controller refused broker id %d: %s", resp.broker_id, applied.status.remark)
                return
            self._save_identity(resp.broker_id, check)
            self.my_id = resp.broker_id
            log.info("controller mode: this broker is %s#%d", b.broker_name, self.my_id)
        b.set_broker_id(self.my_id)
        resp = await self.client.call("RegisterBroker", cpb.RegisterBrokerRequest(
            cluster_name=b.cluster, broker_name=b.broker_name, broker_id=self.my_id, address=b.internal_addr,
            ha_address=b.ha_addr, grpc_address=b.grpc_addr))
        if resp.status.code != Code.SUCCESS:
            log.warning("controller refused registration: %s %s", Code(resp.status.code).name, resp.status.remark)
            if resp.status.code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                self.my_id = NO_MASTER  # the controller forgot us (cleaned): apply again
            return
        self.registered = True
        await self._heartbeat()
        await self.on_info(resp.info)

    # ------------------------------------------------------------ periodic
    def _heartbeat_request(self) -> cpb.BrokerHeartbeat:
        b, s = self.broker, self.broker.settings
        return cpb.BrokerHeartbeat(cluster_name=b.cluster, broker_name=b.broker_name, broker_id=self.my_id,
                                   address=b.internal_addr, epoch=self.epochs.last_epoch,
                                   max_offset=b.store.commit_log.max_offset, confirm_offset=b.store.confirm_offset,
                                   heartbeat_timeout_ms=s.controllerHeartBeatTimeoutMills,
                                   election_priority=s.brokerElectionPriority)

    async def _heartbeat(self) -> None:
        self._adopt_pending_epochs()
        if self.is_master:
            self._update_confirm()
        timeout = self.broker.settings.sendHeartbeatTimeoutMillis / 1000
        for _addr, resp in await self.client.call_all("Heartbeat", self._heartbeat_request(), timeout):
            if resp.status.code == Code.SUCCESS and resp.HasField("info"):
                self.last_leader_contact = time.monotonic()
                await self.on_info(resp.info)

    @property
    def lease_expired(self) -> bool:
        """No controller leader heard for longer than the timeout after which it deems this broker dead."""
        timeout = self.broker.settings.controllerHeartBeatTimeoutMills / 1000
        return time.monotonic() - self.last_leader_contact > timeout

    async def _poll(self) -> None:
        b = self.broker
        resp = await self.client.call("GetReplicaInfo", cpb.BrokerSetRequest(cluster_name=b.cluster,
                                                                             broker_name=b.broker_name))
        if resp.status.code == Code.SUCCESS:
            await self.on_info(resp.info)
            if resp.info.master_broker_id == NO_MASTER or not any(
                    r.alive for r in resp.info.replicas if r.broker_id == resp.info.master_broker_id):
                await self.elect_self()

    async def hand_off(self) -> int | None:
        """A master about to stop asks the controller to elect its most caught-up live in-sync slave now
        (ElectMaster designating it, as `mqadmin electMaster -b` does) and adopts the answer, so it forwards
        what its clients still send instead of taking writes no slave will copy; the new master's id, or None.

        Why: a graceful stop used to leave the set masterless until the controller's heartbeat timeout after
        the master's last heartbeat: 1.8-1.9 s without a successful send in the chaos harness's restarts
        (session 13), more than a kill -9 (0.7 s)."""
        if not self.is_master:
            return None
        # no acknowledged message may be missing on the new master: from now on a put is answered only once
        # every SyncStateSet member holds it, and the target must hold everything answered before
        self._handing_off = True
        try:
            target = await self._hand_off_target(wait_s=0.5)
            if target is None:
                return None
            b = self.broker
            log.info("controller mode: stopping: asking the controller to elect broker %d master of %s", target,
                     b.broker_name)
            resp = await self.client.call("ElectMaster", cpb.ElectMasterRequest(
                cluster_name=b.cluster, broker_name=b.broker_name, broker_id=target, designate_elect=True))
            if resp.status.code != Code.SUCCESS:
                log.info("controller mode: hand-off refused: %s %s", Code(resp.status.code).name,
                         resp.status.remark)
                return None
            await self.on_info(resp.info)
            return target
        finally:
            self._handing_off = False

    async def _hand_off_target(self, wait_s: float) -> int | None:
        """The live, answering SyncStateSet slave holding the most, once it holds every acknowledged put
        (waiting up to ``wait_s`` for one to catch up); None: no such slave, stop without a hand-off."""
        s = self.broker.settings
        slaves = self.broker.replication_master.slaves
        deadline = time.monotonic() + wait_s
        while True:
            now = time.monotonic()
            live = [(st.ack_offset, m) for m in self.sync_state_set if m != self.my_id
                    and (st := slaves.get(m)) is not None and st.connected
                    and st.silent_for(now) <= s.haHousekeepingInterval / 1000]
            best = max(live, default=None)
            if best is not None and best[0] >= self._acked_end:
                return best[1]
            if now >= deadline or not live:
                return None
            await asyncio.sleep(0.01)

    async def elect_self(self) -> None:
        b = self.broker
        resp = await self.client.call("ElectMaster", cpb.ElectMasterRequest(
            cluster_name=b.cluster, broker_name=b.broker_name, broker_id=self.my_id))
        if resp.status.code in (Code.SUCCESS, Code.CONTROLLER_MASTER_STILL_EXIST):
            await self.on_info(resp.info)
        else:
            log.info("controller mode: ElectMaster: %s %s", Code(resp.status.code).name, resp.status.remark)

    # ---------------------------------------------------------------- roles
    async def on_info(self, info: cpb.ReplicaInfo) -> None:
        """Adopt the controller's view: a newer epoch changes the role, a newer set epoch the set."""
        async with self._role_lock:
            if info.master_epoch > self.master_epoch and info.master_broker_id != NO_MASTER:
                if info.master_broker_id == self.my_id:
                    await self._become_master(info)
                else:
                    await self._become_slave(info)
            elif (info.master_epoch == self.master_epoch and self.is_master
                  and info.sync_state_set_epoch > self.sync_state_set_epoch):
                self._adopt_set(info)
            elif info.master_epoch == self.master_epoch and not self.is_master and info.master_broker_id != NO_MASTER:
                if info.sync_state_set_epoch > self.sync_state_set_epoch:  # a slave's view, for haStatus only
                    self.sync_state_set = tuple(sorted(info.sync_state_set))
                    self.sync_state_set_epoch = info.sync_state_set_epoch
                rec = next((r for r in info.replicas if r.broker_id == info.master_broker_id), None)
                if rec is not None and (rec.ha_address, rec.address) != (self.master_ha_addr, self.master_addr):
                    self.master_ha_addr, self.master_addr = rec.ha_address, rec.address
                    self.master_grpc_addr = rec.grpc_address

    def _adopt_set(self, info: cpb.ReplicaInfo) -> None:
        old = self.sync_state_set
        self.sync_state_set = tuple(sorted(info.sync_state_set))
        self.sync_state_set_epoch = info.sync_state_set_epoch
        if old != self.sync_state_set:
            b = self.broker
            log.info("SyncStateSet of %s: %s -> %s (epoch %d)", b.broker_name, list(old), list(self.sync_state_set),
                     self.sync_state_set_epoch)
            b.ha_events.emit(ev.SYNC_STATE_SET_CHANGED, epoch=self.master_epoch,
                             members=tuple(f"{b.broker_name}#{m}" for m in self.sync_state_set))
        self._update_confirm()
        self._resolve_waiters()

    async def _become_master(self, info: cpb.ReplicaInfo) -> None:
        b = self.broker
        store = b.store
        if info.master_epoch < self.epochs.last_epoch:
            log.error("refusing master epoch %d: the epoch file is already at %d", info.master_epoch,
                      self.epochs.last_epoch)
            return
        was_master = b.is_master
        if b.replication_slave.running:
            await b.replication_slave.stop()
        self.master_epoch, self.master_id = info.master_epoch, self.my_id
        self.master_addr, self.master_ha_addr, self.master_grpc_addr = b.internal_addr, b.ha_addr, b.grpc_addr
        if not was_master:  # replicated bytes may end inside a record or a segment's filler: never write after it
            store.trim_torn_tail()
        self.epochs.truncate_from(store.commit_log.max_offset + 1)
        if info.master_epoch > self.epochs.last_epoch:
            self.epochs.append(info.master_epoch, store.commit_log.max_offset)
        self._pending_epochs = []
        self._max_samples.clear()
        self.sync_state_set = tuple(sorted(info.sync_state_set)) or (self.my_id,)
        self.sync_state_set_epoch = info.sync_state_set_epoch
        store.rebuild_queue_offsets()
        if not was_master:
            await b.change_role("SYNC_MASTER", 0)
        self._update_confirm()
        b.ha_events.emit(ev.MASTER_ELECTED, epoch=self.master_epoch, leader=b.node_id,
                         offset=store.commit_log.max_offset)
        b.ha_events.emit(ev.SYNC_STATE_SET_CHANGED, epoch=self.master_epoch,
                         members=tuple(f"{b.broker_name}#{m}" for m in self.sync_state_set))
        log.info("controller mode: %s#%d is MASTER of epoch %d at offset %d", b.broker_name, self.my_id,
                 self.master_epoch, store.commit_log.max_offset)
        self._ensure_namesrv()

    async def _become_slave(self, info: cpb.ReplicaInfo) -> None:
        b = self.broker
        rec = next((r for r in info.replicas if r.broker_id == info.master_broker_id), None)
        if rec is None:
            return
        self.master_epoch, self.master_id = info.master_epoch, info.master_broker_id
        self.master_addr, self.master_ha_addr, self.master_grpc_addr = rec.address, rec.ha_address, rec.grpc_address
        self.sync_state_set, self.sync_state_set_epoch = tuple(sorted(info.sync_state_set)), info.sync_state_set_epoch
        self._fail_waiters()
        if b.is_master:
            await b.change_role("SLAVE", self.my_id)  # starts replication (truncating first)
        else:
            await b.replication_slave.stop()
            b.set_broker_id(self.my_id)
            b.replication_slave.start()
            b.namesrv.register_now()
        log.info("controller mode: %s#%d is SLAVE of #%d (%s), epoch %d", b.broker_name, self.my_id,
                 self.master_id, self.master_ha_addr, self.master_epoch)
        self._ensure_namesrv()

    def _ensure_namesrv(self) -> None:
        if not self._namesrv_started:
            self._namesrv_started = True
            self.broker.namesrv.start()

    # ------------------------------------------------------ truncation
    async def _before_session(self, ha_addr: str) -> None:
        """Before following a master: cut the local tail it does not share, adopt its epochs."""
        b = self.broker
        if not self.master_addr or ha_addr != self.master_ha_addr:
            raise ValueError(f"{ha_addr} is not the current master's HA address")
        async with b.security.client_tls.channel(self.master_addr) as ch:
            cache = await controller_pb2_grpc.BrokerReplicaStub(ch).GetBrokerEpoch(
                cpb.BrokerEpochRequest(), timeout=3, metadata=b.security.inner_metadata())
        if cache.role != "MASTER" or cache.master_epoch != self.master_epoch:
            raise ValueError(f"{self.master_addr} is not master of epoch {self.master_epoch} yet "
                             f"({cache.role}, epoch {cache.master_epoch})")
        master = [EpochEntry(e.epoch, e.start_offset) for e in cache.entries]
        store = b.store
        local_max = store.commit_log.max_offset
        point = find_consistent_point(self.epochs.entries, local_max, master, cache.max_offset)
        if point is None:
            point = 0
            if local_max:
                log.warning("no epoch shared with master %s: truncating the whole local log (%d bytes)",
                            self.master_addr, local_max)
        point = min(point, cache.max_offset)
        if point < local_max:
            removed = store.truncate_to(point)
            self.epochs.truncate_from(point + 1 if point else 0)
            self.truncations += 1
            self.last_truncation = {"fromOffset": point, "toOffset": local_max, "epoch": self.master_epoch,
                                    "at": int(time.time() * 1000)}
            log.warning("controller mode: truncated %d bytes [%d, %d) not on master #%d (epoch %d)", removed, point,
                        local_max, self.master_id, self.master_epoch)
            b.ha_events.emit(ev.TRUNCATION, epoch=self.master_epoch, from_offset=point, to_offset=local_max)
        self._pending_epochs = master
        self._adopt_pending_epochs()

    def _adopt_pending_epochs(self) -> None:
        """A slave records the master's epochs it now holds data of (start at or below its log end)."""
        if not self._pending_epochs or self.is_master:
            return
        end = self.broker.store.commit_log.max_offset
        held = [e for e in self._pending_epochs if e.start <= end]
        if held and held != self.epochs.entries:
            self.epochs.replace(held)

    # --------------------------------------------------------- SyncStateSet
    async def _check_sync_state_set(self) -> None:
        if not self.is_master:
            return
        b, s = self.broker, self.broker.settings
        now = time.monotonic()
        end = b.store.commit_log.max_offset
        self._max_samples.append((now, end))
        horizon = now - s.haMaxTimeSlaveNotCatchup / 1000
        behind_mark = 0
        while self._max_samples and self._max_samples[0][0] <= horizon:
            behind_mark = self._max_samples.popleft()[1]
        if behind_mark:
            self._max_samples.appendleft((horizon, behind_mark))
        slaves = b.replication_master.slaves
        members = set(self.sync_state_set)
        new = {self.my_id}
        silent_limit = s.haHousekeepingInterval / 1000
        for m in members - {self.my_id}:
            st = slaves.get(m)
            if st is None or not st.connected or st.ack_offset < behind_mark:
                continue  # shrink
            if st.silent_for(now) > silent_limit:
                log.info("controller mode: SyncStateSet member #%d silent for %.2f s (haHousekeepingInterval %d ms)",
                         m, st.silent_for(now), s.haHousekeepingInterval)
                continue  # shrink: paused or cut off, though its connection is open and it was not behind
            new.add(m)
        epoch_start = self.epochs.entries[-1].start if self.epochs.entries else 0
        confirm = b.store.confirm_offset
        for bid, st in slaves.items():
            if (bid not in members and st.connected and st.silent_for(now) <= silent_limit
                    and st.ack_offset >= confirm and st.ack_offset >= epoch_start):
                new.add(bid)
        if tuple(sorted(new)) == self.sync_state_set:
            return
        resp = await self.client.call("AlterSyncStateSet", cpb.AlterSyncStateSetRequest(
            cluster_name=b.cluster, broker_name=b.broker_name, master_broker_id=self.my_id,
            master_epoch=self.master_epoch, sync_state_set=sorted(new), sync_state_set_epoch=self.sync_state_set_epoch))
        if resp.status.code == Code.SUCCESS:
            async with self._role_lock:
                self._adopt_set(resp.info)
        else:
            log.info("AlterSyncStateSet %s refused: %s %s", sorted(new), Code(resp.status.code).name,
                     resp.status.remark)
            await self.on_info(resp.info) if resp.HasField("info") else None

    # ------------------------------------------------------------- acks
    def _copies(self, offset: int) -> tuple[int, int]:
        """(copies among the SyncStateSet holding ``offset``, members) — the master counts."""
        slaves = self.broker.replication_master.slaves
        members = [m for m in self.sync_state_set if m != self.my_id]
        have = 1 + sum(1 for m in members if (st := slaves.get(m)) is not None and st.connected
                       and st.ack_offset >= offset)
        return have, 1 + len(members)

    def _ack_summary(self) -> str:
        """Each connected slave's ack offset and silence, for the log line of a timed-out send."""
        now = time.monotonic()
        slaves = sorted(self.broker.replication_master.slaves.items())
        return ", ".join(f"#{bid} {'up' if st.connected else 'down'} ack {st.ack_offset} "
                         f"silent {st.silent_for(now):.2f} s" for bid, st in slaves) or "no slave"

    def _needed(self) -> int:
        s = self.broker.settings
        size = self.sync_state_set_size
        return size if s.allAckInSyncStateSet or self._handing_off else min(s.inSyncReplicas, size)

    async def wait_replicated(self, end_offset: int) -> PutStatus:
        s = self.broker.settings
        if not self.is_master:
            return PutStatus.SERVICE_NOT_AVAILABLE
        if self.sync_state_set_size < s.minInSyncReplicas:
            return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        if self._copies(end_offset)[0] >= self._needed():
            self._update_confirm()
            self._acked_end = max(self._acked_end, end_offset)
            return PutStatus.PUT_OK
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append((end_offset, fut))
        try:
            replicated = await asyncio.wait_for(fut, s.slaveTimeout / 1000)
        except TimeoutError:
            have, members = self._copies(end_offset)
            log.info("controller mode: a send to offset %d waited %d ms (slaveTimeout) for %d copies; %d of the "
                     "SyncStateSet's %d hold it (acks: %s)", end_offset, s.slaveTimeout, self._needed(), have,
                     members, self._ack_summary())
            return PutStatus.FLUSH_SLAVE_TIMEOUT
        if replicated and self.is_master:
            self._acked_end = max(self._acked_end, end_offset)
            return PutStatus.PUT_OK
        return PutStatus.SERVICE_NOT_AVAILABLE

    def _on_ack(self) -> None:
        if self.is_master:
            self._update_confirm()
            self._resolve_waiters()

    def _resolve_waiters(self) -> None:
        needed = self._needed()
        keep = []
        for offset, fut in self._waiters:
            if fut.done():
                continue
            if self._copies(offset)[0] >= needed:
                fut.set_result(True)
            else:
                keep.append((offset, fut))
        self._waiters = keep

    def _fail_waiters(self) -> None:
        """A demotion answers every put still waiting for the SyncStateSet: not replicated.

        With a result, not ``fut.cancel()``: a cancelled future raises CancelledError in the
        task awaiting it, which looks like that task being cancelled — the timer's loop, in
        the middle of putting due messages, ended silently, so after its next promotion this
        node never delivered a delayed message again (chaos, controller schedule, session 11).
        """
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters = []

    def _update_confirm(self) -> None:
        """confirm = min ack of the SyncStateSet members; the log end while the master is alone."""
        b = self.broker
        store = b.store
        if not self.is_master:
            return
        if b.settings.readUnCommitted:
            store.set_confirm_offset(None)
            return
        members = [m for m in self.sync_state_set if m != self.my_id]
        if not members:
            if store.confirm_bound is not None:
                store.set_confirm_offset(None)
            return
        slaves = b.replication_master.slaves
        current = store.confirm_offset
        acks = [st.ack_offset if (st := slaves.get(m)) is not None and st.connected else None for m in members]
        if any(a is None for a in acks):
            new = current  # a member without a connection keeps the old value (RocketMQ #6662)
        else:
            new = max(current, min(min(a for a in acks if a is not None), store.commit_log.max_offset))
        if store.confirm_bound is None or new != store.confirm_bound:
            old = store.confirm_bound
            store.set_confirm_offset(new)
            if old is None or new > old:
                b.ha_events.emit(ev.COMMIT_ADVANCED, epoch=self.master_epoch, offset=new)

    # ------------------------------------------------------- broker service
    async def GetBrokerEpoch(self, request: cpb.BrokerEpochRequest, context: Any) -> cpb.BrokerEpochCache:
        b = self.broker
        end = b.store.commit_log.max_offset
        return cpb.BrokerEpochCache(
            status=cpb.ControllerStatus(code=0), cluster_name=b.cluster, broker_name=b.broker_name,
            broker_id=self.my_id, max_offset=end, confirm_offset=b.store.confirm_offset,
            entries=[cpb.BrokerEpochEntry(epoch=e, start_offset=s, end_offset=x)
                     for e, s, x in self.epochs.with_ends(end)],
            role="MASTER" if self.is_master else "SLAVE", master_epoch=self.master_epoch)

    async def NotifyBrokerRoleChanged(self, request: cpb.ReplicaInfo, context: Any) -> cpb.ControllerStatus:
        if request.broker_name == self.broker.broker_name and self.registered:
            await self.on_info(request)
        return cpb.ControllerStatus(code=0)

    # -------------------------------------------------------------- status
    def registration_extras(self) -> dict[str, str]:
        return {"controllerMode": "true", "anyNodeServes": "true", "masterEpoch": str(self.master_epoch),
                "controllerBrokerId": str(self.my_id)}

    def status(self) -> dict[str, Any]:
        b = self.broker
        store = b.store
        st: dict[str, Any] = {
            "mode": "controller", "role": "MASTER" if self.is_master else "SLAVE", "brokerId": self.my_id,
            "node": b.node_id, "masterEpoch": self.master_epoch, "masterBrokerId": self.master_id,
            "masterAddr": self.master_addr, "syncStateSet": list(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch, "maxOffset": store.commit_log.max_offset,
            "confirmOffset": store.confirm_offset, "epochs": [list(x) for x in self.epochs.with_ends(
                store.commit_log.max_offset)], "truncations": self.truncations,
            "lastTruncation": self.last_truncation, "controllerLeader": self.client.leader or "",
        }
        if self.is_master:
            st["slaves"] = b.replication_master.status()
            st["slaveReadsRelayed"] = b.slave_reader.relayed
        else:
            st["connected"] = b.replication_slave.connected
            st["lagBytes"] = b.replication_slave.lag_bytes
        return st
