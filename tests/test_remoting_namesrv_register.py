"""Apache brokers on RocketScope's name server: REGISTER_BROKER (103), UNREGISTER_BROKER (104),
QUERY_DATA_VERSION (322), BROKER_HEARTBEAT (904) over remoting (issue 19, session 11).

The long test runs Apache RocketMQ 5.3.3's own broker (peers/, `make peers`) with RocketScope's
name server as its ``namesrvAddr``: Apache's Java producer and push consumer
(peers/java/src/RemotingFailoverTool.java) resolve the topic's route through RocketScope's name
server and send and consume through Apache's broker; the broker's shutdown removes its route.
The raw-frame tests (seconds) pin the handlers' answers with the header and body names of
rocketmq-remoting 5.3.3 (RegisterBrokerRequestHeader, RegisterBrokerBody, DataVersion, read with javap).
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from test_remoting_failover import SOURCE, ToolRun
from test_remoting_java_secure import java_classes

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "peers"))
import reference_cluster as ref  # peers/ is not a package
import remoting as peer_remoting  # peers/remoting.py

pytestmark = pytest.mark.e2e
REGISTER, UNREGISTER, QUERY_DATA_VERSION, HEARTBEAT = 103, 104, 322, 904


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("namesrv-register"), lambda: failed_call(request)) as c:
        yield c


def body(topics: dict[str, int], counter: int = 1, timestamp: int = 1_700_000_000_000) -> bytes:
    """A RegisterBrokerBody as Apache's broker writes it (fastjson; bare numeric keys never occur here)."""
    table = {t: {"topicName": t, "readQueueNums": q, "writeQueueNums": q, "perm": 6, "topicFilterType": "SINGLE_TAG",
                 "topicSysFlag": 0, "order": False, "attributes": {}} for t, q in topics.items()}
    return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": counter, "stateVersion": 0, "timestamp": timestamp},
        "topicConfigTable": table}}).encode()


def header(addr: str, data: bytes, broker_id: int = 0, **extra: Any) -> dict[str, str]:
    fields = {"brokerName": "apache-b", "brokerAddr": addr, "clusterName": "ApacheC", "haServerAddr": addr,
              "brokerId": str(broker_id), "heartbeatTimeoutMillis": "120000", "enableActingMaster": "false",
              "compressed": "false", "bodyCrc32": str(zlib.crc32(data) & 0x7FFFFFFF)}
    fields.update({k: str(v) for k, v in extra.items()})
    return fields


def route(c: LocalCluster, topic: str) -> dict[str, Any] | None:
    with RemotingClient(c.namesrv_addr) as ns:
        got = ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return json.loads(got.body) if got.code == ResponseCode.SUCCESS else None


def test_register_query_and_remove_on_close(cluster: LocalCluster) -> None:
    data = body({"RegT": 4})
    master, slave = "127.0.0.1:40001", "127.0.0.1:40002"
    with RemotingClient(cluster.namesrv_addr) as b:
        ok = b.invoke(REGISTER, header(master, data), data)
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert "masterAddr" not in ok.fields  # Apache answers the master's addresses to slaves only
        got = b.invoke(REGISTER, header(slave, data, broker_id=1, haServerAddr="127.0.0.1:40012"), data)
        assert got.code == ResponseCode.SUCCESS and got.fields["masterAddr"] == master, got
        r = route(cluster, "RegT")
        assert r is not None
        assert r["brokerDatas"] == [{"brokerAddrs": {"0": master, "1": slave}, "brokerName": "apache-b",
                                     "cluster": "ApacheC", "enableActingMaster": False}]
        assert [(q["readQueueNums"], q["perm"]) for q in r["queueDatas"]] == [(4, 6)]
        # a registration carrying one new topic (Apache's registerIncrementBrokerData) adds it and keeps the
        # others: Apache's name server deletes no topic on registration (deleteTopicWithBrokerRegistration=false)
        more = body({"RegT2": 2}, counter=2)
        assert b.invoke(REGISTER, header(master, more), more).code == ResponseCode.SUCCESS
        assert route(cluster, "RegT") is not None and route(cluster, "RegT2") is not None
        same = body({"RegT": 4})  # the first registration again (version 1): its data version is held below
        assert b.invoke(REGISTER, header(master, same), same).code == ResponseCode.SUCCESS
        # QUERY_DATA_VERSION: the version registered is current, another one is not
        ask = {"brokerName": "apache-b", "brokerAddr": master, "clusterName": "ApacheC", "brokerId": "0"}
        same = b.invoke(QUERY_DATA_VERSION, ask, json.dumps({"counter": 1, "stateVersion": 0,
                                                             "timestamp": 1_700_000_000_000}).encode())
        assert (same.code, same.fields["changed"]) == (ResponseCode.SUCCESS, "false")
        assert json.loads(same.body)["counter"] == 1
        newer = b.invoke(QUERY_DATA_VERSION, ask, json.dumps({"counter": 2, "stateVersion": 0,
                                                              "timestamp": 1_700_000_000_000}).encode())
        assert newer.fields["changed"] == "true"
        beat = b.invoke(HEARTBEAT, {**ask, "epoch": "0", "maxOffset": "0", "confirmOffset": "0"})
        assert beat.code == ResponseCode.SUCCESS
        # the slave shuts down: UNREGISTER_BROKER
        gone = b.invoke(UNREGISTER, {"brokerName": "apache-b", "brokerAddr": slave, "clusterName": "ApacheC",
                                     "brokerId": "1"})
        assert gone.code == ResponseCode.SUCCESS
        r = route(cluster, "RegT")
        assert r is not None and r["brokerDatas"][0]["brokerAddrs"] == {"0": master}
    # the connection the master registered on closed: removed at once (Apache: onChannelDestroy)
    wait_until(lambda: route(cluster, "RegT") is None, timeout=10, what="the route gone with the connection")


