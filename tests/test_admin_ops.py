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
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from cluster import LocalCluster, wait_until
from peers_support import require_peers
from rmq import drain, message, producer, simple_consumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from rocketmq.v5.exception.client_exception import InternalErrorException

from rocketscope.admin_cli import admin as admin_group

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "peers"))  # reference_cluster (not a package)

pytestmark = pytest.mark.e2e

CLUSTER = "DefaultCluster"


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def admin(c: LocalCluster | str, *args: str, check: bool = True) -> Result:
    """``rocketscope admin ARGS -n <name server>`` in this process; its exit code, stdout and stderr.
    ``c`` is a cluster or a name-server address (Apache's: the CLI reads it over remoting)."""
    r = CliRunner().invoke(admin_group, [*args, "-n", c if isinstance(c, str) else c.namesrv_addr])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    res = Result(r.exit_code, r.stdout, r.stderr)
    if check and res.returncode:
        raise AssertionError(f"admin {' '.join(args)} failed ({res.returncode}): {res.stderr}{res.stdout}")
    return res


def admin_json(c: LocalCluster | str, *args: str) -> Any:
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


def route_perms(c: LocalCluster | str, topic: str) -> dict[str, int]:
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
    bad = admin(cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "now", "-q", "9", "-o", "0",
                check=False)
    assert bad.returncode == 1 and "queue 9 is outside 0..3 of topic OpsReset" in bad.stderr
    # -q/-o sets one queue: the lag grows by what that queue holds
    one = admin_json(cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "now", "-q", "0", "-o", "0",
                     "-b", cluster.brokers["broker-a"].admin_addr)
    assert [(q["brokerName"], q["queueId"], q["offset"]) for q in one] == [("broker-a", 0, 0)]


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
        taken = len(drain(consumer, 3, timeout=30))  # received and acked (a whole batch of one broker)
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
    # the broker counters (sent, handed out) and what is left unacked, on both brokers
    assert (row["inMsg24Hour"], row["outMsg24Hour"], row["accumulation"]) == (8, taken, 8 - taken), row

    # updateTopicPerm: read-only on every broker of the topic, then back
    out = admin(cluster, "updateTopicPerm", "-t", topic, "-p", "4").stdout
    assert out.count("update topic perm from 6 to 4") == 2
    wait_until(lambda: set(route_perms(cluster, topic).values()) == {4}, timeout=10, what="topic read-only")
    admin(cluster, "updateTopicPerm", "-t", topic, "-p", "6")
    wait_until(lambda: set(route_perms(cluster, topic).values()) == {6}, timeout=10, what="topic writable")
    assert admin(cluster, "updateTopicPerm", "-t", topic, "-p", "5", check=False).returncode == 2



def test_consumer_connection_lists_remoting_consumers(cluster: LocalCluster, tmp_path: Path) -> None:
    """A Go (remoting) push consumer, alive while it waits for messages, is listed by consumerConnection."""
    from go_clients import rmqgo

    group = "OpsGoGroup"
    log = (tmp_path / "rmqgo.log").open("w")
    go = subprocess.Popen([rmqgo(), "consume", "-ns", cluster.namesrv_addr, "-topic", "OpsMisc", "-group", group,
                           "-n", "1000", "-timeout", "60"], stdout=log, stderr=subprocess.STDOUT,
                          start_new_session=True)
    try:
        conns = wait_until(lambda: admin_json(cluster, "consumerConnection", "-g", group), timeout=40,
                           interval=0.5, what="the Go consumer listed")
    finally:
        go.kill()
        go.wait(10)
        log.close()
    assert {c["language"] for c in conns} == {"GO"} and {c["type"] for c in conns} == {"PUSH_CONSUMER"}
    assert len({c["clientId"] for c in conns}) == 1

# ---------------------------------------------------------------- Apache's mqadmin (needs `make peers`)


def mqadmin(namesrv: str, home: Path, *args: str) -> str:
    """Apache's mqadmin 5.3.3, unchanged; its whole output (it exits 0 even when a command fails, printing
    the exception). A run that hit the Java client's 3 s timeout while its JVM warmed up is run again
    (three runs at most), as tests/test_remoting_java.py does."""
    import reference_cluster as ref

    return ref.run_mqadmin(ref.LIB, namesrv, home, *args)[1]


def ok(out: str) -> str:
    assert "Exception" not in out, out[-3000:]
    return out


def diff_total(out: str) -> int:
    return int(ok(out).rsplit("Diff Total:", 1)[1].split()[0])


