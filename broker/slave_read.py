"""slaveReadEnable: a master hands far-behind pulls to a slave that holds the data.

RocketMQ's master answers a pull whose data lies more than accessMessageInMemoryMaxRatio
percent of physical memory behind the commit log's end with ``suggestWhichBrokerId`` = a
slave, so the consumer's next pulls read cold data from the slave's disk instead of the
master's page cache, which the producers' fresh writes need. The v2 gRPC protocol has no
such field, so a RocketScope master serves the pull *through* an in-sync slave (the slave
reads its own disk; the master only relays), and names that slave in the trailing metadata
``x-rocketscope-suggest-broker`` (a reader may go there directly; ours do not yet: the relay
already keeps cold reads off the master's disk). Only slaves whose ack offset covers the requested record qualify;
with none, the master serves the pull itself.

ReceiveMessage (POP) while the master is down: ``SlaveActing``.  Apache RocketMQ 5.3.3 reads
POP from a slave only in its "slave acting master" mode: the name server reports the slave
with the smallest id as broker 0 with read-only queues, and that slave serves POP.  Here the
same happens with ``slaveReadEnable=true`` in Master/Slave mode (broker/route_view.py names
the slave; this module decides when it serves): a slave whose replication link to its master
is down hands messages out from its own copy, starting at the consumer offsets it last
synced from the master, and takes acks locally.  It never redelivers by itself (it cannot
write the retry topic, as Apache's slave skips its revive pass): a hand-out that is not acked
stays invisible until the master is back.  When the master registers at the name servers again
(checked every ``CHECK_S``; the replication link follows seconds later), the slave stops handing
out and *hands back* its progress: every queue it advanced past the master's offset is set on
the master (BrokerAdmin.ResetOffset with explicit offsets), repeated for ``HAND_BACK_S``
seconds, long enough for the clients' route refresh (30 s in the official clients) to move
them back to the master; a receive that still reaches the slave waits out its long polling
and finds nothing.  A client whose route refresh reaches the master before the hand-back (at
most ``CHECK_S`` plus one admin call) gets again what the slave already delivered.
Duplicates: acks the master took after the slave's last offset sync (every few seconds) and
hand-outs in flight at the crash are delivered again by the slave; acks the slave takes after
its last hand-back are delivered again by the master.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from rocketmq.grpc_protocol import service_pb2 as svc

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2

from .receipt import SLAVE_ORIGIN
from .request_metadata import SLAVE_READ_HEADER, request_metadata

if TYPE_CHECKING:
    from rocketscope.config import Settings

    from .forwarding import LeaderForwarder
    from .ha.master import ReplicationMaster
    from .ha.slave import ReplicationSlave
    from .namesrv_client import NamesrvClient
    from .pop import PopService
    from .security import SecurityConfig
    from .store.message_store import MessageStore

log = logging.getLogger(__name__)
SUGGEST_HEADER = "x-rocketscope-suggest-broker"
PULL_PATH = "/apache.rocketmq.v2.MessagingService/PullMessage"
ACK_PATH = "/apache.rocketmq.v2.MessagingService/AckMessage"
CHANGE_INVISIBLE_PATH = "/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration"


class SlaveReadHost(Protocol):
    """What slaveReadEnable uses of its broker (issue 17: this, not the whole Broker); read-only views.

    The relay reads the store's queue index and the slaves' ack offsets and opens channels through the
    forwarder; the acting slave reads its replication link, the name servers' cluster view and the POP
    engine's queue states (which it clears and stamps with its receipts' origin), and calls the master's
    admin service with the broker's internal credentials.  ``dledger`` and ``replicas`` only say whether
    the mode is Master/Slave (both None), the one mode a slave acts in.
    """

    @property
    def settings(self) -> Settings: ...
    @property
    def is_master(self) -> bool: ...
    @property
    def node_id(self) -> str: ...
    @property
    def broker_name(self) -> str: ...
    @property
    def store(self) -> MessageStore: ...
    @property
    def pop(self) -> PopService: ...
    @property
    def replication_master(self) -> ReplicationMaster: ...
    @property
    def replication_slave(self) -> ReplicationSlave: ...
    @property
    def forwarder(self) -> LeaderForwarder: ...
    @property
    def namesrv(self) -> NamesrvClient: ...
    @property
    def security(self) -> SecurityConfig: ...
    @property
    def dledger(self) -> object | None: ...
    @property
    def replicas(self) -> object | None: ...


def physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


def far_behind_threshold(settings: Any) -> int:
    """Bytes behind the log end beyond which a pull counts as far behind."""
    if settings.slaveReadBehindBytes > 0:
        return int(settings.slaveReadBehindBytes)
    return physical_memory_bytes() * settings.accessMessageInMemoryMaxRatio // 100


class SlaveReader:
    def __init__(self, broker: SlaveReadHost) -> None:
        self.broker = broker
        self.relayed = 0  # pulls this master served through a slave
        self.threshold = far_behind_threshold(broker.settings)
        self.acting = SlaveActing(broker)  # ReceiveMessage on a slave while the master is down

    def slave_for(self, request: svc.PullMessageRequest, context: grpc.aio.ServicerContext) -> str | None:
        """The gRPC address of a slave to serve this pull, or None to serve it here."""
        b = self.broker
        if not b.settings.slaveReadEnable or not b.is_master:
            return None
        if SLAVE_READ_HEADER in request_metadata(context):
            return None
        mq = request.message_queue
        cq = b.store.cqs.get((mq.topic.name, mq.id))
        entry = cq.entry(request.offset) if cq is not None else None
        if entry is None:
            return None
        end = b.store.commit_log.max_offset
        if end - entry.physical_offset <= self.threshold:
            return None
        needed = entry.physical_offset + entry.size
        for st in b.replication_master.slaves.values():
            if st.connected and st.ack_offset >= needed and st.address:
                return st.address  # a slave reports its client (gRPC) address
        return None

    async def relay(self, addr: str, request: svc.PullMessageRequest, context: grpc.aio.ServicerContext
                    ) -> AsyncIterator[svc.PullMessageResponse]:
        fwd = self.broker.forwarder
        metadata = [(k, v) for k, v in (context.invocation_metadata() or ())
                    if not k.startswith((":", "grpc-")) and isinstance(v, str)]
        metadata.append((SLAVE_READ_HEADER, self.broker.node_id))
        call = fwd.channel(addr).unary_stream(PULL_PATH, request_serializer=lambda m: m.SerializeToString(),
                                               response_deserializer=svc.PullMessageResponse.FromString)
        self.relayed += 1
        if self.relayed == 1 or self.relayed % 1000 == 0:
            log.info("slaveReadEnable: pull of %s#%d at offset %d is far behind; served by slave %s (%d so far)",
                     request.message_queue.topic.name, request.message_queue.id, request.offset, addr, self.relayed)
        context.set_trailing_metadata(((SUGGEST_HEADER, addr),))
        async for resp in call(request, metadata=metadata, timeout=context.time_remaining()):
            yield resp


HAND_BACK_S = 60.0  # after the master is back: its clients' route refresh (30 s) plus margin
WATCH_S = 0.2  # how often the slave checks its replication link
CHECK_S = 1.0  # how often an acting slave asks the name servers whether its master registered again


class SlaveActing:
    """A slave with slaveReadEnable serving ReceiveMessage while its master is unreachable (see the module doc)."""

    def __init__(self, broker: SlaveReadHost) -> None:
        self.broker = broker
        self.acting = False
        self.acting_since = 0.0
        self.back_since = 0.0  # when the link came back after acting; 0: nothing to hand back
        self.handed_back = 0  # queue offsets set on the master
        self.forwarded_acks = 0  # acks of its hand-outs passed on to the master after acting
        self.forwarded_changes = 0  # new invisible times of its hand-outs passed on likewise
        self.periods = 0
        self._checked = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        b = self.broker
        return bool(b.settings.slaveReadEnable) and b.dledger is None and b.replicas is None

    def link_down(self) -> bool:
        b = self.broker
        return self.enabled and not b.is_master and not b.replication_slave.connected

    def may_pop(self) -> bool:
        """Whether this broker hands messages out: a master always; a slave with slaveReadEnable only while acting."""
        b = self.broker
        if b.is_master or not self.enabled:
            return True
        return self.acting

    def start(self) -> None:
        if self.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="slave-acting")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def status(self) -> dict[str, Any]:
        return {"slaveReadActing": self.acting, "slaveReadPeriods": self.periods,
                "slaveReadHandedBack": self.handed_back, "slaveReadHandingBack": self.back_since > 0,
                "slaveReadForwardedAcks": self.forwarded_acks,
                "slaveReadForwardedInvisibleChanges": self.forwarded_changes}

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_S)
            try:
                await self.step()
            except Exception:
                log.exception("slaveReadEnable: acting-master check failed; will retry")

    async def step(self) -> None:
        b = self.broker
        if not self.enabled or b.is_master:
            self.acting, self.back_since = False, 0.0
            return
        down = self.link_down()
        now = time.monotonic()
        if not self.acting and not self.back_since and down:
            self.acting, self.acting_since = True, now
            self.periods += 1
            b.pop.states.clear()  # start from the offsets last synced from the master, not an older period's
            b.pop.issuer = SLAVE_ORIGIN  # its receipts say so: the master takes their acks once back
            log.info("slaveReadEnable: master of %s unreachable; this slave serves ReceiveMessage from its copy "
                     "(consumer offsets as last synced)", b.broker_name)
            return
        if now - self._checked < CHECK_S:
            return
        self._checked = now
        # the master registering again ends the period at once (the replication link follows a few seconds
        # later): clients may route to it from then on, so the progress made here must be there first
        registered = await self.master_admin_addr(registered_only=True) if down else "link"
        if self.acting and registered:
            self.acting, self.back_since = False, now
            b.pop.issuer = ""
            log.info("slaveReadEnable: master of %s is back after %.1f s; handing consumer progress back to it",
                     b.broker_name, now - self.acting_since)
        elif self.back_since and down and not registered:
            self.back_since = 0.0  # gone again before the hand-back finished: a new period starts
            return
        if self.back_since:
            try:
                await self.hand_back()
            except grpc.aio.AioRpcError as exc:  # the master is starting or gone again: the next check retries
                log.warning("slaveReadEnable: hand-back to the master of %s failed: %s", b.broker_name,
                            exc.code().name)
            if now - self.back_since >= HAND_BACK_S:
                self.back_since = 0.0
                b.pop.states.clear()
                log.info("slaveReadEnable: hand-back to the master of %s finished (%d queue offsets set)",
                         b.broker_name, self.handed_back)

    async def _master_registration(self) -> Any:
        """The master's registration at the first name server that lists one (None: none does)."""
        b = self.broker
        for stub in b.namesrv.stubs.values():
            try:
                info = await stub.GetClusterInfo(common_pb2.Empty(), timeout=1)
            except grpc.aio.AioRpcError:
                continue
            for live in info.brokers:
                r = live.registration
                if r.broker_name == b.broker_name and r.broker_id == 0 and r.broker_addr:
                    return r
        return None

    async def master_admin_addr(self, registered_only: bool = False) -> str:
        """The returned master's admin address, from the name servers' cluster view: this slave's
        registration result names it only at its next periodic registration (registerNameServerPeriod)."""
        r = await self._master_registration()
        if r is not None:
            return str(r.broker_addr)
        return "" if registered_only else self.broker.replication_slave.master_admin_addr

    def forwards_acks(self) -> bool:
        """A slave with slaveReadEnable that is not acting for its master: an ack reaching it is the ack of a
        hand-out it made while acting (the official clients ack where they received) and goes to the master,
        which takes such receipts (broker/pop.py ``_slave_receipt``); kept here, it would be handed back only
        within HAND_BACK_S, and an ack of it reaching the master would be refused: redelivered."""
        return self.enabled and not self.broker.is_master and not self.acting

    async def forward_ack(self, request: svc.AckMessageRequest,
                          context: grpc.aio.ServicerContext) -> svc.AckMessageResponse | None:
        """The master's answer to ``request`` (the client's metadata passed on); None when no master is registered."""
        resp = await self._to_master(ACK_PATH, request, svc.AckMessageResponse, context)
        if resp is None:
            return None
        self.forwarded_acks += len(request.entries)
        log.info("slaveReadEnable: %d ack(s) of %s/%s forwarded to the master (%d so far): %s",
                 len(request.entries), request.group.name, request.topic.name, self.forwarded_acks, resp.status.code)
        return resp

    async def forward_change_invisible(self, request: svc.ChangeInvisibleDurationRequest,
                                       context: grpc.aio.ServicerContext) -> svc.ChangeInvisibleDurationResponse | None:
        """As ``forward_ack``, for a new invisible time of one of this slave's hand-outs (a consumer's retry
        back-off): the master takes the slave's receipt by offset and answers with a receipt of its own; kept
        here, the master would hand the message out again at once."""
        resp = await self._to_master(CHANGE_INVISIBLE_PATH, request, svc.ChangeInvisibleDurationResponse, context)
        if resp is None:
            return None
        self.forwarded_changes += 1
        log.info("slaveReadEnable: invisible time of a hand-out of %s/%s forwarded to the master (%d so far): %s",
                 request.group.name, request.topic.name, self.forwarded_changes, resp.status.code)
        return resp

    async def _to_master(self, path: str, request: Any, response: Any,
                         context: grpc.aio.ServicerContext) -> Any | None:
        """``request`` sent on to the registered master with the client's metadata; None when there is none."""
        r = await self._master_registration()
        if r is None or not r.grpc_addr:
            return None
        metadata = [(k, v) for k, v in (context.invocation_metadata() or ())
                    if not k.startswith((":", "grpc-")) and isinstance(v, str)]
        call = self.broker.forwarder.channel(r.grpc_addr).unary_unary(
            path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=response.FromString)
        remaining = context.time_remaining()
        return await call(request, metadata=metadata, timeout=5.0 if remaining is None else max(0.1, remaining - 0.05))

    async def hand_back(self) -> int:
        """Set on the master every queue offset this slave advanced beyond the master's; the number set."""
        b = self.broker
        mine = {k: st.committed for k, st in list(b.pop.states.items())}
        if not mine:
            return 0
        admin_addr = await self.master_admin_addr()
        if not admin_addr:
            return 0
        md = b.security.inner_metadata()
        async with b.security.client_tls.channel(admin_addr) as channel:
            stub = admin_pb2_grpc.BrokerAdminStub(channel)
            resp = await stub.ConsumerOffsets(common_pb2.Empty(), timeout=5, metadata=md)
            theirs = {(o.group, o.topic, o.queue_id): o.offset for o in resp.offsets}
            ahead: dict[tuple[str, str], list[tuple[int, int]]] = {}
            for (group, topic, qid), committed in mine.items():
                if committed > theirs.get((group, topic, qid), 0):
                    ahead.setdefault((group, topic), []).append((qid, committed))
            done = 0
            for (group, topic), queues in sorted(ahead.items()):
                req = admin_pb2.ResetOffsetRequest(group=group, topic=topic, force=True)
                for qid, off in queues:
                    req.offsets.add(group=group, topic=topic, queue_id=qid, offset=off)
                res = await stub.ResetOffset(req, timeout=5, metadata=md)
                if res.status.code != 0:
                    log.warning("slaveReadEnable: hand-back of %s/%s to %s refused: %s", group, topic, admin_addr,
                                res.status.remark)
                    continue
                done += len(queues)
                log.info("slaveReadEnable: handed back %s/%s offsets %s to the master %s", group, topic,
                         dict(queues), admin_addr)
        self.handed_back += done
        return done
