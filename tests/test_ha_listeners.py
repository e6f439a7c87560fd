"""Listeners of real processes (issue 15): bind addresses, the peer secret, and a failed addBroker.

* Every listener binds the address it advertises (brokerIP1, the dLegerPeers host, the name
  server's listenHost) unless told otherwise, so a broker on 127.0.0.1 is not reachable on
  127.0.0.2, another local address (the whole 127/8 is loopback on Linux).
* With internalPeerSecret set, the members of a DLedger group elect and replicate, while an
  outsider without the secret can neither read the log from the HA port nor feed a Raft port.
* A broker that a container cannot start (its listenPort is taken) leaves nothing behind, and
  the CLI says which port is in use.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster import (
    BIN,
    STABLE_LEADER_S,
    LocalCluster,
    Proc,
    _port_open,
    cluster_with_namesrv,
    leader_held,
    wait_until,
)
from conftest import failed_call, free_port
from rmq import message, producer

from rocketscope.broker.dledger import peer_wire
from rocketscope.broker.ha import wire as ha_wire
from rocketscope.broker.protocol import (
    admin_pb2_grpc,
    common_pb2,
    dledger_pb2,
    ha_pb2,
)
from rocketscope.broker.raft import MsgType

pytestmark = pytest.mark.e2e
SECRET = "s3cret-peers"
OTHER_LOCAL = "127.0.0.2"


def connects(host: str, port: int) -> bool:
    """True if a TCP connection to host:port is accepted; False if refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        try:
            s.connect((host, port))
            return True
        except ConnectionRefusedError:
            return False


def slave_exchange(ha: str, secret: str, report: ha_pb2.SlaveReport) -> tuple[str, list[ha_pb2.TransferChunk]]:
    """Say hello to the HA port at ``ha`` as a slave, send ``report``; the refusal ('' if accepted) and the
    chunks received until one carries data or the port closes the connection."""
    host, _, port = ha.rpartition(":")
    decoder = peer_wire.FrameDecoder()
    payloads: list[bytes] = []
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(ha_wire.hello(report.broker_name, "outsider", secret) + peer_wire.frame(report.SerializeToString()))
        while True:
            data = s.recv(1 << 16)
            if not data:
                break
            payloads += decoder.feed(data)
            if len(payloads) > 1 and ha_pb2.TransferChunk.FromString(payloads[-1]).data:
                break
    assert payloads, "the HA port closed the connection without answering the hello"
    refusal = peer_wire.parse_reply(payloads[0])
    return refusal, [ha_pb2.TransferChunk.FromString(p) for p in payloads[1:]]


def status(addr: str) -> dict[str, Any]:
    with grpc.insecure_channel(addr) as ch:
        return json.loads(admin_pb2_grpc.BrokerAdminStub(ch).HaStatus(common_pb2.Empty(), timeout=10).json)


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("listeners"), lambda: failed_call(request)) as c:
        yield c


def test_listeners_bind_the_advertised_address_only(cluster: LocalCluster) -> None:
    # ground truth: 127.0.0.2 reaches a socket bound to every interface on this host
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as wildcard:
        wildcard.bind(("0.0.0.0", 0))
        wildcard.listen()
        assert connects(OTHER_LOCAL, wildcard.getsockname()[1]), "127.0.0.2 is not a local address here"
    c = cluster
    peer_port = free_port()
    b = c.start_broker("broker-l", enableDLegerCommitLog="true", dLegerGroup="broker-l",
                       dLegerPeers=f"n0-127.0.0.1:{peer_port}", dLegerSelfId="n0")
    ha_port = b.listen_port + 1
    wait_until(lambda: status(b.admin_addr)["role"] == "LEADER", timeout=30, what="the one-member group leads")
    ports = {"grpcServerPort": b.grpc_port, "listenPort": b.listen_port, "HA": ha_port, "Raft": peer_port,
             "name server": c.namesrv_ports[0]}
    for what, port in ports.items():
        assert connects("127.0.0.1", port), f"{what} not reachable on its advertised address"
        assert not connects(OTHER_LOCAL, port), f"{what} port {port} is reachable on {OTHER_LOCAL}"
    # bindAddress=0.0.0.0 opens the client and admin ports to every interface, as documented
    b.proc.stop()
    b.conf.write_text(b.conf.read_text() + "bindAddress=0.0.0.0\n")
    b.proc.start()
    wait_until(lambda: _port_open(b.grpc_port) and _port_open(b.listen_port), what="restarted broker")
    assert connects(OTHER_LOCAL, b.grpc_port) and connects(OTHER_LOCAL, b.listen_port)
    assert not connects(OTHER_LOCAL, ha_port), "bindAddress must not widen the HA port (haBindAddress does)"


