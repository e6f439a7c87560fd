"""Remoting over TLS (issue 19): the name server's and the broker's remoting ports in enforcing and permissive mode.

Ground truth: the messages Apache's Go client v2 reports sent (``WithTls``) and received, and the
store's queue offsets read with raw GET_MAX_OFFSET frames over TLS.  RocketMQ's rule
(``NettyRemotingServer.TlsModeHandler`` in rocketmq-remoting 5.3.3): in enforcing mode a
connection whose first byte is not a TLS handshake is closed without an answer; in permissive
mode TLS and plaintext share the port.  The same port also carries gRPC (docs/REMOTING.md), so
each mode is checked with gRPC plain and over TLS too.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster import BIN, BrokerNode, LocalCluster, Proc, _port_open, wait_until
from conftest import free_port
from go_clients import rmqgo, run_go, summary

from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2, namesrv_pb2_grpc
from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RemotingCommand, RequestCode, ResponseCode, encode
from rocketscope.broker.security.certs import generate_dev_certs

pytestmark = pytest.mark.e2e
QUEUES = 4


def tls_conf(certs: Path, mode: str) -> dict[str, Any]:
    return {"tls.server.mode": mode, "tls.server.certPath": certs / "server.pem",
            "tls.server.keyPath": certs / "server.key", "tls.client.trustCertPath": certs / "ca.pem"}


def client_ctx(certs: Path) -> ssl.SSLContext:
    """Verifies the server against the development CA (the Go client skips verification)."""
    return ssl.create_default_context(cafile=str(certs / "ca.pem"))


def start_namesrv(c: LocalCluster, name: str, conf: dict[str, Any]) -> str:
    port = free_port()
    path = c.root / f"{name}.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in {"listenPort": port, **conf}.items()))
    c.namesrvs.append(Proc(name, [str(BIN), "namesrv", "-c", str(path)], c.root / f"{name}.log").start())
    wait_until(lambda: _port_open(port), what=f"{name} port")
    return f"127.0.0.1:{port}"


def wait_registered(ns: str, certs: Path, broker: str) -> None:
    """The broker's first registration reached the name server (asked over TLS).  Create topics after it:
    a topic created while that registration is in flight waits for the next periodic one (the kick is
    lost in broker/namesrv_client.py ``_requests``), up to registerNameServerPeriod (30 s)."""
    with RemotingClient(ns, tls=client_ctx(certs)) as n:
        wait_until(lambda: broker.encode() in n.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).body, timeout=30,
                   what=f"{broker} registered")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("remoting-tls-certs")
    generate_dev_certs(out, overwrite=True)
    return out


@pytest.fixture(scope="module")
def enforcing(certs: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[LocalCluster, str, BrokerNode, str]]:
    """An enforcing name server and broker.  The broker shares its listenPort (gRPC over TLS spliced by ALPN);
    the name server serves remoting on a port of its own (``remotingListenPort``, the other listener), so
    the clients' name server address is that port and the broker registers over gRPC on listenPort."""
    rmqgo()  # build (or skip) before any process starts
    c = LocalCluster(tmp_path_factory.mktemp("remoting-tls"))
    ok = False
    try:
        ns_port = free_port()
        ns_grpc = start_namesrv(c, "namesrv-tls", {**tls_conf(certs, "enforcing"), "remotingListenPort": ns_port})
        ns = f"127.0.0.1:{ns_port}"
        wait_until(lambda: _port_open(ns_port), what="the name server's remoting port")
        node = c.start_broker("broker-tls", namesrvAddr=ns_grpc, **tls_conf(certs, "enforcing"))
        wait_registered(ns, certs, "broker-tls")
        with RemotingClient(node.admin_addr, tls=client_ctx(certs)) as b:
            resp = b.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "TlsT", "readQueueNums": str(QUEUES),
                                                                  "writeQueueNums": str(QUEUES), "perm": "6"})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        with RemotingClient(ns, tls=client_ctx(certs)) as n:
            wait_until(lambda: n.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TlsT"}).code == 0,
                       timeout=30, what="route of TlsT over TLS")
        yield c, ns, node, ns_grpc
        ok = True
    finally:
        if not ok:
            print(c.logs())
        c.stop()


def max_offsets(addr: str, certs: Path, topic: str) -> int:
    with RemotingClient(addr, tls=client_ctx(certs)) as b:
        return sum(int(b.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}).fields["offset"])
                   for q in range(QUEUES))