@pytest.mark.slow
@pytest.mark.long
def test_apache_mqadmin_against_rocketscope(cluster: LocalCluster, tmp_path: Path) -> None:
    """Apache's mqadmin runs the maintenance commands against RocketScope over remoting
    (broker/remoting/admin_ops_handlers.py, broker/remoting/namesrv_handlers.py)."""
    require_peers()
    ns, home = cluster.namesrv_addr, tmp_path
    a = cluster.brokers["broker-a"]
    topic, group = "OpsJava", "OpsJavaGroup"
    admin(cluster, "updateTopic", "-b", a.admin_addr, "-t", topic, "-r", "4", "-w", "4")
    # brokerConsumeStats sums every group of the broker: the other tests' groups are idle, so count from here
    base = diff_total(mqadmin(ns, home, "brokerConsumeStats", "-b", a.admin_addr))
    t0 = int(time.time() * 1000)
    wait_until(lambda: time.time() * 1000 > t0 + 5, timeout=2, what="the clock to pass t0")
    with producer(a.endpoint, topic) as p:
        for i in range(10):
            p.send(message(topic, f"java-{i}".encode()))
    with simple_consumer(a.endpoint, group, topic) as consumer:
        assert len({m.message_id for m in drain(consumer, 10, timeout=40)}) == 10
    wait_until(lambda: lag(cluster, group, topic) == 0, timeout=20, what="the group caught up")

    status = ok(mqadmin(ns, home, "topicStatus", "-t", topic))
    rows = [line.split() for line in status.splitlines() if line.startswith("broker-a")]
    assert len(rows) == 4 and sum(int(r[3]) for r in rows) == 10
    assert diff_total(mqadmin(ns, home, "brokerConsumeStats", "-b", a.admin_addr)) == base

    out = ok(mqadmin(ns, home, "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(t0)))
    assert "#brokerName" in out and lag(cluster, group, topic) == 10
    assert diff_total(mqadmin(ns, home, "brokerConsumeStats", "-b", a.admin_addr)) == base + 10

    assert "OK, " in ok(mqadmin(ns, home, "wipeWritePerm", "-b", "broker-a"))
    assert route_perms(cluster, topic) == {"broker-a": 4}
    assert "OK, " in ok(mqadmin(ns, home, "addWritePerm", "-b", "broker-a"))
    assert route_perms(cluster, topic) == {"broker-a": 6}

    conf = ok(mqadmin(ns, home, "getBrokerConfig", "-b", a.admin_addr))
    assert re.search(r"^brokerPermission\s+=\s+6$", conf, re.M), conf[-2000:]
    ok(mqadmin(ns, home, "updateBrokerConfig", "-b", a.admin_addr, "-k", "autoCreateTopicEnable", "-v", "false"))
    assert admin_json(cluster, "getBrokerConfig", "-b", a.admin_addr)[a.admin_addr]["config"][
        "autoCreateTopicEnable"] == "false"
    ok(mqadmin(ns, home, "updateBrokerConfig", "-b", a.admin_addr, "-k", "autoCreateTopicEnable", "-v", "true"))
    refused = mqadmin(ns, home, "updateBrokerConfig", "-b", a.admin_addr, "-k", "listenPort", "-v", "1")
    assert "CODE: 16" in refused and "listenPort: needs a broker restart" in refused

    # -b: with -c mqadmin would also create the topic on broker-b (from the route), as it does on Apache
    assert "update topic perm from 6 to 4" in ok(mqadmin(ns, home, "updateTopicPerm", "-b", a.admin_addr, "-t",
                                                         topic, "-p", "4"))
    wait_until(lambda: route_perms(cluster, topic) == {"broker-a": 4}, timeout=10, what="the topic read-only")
    ok(mqadmin(ns, home, "updateTopicPerm", "-b", a.admin_addr, "-t", topic, "-p", "6"))

    out = ok(mqadmin(ns, home, "deleteSubGroup", "-g", group, "-c", CLUSTER, "-r", "true"))
    assert out.count("success") == 2
    assert admin(cluster, "consumerProgress", "-g", group, check=False).returncode == 1


def reset_scenario(namesrv: str, home: Path, endpoint: str, broker_addr: str, topic: str, group: str
                   ) -> dict[str, Any]:
    """Ten messages sent and consumed, then mqadmin's resetOffsetByTime to before the sends,
    wipeWritePerm / addWritePerm and updateBrokerConfig of a key that needs a restart: what a user sees."""
    seen: dict[str, Any] = {}
    # brokerConsumeStats sums every group of the broker; the others are idle during the scenario
    base = diff_total(mqadmin(namesrv, home, "brokerConsumeStats", "-b", broker_addr))
    t0 = int(time.time() * 1000)
    wait_until(lambda: time.time() * 1000 > t0 + 5, timeout=2, what="the clock to pass t0")
    with producer(endpoint, topic) as p:
        for i in range(10):
            p.send(message(topic, f"cmp-{i}".encode()))
    with simple_consumer(endpoint, group, topic, await_s=5) as consumer:  # Apache's proxy polls >= 5 s
        ids: set[str] = set()
        deadline = time.monotonic() + 60
        while len(ids) < 10 and time.monotonic() < deadline:
            try:
                ids |= {m.message_id for m in drain(consumer, 10 - len(ids), timeout=deadline - time.monotonic())}
            except InternalErrorException as exc:  # Apache's proxy before it has the client's Settings
                if '"settings" is null' not in str(exc):  # (docs/COMPATIBILITY.md row 41): receive again
                    raise
        seen["consumed"] = len(ids)
    wait_until(lambda: diff_total(mqadmin(namesrv, home, "brokerConsumeStats", "-b", broker_addr)) == base,
               timeout=60, interval=1, what="the group's offsets committed")
    out = ok(mqadmin(namesrv, home, "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(t0)))
    seen["reset_rows"] = sorted(line.split()[1:] for line in out.splitlines() if line.startswith("broker-"))
    seen["diff_after_reset"] = diff_total(mqadmin(namesrv, home, "brokerConsumeStats", "-b", broker_addr)) - base
    seen["wipe"] = ok(mqadmin(namesrv, home, "wipeWritePerm", "-b", "broker-a")).strip().rsplit(",", 1)[0]
    seen["perm_wiped"] = route_perms(namesrv, topic)
    ok(mqadmin(namesrv, home, "addWritePerm", "-b", "broker-a"))
    seen["perm_added"] = route_perms(namesrv, topic)
    out = mqadmin(namesrv, home, "updateBrokerConfig", "-b", broker_addr, "-k", "listenPort",
                  "-v", broker_addr.rsplit(":", 1)[1])  # its own value: harmless where it is accepted
    seen["update_listen_port"] = "success" if "update broker config success" in out else "refused"
    return seen


@pytest.mark.slow
@pytest.mark.long
def test_mqadmin_maintenance_compared_with_apache(cluster: LocalCluster, apache_rocketmq: Any,
                                                    tmp_path: Path) -> None:
    """The same scenario on Apache RocketMQ 5.3.3 and on RocketScope (docs/COMPATIBILITY.md, admin rows)."""
    require_peers()
    ref = apache_rocketmq
    topic = f"OpsCmp{int(time.time())}"
    ref.create_topic(topic)
    apache = reset_scenario(ref.namesrv_addr, tmp_path / "apache", ref.endpoint, ref.broker_addr, topic,
                            f"{topic}Group")
    a = cluster.brokers["broker-a"]
    admin(cluster, "updateTopic", "-b", a.admin_addr, "-t", topic, "-r", "4", "-w", "4")
    ours = reset_scenario(cluster.namesrv_addr, tmp_path / "ours", a.endpoint, a.admin_addr, topic, f"{topic}Group")
    same = ("consumed", "reset_rows", "diff_after_reset", "perm_wiped", "perm_added")
    assert {k: ours[k] for k in same} == {k: apache[k] for k in same}
    assert apache["consumed"] == 10 and apache["diff_after_reset"] == 10
    assert apache["perm_wiped"] == {"broker-a": 4} and apache["perm_added"] == {"broker-a": 6}
    assert apache["wipe"].startswith("wipe write perm of broker[broker-a] in name server[")
    assert ours["wipe"].startswith("wipe write perm of broker[broker-a] in name server[")
    # the deliberate difference (docs/COMPATIBILITY.md): Apache stores any key, RocketScope refuses a key
    # that only a restart would apply
    assert (apache["update_listen_port"], ours["update_listen_port"]) == ("success", "refused")


# ---------------------------------------------------------------- the name server's rule, without processes
def test_wipe_lasts_while_the_broker_registers_and_ends_when_it_is_gone() -> None:
    from rocketscope.broker.namesrv.route_info import RouteInfo
    from rocketscope.broker.protocol import common_pb2, namesrv_pb2

    def reg(name: str, addr: str) -> namesrv_pb2.BrokerRegistration:
        r = namesrv_pb2.BrokerRegistration(cluster_name=CLUSTER, broker_name=name, broker_id=0, broker_addr=addr)
        r.topics.add(topic_name="T", read_queue_nums=4, write_queue_nums=4, perm=6)
        return r

    routes = RouteInfo()
    routes.register(reg("a", "h:1"), session=1, now_ms=0)
    routes.register(reg("b", "h:2"), session=2, now_ms=0)

    def perms() -> dict[str, int]:
        route = routes.route("T")
        assert route is not None
        return {q.broker_name: q.perm for q in route.queue_datas}

    assert routes.wipe_write_perm("a") == 1 and perms() == {"a": 4, "b": 6}
    changed = reg("a", "h:1")
    changed.topics.add(topic_name="U", read_queue_nums=1, write_queue_nums=1, perm=6)
    changed.data_version.CopyFrom(common_pb2.DataVersion(timestamp=1, counter=2))
    routes.register(changed, session=1, now_ms=1000)  # a topic change keeps the wipe (docs/COMPATIBILITY.md A3)
    assert perms() == {"a": 4, "b": 6}
    assert routes.add_write_perm("a") == 2 and perms() == {"a": 6, "b": 6}
    routes.wipe_write_perm("a")
    routes.session_closed(1)  # broker a gone: it comes back writable
    routes.register(reg("a", "h:1"), session=3, now_ms=2000)
    assert perms() == {"a": 6, "b": 6}
    assert routes.wipe_write_perm("nobody") == 0 and "nobody" not in routes.write_wiped
