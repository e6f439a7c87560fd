"""The slave side of Master/Slave replication: follow the master's commit log byte for byte.

The slave learns the master's HA address from the name server (its registration result)
or from ``haMasterAddress``, reports its log end, appends what the master streams at the
same physical offsets, and reports its new end as soon as the chunks of one read are appended (one
small frame over the framed TCP link of broker/ha/wire.py: a SYNC_MASTER send waits for exactly this).
It also copies the master's topic configs, consumer groups and consumer offsets every few seconds, so a slave
promoted by `rocketscope admin switchover` serves the same topics and resumes consumers
where they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import grpc
from google.protobuf.message import DecodeError

from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2, ha_pb2

from ..peer_frames.dial import LinkRefused, dial, reason
from ..peer_frames.wire import FrameDecoder, WireError, frame
from . import wire

if TYPE_CHECKING:
    from rocketscope.broker.groups import GroupManager
    from rocketscope.broker.namesrv_client import NamesrvClient
    from rocketscope.broker.offsets import OffsetManager
    from rocketscope.broker.request_modes import RequestModes
    from rocketscope.broker.security import SecurityConfig
    from rocketscope.broker.store.message_store import MessageStore
    from rocketscope.broker.topics import TopicManager
    from rocketscope.config import Settings

log = logging.getLogger(__name__)
METADATA_SYNC_S = 3.0
RECONNECT_CAP_S = 0.5
CONNECT_TIMEOUT_S = 3.0  # connect, TLS handshake and the hello's answer together
READ_BYTES = 1 << 20


def reconnect_delay(failures: int) -> float:
    """Seconds before the next attempt to reach the master after ``failures`` failed sessions in a row.

    Why capped at half a second: a SYNC_MASTER's sends wait for this slave's ack (inSyncReplicas), so every
    moment the slave spends backing off after the master became reachable again is a moment no send
    completes.  With the earlier cap of 3 s a 1.5 s cut of the HA link held sends for 3.0 s (the cut plus
    1.6 s of back-off; bench/results/chaos_s16q_masterslave.json, isolate and oneway).  An attempt is one
    TCP connect on a LAN, and only the first failure is logged, so trying twice a second costs nothing.
    """
    return min(0.1 * 2 ** min(failures, 3), RECONNECT_CAP_S)

class SlaveHost(Protocol):
    """What the HA slave uses of its broker (issue 17: this, not the whole Broker)."""

    store: MessageStore
    settings: Settings
    security: SecurityConfig
    namesrv: NamesrvClient
    topics: TopicManager
    groups: GroupManager
    offsets: OffsetManager
    request_modes: RequestModes
    cluster: str
    broker_name: str
    grpc_addr: str

    @property
    def broker_id(self) -> int: ...


class ReplicationSlave:
    def __init__(self, broker: SlaveHost) -> None:
        self.broker = broker
        self.master_ha_addr = ""
        self.master_admin_addr = ""
        self.connected = False
        self.master_max_offset = 0
        self.last_chunk_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        # controller mode: where the master is, and the epoch check + truncation before each session
        self.address_override: Callable[[], tuple[str, str]] | None = None
        self.before_session: Callable[[str], Awaitable[None]] | None = None
        # controller mode: dispatch only up to the master's confirm offset (consumers of a replica,
        # slave reads or after a promotion, see only what the SyncStateSet acknowledged)
        self.follow_confirm = False

    @property
    def running(self) -> bool:
        """Started and not stopped since."""
        return bool(self._tasks)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._replicate(), name="ha-slave"),
                       loop.create_task(self._sync_metadata(), name="ha-slave-metadata")]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        self.connected = False

    def master_addresses(self) -> tuple[str, str]:
        if self.address_override is not None:
            return self.address_override()
        s = self.broker.settings
        result = self.broker.namesrv.last_result
        ha = s.haMasterAddress or (result.ha_server_addr if result else "")
        admin = result.master_addr if result else ""
        return ha, admin

    @property
    def lag_bytes(self) -> int:
        return max(0, self.master_max_offset - self.broker.store.commit_log.max_offset)

    async def _replicate(self) -> None:
        failures = 0
        while True:
            ha_addr, admin_addr = self.master_addresses()
            if not ha_addr:
                await asyncio.sleep(0.5)
                continue
            self.master_ha_addr, self.master_admin_addr = ha_addr, admin_addr
            try:
                if self.before_session is not None:
                    await self.before_session(ha_addr)
                await self._session(ha_addr)
            except grpc.aio.AioRpcError as exc:  # controller mode's epoch query (before_session)
                if failures == 0:
                    log.warning("replication from master %s interrupted: %s", ha_addr, exc.code().name)
                failures += 1
            except (OSError, TimeoutError, ssl.SSLError, asyncio.IncompleteReadError, WireError) as exc:
                if failures == 0:
                    log.warning("replication from master %s interrupted: %s", ha_addr, reason(exc))
                failures += 1
            except LinkRefused as exc:  # the HA port refused our hello (secret, group): said once per outage
                if failures == 0:
                    log.error("replication from master %s refused: %s", ha_addr, exc)
                failures += 1
            except ValueError as exc:  # offsets disagree: do not retry in a tight loop
                log.error("replication from master %s refused: %s", ha_addr, exc)
                failures += 1
            else:
                failures = 0
            self.connected = False
            await asyncio.sleep(reconnect_delay(failures))

    async def _session(self, addr: str) -> None:
        b = self.broker
        tls = b.security.client_tls
        greeting = wire.hello(b.broker_name, f"{b.broker_name}#{b.broker_id}", tls.peer_secret)
        reader, writer = await asyncio.wait_for(dial(addr, tls, greeting, wire.PROTOCOL), CONNECT_TIMEOUT_S)

        def report() -> bytes:
            return frame(ha_pb2.SlaveReport(cluster_name=b.cluster, broker_name=b.broker_name, broker_id=b.broker_id,
                                            address=b.grpc_addr,
                                            max_offset=b.store.commit_log.max_offset).SerializeToString())

        try:
            writer.write(report())
            decoder = FrameDecoder()
            while True:
                data = await reader.read(READ_BYTES)
                if not data:
                    raise ConnectionResetError("closed by the master")
                payloads = decoder.feed(data)
                copied: list[tuple[int, bytes]] = []  # chunks written, to dispatch once the report is out
                for payload in payloads:
                    try:
                        chunk = ha_pb2.TransferChunk.FromString(payload)
                    except DecodeError as exc:
                        raise WireError(f"a frame of {len(payload)} bytes is not a TransferChunk: {exc}") from None
                    if chunk.error:
                        raise ValueError(chunk.error)
                    if not self.connected:
                        log.info("replicating from master %s at offset %d", addr, b.store.commit_log.max_offset)
                        self.connected = True
                    self.master_max_offset = chunk.master_max_offset
                    self.last_chunk_at = time.time()
                    if self.follow_confirm:  # controller mode: the chunk's confirm offset decides what is dispatched
                        if chunk.data:
                            b.store.append_replicated(chunk.offset, chunk.data)
                        b.store.advance_confirm_offset(chunk.confirm_offset)
                    elif chunk.data:
                        b.store.copy_replicated(chunk.offset, chunk.data)
                        copied.append((chunk.offset, chunk.data))
                if payloads:
                    # one report for what this read appended, answering heartbeats too: the master takes a
                    # silent slave for gone (haHousekeepingInterval) even while its TCP connection stays open.
                    # It leaves before the copies are dispatched: the master waits for the copy, not for this
                    # slave's queues (MessageStore.copy_replicated)
                    writer.write(report())
                for offset, chunk_data in copied:
                    b.store.dispatch_copied(offset, chunk_data)
        finally:
            writer.transport.abort()

    async def _sync_metadata(self) -> None:
        while True:
            await asyncio.sleep(METADATA_SYNC_S)
            if not self.master_admin_addr:
                continue
            try:
                await self.sync_metadata_once(self.master_admin_addr)
            except grpc.aio.AioRpcError as exc:
                log.debug("metadata sync from %s failed: %s", self.master_admin_addr, exc.code().name)

    async def sync_metadata_once(self, admin_addr: str) -> None:
        from rocketscope.broker.groups import GroupConfig
        from rocketscope.broker.request_modes import RequestMode
        from rocketscope.broker.topics import TopicConfig

        b = self.broker
        async with b.security.client_tls.channel(admin_addr) as channel:
            stub = admin_pb2_grpc.BrokerAdminStub(channel)
            topics = await stub.GetTopicConfigs(common_pb2.Empty(), timeout=5, metadata=b.security.inner_metadata())
            for t in topics.topics:
                cfg = b.topics.get(t.topic_name)
                new = TopicConfig(t.topic_name, t.read_queue_nums, t.write_queue_nums, t.perm, t.order,
                                  attributes=dict(t.attributes))
                if cfg is None or (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm, cfg.attributes) != (
                        new.read_queue_nums, new.write_queue_nums, new.perm, new.attributes):
                    new.system = cfg.system if cfg else new.system
                    b.topics.update(new)
            groups = await stub.GetSubGroups(common_pb2.Empty(), timeout=5, metadata=b.security.inner_metadata())
            for g in groups.groups:
                mine = b.groups.get(g.group_name)
                policy = json.loads(g.group_retry_policy) if g.group_retry_policy else None
                attrs = dict(g.attributes)
                if mine is None or (mine.retry_max_times, mine.consume_message_orderly, mine.retry_policy,
                                    mine.attributes) != (g.retry_max_times, g.consume_message_orderly, policy, attrs):
                    b.groups.update(GroupConfig(g.group_name, g.consume_enable, g.consume_message_orderly,
                                                g.retry_max_times, g.retry_queue_nums, g.consume_broadcast_enable,
                                                g.which_broker_when_consume_slowly, policy, attrs))
            modes = await stub.GetMessageRequestModes(common_pb2.Empty(), timeout=5,
                                                      metadata=b.security.inner_metadata())
            b.request_modes.replace([RequestMode(m.topic, m.group, m.mode, m.pop_share_queue_num) for m in modes.modes])
            offsets = await stub.ConsumerOffsets(common_pb2.Empty(), timeout=5, metadata=b.security.inner_metadata())
            for o in offsets.offsets:
                b.offsets.commit(o.group, o.topic, o.queue_id, o.offset)

