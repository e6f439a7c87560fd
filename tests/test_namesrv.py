"""Name server: route table rules (unit) and liveness with real processes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import BIN, LocalCluster, wait_until
from rmq import drain, message, producer, simple_consumer

from rocketscope.broker.namesrv.route_info import RouteInfo
from rocketscope.broker.protocol import common_pb2, namesrv_pb2


def reg(name: str = "broker-a", bid: int = 0, topics: tuple[str, ...] = ("T",), addr: str = "10.0.0.1:10911",
        timeout_ms: int = 0) -> namesrv_pb2.BrokerRegistration:
    r = namesrv_pb2.BrokerRegistration(cluster_name="C", broker_name=name, broker_id=bid, broker_addr=addr,
                                       grpc_addr=addr.replace("10911", "8081"), heartbeat_timeout_ms=timeout_ms)
    for t in topics:
        r.topics.append(common_pb2.TopicConfig(topic_name=t, read_queue_nums=4, write_queue_nums=4, perm=6))
    return r


def test_route_lists_queues_and_addresses() -> None:
    ri = RouteInfo()
    ri.register(reg(), session=1, now_ms=0)
    ri.register(reg("broker-b", addr="10.0.0.2:10911"), session=2, now_ms=0)
    ri.register(reg(bid=1, addr="10.0.0.3:10911", topics=()), session=3, now_ms=0)
    route = ri.route("T")
    assert route is not None
    assert sorted(q.broker_name for q in route.queue_datas) == ["broker-a", "broker-b"]
    a = next(b for b in route.broker_datas if b.broker_name == "broker-a")
    assert dict(a.broker_addrs) == {0: "10.0.0.1:10911", 1: "10.0.0.3:10911"}
    assert dict(a.grpc_addrs)[0] == "10.0.0.1:8081"
    assert ri.route("Nope") is None


def test_slave_topics_do_not_define_queues_and_a_group_without_master_is_read_only() -> None:
    ri = RouteInfo()
    ri.register(reg(), session=1, now_ms=0)
    ri.register(reg(bid=1, addr="10.0.0.3:10911", topics=("SlaveOnly",)), session=2, now_ms=0)
    assert ri.route("SlaveOnly") is None
    ri.unregister("C", "broker-a", 0, reason="test")
    route = ri.route("T")
    assert route is not None and route.queue_datas[0].perm == 4  # the slave serves reads only


def test_a_deposed_master_of_an_older_epoch_does_not_take_the_route_back() -> None:
    """Controller mode: the master of epoch 3 keeps the route while the cut-off master of epoch 2 registers."""
    ri = RouteInfo(expired_ms=120_000)
    old, new = reg(addr="10.0.0.1:10911"), reg(addr="10.0.0.2:10911")
    old.epoch, new.epoch = 2, 3
    ri.register(old, session=1, now_ms=0)
    ri.register(new, session=2, now_ms=1_000)
    result = ri.register(old, session=1, now_ms=2_000)
    assert result.master_addr == "10.0.0.2:10911"
    a = next(b for b in ri.route("T").broker_datas if b.broker_name == "broker-a")
    assert dict(a.broker_addrs)[0] == "10.0.0.2:10911"
    # once the newer master has expired (gone for good), the other may register again
    ri.register(old, session=1, now_ms=200_000)
    a = next(b for b in ri.route("T").broker_datas if b.broker_name == "broker-a")
    assert dict(a.broker_addrs)[0] == "10.0.0.1:10911"


def test_expiry_and_session_close() -> None:
    ri = RouteInfo(expired_ms=120_000)
    ri.register(reg(), session=1, now_ms=0)
    ri.register(reg("broker-b", addr="10.0.0.2:10911"), session=2, now_ms=100_000)
    assert ri.scan_not_active(now_ms=119_000) == 0
    assert ri.scan_not_active(now_ms=121_000) == 1  # broker-a silent for more than 120 s
    assert [r.broker_name for r, _ in ri.cluster_info()] == ["broker-b"]
    assert ri.session_closed(2) == 1
    assert ri.cluster_info() == [] and ri.route("T") is None


def test_topic_removed_when_the_master_stops_listing_it() -> None:
    ri = RouteInfo()
    ri.register(reg(topics=("T", "U")), session=1, now_ms=0)
    ri.register(reg(topics=("T",)), session=1, now_ms=1)
    assert ri.topics() == ["T"]


@pytest.fixture()
def two_namesrv_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path)
    try:
        c.start_namesrv(count=2)
        c.start_broker("broker-a")
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", "TopicNs", "-r", "2", "-w", "2")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


@pytest.mark.e2e
def test_broker_registers_with_every_name_server_and_kill_9_removes_it_at_once(
        two_namesrv_cluster: LocalCluster) -> None:
    c = two_namesrv_cluster
    for port in c.namesrv_ports:
        out = subprocess.run([str(BIN), "admin", "clusterList", "-n", f"127.0.0.1:{port}", "--json"],
                             capture_output=True, text=True, check=True).stdout
        assert "broker-a" in out
    # one name server down: the broker keeps serving, routes come from the other
    c.namesrvs[0].kill9()
    node = c.brokers["broker-a"]
    with producer(node.endpoint, "TopicNs") as p:
        msg_id = p.send(message("TopicNs", b"still routed")).message_id
    with simple_consumer(node.endpoint, "GroupNs", "TopicNs") as cons:
        assert [m.message_id for m in drain(cons, 1)] == [msg_id]
    # kill -9 of the broker breaks its session stream: removed at once, not after 120 s
    node.proc.kill9()
    other = f"127.0.0.1:{c.namesrv_ports[1]}"
    wait_until(lambda: "broker-a" not in subprocess.run(
        [str(BIN), "admin", "clusterList", "-n", other, "--json"], capture_output=True, text=True).stdout,
        timeout=10, what="broker removed from the name server")


@pytest.mark.e2e
def test_config_errors_name_key_and_value(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("brokerName=b\nlistenPort=notaport\n")
    res = subprocess.run([str(BIN), "broker", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert "listenPort" in res.stderr and "notaport" in res.stderr
    conf.write_text("brokerRole=BOSS\n")
    res = subprocess.run([str(BIN), "broker", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and "brokerRole" in res.stderr and "BOSS" in res.stderr


def test_unknown_key_is_a_warning_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    from rocketscope.broker.broker_config import load_broker_config

    with caplog.at_level("WARNING"):
        settings = load_broker_config({"brokerNmae": "typo", "brokerName": "x", "metricsExporterType": "PROM"})
    assert settings.brokerName == "x"
    assert any("brokerNmae" in r.getMessage() for r in caplog.records)
    assert not any("metricsExporterType" in r.getMessage() for r in caplog.records)


def test_properties_file_parsing(tmp_path: Path) -> None:
    from rocketscope.config import read_properties

    f = tmp_path / "x.conf"
    f.write_text("# comment\n! also comment\na=1\nb : two\nc=long \\\n  value\nempty=\n")
    assert read_properties(f) == {"a": "1", "b": "two", "c": "long value", "empty": ""}


def test_a_change_while_a_registration_is_in_flight_is_registered_at_once() -> None:
    """A topic created after the broker's registration was taken but before it was sent must not
    wait for the next periodic registration (30 s by default): the kick it sets survives."""
    import asyncio

    from rocketscope.broker.namesrv_client import NamesrvClient
    from rocketscope.broker.protocol import namesrv_pb2

    async def scenario() -> float:
        topics: list[str] = []

        def registration() -> namesrv_pb2.BrokerRegistration:
            reg = namesrv_pb2.BrokerRegistration(broker_name="b")
            for t in topics:
                reg.topics.add(topic_name=t)
            return reg

        client = NamesrvClient(["127.0.0.1:1"], registration, period_s=30.0)
        requests = client._requests("127.0.0.1:1", asyncio.Event())
        first = await anext(requests)
        assert [t.topic_name for t in first.register.topics] == []
        topics.append("TopicCreatedMeanwhile")  # the broker's topics_on_change() kicks a registration
        client.register_now()
        began = asyncio.get_running_loop().time()
        second = await asyncio.wait_for(anext(requests), 5)
        assert [t.topic_name for t in second.register.topics] == ["TopicCreatedMeanwhile"]
        took = asyncio.get_running_loop().time() - began
        await client.stop()
        return took

    assert asyncio.run(scenario()) < 5
