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
from click.testing import CliRunner, Result
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from peers_support import ReferenceCluster, remoting

from rocketscope.admin_cli import admin
from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode

pytestmark = pytest.mark.e2e
GET_ALL_MESSAGE_REQUEST_MODE = 402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("set-consume-mode"), lambda: failed_call(request)) as c:
        c.start_broker("broker-a")
        yield c


def set_consume_mode(namesrv: str, *args: str) -> Result:
    """``rocketscope admin setConsumeMode ARGS`` in this process (a subprocess costs seconds of imports)."""
    return CliRunner().invoke(admin, ["setConsumeMode", *args, "-n", namesrv])


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
    res = set_consume_mode(cluster.namesrv_addr, "-c", "DefaultCluster", "-t", "ModeT", "-g", "ModeG", "-m", "POP",
                           "-q", "1")
    assert res.exit_code == 0, res.output
    out = res.output
    assert f"set consume mode to {node.admin_addr} success." in out
    assert "topic[ModeT] group[ModeG] consume mode[POP] popShareQueueNum[1]" in out
    entry = {"consumerGroup": "ModeG", "mode": "POP", "popShareQueueNum": 1, "topic": "ModeT"}
    got = all_modes(node.admin_addr)
    assert got == {"messageRequestModeMap": {"ModeT": {"ModeG": entry}}}
    assert json.loads((node.store / "config" / "messageRequestMode.json").read_text()) == got
    # -b one broker; PULL again
    assert set_consume_mode(cluster.namesrv_addr, "-b", node.admin_addr, "-t", "ModeT", "-g", "ModeG",
                            "-m", "PULL").exit_code == 0
    assert all_modes(node.admin_addr)["messageRequestModeMap"]["ModeT"]["ModeG"]["mode"] == "PULL"
    # refusals name the cause, with the broker's code; nothing changes
    res = set_consume_mode(cluster.namesrv_addr, "-c", "DefaultCluster", "-t", "NoSuchT", "-g", "ModeG", "-m", "POP")
    assert res.exit_code == 1 and "topic[NoSuchT] not exist (code 17)" in res.output, res.output
    res = set_consume_mode(cluster.namesrv_addr, "-c", "DefaultCluster", "-t", "%RETRY%ModeG", "-g", "ModeG",
                           "-m", "POP")
    assert res.exit_code == 1 and "retry topic is not allowed to set mode (code 16)" in res.output, res.output
    assert all_modes(node.admin_addr)["messageRequestModeMap"]["ModeT"]["ModeG"]["mode"] == "PULL"


@pytest.mark.long
def test_same_on_apache(apache_rocketmq: ReferenceCluster, cluster: LocalCluster) -> None:
    """rocketscope admin setConsumeMode against Apache's broker, then 402 on both: the same body."""
    apache_rocketmq.create_topic("ModeApacheT")
    apache_rocketmq.create_group("ModeApacheG")
    out = set_consume_mode(apache_rocketmq.namesrv_addr, "-c", "DefaultCluster", "-t", "ModeApacheT", "-g",
                           "ModeApacheG", "-m", "POP", "-q", "1").output
    assert f"set consume mode to {apache_rocketmq.broker_addr} success." in out, out
    apache = remoting.loads_fastjson(remoting.call(apache_rocketmq.broker_addr, GET_ALL_MESSAGE_REQUEST_MODE).body)
    cluster.admin("updateTopic", "-c", "DefaultCluster", "-t", "ModeApacheT", "-r", "2", "-w", "2")
    with RemotingClient(cluster.namesrv_addr) as ns:
        wait_until(lambda: ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "ModeApacheT"}).code == 0,
                   what="route of ModeApacheT")
    assert set_consume_mode(cluster.namesrv_addr, "-c", "DefaultCluster", "-t", "ModeApacheT", "-g", "ModeApacheG",
                            "-m", "POP", "-q", "1").exit_code == 0
    ours = all_modes(cluster.brokers["broker-a"].admin_addr)["messageRequestModeMap"]["ModeApacheT"]
    assert apache["messageRequestModeMap"]["ModeApacheT"] == ours, (apache, ours)


@pytest.mark.parametrize(("args", "named"), [
    (["-t", "T", "-g", "G", "-m", "POP"], "give -b (a broker) or -c (a cluster)"),
    (["-c", "C", "-t", "T", "-g", "G", "-m", "PUSH"], "'PUSH' is not one of")])
def test_set_consume_mode_usage_errors_name_the_flag(args: list[str], named: str) -> None:
    """Refused before any broker is asked."""
    res = set_consume_mode("127.0.0.1:1", *args)
    assert res.exit_code == 2 and named in res.output, res.output
