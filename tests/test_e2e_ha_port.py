"""The HA port (haListenPort, framed TCP: broker/ha/wire.py) against bad input and outsiders, with real processes.

A SYNC_MASTER with internalPeerSecret and its slave.  Damaged, truncated and random byte streams are thrown
at the master's HA port (each must be closed with one log line, never crash or stall the master); a
"slave" with a wrong or no secret, and a slave broker with a wrong one, is refused before any commit-log
byte leaves the master.  Ground truth
afterwards: every message sent to the master (counted by its body) is read back from the slave's own
queue, so the real slave kept replicating through all of it.  The in-process cases of the shared port
(every kind of bad hello named, TLS) are tests/test_dledger_peer_port.py.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator

import cluster
import grpc
import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from test_e2e_master_slave import raw_send_to

from rocketscope.broker.ha import wire as ha_wire
from rocketscope.broker.peer_frames import wire
from rocketscope.broker.protocol import ha_pb2

pytestmark = pytest.mark.e2e
SECRET = "ha-s3cret"
TOPIC = "TopicHaPort"
SEED = 20


@pytest.fixture()
def pair(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("haport"), lambda: failed_call(request)) as c:
        c.start_broker("master", brokerName="broker-h", brokerRole="SYNC_MASTER", internalPeerSecret=SECRET)
        c.start_broker("slave", brokerName="broker-h", brokerRole="SLAVE", brokerId=1, internalPeerSecret=SECRET)
        c.admin("updateTopic", "-b", c.brokers["master"].admin_addr, "-t", TOPIC, "-r", "1", "-w", "1")
        wait_until(lambda: cluster.ha_status(c.brokers["slave"].admin_addr)["connected"], what="slave replicating")
        yield c


def pull_bodies(endpoint: str) -> list[bytes]:
    """Every body in queue 0 of TOPIC as the broker at ``endpoint`` (the slave) stores it."""
    out: list[bytes] = []
    with grpc.insecure_channel(endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        while True:
            req = svc.PullMessageRequest(offset=len(out), batch_size=32)
            req.group.name = "GroupHaPort"
            req.message_queue.topic.name = TOPIC
            req.message_queue.id = 0
            req.message_queue.broker.name = "broker-h"
            req.filter_expression.type = pb.TAG
            req.filter_expression.expression = "*"
            got = [r.message.body for r in stub.PullMessage(req, metadata=(("x-mq-client-id", "t"),), timeout=20)
                   if r.HasField("message")]
            if not got:
                return out
            out += got


def throw(port: int, data: bytes, split: bool = False) -> bytes:
    """Send ``data`` (in random small pieces if ``split``), half-close, and return what the port answered
    before it closed the connection (a timeout here would be a port that hangs)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        try:
            if split:
                rng = random.Random(len(data))
                pos = 0
                while pos < len(data):
                    n = rng.randint(1, 7)
                    s.sendall(data[pos:pos + n])
                    pos += n
            else:
                s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # the port closed first (it refused the first bytes): what it said is still readable
            pass
        answer = b""
        try:
            while chunk := s.recv(1 << 16):
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


def refusal(answer: bytes) -> str:
    payloads = wire.FrameDecoder().feed(answer)
    return wire.parse_reply(payloads[0]) if payloads else ""


def report(max_offset: int = 0, broker_id: int = 7) -> bytes:
    return wire.frame(ha_pb2.SlaveReport(broker_name="broker-h", broker_id=broker_id, address="127.0.0.1:1",
                                         max_offset=max_offset).SerializeToString())


