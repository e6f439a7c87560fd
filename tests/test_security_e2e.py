"""End to end: a broker with TLS and ACL on, the official client with TLS and credentials.

The broker binds every listener with ``bind_server`` and installs ``AclInterceptor`` on the
client and admin ports; the name server and the replication/Raft ports get TLS as well
(docs/SECURITY.md).

The official client's TLS uses the system trust store (``grpc.ssl_channel_credentials()``
without roots).  gRPC reads ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` once per process, when
the first channel with default roots is created, so this module points it at a CA
directory chosen at import time (before any test runs) and writes the CA there later.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from cluster import BIN, BrokerNode, LocalCluster, Proc, _port_open, wait_until
from conftest import free_port
from rmq import config, drain, message
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc
from rocketscope.broker.security.certs import generate_dev_certs
from rocketscope.signature import client_metadata, utc_now

pytestmark = pytest.mark.e2e

CERTS = Path(tempfile.mkdtemp(prefix="rs-security-ca-"))
os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(CERTS / "ca.pem")

ACL: dict[str, Any] = {
    "accounts": [
        {"accessKey": "appProducer", "secretKey": "producer-secret", "defaultTopicPerm": "PUB",
         "topicPerms": ["TopicDenied=DENY", "TopicSecure=PUB|SUB", "TopicLater=DENY"]},
        {"accessKey": "appConsumer", "secretKey": "consumer-secret", "defaultTopicPerm": "SUB",
         "defaultGroupPerm": "SUB"},
        {"accessKey": "farAwayApp", "secretKey": "faraway-secret", "defaultTopicPerm": "PUB|SUB",
         "whiteRemoteAddress": "10.99.*.*"},
        {"accessKey": "opsAdmin", "secretKey": "admin-secret", "admin": True},
    ],
}


def tls_conf(**extra: Any) -> dict[str, Any]:
    return {"tls.server.mode": "enforcing", "tls.server.certPath": CERTS / "server.pem",
            "tls.server.keyPath": CERTS / "server.key", "tls.server.trustCertPath": CERTS / "ca.pem",
            "tls.client.trustCertPath": CERTS / "ca.pem", **extra}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, BrokerNode, Path]]:
    generate_dev_certs(CERTS, overwrite=True)
    root = tmp_path_factory.mktemp("secure")
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(yaml.safe_dump(ACL))
    c = LocalCluster(root)
    try:
        node = c.start_broker("broker-sec", namesrvAddr="", aclEnable="true", aclFile=acl_file,
                              aclFileWatchIntervalMillis=100, traceTopicEnable="true", metricsExporterType="PROM",
                              metricsPromExporterHost="127.0.0.1", metricsPromExporterPort=free_port(), **tls_conf())
        yield c, node, acl_file
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def client_config(node: BrokerNode, ak: str, sk: str) -> ClientConfiguration:
    return config(node.endpoint, Credentials(ak, sk))


def tls_channel(node: BrokerNode, port: int | None = None, with_cert: bool = False) -> grpc.Channel:
    ca = (CERTS / "ca.pem").read_bytes()
    creds = (grpc.ssl_channel_credentials(ca, (CERTS / "client.key").read_bytes(),
                                          (CERTS / "client.pem").read_bytes())
             if with_cert else grpc.ssl_channel_credentials(ca))
    return grpc.secure_channel(f"127.0.0.1:{port or node.grpc_port}", creds)


def send_request(topic: str) -> svc.SendMessageRequest:
    req = svc.SendMessageRequest()
    m = req.messages.add(body=b"raw")
    m.topic.name = topic
    m.system_properties.message_id = "01ABCDEF0000000000000000"
    m.system_properties.message_type = pb.NORMAL
    return req


def raw_send(node: BrokerNode, topic: str, md: list[tuple[str, str]]) -> pb.Status:
    with tls_channel(node) as ch:
        return svc_grpc.MessagingServiceStub(ch).SendMessage(send_request(topic), timeout=10,
                                                             metadata=[*md, ("x-mq-client-id", "raw")]).status


def create_topic(node: BrokerNode, topic: str, ak: str, sk: str) -> None:
    with tls_channel(node, node.listen_port) as ch:
        req = admin_pb2.UpdateTopicRequest()
        req.config.topic_name, req.config.read_queue_nums, req.config.write_queue_nums, req.config.perm = topic, 2, 2, 6
        st = admin_pb2_grpc.BrokerAdminStub(ch).UpdateTopic(req, metadata=client_metadata(ak, sk), timeout=10)
        assert st.code == 0, st


def test_tls_and_credentials_produce_and_consume(secure: tuple[LocalCluster, BrokerNode, Path]) -> None:
    _, node, _ = secure
    create_topic(node, "TopicSecure", "opsAdmin", "admin-secret")
    p = Producer(client_config(node, "appProducer", "producer-secret"), ("TopicSecure",), tls_enable=True)
    p.startup()
    try:
        ids = sorted(p.send(message("TopicSecure", f"s{i}".encode())).message_id for i in range(5))
    finally:
        p.shutdown()
    c = SimpleConsumer(client_config(node, "appConsumer", "consumer-secret"), "GroupSecure",
                       {"TopicSecure": FilterExpression("*")}, await_duration=2, tls_enable=True)
    c.startup()
    try:
        assert sorted(m.message_id for m in drain(c, 5)) == ids
    finally:
        c.shutdown()


def _send_with(node: BrokerNode, ak: str, sk: str, topic: str) -> Exception:
    p = Producer(client_config(node, ak, sk), (topic,), tls_enable=True)
    p.startup()
    try:
        with pytest.raises(Exception) as exc:  # the client's exception class is checked by the caller
            p.send(message(topic, b"refused"))
        return exc.value
    finally:
        p.shutdown()


@pytest.mark.parametrize(("ak", "sk", "topic", "code", "fragment"), [
    ("appProducer", "wrong-secret", "TopicSecure", pb.UNAUTHORIZED, "does not match"),
    ("nobodyAtAll", "whatever-secret", "TopicSecure", pb.UNAUTHORIZED, "unknown access key"),
    ("farAwayApp", "faraway-secret", "TopicSecure", pb.FORBIDDEN, "whiteRemoteAddress"),
    ("appProducer", "producer-secret", "TopicDenied", pb.FORBIDDEN, "DENY on topic TopicDenied"),
    ("appConsumer", "consumer-secret", "TopicSecure", pb.FORBIDDEN, "PUB is needed"),
])
def test_the_official_client_is_refused_with_the_right_code(secure: tuple[LocalCluster, BrokerNode, Path], ak: str,
                                                             sk: str, topic: str, code: int, fragment: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    _, node, _ = secure
    exc = _send_with(node, ak, sk, topic)
    cls = {pb.UNAUTHORIZED: "UnauthorizedException", pb.FORBIDDEN: "ForbiddenException"}[code]
    if "failed to fetch topic" in str(exc):
        # refused at the route query: the client raises a plain Exception and logs the status it got
        assert f"{code}, " in caplog.text and fragment in caplog.text, caplog.text[-2000:]
    else:
        assert type(exc).__name__ == cls, repr(exc)
        assert getattr(exc, "code", None) == code and fragment in str(exc)


def test_expired_signature_is_unauthorized(secure: tuple[LocalCluster, BrokerNode, Path]) -> None:
    from datetime import timedelta

    _, node, _ = secure
    st = raw_send(node, "TopicSecure", client_metadata("appProducer", "producer-secret",
                                                       utc_now() - timedelta(hours=3)))
    assert st.code == pb.UNAUTHORIZED and "expired" in st.message
    assert raw_send(node, "TopicSecure", client_metadata("appProducer", "producer-secret")).code == pb.OK


def test_only_admins_create_topics(secure: tuple[LocalCluster, BrokerNode, Path]) -> None:
    _, node, _ = secure
    with pytest.raises(grpc.RpcError) as exc:
        create_topic(node, "TopicByProducer", "appProducer", "producer-secret")
    assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED and "admin-only" in exc.value.details()
    with pytest.raises(grpc.RpcError) as exc:
        create_topic(node, "TopicByNobody", "opsAdmin", "not-the-admin-secret")
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    create_topic(node, "TopicByAdmin", "opsAdmin", "admin-secret")


def test_plaintext_client_cannot_talk_to_an_enforcing_broker(secure: tuple[LocalCluster, BrokerNode, Path]) -> None:
    _, node, _ = secure
    for port in (node.grpc_port, node.listen_port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            req = svc.QueryRouteRequest()
            req.topic.name = "TopicSecure"
            with pytest.raises(grpc.RpcError) as exc:
                svc_grpc.MessagingServiceStub(ch).QueryRoute(req, timeout=5,
                                                             metadata=client_metadata("appProducer",
                                                                                      "producer-secret"))
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE


def test_acl_file_changes_take_effect_without_restart(secure: tuple[LocalCluster, BrokerNode, Path]) -> None:
    _, node, acl_file = secure
    md = lambda: client_metadata("appProducer", "producer-secret")  # noqa: E731 - a fresh date each call
    assert raw_send(node, "TopicLater", md()).code == pb.FORBIDDEN
    granted = yaml.safe_load(acl_file.read_text())
    granted["accounts"][0]["topicPerms"] = ["TopicDenied=DENY", "TopicSecure=PUB|SUB", "TopicLater=PUB"]
    acl_file.write_text(yaml.safe_dump(granted))
    wait_until(lambda: raw_send(node, "TopicLater", md()).code == pb.OK, what="the new ACL to allow TopicLater")
    acl_file.write_text("accounts: [ {broken")  # a broken edit is ignored: the last good ACL stays
    wait_until(lambda: "ACL reload failed" in node.proc.log(), what="the broken ACL to be noticed")
    assert raw_send(node, "TopicLater", md()).code == pb.OK
    acl_file.write_text(yaml.safe_dump(ACL))
    wait_until(lambda: raw_send(node, "TopicLater", md()).code == pb.FORBIDDEN, what="the ACL to deny TopicLater")
    log = node.proc.log()
    assert "ACL refused SendMessage" in log
    assert not any(secret in log for secret in ("producer-secret", "consumer-secret", "admin-secret"))


def test_every_account_may_write_trace_records(secure: tuple[LocalCluster, BrokerNode, Path]) -> None:
    _, node, _ = secure
    assert raw_send(node, "RMQ_SYS_TRACE_TOPIC", client_metadata("appConsumer", "consumer-secret")).code == pb.OK


def test_missing_client_certificate_when_required(secure: tuple[LocalCluster, BrokerNode, Path]) -> None:
    c, _, _ = secure
    node = c.start_broker("broker-mtls", namesrvAddr="", **tls_conf(**{"tls.server.need.client.auth": "require"}))
    req = svc.QueryRouteRequest()
    req.topic.name = "TopicMtls"
    with tls_channel(node) as ch, pytest.raises(grpc.RpcError) as exc:
        svc_grpc.MessagingServiceStub(ch).QueryRoute(req, timeout=5)
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    with tls_channel(node, with_cert=True) as ch:
        assert svc_grpc.MessagingServiceStub(ch).QueryRoute(req, timeout=5).status.code == pb.OK
    node.proc.stop()


def test_permissive_broker_serves_tls_and_plaintext_clients(secure: tuple[LocalCluster, BrokerNode, Path]) -> None:
    c, _, _ = secure
    node = c.start_broker("broker-permissive", namesrvAddr="", **tls_conf(**{"tls.server.mode": "permissive"}))
    for tls in (True, False):
        p = Producer(config(node.endpoint), ("TopicMixed",), tls_enable=tls)
        p.startup()
        try:
            assert p.send(message("TopicMixed", b"either")).message_id
        finally:
            p.shutdown()
    node.proc.stop()


def test_refusals_are_counted(secure: tuple[LocalCluster, BrokerNode, Path]) -> None:
    import re
    import urllib.request

    _, node, _ = secure
    port = re.search(r"metricsPromExporterPort=(\d+)", node.conf.read_text()).group(1)  # type: ignore[union-attr]
    assert raw_send(node, "TopicSecure", client_metadata("appProducer", "bad-secret")).code == pb.UNAUTHORIZED

    def denied() -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
                   if line.startswith("rocketmq_acl_denied_total{") and 'reason="signature"' in line)

    wait_until(lambda: denied() >= 1, what="rocketmq_acl_denied_total{reason=signature}")


# ---------------------------------------------------------------------------------------------
# A whole TLS fleet: name server, SYNC_MASTER and slave all enforcing TLS, ACL on the brokers.
# This proves the broker's *outbound* connections (name server sessions, replication stream,
# the slave's metadata sync signed with innerClientAuthenticationCredentials) and the admin
# CLI's --trustCertPath/--accessKey options, on top of the listeners tested above.


def admin_cli(namesrv: str, *args: str, creds: tuple[str, str] | None = ("opsAdmin", "admin-secret"),
              tls: bool = True) -> subprocess.CompletedProcess[str]:
    opts = ["--trustCertPath", str(CERTS / "ca.pem")] if tls else []
    if creds:
        opts += ["--accessKey", creds[0], "--secretKey", creds[1]]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCKETMQ_", "ROCKETSCOPE_ADMIN"))}
    return subprocess.run([str(BIN), "admin", *opts, *args, "-n", namesrv], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.fixture(scope="module")
def fleet(secure: tuple[LocalCluster, BrokerNode, Path], tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[LocalCluster, str]]:
    _, _, acl_file = secure  # same CA and ACL file
    root = tmp_path_factory.mktemp("fleet")
    ns_port = free_port()
    ns_conf = root / "namesrv.conf"
    ns_conf.write_text("".join(f"{k}={v}\n" for k, v in {"listenPort": ns_port, **tls_conf()}.items()))
    c = LocalCluster(root)
    c.namesrvs.append(Proc("namesrv-tls", [str(BIN), "namesrv", "-c", str(ns_conf)], root / "namesrv.log").start())
    c.namesrv_ports.append(ns_port)
    namesrv = f"127.0.0.1:{ns_port}"
    common = {"namesrvAddr": namesrv, "aclEnable": "true", "aclFile": acl_file,
              "innerClientAuthenticationCredentials": '{"accessKey": "opsAdmin", "secretKey": "admin-secret"}',
              **tls_conf()}
    try:
        wait_until(lambda: _port_open(ns_port), what="TLS name server")
        for name, conf in (("tls-m", {"brokerName": "broker-tls", "brokerRole": "SYNC_MASTER", "brokerId": 0,
                                      "haListenPort": free_port(), "metricsExporterType": "PROM",
                                      "metricsPromExporterHost": "127.0.0.1",
                                      "metricsPromExporterPort": FLEET_METRICS_PORT, "tls.metrics.enable": "true"}),
                           ("tls-s", {"brokerName": "broker-tls", "brokerRole": "SLAVE", "brokerId": 1,
                                      "haListenPort": free_port()})):
            c.brokers[name] = _start_plain(c, root, name, {**common, **conf})
        yield c, namesrv
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


FLEET_METRICS_PORT = free_port()


def _start_plain(c: LocalCluster, root: Path, name: str, conf: dict[str, Any]) -> BrokerNode:
    """LocalCluster.start_broker waits through a plaintext admin CLI; this one waits on the ports only."""
    grpc_port, listen_port = free_port(), free_port()
    values = {"grpcServerPort": grpc_port, "listenPort": listen_port, "storePathRootDir": root / f"store-{name}",
              "mappedFileSizeCommitLog": 1 << 20, "defaultTopicQueueNums": 2, **conf}
    path = root / f"{name}.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    node = BrokerNode(name, path, grpc_port, listen_port, root / f"store-{name}",
                      Proc(name, [str(BIN), "broker", "-c", str(path)], root / f"{name}.log"))
    node.proc.start()
    wait_until(lambda: _port_open(grpc_port) and _port_open(listen_port), what=f"broker {name} ports")
    return node


def test_tls_fleet_registers_replicates_and_is_administered_over_tls(fleet: tuple[LocalCluster, str]) -> None:
    c, namesrv = fleet
    master, slave = c.brokers["tls-m"], c.brokers["tls-s"]

    def registered() -> bool:
        res = admin_cli(namesrv, "clusterList", "--json")
        return res.returncode == 0 and {b["brokerId"] for b in json.loads(res.stdout)} == {0, 1}
    wait_until(registered, timeout=30, what="both brokers registered with the TLS name server")

    # a plaintext admin cannot even reach the name server
    plain = admin_cli(namesrv, "clusterList", creds=None, tls=False)
    assert plain.returncode != 0
    # topic creation is admin-only on the brokers: refused without credentials, accepted with
    refused = admin_cli(namesrv, "updateTopic", "-c", "DefaultCluster", "-t", "TopicFleet", creds=None)
    assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr, refused
    not_admin = admin_cli(namesrv, "updateTopic", "-c", "DefaultCluster", "-t", "TopicFleet",
                          creds=("appProducer", "producer-secret"))
    assert not_admin.returncode != 0 and "PERMISSION_DENIED" in not_admin.stderr, not_admin
    done = admin_cli(namesrv, "updateTopic", "-c", "DefaultCluster", "-t", "TopicFleet", "-r", "2", "-w", "2")
    assert done.returncode == 0, done.stderr

    # SYNC_MASTER acknowledges only once the slave has the message: replication runs over TLS
    p = Producer(client_config(master, "appProducer", "producer-secret"), ("TopicFleet",), tls_enable=True)
    p.startup()
    try:
        wait_until(lambda: _try_send(p), timeout=30, what="a send acknowledged by the SYNC_MASTER")
        for i in range(4):
            p.send(message("TopicFleet", f"f{i}".encode()))
    finally:
        p.shutdown()

    def slave_caught_up() -> bool:
        res = admin_cli(namesrv, "haStatus", "-b", f"127.0.0.1:{slave.listen_port}")
        return res.returncode == 0 and json.loads(res.stdout)[f"127.0.0.1:{slave.listen_port}"]["maxOffset"] > 0
    wait_until(slave_caught_up, timeout=30, what="the slave's commit log over TLS")
    status = json.loads(admin_cli(namesrv, "haStatus", "-b", f"127.0.0.1:{master.listen_port}").stdout)
    m = status[f"127.0.0.1:{master.listen_port}"]
    assert m["slaves"] and all(s["ackOffset"] == m["maxOffset"] for s in m["slaves"]), m
    # the slave pulled the topic config from the master's admin port, signing with the inner account
    # /metrics over HTTPS (tls.metrics.enable) with the same certificate
    import ssl
    import urllib.request
    ctx = ssl.create_default_context(cafile=str(CERTS / "ca.pem"))
    with urllib.request.urlopen(f"https://127.0.0.1:{FLEET_METRICS_PORT}/metrics", context=ctx, timeout=10) as resp:
        assert "rocketmq_messages_in_total" in resp.read().decode()
    topics_file = slave.store / "config" / "topics.json"
    wait_until(lambda: topics_file.exists() and "TopicFleet" in topics_file.read_text(), timeout=30,
               what="topic metadata synced to the slave")


def _try_send(p: Producer) -> bool:
    try:
        p.send(message("TopicFleet", b"probe"))
        return True
    except Exception:
        return False


def test_exporter_serves_otlp_and_metrics_over_tls(tmp_path: Path) -> None:
    import http.client
    import ssl
    import urllib.request

    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    from rocketscope.telemetry.exporter import ExporterConfig, ExporterServer
    from rocketscope.tls import server_config

    tls = server_config({"tls.server.mode": "enforcing", "tls.server.certPath": str(CERTS / "server.pem"),
                         "tls.server.keyPath": str(CERTS / "server.key")})
    server = ExporterServer(ExporterConfig(host="127.0.0.1", grpc_port=0, http_port=0, metrics_port=0,
                                           tls=tls)).start()
    try:
        req = ExportMetricsServiceRequest()
        rm = req.resource_metrics.add()
        attr = rm.resource.attributes.add()
        attr.key, attr.value.string_value = "service.name", "broker"
        metric = rm.scope_metrics.add().metrics.add()
        metric.name = "rocketmq_tls_probe"
        point = metric.gauge.data_points.add()
        point.as_int = 7
        label = point.attributes.add()
        label.key, label.value.string_value = "node_id", "tls-node"
        ctx = ssl.create_default_context(cafile=str(CERTS / "ca.pem"))
        post = urllib.request.Request(f"https://127.0.0.1:{server.http_port}/v1/metrics",
                                      data=req.SerializeToString(),
                                      headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(post, context=ctx, timeout=10) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(f"https://127.0.0.1:{server.metrics_port}/metrics", context=ctx,
                                    timeout=10) as resp:
            assert "rocketmq_tls_probe" in resp.read().decode()
        with pytest.raises((OSError, http.client.HTTPException)):  # plaintext is refused on the TLS port
            urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5)
        # OTLP/gRPC with TLS
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        with grpc.secure_channel(f"127.0.0.1:{server.grpc_port}",
                                 grpc.ssl_channel_credentials((CERTS / "ca.pem").read_bytes())) as ch:
            metrics_service_pb2_grpc.MetricsServiceStub(ch).Export(req, timeout=10)
    finally:
        server.stop()