def test_bad_registrations_are_named_and_register_nothing(cluster: LocalCluster) -> None:
    data = body({"BadRegT": 2})
    addr = "127.0.0.1:40101"
    with RemotingClient(cluster.namesrv_addr) as b:
        crc = b.invoke(REGISTER, header(addr, data, bodyCrc32=12345), data)
        assert crc.code == ResponseCode.SYSTEM_ERROR and (crc.remark or "").startswith("crc32 not match"), crc
        fields = header(addr, data)
        del fields["brokerAddr"]
        missing = b.invoke(REGISTER, fields, data)
        assert missing.code == ResponseCode.SYSTEM_ERROR and "brokerAddr" in (missing.remark or ""), missing
        squeezed = b.invoke(REGISTER, header(addr, data, compressed="true"), data)
        assert squeezed.code == ResponseCode.SYSTEM_ERROR and "compressed" in (squeezed.remark or ""), squeezed
        junk = b"{not json"
        bad = b.invoke(REGISTER, header(addr, junk), junk)
        assert bad.code == ResponseCode.SYSTEM_ERROR and "RegisterBrokerBody" in (bad.remark or ""), bad
        table = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": {"X": {"readQueueNums": "many"}}}})
        typed = b.invoke(REGISTER, header(addr, table.encode()), table.encode())
        assert typed.code == ResponseCode.SYSTEM_ERROR and "topicConfigTable['X']" in (typed.remark or ""), typed
        assert route(cluster, "BadRegT") is None and route(cluster, "X") is None


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(600)
def test_apache_broker_on_rocketscope_namesrv_serves_java_clients(cluster: LocalCluster) -> None:
    """Run: .venv/bin/pytest -q tests/test_remoting_namesrv_register.py -k apache (long: an Apache broker JVM,
    about 60 s; needs `make peers`)."""
    java_classes(SOURCE)  # compile, or skip without the peers
    topic, count = "ApacheOnRsT", 20
    ap = ref.ReferenceCluster(cluster.root / "apache", namesrv_port=cluster.namesrv_ports[0],
                              broker_port=ref._broker_port(), prom_port=ref._free_port(),
                              broker_conf={"metricsExporterType": "DISABLE"})
    ap.root.mkdir(parents=True)
    try:
        ap._write_confs()
        ap._launch("broker", ["-c", str(ap.root / "broker.conf")], heap="256m", detach=False,
                   extra=["-XX:MaxDirectMemorySize=256m"])
        wait_until(lambda: (r := route(cluster, "TBW102")) is not None
                   and r["brokerDatas"][0]["brokerAddrs"] == {"0": ap.broker_addr}, timeout=240,
                   what="Apache's broker in RocketScope's route of TBW102")
        peer_remoting.create_topic(ap.broker_addr, topic, queues=2)  # the broker registers its new topic at once
        wait_until(lambda: route(cluster, topic), timeout=60, what=f"{topic} routed by RocketScope's name server")
        run = ToolRun(cluster, cluster.namesrv_addr, topic, "ApacheOnRsP", "ApacheOnRsC", str(count), "0", "60")
        try:
            wait_until(lambda: run.of("summary"), timeout=240, what="the Java tool's summary")
        finally:
            run.close()
        (_, summary), = run.of("summary")
        failures = [e["error"][:300] for _, e in run.of("failed")]
        assert (summary["acked"], summary["failed"], summary["consumed"], summary["missing"]) == (count, 0, count, 0), \
            (summary, failures[:3], route(cluster, topic))
        assert {e["broker"] for _, e in run.of("sent")} == {"broker-a"}
        # the messages are on Apache's broker: its own max offsets add up to what was sent
        stored = sum(int(peer_remoting.call(ap.broker_addr, RequestCode.GET_MAX_OFFSET,
                                            {"topic": topic, "queueId": q}).ext["offset"]) for q in range(2))
        assert stored == count
    finally:
        ap.stop()
    # Apache's broker unregisters at shutdown (UNREGISTER_BROKER): its routes are gone
    wait_until(lambda: route(cluster, topic) is None, timeout=30, what="the route gone after the broker stopped")