def test_ha_port_survives_bad_streams_and_refuses_outsiders(pair: LocalCluster) -> None:
    c = pair
    master, slave = c.brokers["master"], c.brokers["slave"]
    ha = master.listen_port + 1
    sent: list[bytes] = []

    def send_some(n: int, tag: str, size: int = 0) -> None:
        for i in range(n):
            body = f"{tag}-{i}".encode().ljust(size, b".")
            assert raw_send_to(master.endpoint, TOPIC, body).code == pb.OK  # SYNC_MASTER: the slave acknowledged it
            sent.append(body)

    send_some(10, "before")
    good = ha_wire.hello("broker-h", "fuzz", SECRET)
    rng = random.Random(SEED)
    cases: list[tuple[str, bytes, bool]] = [
        ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False),
        ("raft magic", b"RSRF\x01" + wire.frame(b"x"), False),
        ("wrong version", ha_wire.MAGIC + b"\x09" + good[5:], False),
        ("huge frame", ha_wire.MAGIC + b"\x01" + (1 << 30).to_bytes(4, "big"), False),
        ("hello cut short", good[:-3], False),
        ("hello then garbage", good + wire.frame(b"\xff" * 40), False),
        ("report split in pieces, then cut", good + report()[:-2], True),
        ("ahead of the master", good + report(max_offset=1 << 40), False),
        ("the master's own id", good + report(broker_id=0), False),
    ]
    cases += [(f"random {i}", rng.randbytes(rng.randint(1, 300)), i % 2 == 0) for i in range(8)]
    # one byte of the hello flipped: anywhere but in the sender's name (free text, "fuzz")
    sender_at = 5 + 4 + 2 + len("broker-h") + 2
    spots = [j for j in range(len(good)) if not sender_at <= j < sender_at + len("fuzz")]
    for _ in range(8):
        at = rng.choice(spots)
        cases.append((f"damaged hello byte {at}", good[:at] + bytes([good[at] ^ 0xFF]) + good[at + 1:] + report(),
                      False))
    started = time.monotonic()
    for what, data, split in cases:
        answer = throw(ha, data, split)
        # nothing but a hello with the secret and a valid first report gets commit-log bytes
        for payload in wire.FrameDecoder().feed(answer)[1:]:
            assert not ha_pb2.TransferChunk.FromString(payload).data, f"{what}: the port sent commit-log bytes"
    assert time.monotonic() - started < 60, "the port held bad connections open"

    # a "slave" with no secret or a wrong one is refused by name and sent nothing else
    for secret, why in (("", "no peer secret"), ("guess", "a wrong peer secret")):
        answer = throw(ha, ha_wire.hello("broker-h", "outsider", secret) + report())
        assert why in refusal(answer), answer
        assert len(wire.FrameDecoder().feed(answer)) == 1, "a refused slave was sent frames after the refusal"
    # another group's slave: refused at its hello, or (hello right, report wrong) by the master's error chunk
    answer = throw(ha, ha_wire.hello("broker-x", "outsider", SECRET) + report())
    assert "'broker-x' is not 'broker-h'" in refusal(answer), answer
    answer = throw(ha, good + wire.frame(ha_pb2.SlaveReport(broker_name="broker-x", broker_id=3).SerializeToString()))
    chunks = [ha_pb2.TransferChunk.FromString(p) for p in wire.FrameDecoder().feed(answer)[1:]]
    assert any("does not belong to group broker-h" in ch.error for ch in chunks), chunks
    assert not any(ch.data for ch in chunks), "another group's slave was sent commit-log bytes"

    # a real slave broker with a wrong secret: refused, it copies nothing while the real slave acks every send
    intruder = c.start_broker("intruder", brokerName="broker-h", brokerRole="SLAVE", brokerId=2,
                              internalPeerSecret="not-the-secret")
    wait_until(lambda: "a wrong peer secret" in intruder.proc.log(), what="the intruder's refusal logged")
    send_some(12, "after", size=128 << 10)  # 1.5 MiB: above the 1 MiB a connection may buffer on the master
    assert cluster.ha_status(intruder.admin_addr)["maxOffset"] == 0, "a slave with a wrong secret copied the log"
    log = master.proc.log()
    assert "HA port: closing the connection" in log and "no peer secret" in log
    assert "Traceback" not in log, log[-4000:]
    # ground truth: every body sent to the master (each acknowledged by the slave) is in the slave's queue
    master_end = cluster.ha_status(master.admin_addr)["maxOffset"]
    wait_until(lambda: cluster.ha_status(slave.admin_addr)["maxOffset"] >= master_end, what="slave caught up")
    # (the slave learns the topic with its metadata copy, every few seconds: until then it serves nothing)
    wait_until(lambda: pull_bodies(slave.endpoint) == sent, timeout=30, what="every sent body read from the slave")
    # a slave that joins now copies the whole log from offset 0 in one burst of chunks (the master writes until
    # the log's end or until the connection's buffer is full, then resumes as the slave reads): complete and in order
    late = c.start_broker("late", brokerName="broker-h", brokerRole="SLAVE", brokerId=3, internalPeerSecret=SECRET)
    wait_until(lambda: cluster.ha_status(late.admin_addr)["maxOffset"] >= master_end, what="the late slave caught up")
    wait_until(lambda: pull_bodies(late.endpoint) == sent, timeout=30, what="every sent body read from the late slave")
