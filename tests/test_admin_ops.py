"""mqadmin's maintenance commands of `rocketscope admin` (issue 21), end to end over real processes.

One name server and two brokers as processes; the official Python client sends and consumes, and
every assertion is on what a user sees: where sends land (counted per broker from the stores'
offsets), which messages a group receives after its offsets moved, routes' permissions, and
the refusal of a config key that needs a restart. The CLI runs in this process (click's runner,
the same code as `rocketscope admin`: a process per call cost 1-2 s on a loaded 2-core machine,
over 40 calls), except wipeWritePerm and addWritePerm, run as the installed command.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from cluster import LocalCluster, wait_until
from rmq import drain, message, producer, simple_consumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from rocketscope.admin_cli import admin as admin_group

pytestmark = pytest.mark.e2e

CLUSTER = "DefaultCluster"


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def admin(c: LocalCluster, *args: str, check: bool = True) -> Result:
    """``rocketscope admin ARGS -n <name server>`` in this process; its exit code, stdout and stderr."""
    r = CliRunner().invoke(admin_group, [*args, "-n", c.namesrv_addr])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    res = Result(r.exit_code, r.stdout, r.stderr)
    if check and res.returncode:
        raise AssertionError(f"admin {' '.join(args)} failed ({res.returncode}): {res.stderr}{res.stdout}")
    return res


def admin_json(c: LocalCluster, *args: str) -> Any:
    return json.loads(admin(c, *args, "--json").stdout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("admin-ops"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a")
        c.start_broker("broker-b")
        for topic in ("OpsRotation", "OpsReset", "OpsMisc"):
            admin(c, "updateTopic", "-c", CLUSTER, "-t", topic, "-r", "4", "-w", "4")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def stored_per_broker(c: LocalCluster, topic: str) -> dict[str, int]:
    """Messages each broker stored for ``topic`` (sum of its queues' max offsets): the ground truth of sends."""
    out: dict[str, int] = {}
    for q in admin_json(c, "topicStatus", "-t", topic):
        out[q["brokerName"]] = out.get(q["brokerName"], 0) + q["maxOffset"] - q["minOffset"]
    return out


def route_perms(c: LocalCluster, topic: str) -> dict[str, int]:
    return {q["brokerName"]: q["perm"] for q in admin_json(c, "topicRoute", "-t", topic)["queueDatas"]}


def send(c: LocalCluster, topic: str, bodies: list[bytes]) -> list[Any]:
    """A fresh producer (its first route query sees the current permissions) sends ``bodies``."""
    with producer(c.brokers["broker-b"].endpoint, topic) as p:
        return [p.send(message(topic, b)) for b in bodies]


def test_wipe_write_perm_takes_a_broker_out_of_rotation(cluster: LocalCluster) -> None:
    topic = "OpsRotation"
    out = cluster.admin("wipeWritePerm", "-b", "broker-a").stdout  # the installed CLI, as a process
    assert "wipe write perm of broker[broker-a]" in out and "OK, " in out
    assert int(out.strip().rsplit(" ", 1)[1]) >= 3  # the three topics created on it at least
    assert route_perms(cluster, topic) == {"broker-a": 4, "broker-b": 6}
    # the brokers cache a route for up to 1 s: wait until broker-b's gRPC route shows broker-a read-only
    def broker_a_read_only() -> bool:
        with grpc.insecure_channel(cluster.brokers["broker-b"].endpoint) as ch:
            req = svc.QueryRouteRequest()
            req.topic.name = topic
            resp = svc_grpc.MessagingServiceStub(ch).QueryRoute(req, metadata=(("x-mq-client-id", "ops"),), timeout=5)
        perms = {(q.broker.name, q.permission) for q in resp.message_queues}
        return bool(perms) and all(p == pb.READ for name, p in perms if name == "broker-a")

    wait_until(broker_a_read_only, timeout=10, what="broker-a's queues read-only in the gRPC route")

    before = stored_per_broker(cluster, topic)
    receipts = send(cluster, topic, [f"wiped-{i}".encode() for i in range(20)])
    after = stored_per_broker(cluster, topic)
    assert after.get("broker-a", 0) - before.get("broker-a", 0) == 0
    assert after["broker-b"] - before.get("broker-b", 0) == 20
    assert {r.message_queue.message_queue0().broker.name for r in receipts} == {"broker-b"}

    # consumers still drain the wiped broker: its queues stay readable
    assert all(p & 4 for p in route_perms(cluster, topic).values())

    out = cluster.admin("addWritePerm", "-b", "broker-a").stdout
    assert "add write perm of broker[broker-a]" in out and "OK, " in out
    assert route_perms(cluster, topic) == {"broker-a": 6, "broker-b": 6}
    wait_until(lambda: not broker_a_read_only(), timeout=10, what="broker-a writable again in the gRPC route")
    receipts = send(cluster, topic, [f"back-{i}".encode() for i in range(20)])
    final = stored_per_broker(cluster, topic)
    gained = {b: final.get(b, 0) - after.get(b, 0) for b in ("broker-a", "broker-b")}
    assert sum(gained.values()) == 20 and gained["broker-a"] > 0 and gained["broker-b"] > 0, gained
    assert {r.message_queue.message_queue0().broker.name for r in receipts} == {"broker-a", "broker-b"}

    # an unknown broker name changes nothing and says so with a count of 0
    assert admin(cluster, "wipeWritePerm", "-b", "no-such-broker").stdout.strip().endswith("OK, 0")
    assert route_perms(cluster, topic) == {"broker-a": 6, "broker-b": 6}


def progress(c: LocalCluster, group: str, topic: str) -> dict[tuple[str, int], int]:
    data = admin_json(c, "consumerProgress", "-g", group, "-t", topic)
    return {(q["brokerName"], q["queueId"]): q["consumerOffset"] for q in data["queues"]}


def lag(c: LocalCluster, group: str, topic: str) -> int:
    return int(admin_json(c, "consumerProgress", "-g", group, "-t", topic)["diffTotal"])


def test_reset_offset_by_time_redelivers_what_was_stored_since(cluster: LocalCluster) -> None:
    topic, group = "OpsReset", "OpsResetGroup"
    endpoint = cluster.brokers["broker-a"].endpoint
    first = send(cluster, topic, [f"first-{i}".encode() for i in range(10)])
    t_mid = int(time.time() * 1000) + 1
    wait_until(lambda: time.time() * 1000 > t_mid + 5, timeout=2, what="the clock to pass the reset time")
    second = send(cluster, topic, [f"second-{i}".encode() for i in range(10)])
    with simple_consumer(endpoint, group, topic) as consumer:
        got = drain(consumer, 20, timeout=40)
    assert {m.message_id for m in got} >= {r.message_id for r in first + second}
    wait_until(lambda: lag(cluster, group, topic) == 0, timeout=20, what="the group caught up")

    stamp = time.strftime("%Y-%m-%d#%H:%M:%S", time.localtime(t_mid / 1000)) + f":{t_mid % 1000:03d}"
    out = admin(cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", stamp).stdout
    assert f"timestamp(long)[{t_mid}]" in out
    reset = json.loads(admin(cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(t_mid),
                                     "--json").stdout)
    assert sum(q["offset"] for q in reset) == 10  # each queue just past its first-batch messages
    assert lag(cluster, group, topic) == 10

    # -f false only rolls back: "now" is ahead of every offset, so nothing moves
    admin(cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "now", "-f", "false")
    assert lag(cluster, group, topic) == 10

    # the group receives exactly the second batch again
    with simple_consumer(endpoint, group, topic) as consumer:
        again = drain(consumer, 10, timeout=40)
        extra = drain(consumer, 1, timeout=2)
    assert sorted(m.body for m in again) == sorted(f"second-{i}".encode() for i in range(10))
    assert extra == []
    wait_until(lambda: lag(cluster, group, topic) == 0, timeout=20, what="the group caught up again")

    # cloneGroupOffset: a new group starts where the old one is
    admin(cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(t_mid))
    admin(cluster, "cloneGroupOffset", "-s", group, "-d", "OpsCloneGroup", "-t", topic)
    assert progress(cluster, "OpsCloneGroup", topic) == progress(cluster, group, topic)

    # deleteSubGroup -r true drops the group and its offsets
    assert "success" in admin(cluster, "deleteSubGroup", "-g", "OpsCloneGroup", "-r", "true").stdout
    gone = admin(cluster, "consumerProgress", "-g", "OpsCloneGroup", check=False)
    assert gone.returncode == 1
    offsets = admin_json(cluster, "brokerConsumeStats", "-b", cluster.brokers["broker-a"].admin_addr)
    assert {q["group"] for q in offsets["queues"]} >= {group}
    assert "OpsCloneGroup" not in {q["group"] for q in offsets["queues"]}

    # refusals name what is wrong
    bad = admin(cluster, "resetOffsetByTime", "-g", "NoSuchGroup", "-t", topic, "-s", "now", check=False)
    assert bad.returncode == 1 and "NoSuchGroup does not exist" in bad.stderr
    bad = admin(cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "yesterday", check=False)
    assert bad.returncode == 2 and "-s" in bad.stderr


def test_broker_config_hot_keys_and_refusals(cluster: LocalCluster) -> None:
    addr = cluster.brokers["broker-b"].admin_addr
    conf = admin_json(cluster, "getBrokerConfig", "-b", addr)[addr]
    assert conf["config"]["brokerPermission"] == "6" and "brokerPermission" in conf["hotReloadable"]
    assert "listenPort" not in conf["hotReloadable"]

    assert "success" in admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "brokerPermission", "-v", "4").stdout
    try:
        wait_until(lambda: route_perms(cluster, "OpsMisc")["broker-b"] == 4, timeout=10,
                   what="broker-b's routes read-only after brokerPermission=4")
        assert admin_json(cluster, "getBrokerConfig", "-b", addr)[addr]["config"]["brokerPermission"] == "4"
    finally:
        admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "brokerPermission", "-v", "6")
    wait_until(lambda: route_perms(cluster, "OpsMisc")["broker-b"] == 6, timeout=10, what="broker-b writable again")

    restart = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "listenPort", "-v", "1", check=False)
    assert restart.returncode == 1 and "listenPort: needs a broker restart" in restart.stderr
    bad = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "brokerPermission", "-v", "5", check=False)
    assert bad.returncode == 1 and "brokerPermission" in bad.stderr and "must be 2, 4 or 6" in bad.stderr
    unknown = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "noSuchKey", "-v", "1", check=False)
    assert unknown.returncode == 1 and "noSuchKey: not a broker config key" in unknown.stderr
    assert admin_json(cluster, "getBrokerConfig", "-b", addr)[addr]["config"]["brokerPermission"] == "6"


