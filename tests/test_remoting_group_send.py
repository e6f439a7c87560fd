"""Sends pipelined on one remoting connection are stored together (issue 20) and answered one by one.

The broker decodes every whole frame of a read at once and stores the sends among them with one
``put_messages`` (broker/remoting/broker_handlers.py ``send_group``).  Ground truth here is what the
test wrote in one ``sendall``: N frames with known opaques, queues and bodies, one of them with a
bad header.  Every good send must be answered SUCCESS under its own opaque with the queue it
asked for and a distinct offset; the bad one must get its own error naming the field and store
nothing; what a consumer reads back is exactly the good bodies, in each queue in the order sent.
Runs in a few seconds (one name server and one broker).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from cluster import LocalCluster, wait_until

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import (
    FLAG_RESPONSE,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_messages,
    encode,
    properties_to_string,
)

pytestmark = pytest.mark.e2e
QUEUES = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("group-send"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a", flushDiskType="SYNC_FLUSH")  # grouped sends also share one fsync wait
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def _send_frame(topic: str, queue_id: int, opaque: int, body: bytes, uniq: str, drop: str = "") -> bytes:
    header = {"a": "group-send-producer", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
              "g": "1700000000000", "h": "0", "i": properties_to_string({"UNIQ_KEY": uniq, "KEYS": uniq}),
              "j": "0", "k": "false", "m": "false"}
    header.pop(drop, None)
    return encode(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=header, body=body, opaque=opaque))


def _read_frames(sock: socket.socket, count: int) -> list[RemotingCommand]:
    from rocketscope.broker.remoting.codec import decode

    buf, out = b"", []
    sock.settimeout(30)
    while len(out) < count:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise AssertionError(f"connection closed after {len(out)} of {count} answers")
        buf += chunk
        while len(buf) >= 4 and len(buf) - 4 >= int.from_bytes(buf[:4], "big"):
            n = int.from_bytes(buf[:4], "big")
            out.append(decode(buf[4:4 + n]))
            buf = buf[4 + n:]
    return out


def test_pipelined_sends_in_one_write_are_each_answered_and_stored_in_order(cluster: LocalCluster) -> None:
    topic = "GroupSendT"
    cluster.admin("updateTopic", "-t", topic, "-r", str(QUEUES), "-w", str(QUEUES))
    addr = cluster.brokers["broker-a"].admin_addr
    n, bad_at = 48, 17
    sent: dict[int, tuple[int, bytes]] = {}  # opaque -> (queue, body) of the good sends
    frames = []
    for i in range(n):
        opaque = 1000 + i
        if i == bad_at:
            frames.append(_send_frame(topic, 0, opaque, b"bad", "BAD", drop="a"))  # no producerGroup
            continue
        body = f"group-{i}".encode()
        sent[opaque] = (i % QUEUES, body)
        frames.append(_send_frame(topic, i % QUEUES, opaque, body, f"U{i:04d}"))
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"".join(frames))  # one write: the broker reads many frames per chunk
        answers = _read_frames(sock, n)
    by_opaque = {a.opaque: a for a in answers}
    assert sorted(by_opaque) == [1000 + i for i in range(n)], "every request answered once, under its own opaque"
    assert all(a.flag & FLAG_RESPONSE for a in answers)
    bad = by_opaque[1000 + bad_at]
    assert bad.code == ResponseCode.SYSTEM_ERROR and "<producerGroup>" in (bad.remark or "")
    offsets: dict[int, list[int]] = {}
    for opaque, (queue_id, _) in sent.items():
        a = by_opaque[opaque]
        assert a.code == ResponseCode.SUCCESS, (a.code, a.remark)
        assert int(a.fields["queueId"]) == queue_id
        offsets.setdefault(queue_id, []).append(int(a.fields["queueOffset"]))
    for queue_id, offs in offsets.items():
        assert sorted(offs) == list(range(len(offs))), f"queue {queue_id}: offsets {offs}"

    # read back: exactly the good bodies, each queue in the order they were written
    with RemotingClient(addr) as b:
        for queue_id in range(QUEUES):
            want = [body for _, (q, body) in sorted(sent.items()) if q == queue_id]

            def pulled(q: int = queue_id) -> list[bytes]:
                resp = b.invoke(RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "group-send-reader", "topic": topic, "queueId": str(q), "queueOffset": "0",
                    "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                    "subscription": "*", "subVersion": "0", "expressionType": "TAG"})  # 4: this subscription
                return [m.body for m in decode_messages(resp.body)] if resp.code == ResponseCode.SUCCESS else []
            got = wait_until(lambda p=pulled, w=want: p() if len(p()) >= len(w) else None, timeout=20,
                             what=f"queue {queue_id} readable")
            assert got == want
