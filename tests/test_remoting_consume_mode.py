"""SET_MESSAGE_REQUEST_MODE (401), QUERY_ASSIGNMENT (400) and ordered POP over remoting, raw frames.

What Apache's broker 5.3.3 answers (QueryAssignmentProcessor, PopMessageProcessor, AckMessageProcessor,
ChangeInvisibleTimeProcessor, read in its source): without a mode set, PULL and the topic's queues
shared among the group's consumers by the client's strategy; after ``setConsumeMode ... -m POP`` (share
0), every broker's queue -1 in POP mode, also after a restart (persisted); an ordered pop holds a
queue's batch until it is acked or its invisible time ends, and then hands the same messages out again
with their delivery count in ``orderCountInfo``. Ground truth: the messages sent here and which come back
when; Apache's own Java client against both brokers is tests/test_remoting_java_order.py (long).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode, WireMessage, decode_messages

pytestmark = pytest.mark.e2e
TOPIC, QUEUES = "ModeT", 4
SET_MODE = 401
POLLING_TIMEOUT = 210


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-mode"), lambda: failed_call(request)) as c:
        node = c.start_broker("broker-a")
        with RemotingClient(node.admin_addr) as b:
            for topic, queues in ((TOPIC, QUEUES), ("OrderT", 1)):
                fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"}
                assert b.invoke(17, fields).code == ResponseCode.SUCCESS
        yield c


def heartbeat(b: RemotingClient, client_id: str, group: str) -> None:
    body = {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "expressionType": "TAG", "tagsSet": [],
                                 "codeSet": [], "subVersion": 1}]}]}
    assert b.invoke(RequestCode.HEART_BEAT, {}, json.dumps(body).encode()).code == ResponseCode.SUCCESS


def assignment(b: RemotingClient, group: str, client_id: str, topic: str = TOPIC,
               strategy: str = "AVG") -> list[tuple[str, int, str]] | None:
    body = {"topic": topic, "consumerGroup": group, "clientId": client_id, "strategyName": strategy,
            "messageModel": "CLUSTERING"}
    resp = b.invoke(RequestCode.QUERY_ASSIGNMENT, {}, json.dumps(body).encode())
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    got = json.loads(resp.body).get("messageQueueAssignments")
    if got is None:
        return None
    return sorted((a["messageQueue"]["brokerName"], a["messageQueue"]["queueId"], a["mode"]) for a in got)


def set_mode(b: RemotingClient, topic: str, group: str, mode: str, share: int = 0) -> Any:
    body = {"topic": topic, "consumerGroup": group, "mode": mode, "popShareQueueNum": share}
    return b.invoke(SET_MODE, {}, json.dumps(body).encode())


def test_assignment_pull_by_default_pop_once_set_and_kept_across_a_restart(cluster: LocalCluster) -> None:
    node = cluster.brokers["broker-a"]
    group = "ModeG"
    with RemotingClient(node.admin_addr) as one, RemotingClient(node.admin_addr) as two:
        assert assignment(one, group, "c1") is None  # no consumer of the group online: nothing (Apache: null)
        heartbeat(one, "c1", group)
        heartbeat(two, "c2", group)
        a1, a2 = assignment(one, group, "c1"), assignment(two, group, "c2")
        assert a1 == [("broker-a", 0, "PULL"), ("broker-a", 1, "PULL")]  # AVG: consecutive halves
        assert a2 == [("broker-a", 2, "PULL"), ("broker-a", 3, "PULL")]
        assert assignment(one, group, "c1", strategy="AVG_BY_CIRCLE") == [("broker-a", 0, "PULL"),
                                                                            ("broker-a", 2, "PULL")]
        assert assignment(one, group, "c1", strategy="NoSuchStrategy") is None

        # mqadmin setConsumeMode's request, with Apache's refusals
        refused = set_mode(one, f"%RETRY%{group}", group, "POP")
        assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
        assert set_mode(one, "NoSuchTopic", group, "POP").code == ResponseCode.TOPIC_NOT_EXIST
        bad = set_mode(one, TOPIC, group, "PUSH")
        assert bad.code == ResponseCode.INVALID_PARAMETER and "mode" in (bad.remark or ""), bad.remark
        assert set_mode(one, TOPIC, group, "POP").code == ResponseCode.SUCCESS
        assert assignment(one, group, "c1") == assignment(two, group, "c2") == [("broker-a", -1, "POP")]
        # the group's retry topic: RocketScope's pops hand its messages out, so a pull must not take them too
        assert assignment(one, group, "c1", topic=f"%RETRY%{group}") == []
        assert set_mode(one, TOPIC, group, "POP", share=1).code == ResponseCode.SUCCESS
        # share 1 with 2 consumers covers everyone: still every queue (Apache: share >= consumers - 1)
        assert assignment(one, group, "c1") == [("broker-a", -1, "POP")]
        assert set_mode(one, TOPIC, "OtherG", "POP", share=0).code == ResponseCode.SUCCESS
    node.proc.stop()
    cluster.start_broker("broker-a")
    with RemotingClient(node.admin_addr) as one:
        heartbeat(one, "c1", group)
        assert assignment(one, group, "c1") == [("broker-a", -1, "POP")]  # the mode survived the restart
        heartbeat(one, "c1", "PullG")
        assert assignment(one, "PullG", "c1") == [("broker-a", q, "PULL") for q in range(QUEUES)]
        assert assignment(one, "PullG", "c1", topic="%RETRY%PullG") == [("broker-a", 0, "PULL")]


def send(b: RemotingClient, topic: str, body: str) -> None:
    fields = {"producerGroup": "OrderProducer", "topic": topic, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": "1", "queueId": "0", "sysFlag": "0",
              "bornTimestamp": str(int(time.time() * 1000)), "flag": "0", "properties": ""}
    assert b.invoke(RequestCode.SEND_MESSAGE, fields, body.encode()).code == ResponseCode.SUCCESS


def pop(b: RemotingClient, group: str, n: int, invisible_ms: int, order: bool = True,
        poll_ms: int = 0) -> tuple[Any, list[WireMessage]]:
    resp = b.invoke(RequestCode.POP_MESSAGE, {
        "consumerGroup": group, "topic": "OrderT", "queueId": "-1", "maxMsgNums": str(n),
        "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms), "bornTime": str(int(time.time() * 1000)),
        "initMode": "0", "expType": "TAG", "exp": "*", "order": str(order).lower()})
    return resp, decode_messages(resp.body) if resp.code == ResponseCode.SUCCESS else []


def extra_info(resp: Any, m: WireMessage) -> str:
    """What Apache's client builds for an ordered pop's message (ExtraInfoUtil.buildExtraInfo)."""
    start = {int(p.split(" ")[1]): p.split(" ")[2] for p in resp.fields["startOffsetInfo"].split(";")}
    return " ".join(str(x) for x in (start[m.queue_id], resp.fields["popTime"], resp.fields["invisibleTime"],
                                     resp.fields["reviveQid"], 0, "broker-a", m.queue_id, m.queue_offset))


def ack(b: RemotingClient, group: str, extra: str) -> Any:
    return b.invoke(RequestCode.ACK_MESSAGE, {"consumerGroup": group, "topic": "OrderT", "queueId": "0",
                                              "offset": extra.split(" ")[7], "extraInfo": extra})


def test_ordered_pop_holds_the_queue_until_acked_and_counts_redeliveries(cluster: LocalCluster) -> None:
    node = cluster.brokers["broker-a"]
    group = "OrderG"
    with RemotingClient(node.admin_addr) as b:
        for i in range(6):
            send(b, "OrderT", f"o-{i}")
        resp, msgs = pop(b, group, 2, 2000)
        assert [m.body for m in msgs] == [b"o-0", b"o-1"]
        assert (resp.fields["reviveQid"], resp.fields["restNum"]) == ("999", "4")  # 4 left behind the batch
        assert resp.fields["orderCountInfo"] == "0 0 0"  # queue 0, all first deliveries
        assert all("POP_CK" not in m.properties for m in msgs)  # Apache's client builds it from the header
        held, none = pop(b, group, 2, 2000)  # the queue's batch is in flight: nothing, the rest not counted
        assert (held.code, none, held.fields["restNum"]) == (ResponseCode.PULL_NOT_FOUND, [], "0")
        t0 = time.monotonic()
        again, msgs = pop(b, group, 2, 30_000, poll_ms=8000)  # comes back once the 2 s invisible time ends
        assert [m.body for m in msgs] == [b"o-0", b"o-1"] and time.monotonic() - t0 < 7.5
        assert again.fields["orderCountInfo"] == "0 qo0%0 1;0 qo0%1 1;0 0 1"
        assert [m.reconsume_times for m in msgs] == [1, 1]
        stale = extra_info(resp, msgs[0])  # the first hand-out's extraInfo
        assert ack(b, group, stale).code == ResponseCode.INVALID_PARAMETER  # not the current hand-out
        for m in msgs:
            assert ack(b, group, extra_info(again, m)).code == ResponseCode.SUCCESS
        assert ack(b, group, stale).code == ResponseCode.SUCCESS  # below the committed offset now: done (Apache)
        third, msgs = pop(b, group, 8, 60_000)
        assert [m.body for m in msgs] == [b"o-2", b"o-3", b"o-4", b"o-5"] and third.fields["restNum"] == "0"
        assert third.fields["orderCountInfo"] == "0 0 0"
        # CHANGE_MESSAGE_INVISIBLETIME on an ordered hand-out: answers reviveQid 999, the message comes back then
        m2 = msgs[0]
        changed = b.invoke(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": group, "topic": "OrderT", "queueId": "0", "offset": str(m2.queue_offset),
            "extraInfo": extra_info(third, m2), "invisibleTime": "1000"})
        assert changed.code == ResponseCode.SUCCESS and changed.fields["reviveQid"] == "999"
        for m in msgs[1:]:
            assert ack(b, group, extra_info(third, m)).code == ResponseCode.SUCCESS
        back, got = pop(b, group, 8, 60_000, poll_ms=8000)
        assert [m.body for m in got] == [b"o-2"] and back.fields["orderCountInfo"] == "0 qo0%2 1;0 0 1"
        assert ack(b, group, extra_info(back, got[0])).code == ResponseCode.SUCCESS
        end, none = pop(b, group, 8, 60_000, poll_ms=500)
        assert (end.code, none, end.fields["restNum"]) == (POLLING_TIMEOUT, [], "0")
        send(b, "OrderT", "o-6")
        handed, held = pop(b, group, 8, 1000)
        assert [m.body for m in held] == [b"o-6"]
    # a restart while o-6 is in flight, its invisible time ending before the group's first pop after the restart:
    # it still comes back in place, not through the retry topic (which ordered pops do not read), because the
    # broker remembers that the group pops OrderT in order (the revive runs before any pop could remind it)
    node.proc.stop()  # SIGTERM: the hand-out's journal record is written (kill -9 may lose it: then o-6 is new)
    cluster.start_broker("broker-a")
    due = int(handed.fields["popTime"]) / 1000 + 1.0
    wait_until(lambda: time.time() > due + 1.0, timeout=30, what="o-6's invisible time over, and a revive pass")
    with RemotingClient(node.admin_addr) as b:
        back, got = pop(b, group, 8, 60_000, poll_ms=8000)
        assert [m.body for m in got] == [b"o-6"] and back.fields["orderCountInfo"] == "0 qo0%6 1;0 0 1"
