"""A bad SQL92 expression over remoting, in raw frames: the codes Apache RocketMQ 5.3.3's broker answers.

Read with javap from rocketmq-broker-5.3.3.jar (docs/COMPATIBILITY.md, "SQL92 over remoting"):
HEART_BEAT registers a consumer's subscriptions without compiling them (SUCCESS); a later
PULL_MESSAGE without the subscription flag finds no filter data for the group and answers
FILTER_DATA_NOT_EXIST (27). A pull that carries the expression itself answers
SUBSCRIPTION_PARSE_FAILED (23) here (Apache: 23 for an empty expression, a bad one served unfiltered).
Every remark names the expression. Ground truth for the good case: four messages this test sent with
n = 0..3, of which ``n >= 2`` selects two. One broker with enablePropertyFilter=true (~10 s).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from cluster import LocalCluster
from rmq import message, producer

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode, decode_messages

pytestmark = pytest.mark.e2e
FILTER_DATA_NOT_EXIST = 27  # RocketMQ's ResponseCode


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("sql92-errors"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a", enablePropertyFilter=True)
        yield c
    finally:
        c.stop()


def heartbeat(r: RemotingClient, group: str, topic: str, expression: str) -> int:
    body = {"clientID": f"sql92-{group}", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": expression, "expressionType": "SQL92",
                                 "classFilterMode": False, "tagsSet": [], "codeSet": [], "subVersion": 1}]}]}
    return r.invoke(RequestCode.HEART_BEAT, {}, json.dumps(body).encode()).code


def pull(r: RemotingClient, group: str, topic: str, expression: str | None) -> tuple[int, str, list[str]]:
    """One pull of queue 0 from offset 0; ``expression`` None: without the subscription flag."""
    fields = {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
              "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "1",
              "expressionType": "SQL92"}
    if expression is not None:
        fields |= {"sysFlag": "4", "subscription": expression}
    resp = r.invoke(RequestCode.PULL_MESSAGE, fields)
    bodies = [m.body.decode() for m in decode_messages(resp.body)] if resp.code == ResponseCode.SUCCESS else []
    return resp.code, resp.remark or "", bodies


def test_bad_sql92_answers_as_apache(cluster: LocalCluster) -> None:
    a = cluster.brokers["broker-a"]
    topic, group = f"S{uuid.uuid4().hex[:8]}", "Sql92ErrG"
    cluster.admin("updateTopic", "-b", a.admin_addr, "-t", topic, "-r", "1", "-w", "1")
    with producer(a.endpoint, topic) as p:
        for n in range(4):
            p.send(message(topic, f"m{n}".encode(), props={"n": str(n)}))
    with RemotingClient(a.admin_addr) as r:
        # a good expression registered by heartbeat filters the pull: m2 and m3 of the four sent
        assert heartbeat(r, group, topic, "n >= 2") == ResponseCode.SUCCESS
        code, remark, bodies = pull(r, group, topic, None)
        assert (code, sorted(bodies)) == (ResponseCode.SUCCESS, ["m2", "m3"]), remark

        # (a) a bad one: the heartbeat is accepted, the pull finds no filter data
        assert heartbeat(r, group, topic, "n >") == ResponseCode.SUCCESS
        code, remark, _ = pull(r, group, topic, None)
        assert code == FILTER_DATA_NOT_EXIST and "'n >'" in remark, (code, remark)
        assert remark.startswith("The broker's consumer filter data is not exist")

        # (b) in the pull itself, and an empty one (Apache's FilterAPI: "Expression can't be null!")
        code, remark, _ = pull(r, "Sql92ErrG2", topic, "n >")
        assert code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "'n >'" in remark, (code, remark)
        code, remark, _ = pull(r, "Sql92ErrG2", topic, "")
        assert code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "Expression can't be null" in remark
    # one INFO line per refused pull, naming the group and the expression
    log = a.proc.log()
    assert f"PULL_MESSAGE of group {group} on {topic}" in log and "(code 27): SQL92 expression 'n >'" in log
