"""BrokerContainer: two containers with crossed masters and slaves serve traffic; removal at runtime."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import BIN, LocalCluster, Proc, _port_open, stop_together, wait_until
from conftest import free_port
from rmq import drain, message, producer, simple_consumer

pytestmark = pytest.mark.e2e


def broker_conf(root: Path, name: str, role: str, broker_id: int, namesrv: str) -> tuple[Path, dict[str, int]]:
    ports = {"grpc": free_port(), "listen": free_port()}
    path = root / f"{name}-{broker_id}.conf"
    path.write_text(f"brokerName={name}\nbrokerId={broker_id}\nbrokerRole={role}\nnamesrvAddr={namesrv}\n"
                    f"grpcServerPort={ports['grpc']}\nlistenPort={ports['listen']}\n"
                    f"storePathRootDir={root / f'store-{name}-{broker_id}'}\nmappedFileSizeCommitLog=1048576\n"
                    "minInvisibleTimeMillsForRecv=1000\n")
    return path, ports


@pytest.fixture()
def containers(tmp_path: Path) -> Iterator[dict[str, object]]:
    c = LocalCluster(tmp_path)
    procs: list[Proc] = []
    try:
        c.start_namesrv()
        ns = c.namesrv_addr
        a0, pa0 = broker_conf(tmp_path, "broker-a", "ASYNC_MASTER", 0, ns)
        b1, pb1 = broker_conf(tmp_path, "broker-b", "SLAVE", 1, ns)
        b0, pb0 = broker_conf(tmp_path, "broker-b", "ASYNC_MASTER", 0, ns)
        a1, pa1 = broker_conf(tmp_path, "broker-a", "SLAVE", 1, ns)
        addrs = []
        for i, (first, second) in enumerate(((a0, b1), (b0, a1))):
            port = free_port()
            conf = tmp_path / f"container{i}.conf"
            conf.write_text(f"brokerConfigPaths={first}:{second}\nnamesrvAddr={ns}\nlistenPort={port}\n")
            procs.append(Proc(f"container{i}", [str(BIN), "container", "-c", str(conf)],
                              tmp_path / f"container{i}.log").start())
            addrs.append(f"127.0.0.1:{port}")
            wait_until(lambda p=port: _port_open(p), what=f"container {i}")
        wait_until(lambda: len(c.admin_json("clusterList")) == 4, timeout=30, what="four brokers registered")
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", "TopicBox", "-r", "2", "-w", "2")
        yield {"cluster": c, "containers": addrs, "ports": {"a0": pa0, "b0": pb0, "a1": pa1, "b1": pb1}}
    except BaseException:
        print(c.logs(), *(p.log()[-4000:] for p in procs))
        raise
    finally:
        stop_together(procs)
        c.stop()


def test_crossed_containers_serve_and_survive_removing_a_broker(containers: dict[str, object]) -> None:
    c: LocalCluster = containers["cluster"]  # type: ignore[assignment]
    ports: dict[str, dict[str, int]] = containers["ports"]  # type: ignore[assignment]
    ep = f"127.0.0.1:{ports['a0']['grpc']}"
    route = c.admin_json("topicRoute", "-t", "TopicBox")
    assert sorted(q["brokerName"] for q in route["queueDatas"]) == ["broker-a", "broker-b"]
    with producer(ep, "TopicBox") as p:
        ids = {p.send(message("TopicBox", f"box-{i}".encode())).message_id for i in range(20)}
    with simple_consumer(ep, "GroupBox", "TopicBox") as cons:
        assert {m.message_id for m in drain(cons, 20)} == ids  # both groups' masters served
    slave_a = f"127.0.0.1:{ports['a1']['listen']}"
    wait_until(lambda: json.loads(c.admin("haStatus", "-b", slave_a).stdout)[slave_a]["connected"],
               what="broker-a's slave replicating in the other container")
    res = c.admin("removeBroker", "-c", containers["containers"][1], "-b", "DefaultCluster:broker-a:1")  # type: ignore[index]
    assert "success" in res.stdout
    wait_until(lambda: len(c.admin_json("clusterList")) == 3, what="the removed broker gone from the cluster")
    with producer(ep, "TopicBox") as p:
        more = {p.send(message("TopicBox", f"after-{i}".encode())).message_id for i in range(10)}
    with simple_consumer(ep, "GroupBox", "TopicBox") as cons:
        assert {m.message_id for m in drain(cons, 10)} == more