def plaintext_answer(addr: str) -> bytes:
    """Send one plaintext GET_BROKER_CLUSTER_INFO frame; what comes back before the server closes (or 2 s pass)."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(encode(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, opaque=7, language="PYTHON",
                                         version=479)))
        s.settimeout(2)
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except TimeoutError:
            return got + b"<still open>"
        except ConnectionResetError:  # closed with our frame unread: the kernel answers with a reset
            return got + b"<reset>"
        return got


def grpc_cluster_brokers(addr: str, certs: Path | None) -> set[str]:
    """The name server's gRPC GetClusterInfo on the shared port, over TLS when ``certs`` is given."""
    if certs is None:
        ch = grpc.insecure_channel(addr)
    else:
        ch = grpc.secure_channel(addr, grpc.ssl_channel_credentials((certs / "ca.pem").read_bytes()))
    with ch:
        info = namesrv_pb2_grpc.NameServerStub(ch).GetClusterInfo(common_pb2.Empty(), timeout=10)
    return {b.registration.broker_name for b in info.brokers}


def test_go_client_over_tls_produces_and_consumes(enforcing: tuple[LocalCluster, str, BrokerNode, str],
                                                  certs: Path) -> None:
    _, ns, node, _ = enforcing
    before = max_offsets(node.admin_addr, certs, "TlsT")
    sent = run_go("produce", "-tls", "-ns", ns, "-topic", "TlsT", "-n", "20", "-retries", "0", timeout=90)
    assert summary(sent)["sent"] == 20, sent
    assert max_offsets(node.admin_addr, certs, "TlsT") - before == 20
    got = run_go("consume", "-tls", "-ns", ns, "-topic", "TlsT", "-group", "TlsReaders", "-n", "20",
                 "-timeout", "60", timeout=90)
    assert sorted({e["body"] for e in got if e["event"] == "received"}) == sorted(f"go-{i}" for i in range(20))


def test_enforcing_closes_plaintext_remoting_and_keeps_grpc_over_tls(
        enforcing: tuple[LocalCluster, str, BrokerNode, str], certs: Path) -> None:
    _, ns, node, ns_grpc = enforcing
    for addr in (ns, node.admin_addr):
        # closed without an answer, as RocketMQ's TlsModeHandler does (a reset: the frame was left unread)
        assert plaintext_answer(addr) in (b"", b"<reset>"), addr
    with RemotingClient(ns, tls=client_ctx(certs)) as n:  # the same frame over TLS is answered
        resp = n.invoke(RequestCode.GET_BROKER_CLUSTER_INFO)
    assert resp.code == ResponseCode.SUCCESS and b"broker-tls" in resp.body
    # gRPC over TLS still terminates in gRPC behind the shared port (ALPN h2 is spliced through)
    # and on the broker's shared listenPort: its admin gRPC service over TLS
    with grpc.secure_channel(node.admin_addr, grpc.ssl_channel_credentials((certs / "ca.pem").read_bytes())) as ch:
        status = json.loads(admin_pb2_grpc.BrokerAdminStub(ch).HaStatus(common_pb2.Empty(), timeout=10).json)
    assert status["role"] == "ASYNC_MASTER", status
    assert grpc_cluster_brokers(ns_grpc, certs) == {"broker-tls"}
    with pytest.raises(grpc.RpcError):
        grpc_cluster_brokers(ns_grpc, None)
    # (a real client without TLS against this port: tests/test_remoting_java_secure.py, long)


def test_permissive_port_serves_all_four(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """One permissive name server port: remoting plain and TLS, gRPC plain and TLS.

    Remoting TLS follows the client-port rule (``tls.server.need.client.auth=require`` here) while the
    gRPC service on the same port follows the internal one (``tls.internal.need.client.auth=none``)."""
    c = LocalCluster(tmp_path_factory.mktemp("remoting-permissive"))
    try:
        ns = start_namesrv(c, "namesrv-permissive", {**tls_conf(certs, "permissive"),
                                                     "tls.server.trustCertPath": certs / "ca.pem",
                                                     "tls.server.need.client.auth": "require",
                                                     "tls.internal.need.client.auth": "none"})
        with_cert = client_ctx(certs)
        with_cert.load_cert_chain(certs / "client.pem", certs / "client.key")
        with RemotingClient(ns) as plain, RemotingClient(ns, tls=with_cert) as secure:
            for cl in (plain, secure):
                assert cl.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
            assert secure.sock.version() is not None and not isinstance(plain.sock, ssl.SSLSocket)
        # no client certificate: the handshake (TLS 1.3: the first read after it) fails
        with pytest.raises((ssl.SSLError, ConnectionError)), RemotingClient(ns, tls=client_ctx(certs)) as anonymous:
            anonymous.invoke(RequestCode.GET_BROKER_CLUSTER_INFO)
        wait_until(lambda: "remoting: TLS handshake with" in c.namesrvs[0].log(), timeout=10,
                   what="the refused handshake logged")
        assert grpc_cluster_brokers(ns, None) == set() == grpc_cluster_brokers(ns, certs)
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()
