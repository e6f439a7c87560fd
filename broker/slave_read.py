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
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
from rocketmq.grpc_protocol import service_pb2 as svc

from .request_metadata import request_metadata

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)
SLAVE_READ_HEADER = "x-rocketscope-slave-read"  # marks a pull relayed by the master: serve it locally
SUGGEST_HEADER = "x-rocketscope-suggest-broker"
PULL_PATH = "/apache.rocketmq.v2.MessagingService/PullMessage"


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
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.relayed = 0  # pulls this master served through a slave
        self.threshold = far_behind_threshold(broker.settings)

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
        call = fwd._channel(addr).unary_stream(PULL_PATH, request_serializer=lambda m: m.SerializeToString(),
                                               response_deserializer=svc.PullMessageResponse.FromString)
        self.relayed += 1
        if self.relayed == 1 or self.relayed % 1000 == 0:
            log.info("slaveReadEnable: pull of %s#%d at offset %d is far behind; served by slave %s (%d so far)",
                     request.message_queue.topic.name, request.message_queue.id, request.offset, addr, self.relayed)
        context.set_trailing_metadata(((SUGGEST_HEADER, addr),))
        async for resp in call(request, metadata=metadata, timeout=context.time_remaining()):
            yield resp
