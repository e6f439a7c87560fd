"""ACL over the remoting protocol, end to end: a broker with aclEnable, Apache's Go client v2 with credentials.

Ground truth is the store's queue offsets (read with signed raw GET_MAX_OFFSET frames)
before and after each run, and the sends the Go client reports.  The signature the raw
frames carry is computed here from RocketMQ's rule (broker/security/remoting_acl.py
docstring); the Go client computes its own, so a shared mistake would show.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from go_clients import rmqgo, run_go, summary
from peers_support import require_peers

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode
from rocketscope.broker.security.remoting_acl import sign

pytestmark = pytest.mark.e2e

ACL: dict[str, Any] = {
    "accounts": [
        {"accessKey": "remoteProducer", "secretKey": "remote-secret", "defaultTopicPerm": "PUB",
         "topicPerms": ["RemoteDenied=DENY"]},
        {"accessKey": "remoteConsumer", "secretKey": "consumer-secret", "defaultTopicPerm": "DENY",
         "defaultGroupPerm": "DENY", "topicPerms": ["RemoteOk=SUB", "RemoteDenied=SUB"],
         "groupPerms": ["acl-readers=SUB"]},
        {"accessKey": "opsAdmin", "secretKey": "admin-secret", "admin": True},
    ],
}
QUEUES = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    rmqgo()  # build (or skip) before any process starts
    root = tmp_path_factory.mktemp("remoting-acl")
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(yaml.safe_dump(ACL))
    with cluster_with_namesrv(root, lambda: False) as c:
        c.start_broker("broker-acl", aclEnable="true", aclFile=acl_file, autoCreateTopicEnable="false")
        for name in ("RemoteOk", "RemoteDenied", "RemoteBadKey"):
            c.admin("--accessKey", "opsAdmin", "--secretKey", "admin-secret", "updateTopic", "-t", name, "-r",
                    str(QUEUES), "-w", str(QUEUES))
            with RemotingClient(c.namesrv_addr.split(";")[0]) as ns:
                wait_until(lambda n=name: ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": n}).code == 0,
                           what=f"route of {name}")
        yield c


def signed(fields: dict[str, str], ak: str, sk: str, body: bytes = b"") -> dict[str, str]:
    out = dict(fields, AccessKey=ak)
    out["Signature"] = sign(out, body, sk)
    return out


def stored(c: LocalCluster, topic: str) -> int:
    """Messages in the topic's queues, read with an admin's signed GET_MAX_OFFSET."""
    total = 0
    with RemotingClient(c.brokers["broker-acl"].admin_addr) as b:
        for q in range(QUEUES):
            resp = b.invoke(RequestCode.GET_MAX_OFFSET,
                            signed({"topic": topic, "queueId": str(q)}, "opsAdmin", "admin-secret"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            total += int(resp.fields["offset"])
    return total


def produce(c: LocalCluster, topic: str, ak: str, sk: str, n: int) -> list[dict[str, Any]]:
    return run_go("produce", "-ns", c.namesrv_addr, "-topic", topic, "-n", str(n), "-ak", ak, "-sk", sk,
                  "-retries", "0", timeout=90)


def test_go_client_with_the_right_key_is_served(cluster: LocalCluster) -> None:
    before = stored(cluster, "RemoteOk")
    res = summary(produce(cluster, "RemoteOk", "remoteProducer", "remote-secret", 20))
    assert (res["sent"], res["failed"]) == (20, 0)
    assert stored(cluster, "RemoteOk") - before == 20


def test_go_client_with_a_wrong_secret_is_refused(cluster: LocalCluster) -> None:
    events = produce(cluster, "RemoteBadKey", "remoteProducer", "not-the-secret", 3)
    res = summary(events)
    assert (res["sent"], res["failed"]) == (0, 3)
    errors = " ".join(e.get("error", "") for e in events if e.get("event") == "send_failed")
    assert "signature does not match" in errors, errors
    assert "remote-secret" not in errors and "not-the-secret" not in errors
    assert stored(cluster, "RemoteBadKey") == 0


def test_go_client_without_pub_on_the_topic_is_refused(cluster: LocalCluster) -> None:
    events = produce(cluster, "RemoteDenied", "remoteProducer", "remote-secret", 3)
    res = summary(events)
    assert (res["sent"], res["failed"]) == (0, 3)
    errors = " ".join(e.get("error", "") for e in events if e.get("event") == "send_failed")
    assert "topic RemoteDenied" in errors and "PUB is needed" in errors, errors
    assert stored(cluster, "RemoteDenied") == 0


def test_raw_frames_get_no_permission_with_the_cause(cluster: LocalCluster) -> None:
    with RemotingClient(cluster.brokers["broker-acl"].admin_addr) as b:
        fields = {"topic": "RemoteOk", "queueId": "0"}
        unsigned = b.invoke(RequestCode.GET_MAX_OFFSET, fields)
        assert unsigned.code == ResponseCode.NO_PERMISSION
        assert "no credentials" in (unsigned.remark or "")
        unknown = b.invoke(RequestCode.GET_MAX_OFFSET, signed(fields, "nobody", "x"))
        assert unknown.code == ResponseCode.NO_PERMISSION and "unknown access key 'nobody'" in (unknown.remark or "")
        tampered = signed(fields, "remoteProducer", "remote-secret")
        tampered["queueId"] = "1"  # a field changed after signing
        bad = b.invoke(RequestCode.GET_MAX_OFFSET, tampered)
        assert bad.code == ResponseCode.NO_PERMISSION and "signature does not match" in (bad.remark or "")
        # admin-only: creating a topic needs an admin account, whatever its topic permissions
        create = {"topic": "RemoteNew", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
        refused = b.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, signed(create, "remoteProducer", "remote-secret"))
        assert refused.code == ResponseCode.NO_PERMISSION and "not an admin" in (refused.remark or "")
        ok = b.invoke(RequestCode.GET_MAX_OFFSET, signed(fields, "remoteProducer", "remote-secret"))
        assert ok.code == ResponseCode.SUCCESS, ok.remark


def test_go_consumer_with_sub_rights_receives_and_a_foreign_group_is_refused(cluster: LocalCluster) -> None:
    """HEART_BEAT (group and topics from its body), PULL_MESSAGE and the offset codes, signed by the Go client."""
    sent = summary(produce(cluster, "RemoteOk", "remoteProducer", "remote-secret", 5))
    assert sent["sent"] == 5
    total = stored(cluster, "RemoteOk")
    events = run_go("consume", "-ns", cluster.namesrv_addr, "-topic", "RemoteOk", "-group", "acl-readers",
                    "-n", str(total), "-timeout", "40", "-ak", "remoteConsumer", "-sk", "consumer-secret",
                    timeout=90)
    got = {e["msgId"] for e in events if e.get("event") == "received"}
    assert len(got) == total, events[-3:]
    refused = run_go("consume", "-ns", cluster.namesrv_addr, "-topic", "RemoteOk", "-group", "other-group",
                     "-n", "1", "-timeout", "5", "-ak", "remoteConsumer", "-sk", "consumer-secret", timeout=60)
    assert not [e for e in refused if e.get("event") == "received"], refused[-3:]
    log = cluster.brokers["broker-acl"].proc.log()
    assert "has DENY on group other-group, SUB is needed" in log  # refused by the ACL, not merely slow


PROBE = r'''
import java.util.HashMap;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

public class AclProbe {
    public static void main(String[] a) throws Exception {
        RemotingCommand cmd = RemotingCommand.createRequestCommand(310, null);
        HashMap<String, String> f = new HashMap<>();
        f.put("b", "TopicX"); f.put("a", "pg"); f.put("g", "1700000000000"); f.put("queueId", "3");
        f.put("i", "KEYS\u0001k1\u0002UNIQ_KEY\u0001ABC\u0002"); f.put("_UNIQUE_KEY_QUERY", "true");
        cmd.setExtFields(f);
        cmd.setBody("body-\u00e9".getBytes("UTF-8"));
        new AclClientRPCHook(new SessionCredentials("remoteProducer", "remote-secret")).doBeforeRequest("x:1", cmd);
        System.out.println(cmd.getExtFields().get("Signature"));
    }
}
'''


def test_signature_rule_matches_apaches_acl_client_rpc_hook(tmp_path: Path) -> None:
    """Apache's own AclClientRPCHook (rocketmq-client 5.3.3) signs a command; our rule must give the same."""
    require_peers()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "peers"))
    import reference_cluster as ref  # peers/ is not a package

    src = tmp_path / "AclProbe.java"
    src.write_text(PROBE)
    res = subprocess.run(["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{ref.LIB}/*", str(src)],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    apache = res.stdout.strip().splitlines()[-1]
    fields = {"b": "TopicX", "a": "pg", "g": "1700000000000", "queueId": "3",
              "i": "KEYS\x01k1\x02UNIQ_KEY\x01ABC\x02", "_UNIQUE_KEY_QUERY": "true", "AccessKey": "remoteProducer"}
    assert sign(fields, "body-\u00e9".encode(), "remote-secret") == apache


def test_stats_all_signs_its_remoting_frames(cluster: LocalCluster) -> None:
    """`rocketscope admin statsAll` asks the broker's counters over remoting (rocketscope/admin_stats.py):
    with an admin account its frames are signed and it prints what the store holds (every put of the topic
    since the broker started); without one the broker refuses and the command says so."""
    import json

    admin = ("--accessKey", "opsAdmin", "--secretKey", "admin-secret")
    summary(produce(cluster, "RemoteOk", "remoteProducer", "remote-secret", 3))
    rows = json.loads(cluster.admin(*admin, "statsAll", "-t", "RemoteOk", "--json").stdout)
    assert rows and {r["inMsg24Hour"] for r in rows} == {stored(cluster, "RemoteOk")}, rows
    refused = cluster.admin("statsAll", "-t", "RemoteOk", check=False)
    assert refused.returncode == 2 and "no credentials" in refused.stderr, refused.stderr
