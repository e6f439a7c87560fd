"""DLedger's Raft port in a live group (broker/dledger/peer_port.py): a wrong secret keeps a member out, and
garbage thrown at the members' ports changes nothing.

Three brokers form one group; n0 and n1 share the cluster's ``internalPeerSecret``, n2 was given another.
Ground truth: the messages we sent are committed on n0 and n1 (their commit logs hold them) and n2's log
stays empty, because neither side accepts the other's hello.  Before the sends, each good member's Raft
port gets random bytes, damaged and truncated frames, a wrong magic, an oversize length and a hello without
the secret; the processes stay up and the group replicates every send afterwards.  A second group
replicates over mutual TLS, and each member's log shows both other members' links accepted over TLS.
The in-process cases (every kind of bad input named, TLS) are tests/test_dledger_peer_port.py.
"""

from __future__ import annotations

import random
import re
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import STABLE_LEADER_S, LocalCluster, cluster_with_namesrv, ha_status, leader_held, wait_until
from conftest import failed_call, free_port
from rmq import message, producer

from rocketscope.broker.dledger import peer_wire as wire
from rocketscope.broker.security.certs import generate_dev_certs

pytestmark = pytest.mark.e2e
SECRET = "members-only"


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("raftport"), lambda: failed_call(request)) as c:
        yield c


def garbage(rng: random.Random) -> list[bytes]:
    """Bad streams of every kind: the port must close each one, and none may reach the node."""
    good = wire.hello("broker-r", "n9", SECRET)
    out = [b"GET / HTTP/1.1\r\n\r\n", wire.MAGIC + b"\x09", wire.MAGIC + bytes([wire.VERSION]) +
           struct.pack(">I", wire.MAX_FRAME + 1), wire.hello("broker-r", "n9", "") + wire.frame(b"\x08\x01"),
           wire.hello("other-group", "n9", SECRET)]
    for _ in range(30):
        kind = rng.randrange(3)
        if kind == 0:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))))
        elif kind == 1:
            out.append(good[:rng.randrange(len(good))])
        else:
            data = bytearray(good)
            data[rng.randrange(len(data))] ^= 0xFF
            out.append(bytes(data))
    return out


def throw(port: int, data: bytes) -> None:
    """Send ``data``, half-close, and read until the port closes (a socket timeout = the port hung)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass


def test_wrong_secret_member_gets_nothing_and_garbage_does_not_stop_replication(cluster: LocalCluster) -> None:
    c = cluster
    ports = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = [c.start_broker(f"broker-r-n{i}", brokerName="broker-r", enableDLegerCommitLog="true",
                            dLegerGroup="broker-r", dLegerPeers=peers, dLegerSelfId=f"n{i}",
                            internalPeerSecret=SECRET if i < 2 else "not-the-secret") for i in range(3)]
    members, outsider = nodes[:2], nodes[2]
    wait_until(lambda: leader_held(members, STABLE_LEADER_S), timeout=60, interval=0.2,
               what="n0 and n1 (who share the secret) elect a leader that holds")

    rng = random.Random(17)
    for port in ports[:2]:
        for data in garbage(rng):
            throw(port, data)
    assert all(n.proc.alive for n in nodes)
    log0 = members[0].proc.log() + members[1].proc.log()
    for why in ("not the Raft peer protocol", "longer than the maximum", "refused with no peer secret",
                "group 'other-group' is not 'broker-r'"):
        assert why in log0, f"no log line naming {why!r}"

    leader = wait_until(lambda: next((n for n in members if ha_status(n.admin_addr)["role"] == "LEADER"), None),
                        timeout=10, what="a member's admin status says LEADER")
    c.admin("updateTopic", "-b", leader.admin_addr, "-t", "TopicRaftPort", "-r", "2", "-w", "2")
    with producer(";".join(n.endpoint for n in members), "TopicRaftPort") as p:
        ids = {p.send(message("TopicRaftPort", b"r-%d" % i)).message_id for i in range(20)}
    assert len(ids) == 20, "every send was acknowledged (committed at a majority of n0 and n1)"
    wait_until(lambda: len({ha_status(n.admin_addr)["commitOffset"] for n in members}) == 1, timeout=30,
               what="both members hold the same committed log")
    committed = ha_status(members[0].admin_addr)
    assert committed["commitOffset"] > 0
    out = ha_status(outsider.admin_addr)
    assert out["lastIndex"] == 0 and out["commitOffset"] == 0, f"the member with a wrong secret got entries: {out}"
    assert "refused our messages" in outsider.proc.log() and "a wrong peer secret" in outsider.proc.log()
    assert "refused with a wrong peer secret" in members[0].proc.log() + members[1].proc.log()


def test_members_replicate_over_mutual_tls(tmp_path: Path) -> None:
    """tls.server.mode=permissive on the name server and the brokers (the test's status calls stay plaintext)
    with tls.internal.need.client.auth=require: the members' links are TLS with client certificates of the CA."""
    certs = generate_dev_certs(tmp_path / "certs")
    cert, key = certs.client_certs["client"]
    server = {"tls.server.mode": "permissive", "tls.server.certPath": certs.server_cert,
              "tls.server.keyPath": certs.server_key, "tls.server.trustCertPath": certs.ca_cert}
    tls = {**server, "tls.internal.need.client.auth": "require", "tls.client.trustCertPath": certs.ca_cert,
           "tls.client.certPath": cert, "tls.client.keyPath": key}
    (tmp_path / "cluster").mkdir()
    c = LocalCluster(tmp_path / "cluster")
    try:
        c.start_namesrv(conf=lambda i: server)
        ports = [free_port() for _ in range(3)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
        nodes = [c.start_broker(f"broker-t-n{i}", brokerName="broker-t", enableDLegerCommitLog="true",
                                dLegerGroup="broker-t", dLegerPeers=peers, dLegerSelfId=f"n{i}", **tls)
                 for i in range(3)]
        wait_until(lambda: leader_held(nodes, STABLE_LEADER_S), timeout=60, interval=0.2, what="a leader that holds")
        leader = wait_until(lambda: next((n for n in nodes if ha_status(n.admin_addr)["role"] == "LEADER"), None),
                            timeout=10, what="a member's admin status says LEADER")
        c.admin("updateTopic", "-b", leader.admin_addr, "-t", "TopicRaftTls", "-r", "2", "-w", "2")
        with producer(";".join(n.endpoint for n in nodes), "TopicRaftTls") as p:
            ids = {p.send(message("TopicRaftTls", b"t-%d" % i)).message_id for i in range(10)}
        assert len(ids) == 10
        wait_until(lambda: len({ha_status(n.admin_addr)["commitOffset"] for n in nodes}) == 1, timeout=30,
                   what="every member holds the same committed log")
        assert ha_status(nodes[0].admin_addr)["commitOffset"] > 0
        for n in nodes:  # each member accepted both others' links, and over TLS
            log = n.proc.log()
            assert log.count("connected over TLS") >= 2, f"{n.proc.log_path}: links not over TLS"
            assert not re.search(r"Raft port: member \S+ \(.*\) connected$", log, re.M), \
                "a link connected in plaintext"
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()