def test_peer_secret_keeps_outsiders_off_the_ha_and_raft_ports(cluster: LocalCluster) -> None:
    c = cluster
    peer_ports = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(peer_ports))
    nodes = [c.start_broker(f"broker-s-n{i}", brokerName="broker-s", enableDLegerCommitLog="true",
                            dLegerGroup="broker-s", dLegerPeers=peers, dLegerSelfId=f"n{i}",
                            internalPeerSecret=SECRET) for i in range(3)]

    def leader() -> tuple[int] | None:
        for i, n in enumerate(nodes):
            if status(n.admin_addr)["role"] == "LEADER":
                return (i,)
        return None

    wait_until(lambda: leader_held(nodes, STABLE_LEADER_S), timeout=60, interval=0.2,
               what="the members (who know the secret) elect a leader that holds")
    (ld,) = wait_until(leader, timeout=10, what="the leader's admin status says LEADER")
    c.admin("updateTopic", "-b", nodes[ld].admin_addr, "-t", "TopicSecret", "-r", "2", "-w", "2")
    with producer(";".join(n.endpoint for n in nodes), "TopicSecret") as p:
        ids = [p.send(message("TopicSecret", b"peer-%d" % i)).message_id for i in range(20)]
    assert len(set(ids)) == 20
    wait_until(lambda: len({status(n.admin_addr)["commitIndex"] for n in nodes}) == 1, timeout=30,
               what="every member replicated the sends")

    # an outsider reading the log through the leader's HA port, as a "slave"
    ha = f"127.0.0.1:{nodes[ld].listen_port + 1}"

    def read_as_slave(secret: str) -> tuple[str, list[ha_pb2.TransferChunk]]:
        """The HA port's answer to a "slave" hello with ``secret``, and the chunks it then sent."""
        report = ha_pb2.SlaveReport(cluster_name="DefaultCluster", broker_name="broker-s", broker_id=7,
                                    address="127.0.0.1:1", max_offset=0)
        return slave_exchange(ha, secret, report)

    for secret, why in (("", "no peer secret"), ("guess", "a wrong peer secret")):
        refusal, chunks = read_as_slave(secret)
        assert why in refusal, refusal
        assert not chunks, "a slave without the secret was sent commit-log bytes"
    # ... while the same request with the secret is served (the check, not the request, refused it)
    refusal, chunks = read_as_slave(SECRET)
    assert refusal == "" and any(c.data for c in chunks), "a peer with the secret is not served"

    # an outsider feeding a follower's Raft port: a heartbeat of a far higher term (Raft follows any such leader)
    follower = next(i for i in range(3) if i != ld)
    term_before = status(nodes[follower].admin_addr)["term"]
    batch = dledger_pb2.RaftBatch(group="broker-s", sender="n9")
    batch.messages.add(type=int(MsgType.HEARTBEAT), frm="n9", to=f"n{follower}", term=term_before + 100)
    with socket.create_connection(("127.0.0.1", peer_ports[follower]), timeout=5) as s:
        s.sendall(peer_wire.hello("broker-s", "n9", "") + peer_wire.frame(batch.SerializeToString()))
        answer = b""
        while chunk := s.recv(4096):  # the port answers the hello and closes the connection
            answer += chunk
    (reply,) = peer_wire.FrameDecoder().feed(answer)
    assert "no peer secret" in peer_wire.parse_reply(reply)
    time.sleep(1.0)  # a heartbeat that got through would have raised the term at once
    assert status(nodes[follower].admin_addr)["term"] < term_before + 100, "an outsider changed the term"
    assert "refused" in nodes[follower].proc.log() and "no peer secret" in nodes[follower].proc.log()


def test_failed_add_broker_cleans_up_and_names_the_port(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path)
    proc: Proc | None = None
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        c.start_namesrv()
        container_port = free_port()
        conf = tmp_path / "container.conf"
        conf.write_text(f"namesrvAddr={c.namesrv_addr}\nlistenPort={container_port}\n")
        proc = Proc("container", [str(BIN), "container", "-c", str(conf)], tmp_path / "container.log").start()
        wait_until(lambda: _port_open(container_port), what="container")
        grpc_port = free_port()
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        broker_conf = tmp_path / "broker-x.conf"
        broker_conf.write_text(f"brokerName=broker-x\nnamesrvAddr={c.namesrv_addr}\ngrpcServerPort={grpc_port}\n"
                               f"listenPort={taken}\nhaListenPort={free_port()}\n"
                               f"storePathRootDir={tmp_path / 'store-x'}\n"
                               "mappedFileSizeCommitLog=1048576\n")
        res = c.admin("addBroker", "-c", f"127.0.0.1:{container_port}", "-b", str(broker_conf), check=False,
                      namesrv=False)
        assert res.returncode != 0
        assert f"cannot listen on 127.0.0.1:{taken}" in res.stderr and "in use" in res.stderr, res.stderr
        assert "FAILED_PRECONDITION" in res.stderr and "UNKNOWN" not in res.stderr, res.stderr
        # nothing of the broker is left: no listed broker, its client port is free again
        with grpc.insecure_channel(f"127.0.0.1:{container_port}") as ch:
            st = admin_pb2_grpc.ContainerAdminStub(ch).ContainerStatus(common_pb2.Empty(), timeout=10)
        assert list(st.brokers) == []
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", grpc_port))
            except OSError as exc:
                assert exc.errno != errno.EADDRINUSE, "the failed broker still holds grpcServerPort"
                raise
        # once the port is free the same config starts (no stale store lock, no stale registration)
        blocker.close()
        res = c.admin("addBroker", "-c", f"127.0.0.1:{container_port}", "-b", str(broker_conf), namesrv=False)
        assert "success" in res.stdout
        wait_until(lambda: any(b["brokerName"] == "broker-x" for b in c.admin_json("clusterList")),
                   what="broker-x registered")
        with grpc.insecure_channel(f"127.0.0.1:{container_port}") as ch:
            st = admin_pb2_grpc.ContainerAdminStub(ch).ContainerStatus(common_pb2.Empty(), timeout=10)
        assert [b.broker_name for b in st.brokers] == ["broker-x"]
    except BaseException:
        print(c.logs(), proc.log()[-6000:] if proc else "")
        raise
    finally:
        blocker.close()
        if proc is not None:
            proc.stop()
        c.stop()