def test_topic_and_connection_views(cluster: LocalCluster) -> None:
    topic = "OpsMisc"
    endpoint = cluster.brokers["broker-a"].endpoint
    with producer(endpoint, topic) as p, simple_consumer(endpoint, "OpsMiscGroup", topic) as consumer:
        receipts = [p.send(message(topic, f"misc-{i}".encode())) for i in range(8)]
        drain(consumer, 3, timeout=30)
        producers = admin_json(cluster, "producerConnection", "-g", "AnyGroup", "-t", topic)
        consumers = admin_json(cluster, "consumerConnection", "-g", "OpsMiscGroup")
    assert len(producers) == 1 and producers[0]["language"] == "PYTHON"
    assert len(consumers) == 1 and consumers[0]["type"] == "SIMPLE_CONSUMER"
    assert admin(cluster, "producerConnection", "-g", "G", "-t", "OpsReset", check=False).returncode == 1

    assert sum(stored_per_broker(cluster, topic).values()) == 8
    assert admin_json(cluster, "topicClusterList", "-t", topic) == [CLUSTER]

    found = admin_json(cluster, "queryMsgByUniqueKey", "-i", receipts[5].message_id, "-t", topic)
    assert [m["body"] for m in found] == ["misc-5"]

    stats = {(r["topic"], r["group"]): r for r in admin_json(cluster, "statsAll", "-t", topic)}
    row = stats[(topic, "OpsMiscGroup")]
    assert row["inMsg24Hour"] == 8 and row["accumulation"] + row["outMsg24Hour"] == 8

    # updateTopicPerm: read-only on every broker of the topic, then back
    out = admin(cluster, "updateTopicPerm", "-t", topic, "-p", "4").stdout
    assert out.count("update topic perm from 6 to 4") == 2
    wait_until(lambda: set(route_perms(cluster, topic).values()) == {4}, timeout=10, what="topic read-only")
    admin(cluster, "updateTopicPerm", "-t", topic, "-p", "6")
    wait_until(lambda: set(route_perms(cluster, topic).values()) == {6}, timeout=10, what="topic writable")
    assert admin(cluster, "updateTopicPerm", "-t", topic, "-p", "5", check=False).returncode == 2
