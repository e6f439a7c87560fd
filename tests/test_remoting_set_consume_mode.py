"""`rocketscope admin setConsumeMode` (mqadmin's name and flags) and GET_ALL_MESSAGE_REQUEST_MODE (402).

Ground truth: the mode this test sets is what the broker then reports (402), stores
(``config/messageRequestMode.json``) and assigns (QUERY_ASSIGNMENT); refusals carry the broker's
code and remark. ``test_same_on_apache`` (long) runs the same command against Apache RocketMQ 5.3.3's
broker (rocketscope admin reaches it over remoting) and compares its 402 answer with RocketScope's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from peers_support import ReferenceCluster, remoting

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode

pytestmark = pytest.mark.e2e
GET_ALL_MESSAGE_REQUEST_MODE = 402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("set-consume-mode"), lambda: failed_call(request)) as c:
        c.start_broker("broker-a")
        yield c


def all_modes(addr: str) -> Any:
    with RemotingClient(addr) as b:
        resp = b.invoke(GET_ALL_MESSAGE_REQUEST_MODE)
    assert resp.code == 0, resp.remark
    return json.loads(resp.body)


def test_set_consume_mode_and_get_all_modes(cluster: LocalCluster) -> None:
    node = cluster.brokers["broker-a"]
    cluster.admin("updateTopic", "-c", "DefaultCluster", "-t", "ModeT", "-r", "2", "-w", "2")
    with RemotingClient(cluster.namesrv_addr) as ns:
        wait_until(lambda: ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "ModeT"}).code == 0,
                   what="route of ModeT")
    assert all_modes(node.admin_addr) == {"messageRequestModeMap": {}}  # nothing set yet
    out = cluster.admin("setConsumeMode", "-c", "DefaultCluster", "-t", "ModeT", "-g", "ModeG", "-m", "POP",
                        "-q", "1").stdout
    assert f"set consume mode to {node.admin_addr} success." in out
    assert "topic[ModeT] group[ModeG] consume mode[POP] popShareQueueNum[1]" in out
    entry = {"consumerGroup": "ModeG", "mode": "POP", "popShareQueueNum": 1, "topic": "ModeT"}
    got = all_modes(node.admin_addr)
    assert got == {"messageRequestModeMap": {"ModeT": {"ModeG": entry}}}
    assert json.loads((node.store / "config" / "messageRequestMode.json").read_text()) == got
    # -b one broker; PULL again
    cluster.admin("setConsumeMode", "-b", node.admin_addr, "-t", "ModeT", "-g", "ModeG", "-m", "PULL")
    assert all_modes(node.admin_addr)["messageRequestModeMap"]["ModeT"]["ModeG"]["mode"] == "PULL"
    # refusals name the cause, with the broker's code; nothing changes
    res = cluster.admin("setConsumeMode", "-c", "DefaultCluster", "-t", "NoSuchT", "-g", "ModeG", "-m", "POP",
                        check=False)
    assert res.returncode == 1 and "topic[NoSuchT] not exist (code 17)" in res.stderr, res.stderr
    res = cluster.admin("setConsumeMode", "-c", "DefaultCluster", "-t", "%RETRY%ModeG", "-g", "ModeG", "-m", "POP",
                        check=False)
    assert res.returncode == 1 and "retry topic is not allowed to set mode (code 16)" in res.stderr, res.stderr
    res = cluster.admin("setConsumeMode", "-t", "ModeT", "-g", "ModeG", "-m", "POP", check=False)
    assert res.returncode == 2 and "give -b (a broker) or -c (a cluster)" in res.stderr
    res = cluster.admin("setConsumeMode", "-c", "DefaultCluster", "-t", "ModeT", "-g", "ModeG", "-m", "PUSH",
                        check=False)
    assert res.returncode == 2 and "-m" in res.stderr
    assert all_modes(node.admin_addr)["messageRequestModeMap"]["ModeT"]["ModeG"]["mode"] == "PULL"


@pytest.mark.long
def test_same_on_apache(apache_rocketmq: ReferenceCluster, cluster: LocalCluster) -> None:
    """rocketscope admin setConsumeMode against Apache's broker, then 402 on both: the same body."""
    apache_rocketmq.create_topic("ModeApacheT")
    apache_rocketmq.create_group("ModeApacheG")
    out = cluster.admin("setConsumeMode", "-c", "DefaultCluster", "-t", "ModeApacheT", "-g", "ModeApacheG",
                        "-m", "POP", "-q", "1", "-n", apache_rocketmq.namesrv_addr, namesrv=False).stdout
    assert f"set consume mode to {apache_rocketmq.broker_addr} success." in out, out
    apache = remoting.loads_fastjson(remoting.call(apache_rocketmq.broker_addr, GET_ALL_MESSAGE_REQUEST_MODE).body)
    cluster.admin("updateTopic", "-c", "DefaultCluster", "-t", "ModeApacheT", "-r", "2", "-w", "2")
    with RemotingClient(cluster.namesrv_addr) as ns:
        wait_until(lambda: ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "ModeApacheT"}).code == 0,
                   what="route of ModeApacheT")
    cluster.admin("setConsumeMode", "-c", "DefaultCluster", "-t", "ModeApacheT", "-g", "ModeApacheG", "-m", "POP",
                  "-q", "1")
    ours = all_modes(cluster.brokers["broker-a"].admin_addr)["messageRequestModeMap"]["ModeApacheT"]
    assert apache["messageRequestModeMap"]["ModeApacheT"] == ours, (apache, ours)
