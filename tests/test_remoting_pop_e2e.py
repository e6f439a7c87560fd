"""POP over remoting (POP_MESSAGE 200050, ACK_MESSAGE 200051, CHANGE_MESSAGE_INVISIBLETIME 200053,
BATCH_ACK_MESSAGE 200151), raw frames.

Apache's remoting client has no public POP consumer without the broker-side assignment codes
(QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE: not served), so the frames are built here with
Apache's header names (PopMessageRequestHeader, AckMessageRequestHeader,
ChangeInvisibleTimeRequestHeader) and the acks send back the ``extraInfo`` the pop answer's
``POP_CK`` property carried, as Apache's client does.  Ground truth: the messages sent here,
which come back, which do not (acked, invisible), and an injected invisible time.  Marked ``long`` to keep
``make test`` within its budget (about 15 s here): ``.venv/bin/pytest -q tests/test_remoting_pop_e2e.py``.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from rmq import drain, simple_consumer

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode, WireMessage, decode_messages

pytestmark = [pytest.mark.e2e, pytest.mark.long]
TOPIC, GROUP, QUEUES = "PopT", "PopG", 2
INVISIBLE_MS = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-pop"), lambda: False) as c:
        c.start_broker("broker-a")
        c.admin("updateTopic", "-t", TOPIC, "-r", str(QUEUES), "-w", str(QUEUES))
        yield c


@pytest.fixture(autouse=True)
def _logs_on_failure(request: pytest.FixtureRequest, cluster: LocalCluster) -> Iterator[None]:
    yield
    if failed_call(request):
        print(cluster.logs())


def send(b: RemotingClient, body: str, queue_id: int) -> None:
    fields = {"producerGroup": "PopProducer", "topic": TOPIC, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": str(QUEUES), "queueId": str(queue_id), "sysFlag": "0",
              "bornTimestamp": str(int(time.time() * 1000)), "flag": "0", "properties": ""}
    assert b.invoke(RequestCode.SEND_MESSAGE, fields, body.encode()).code == ResponseCode.SUCCESS


def pop(b: RemotingClient, n: int, poll_ms: int = 0, invisible_ms: int = INVISIBLE_MS) -> tuple[int, list[WireMessage]]:
    resp = b.invoke(RequestCode.POP_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "-1",
                                              "maxMsgNums": str(n), "invisibleTime": str(invisible_ms),
                                              "pollTime": str(poll_ms), "bornTime": str(int(time.time() * 1000)),
                                              "initMode": "0", "expType": "TAG", "exp": "*"})
    return resp.code, decode_messages(resp.body) if resp.code == ResponseCode.SUCCESS else []


def ack(b: RemotingClient, m: WireMessage) -> tuple[int, str]:
    extra = m.properties["POP_CK"]
    parts = extra.split(" ")
    resp = b.invoke(RequestCode.ACK_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": parts[6],
                                              "offset": parts[7], "extraInfo": extra})
    return resp.code, resp.remark or ""


def test_pop_ack_change_invisible_and_redelivery(cluster: LocalCluster) -> None:
    with RemotingClient(cluster.brokers["broker-a"].admin_addr) as b:
        for i in range(6):
            send(b, f"pop-{i}", i % QUEUES)
        code, first = pop(b, 4)
        assert code == ResponseCode.SUCCESS and len(first) == 4
        assert all(len(m.properties["POP_CK"].split(" ")) == 8 and m.topic == TOPIC for m in first)
        code, rest = pop(b, 32)
        assert code == ResponseCode.SUCCESS
        assert sorted(m.body.decode() for m in first + rest) == [f"pop-{i}" for i in range(6)]  # each once
        assert pop(b, 32)[0] == ResponseCode.PULL_NOT_FOUND  # everything is invisible now
        acked, kept, dropped = first[:2] + rest, first[2], first[3]
        for m in acked:
            assert ack(b, m) == (ResponseCode.SUCCESS, "")
        code, remark = ack(b, acked[0])  # acknowledged already
        assert code == ResponseCode.INVALID_PARAMETER and "already acknowledged" in remark
        extra = kept.properties["POP_CK"]
        changed = b.invoke(RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                           {"consumerGroup": GROUP, "topic": TOPIC, "queueId": extra.split(" ")[6],
                            "offset": extra.split(" ")[7], "extraInfo": extra, "invisibleTime": "60000"})
        assert changed.code == ResponseCode.SUCCESS and changed.fields["invisibleTime"] == "60000"
        # after its 2 s the one neither acked nor extended comes back, once, as attempt 2; the others do not
        started = time.monotonic()
        again: list[WireMessage] = wait_until(lambda: pop(b, 32, poll_ms=1000)[1], timeout=15, what="redelivery")
        assert [m.body for m in again] == [dropped.body] and again[0].reconsume_times == 1
        assert time.monotonic() - started < 15
        assert ack(b, again[0])[0] == ResponseCode.SUCCESS
        assert ack(b, dropped)[0] == ResponseCode.INVALID_PARAMETER  # its first hand-out's extraInfo is stale
        # the extended one is acknowledged with the extraInfo Apache's client rebuilds from the change's answer
        parts = extra.split(" ")
        parts[1], parts[2] = changed.fields["popTime"], changed.fields["invisibleTime"]
        kept.properties["POP_CK"] = " ".join(parts)
        assert ack(b, kept) == (ResponseCode.SUCCESS, "")
        assert pop(b, 32, poll_ms=500)[0] == 210  # POLLING_TIMEOUT: nothing left


def test_pop_bad_input_names_the_field(cluster: LocalCluster) -> None:
    with RemotingClient(cluster.brokers["broker-a"].admin_addr) as b:
        zero = b.invoke(RequestCode.POP_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "-1",
                                                  "maxMsgNums": "0", "invisibleTime": "1000"})
        assert zero.code == ResponseCode.INVALID_PARAMETER and "maxMsgNums 0" in (zero.remark or "")
        missing = b.invoke(RequestCode.POP_MESSAGE, {"topic": TOPIC, "queueId": "-1", "maxMsgNums": "1",
                                                     "invisibleTime": "1000"})
        assert missing.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in (missing.remark or "")
        short = b.invoke(RequestCode.ACK_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0",
                                                   "offset": "0", "extraInfo": "1 2 3"})
        assert short.code == ResponseCode.INVALID_PARAMETER and "extraInfo '1 2 3' has 3 fields" in (short.remark or "")
        sql = b.invoke(RequestCode.POP_MESSAGE, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "-1",
                                                 "maxMsgNums": "1", "invisibleTime": "1000", "expType": "SQL92",
                                                 "exp": "a > 1"})
        assert sql.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "SQL92" in (sql.remark or "")


def test_pop_over_remoting_and_grpc_share_one_group(cluster: LocalCluster) -> None:
    """One PopService behind both doors: what remoting holds invisible, a gRPC consumer of the group skips."""
    node = cluster.brokers["broker-a"]
    with RemotingClient(node.admin_addr) as b:
        created = b.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "PopMixT", "readQueueNums": "1",
                                                                 "writeQueueNums": "1", "perm": "6"})
        assert created.code == ResponseCode.SUCCESS
        with RemotingClient(cluster.namesrv_addr) as ns:
            wait_until(lambda: ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "PopMixT"}).code == 0,
                       what="route of PopMixT")
        for i in range(4):
            fields = {"producerGroup": "PopProducer", "topic": "PopMixT", "defaultTopic": "TBW102",
                      "defaultTopicQueueNums": "1", "queueId": "0", "sysFlag": "0",
                      "bornTimestamp": str(int(time.time() * 1000)), "flag": "0", "properties": ""}
            assert b.invoke(RequestCode.SEND_MESSAGE, fields, f"mix-{i}".encode()).code == ResponseCode.SUCCESS
        held = b.invoke(RequestCode.POP_MESSAGE, {"consumerGroup": "PopMixG", "topic": "PopMixT", "queueId": "-1",
                                                  "maxMsgNums": "2", "invisibleTime": "60000"})
        held_msgs = decode_messages(held.body)
        assert held.code == ResponseCode.SUCCESS and len(held_msgs) == 2
        with simple_consumer(node.endpoint, "PopMixG", "PopMixT") as grpc_consumer:
            got = drain(grpc_consumer, 2, timeout=20)
            assert sorted(m.body.decode() for m in got) == sorted(
                {f"mix-{i}" for i in range(4)} - {m.body.decode() for m in held_msgs})
            assert not grpc_consumer.receive(32, 30)  # the two remoting holds are invisible to gRPC too
        for m in held_msgs:
            extra = m.properties["POP_CK"]
            resp = b.invoke(RequestCode.ACK_MESSAGE, {"consumerGroup": "PopMixG", "topic": "PopMixT",
                                                      "queueId": "0", "offset": extra.split(" ")[7],
                                                      "extraInfo": extra})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        left = b.invoke(RequestCode.POP_MESSAGE, {"consumerGroup": "PopMixG", "topic": "PopMixT", "queueId": "-1",
                                                  "maxMsgNums": "32", "invisibleTime": "60000"})
        assert left.code == ResponseCode.PULL_NOT_FOUND


def batch_ack_body(group: str, msgs: list[WireMessage], extra_offsets: int = 0) -> bytes:
    """BatchAckMessageRequestBody as ``MQClientAPIImpl.batchAckMessageAsync`` builds it from the messages'
    POP_CK: one BatchAck per (retry mark, queue, check-point offset, pop time), bit i = offset - ck offset,
    the BitSet in fastjson's form (Base64 of ``BitSet.toByteArray()``). ``extra_offsets`` sets that many
    bits past the last offset (messages never handed out)."""
    groups: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for m in msgs:
        p = m.properties["POP_CK"].split(" ")
        ack = groups.setdefault((p[4], p[6], p[0], p[1]), {
            "c": group, "t": TOPIC, "r": p[4], "so": int(p[0]), "q": int(p[6]), "rq": int(p[3]), "pt": int(p[1]),
            "it": int(p[2]), "bits": set()})
        ack["bits"].add(int(p[7]) - int(p[0]))
    acks = []
    for ack in groups.values():
        bits = ack.pop("bits")
        bits |= {max(bits) + 1 + k for k in range(extra_offsets)}
        raw = bytearray(max(bits) // 8 + 1)
        for i in bits:
            raw[i // 8] |= 1 << (i % 8)
        acks.append({**ack, "b": base64.b64encode(bytes(raw)).decode()})
    return json.dumps({"brokerName": "broker-a", "acks": acks}).encode()


def test_batch_ack_applies_every_named_message(cluster: LocalCluster) -> None:
    """BATCH_ACK_MESSAGE (200151) in Apache's body layout: the named messages are acknowledged (they never
    come back, even after their invisible time), an offset never handed out is refused by name while the
    rest still apply, as Apache's AckMessageProcessor applies each BatchAck in turn."""
    with RemotingClient(cluster.brokers["broker-a"].admin_addr) as b:
        for i in range(6):
            send(b, f"batch-{i}", i % QUEUES)
        got: list[WireMessage] = []
        wait_until(lambda: got.extend(pop(b, 32)[1]) or len(got) >= 6, timeout=15, what="6 messages popped")
        assert sorted(m.body.decode() for m in got) == [f"batch-{i}" for i in range(6)]
        first, second = got[:4], got[4:]
        resp = b.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, batch_ack_body(GROUP, first))
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
        resp = b.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, batch_ack_body(GROUP, second, extra_offsets=1))
        assert resp.code == ResponseCode.INVALID_PARAMETER and "receipt_handle has expired" in (resp.remark or "")
        again = b.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, batch_ack_body(GROUP, first))
        assert again.code == ResponseCode.INVALID_PARAMETER and "already acknowledged" in (again.remark or "")
        empty = b.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, json.dumps({"brokerName": "broker-a", "acks": []}).encode())
        assert empty.code == 208  # NO_MESSAGE, as Apache
        junk = {"acks": [{"c": GROUP, "t": TOPIC, "so": 0, "q": 0, "pt": 1, "b": "%%"}]}
        bad = b.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, json.dumps(junk).encode())
        assert bad.code == ResponseCode.INVALID_PARAMETER and "acks[0].b" in (bad.remark or ""), bad.remark
        # all six were acknowledged: nothing comes back after their 2 s invisible time
        assert pop(b, 32, poll_ms=INVISIBLE_MS + 1500)[0] == 210  # POLLING_TIMEOUT
