"""The HA master's session on its framed port, in one process (broker/ha/master.py, broker/peer_frames/port.py).

A real commit log of 16 MiB behind a ``ReplicationMaster`` on a ``FramedPort``, and a hand-written "slave"
on a raw socket:

* a slave that does not read: the master stops writing at the port's buffer limit (its memory stays
  bounded while the log is far larger) and carries on once the slave reads; the bytes received, put
  together by their offsets, are the master's log byte for byte (ground truth: ``read_raw``);
* a SYNC_MASTER send waiting for the slave is acknowledged by the slave's report (not before), and times
  out as FLUSH_SLAVE_TIMEOUT when the slave stays silent.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rocketscope.broker.ha import wire as ha_wire
from rocketscope.broker.ha.master import ReplicationMaster
from rocketscope.broker.peer_frames import wire
from rocketscope.broker.peer_frames.port import HIGH_WATER, FramedPort
from rocketscope.broker.protocol import ha_pb2
from rocketscope.broker.store.commitlog import CommitLog
from rocketscope.broker.store.message_store import PutStatus
from rocketscope.broker.store.record import StoredMessage

GROUP = "broker-t"
BODY = 64 << 10
RECORDS = 256  # 16 MiB: more than loopback's socket buffers and the port's 1 MiB together


class Host(SimpleNamespace):
    """What ReplicationMaster uses of a broker (its MasterHost protocol), over a real commit log."""

    is_master = True
    broker_id = 0
    node_id = "master"
    role = "SYNC_MASTER"


def host(tmp_path: Path) -> Any:
    log = CommitLog(tmp_path / "log", 4 << 20)
    for i in range(RECORDS):
        log.append(StoredMessage(topic="T", queue_id=0, body=bytes([i % 251]) * BODY, born_timestamp=1,
                                 born_host="127.0.0.1:1", properties={}))
    store = SimpleNamespace(commit_log=log, confirm_offset=log.max_offset)
    settings = SimpleNamespace(haSendHeartbeatInterval=200, inSyncReplicas=2, slaveTimeout=10_000)
    events: list[tuple[str, dict[str, Any]]] = []
    return Host(store=store, settings=settings, broker_name=GROUP,
                ha_events=SimpleNamespace(emit=lambda kind, **kw: events.append((kind, kw)), events=events))


def report(max_offset: int) -> bytes:
    return wire.frame(ha_pb2.SlaveReport(broker_name=GROUP, broker_id=1, address="127.0.0.1:1",
                                         max_offset=max_offset).SerializeToString())


def log_bytes(log: CommitLog, end: int) -> bytes:
    """The log's bytes below ``end``, segment by segment (``read_raw`` stops at a segment's end)."""
    out = bytearray()
    while len(out) < end:
        raw = log.read_raw(len(out), end - len(out))
        assert raw, f"the log has nothing at {len(out)}"
        out += raw
    return bytes(out)


async def until(cond: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_a_slave_that_does_not_read_bounds_the_master_and_gets_the_log_byte_for_byte(tmp_path: Path) -> None:
    b = host(tmp_path)
    log = b.store.commit_log
    end = log.max_offset
    master = ReplicationMaster(b)

    async def run() -> None:
        port = FramedPort("HA", ha_wire.MAGIC, ha_wire.PROTOCOL, GROUP, master.open_session, who="slave",
                          key="haListenPort")
        port.bind("127.0.0.1", 0)
        await port.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port.port)
            writer.write(ha_wire.hello(GROUP, "slave#1", "") + report(0))
            await until(lambda: bool(master.sessions), "the session opened")
            (conn,) = port.conns
            assert conn.transport is not None
            # not reading: the master fills the sockets, then its transport's buffer up to the limit, and stops
            await until(lambda: not next(iter(master.sessions)).writable_now, "the master paused writing")
            await asyncio.sleep(0.2)
            buffered = conn.transport.get_write_buffer_size()
            assert buffered <= HIGH_WATER + (256 << 10) + 1024, f"{buffered} bytes buffered for one slave"
            assert next(iter(master.sessions)).pos < end, "the whole log left while the slave read nothing"

            # a send waiting for the slave's copy of the end of the log
            waiting = asyncio.ensure_future(master.wait_replicated(end))
            await asyncio.sleep(0.05)
            assert not waiting.done(), "acknowledged before the slave reported"

            decoder = wire.FrameDecoder()
            reply, *payloads = decoder.feed(await reader.read(1 << 16))
            assert wire.parse_reply(reply) == ""
            copy = bytearray()
            while len(copy) < end:
                for p in payloads:
                    chunk = ha_pb2.TransferChunk.FromString(p)
                    assert not chunk.error, chunk.error
                    if chunk.data:
                        assert chunk.offset == len(copy), (chunk.offset, len(copy))
                        copy += chunk.data
                payloads = decoder.feed(await asyncio.wait_for(reader.read(1 << 20), 10))
            assert bytes(copy) == log_bytes(log, end), "the slave's copy differs from the master's log"
            assert not waiting.done()
            writer.write(report(end))  # the ack
            assert await asyncio.wait_for(waiting, 2) is PutStatus.PUT_OK
            assert master.status()[0]["ackOffset"] == end
            # a slave that stays silent: the next send times out after slaveTimeout
            b.settings.slaveTimeout = 300
            assert await master.wait_replicated(end + 1) is PutStatus.FLUSH_SLAVE_TIMEOUT
            writer.close()
            await until(lambda: not master.status()[0]["connected"], "the master saw the slave go")
        finally:
            await port.stop()

    asyncio.run(run())
    kinds = [k for k, _ in b.ha_events.events]
    assert kinds[0] == "role_change" and "replica_ack" in kinds
