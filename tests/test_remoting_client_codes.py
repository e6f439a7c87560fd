"""The remoting codes a Java client uses that no other raw test asks directly (issue 19, "Must exist" 1).

SEARCH_OFFSET_BY_TIMESTAMP (29) and GET_EARLIEST_MSG_STORETIME (32) against the store times of messages this
test sent; GET_CONSUMER_LIST_BY_GROUP (38), NOTIFY_CONSUMER_IDS_CHANGED (40, broker to client) and
UNREGISTER_CLIENT (35) against the heartbeats of two connections of one group. Apache's clients send these
(rebalance, offset reset by time, shutdown); the Java and Go tests exercise them only indirectly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from peers_support import remoting

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode, decode_messages, properties_to_string

pytestmark = pytest.mark.e2e
TOPIC, GROUP = "CodesT", "CodesG"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-codes"), lambda: failed_call(request)) as c:
        node = c.start_broker("broker-a")
        remoting.create_topic(node.admin_addr, TOPIC, queues=1)  # mqadmin updateTopic's frame, no subprocess
        yield c


def send(b: RemotingClient, body: bytes) -> None:
    header = {"a": "CodesPG", "b": TOPIC, "c": "TBW102", "d": "1", "e": "0", "f": "0",
              "g": str(int(time.time() * 1000)), "h": "0", "i": properties_to_string({"UNIQ_KEY": body.hex()}),
              "m": "false"}
    resp = b.invoke(RequestCode.SEND_MESSAGE_V2, header, body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def store_times(b: RemotingClient) -> list[int]:
    resp = b.invoke(RequestCode.PULL_MESSAGE, {"consumerGroup": "CodesReader", "topic": TOPIC, "queueId": "0",
                                               "queueOffset": "0", "maxMsgNums": "8", "sysFlag": "4",
                                               "commitOffset": "0", "suspendTimeoutMillis": "0",
                                               "subscription": "*", "subVersion": "0", "expressionType": "TAG"})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return [m.store_timestamp for m in decode_messages(resp.body)]


def test_offsets_by_time_and_earliest_store_time(cluster: LocalCluster) -> None:
    with RemotingClient(cluster.brokers["broker-a"].admin_addr) as b:
        send(b, b"first")
        (t0,) = store_times(b)
        wait_until(lambda: time.time() * 1000 > t0 + 5, what="the clock past the first store time")
        send(b, b"second")
        t1 = store_times(b)[1]
        assert t1 > t0

        def search(ts: int) -> int:
            r = b.invoke(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": TOPIC, "queueId": "0", "timestamp": str(ts)})
            assert r.code == ResponseCode.SUCCESS, r.remark
            return int(r.fields["offset"])

        # the first message stored at or after the time (Apache's default BoundaryType.LOWER)
        assert (search(t0 - 1000), search(t0), search(t0 + 1), search(t1)) == (0, 0, 1, 1)
        r = b.invoke(RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": TOPIC, "queueId": "0"})
        assert r.code == ResponseCode.SUCCESS and int(r.fields["timestamp"]) == t0


def heartbeat(b: RemotingClient, cid: str) -> None:
    body = {"clientID": cid, "producerDataSet": [], "consumerDataSet": [{
        "groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "expressionType": "TAG", "tagsSet": [],
                                 "codeSet": [], "subVersion": 1}]}]}
    assert b.invoke(RequestCode.HEART_BEAT, {}, json.dumps(body).encode()).code == ResponseCode.SUCCESS


def members(b: RemotingClient) -> list[str]:
    r = b.invoke(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return list(json.loads(r.body)["consumerIdList"])


def notified(b: RemotingClient) -> bool:
    """A NOTIFY_CONSUMER_IDS_CHANGED request for GROUP reached this connection (read within 10 s)."""
    while True:
        for i, cmd in enumerate(b.unmatched):
            if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and cmd.fields.get("consumerGroup") == GROUP:
                del b.unmatched[i]
                return True
        b.unmatched.append(b.read_frame())  # a socket timeout (10 s) fails the test


def test_consumer_list_notify_and_unregister(cluster: LocalCluster) -> None:
    addr = cluster.brokers["broker-a"].admin_addr
    with RemotingClient(addr) as one, RemotingClient(addr) as two:
        heartbeat(one, "codes-c1")
        assert members(one) == ["codes-c1"]
        heartbeat(two, "codes-c2")
        assert notified(one)  # a member joined: the others rebalance
        assert members(one) == ["codes-c1", "codes-c2"]
        r = two.invoke(RequestCode.UNREGISTER_CLIENT, {"clientID": "codes-c2", "consumerGroup": GROUP})
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert notified(one)
        assert members(one) == ["codes-c1"]
    with RemotingClient(addr) as three:  # both connections closed: their members are gone, and an empty group
        # is answered as Apache's ConsumerManageProcessor answers it: SYSTEM_ERROR "no consumer for this group, G"
        def gone() -> bool:
            r = three.invoke(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP})
            return r.code == ResponseCode.SYSTEM_ERROR and r.remark == f"no consumer for this group, {GROUP}"

        wait_until(gone, what="an empty group after the connections closed")
