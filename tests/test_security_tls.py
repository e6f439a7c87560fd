"""TLS listeners in each mode, client certificates, certificate rotation, the interceptor, genCerts.

In-process grpc.aio servers with small fake services: what is tested here is the
transport and the refusal shapes, not the broker (tests/test_security_e2e.py does that).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import stat
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2
from rocketscope.broker.security import (
    AclGuard,
    AclInterceptor,
    SecurityConfig,
    bind_server,
    parse_acl,
    real_peer,
)
from rocketscope.broker.security.certs import generate_dev_certs
from rocketscope.broker.security.cli import gen_certs
from rocketscope.config import ConfigError
from rocketscope.signature import client_metadata
from rocketscope.tls import load_private_key, start_metrics_server

ACL = {"accounts": [
    {"accessKey": "producer1", "secretKey": "producer-secret", "defaultTopicPerm": "PUB"},
    {"accessKey": "consumer1", "secretKey": "consumer-secret", "defaultTopicPerm": "SUB", "defaultGroupPerm": "SUB"},
    {"accessKey": "admin001", "secretKey": "admin-secret", "admin": True},
]}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    generate_dev_certs(out)
    return out


class FakeMessaging(svc_grpc.MessagingServiceServicer):
    def __init__(self) -> None:
        self.peers: list[str] = []

    async def QueryRoute(self, request: svc.QueryRouteRequest, context: Any) -> svc.QueryRouteResponse:
        self.peers.append(real_peer(context.peer()))
        return svc.QueryRouteResponse(status=pb.Status(code=pb.OK, message="route"))

    async def SendMessage(self, request: svc.SendMessageRequest, context: Any) -> svc.SendMessageResponse:
        return svc.SendMessageResponse(status=pb.Status(code=pb.OK, message="sent"))

    async def ReceiveMessage(self, request: svc.ReceiveMessageRequest, context: Any
                             ) -> AsyncIterator[svc.ReceiveMessageResponse]:
        yield svc.ReceiveMessageResponse(status=pb.Status(code=pb.OK, message="received"))

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[svc.TelemetryCommand]:
        async for cmd in request_iterator:
            yield svc.TelemetryCommand(status=pb.Status(code=pb.OK, message=cmd.WhichOneof("command") or ""))


class FakeAdmin(admin_pb2_grpc.BrokerAdminServicer):
    async def UpdateTopic(self, request: Any, context: Any) -> common_pb2.Status:
        return common_pb2.Status(code=0)

    async def BrokerStatus(self, request: Any, context: Any) -> admin_pb2.BrokerStatusResponse:
        return admin_pb2.BrokerStatusResponse()


async def serve(props: dict[str, str], guard: AclGuard | None = None, internal: bool = False
                ) -> tuple[grpc.aio.Server, Any, FakeMessaging]:
    sec = SecurityConfig.from_properties(props)
    server = grpc.aio.server(interceptors=[AclInterceptor(guard)] if guard else [])
    fake = FakeMessaging()
    svc_grpc.add_MessagingServiceServicer_to_server(fake, server)
    admin_pb2_grpc.add_BrokerAdminServicer_to_server(FakeAdmin(), server)
    tls = sec.server_tls.for_internal() if internal else sec.server_tls
    from conftest import free_port

    listener = bind_server(server, f"127.0.0.1:{free_port()}", tls)
    await server.start()
    await listener.start()
    return server, listener, fake


def tls_props(certs: Path, mode: str = "enforcing", **extra: str) -> dict[str, str]:
    return {"tls.server.mode": mode, "tls.server.certPath": str(certs / "server.pem"),
            "tls.server.keyPath": str(certs / "server.key"), "tls.server.trustCertPath": str(certs / "ca.pem"),
            **extra}


def creds(certs: Path, with_cert: bool = False) -> grpc.ChannelCredentials:
    ca = (certs / "ca.pem").read_bytes()
    if not with_cert:
        return grpc.ssl_channel_credentials(ca)
    return grpc.ssl_channel_credentials(ca, (certs / "client.key").read_bytes(), (certs / "client.pem").read_bytes())


async def route(channel: grpc.aio.Channel, md: Any = None) -> svc.QueryRouteResponse:
    req = svc.QueryRouteRequest()
    req.topic.name = "T"
    return await svc_grpc.MessagingServiceStub(channel).QueryRoute(req, metadata=md, timeout=5)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_enforcing_serves_tls_and_refuses_plaintext(certs: Path) -> None:
    async def main() -> None:
        server, listener, _ = await serve(tls_props(certs))
        try:
            async with grpc.aio.secure_channel(f"127.0.0.1:{listener.port}", creds(certs)) as ch:
                assert (await route(ch)).status.message == "route"
            async with grpc.aio.insecure_channel(f"127.0.0.1:{listener.port}") as ch:
                with pytest.raises(grpc.aio.AioRpcError) as exc:
                    await route(ch)
                assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            await listener.stop()
            await server.stop(None)

    run(main())


def test_required_client_certificate(certs: Path) -> None:
    async def main() -> None:
        server, listener, _ = await serve(tls_props(certs, **{"tls.server.need.client.auth": "require"}))
        try:
            async with grpc.aio.secure_channel(f"127.0.0.1:{listener.port}", creds(certs)) as ch:
                with pytest.raises(grpc.aio.AioRpcError) as exc:
                    await route(ch)
                assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
            async with grpc.aio.secure_channel(f"127.0.0.1:{listener.port}", creds(certs, True)) as ch:
                assert (await route(ch)).status.message == "route"
        finally:
            await server.stop(None)

    run(main())


def test_internal_ports_can_require_certificates_when_the_client_port_does_not(certs: Path) -> None:
    async def main() -> None:
        props = tls_props(certs, **{"tls.internal.need.client.auth": "require"})
        server, listener, _ = await serve(props, internal=True)
        try:
            async with grpc.aio.secure_channel(f"127.0.0.1:{listener.port}", creds(certs)) as ch:
                with pytest.raises(grpc.aio.AioRpcError):
                    await route(ch)
            client = SecurityConfig.from_properties({**props, "tls.client.certPath": str(certs / "server.pem"),
                                                     "tls.client.keyPath": str(certs / "server.key"),
                                                     "tls.client.trustCertPath": str(certs / "ca.pem")}).client_tls
            assert client.enabled  # on by default when tls.server.mode is not disabled
            async with client.channel(f"127.0.0.1:{listener.port}") as ch:
                assert (await route(ch)).status.message == "route"
        finally:
            await server.stop(None)

    run(main())


def test_permissive_serves_both_on_one_port_and_keeps_the_client_address(certs: Path) -> None:
    async def main() -> None:
        server, listener, fake = await serve(tls_props(certs, "permissive"))
        try:
            target = f"127.0.0.1:{listener.port}"
            async with grpc.aio.secure_channel(target, creds(certs)) as ch:
                assert (await route(ch)).status.message == "route"
            async with grpc.aio.insecure_channel(target) as ch:
                assert (await route(ch)).status.message == "route"
            # the handler sees the client's own ports, not the front end's connections to the internal ports
            internal = {listener.tls_port, listener.plain_port}
            assert all(p.startswith("ipv4:127.0.0.1:") for p in fake.peers)
            assert not any(int(p.rpartition(":")[2]) in internal for p in fake.peers)
        finally:
            await listener.stop()
            await server.stop(None)

    run(main())


def test_certificates_are_reloaded_for_new_connections(tmp_path: Path) -> None:
    first, second, live = tmp_path / "first", tmp_path / "second", tmp_path / "live"
    generate_dev_certs(first)
    generate_dev_certs(second)
    shutil.copytree(first, live)

    async def main() -> None:
        server, listener, _ = await serve(tls_props(live))
        try:
            async with grpc.aio.secure_channel(f"127.0.0.1:{listener.port}", creds(first)) as ch:
                assert (await route(ch)).status.message == "route"
            for name in ("server.pem", "server.key", "ca.pem"):
                tmp = live / (name + ".new")
                shutil.copy(second / name, tmp)
                os.replace(tmp, live / name)  # rename: a new inode, as cert managers do
            async with grpc.aio.secure_channel(f"127.0.0.1:{listener.port}", creds(second)) as ch:
                assert (await route(ch)).status.message == "route"
            async with grpc.aio.secure_channel(f"127.0.0.1:{listener.port}", creds(first)) as ch:
                with pytest.raises(grpc.aio.AioRpcError):
                    await route(ch)
        finally:
            await server.stop(None)

    run(main())


def test_interceptor_answers_v2_codes_and_grpc_statuses() -> None:
    guard = AclGuard(parse_acl(ACL))

    async def main() -> None:
        server, listener, _ = await serve({}, guard)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{listener.port}") as ch:
                stub = svc_grpc.MessagingServiceStub(ch)
                assert (await route(ch, client_metadata("consumer1", "consumer-secret"))).status.code == pb.OK
                assert (await route(ch, client_metadata("consumer1", "not-the-secret"))).status.code == pb.UNAUTHORIZED
                req = svc.SendMessageRequest()
                req.messages.add(body=b"x").topic.name = "T"
                resp = await stub.SendMessage(req, metadata=client_metadata("consumer1", "consumer-secret"), timeout=5)
                assert resp.status.code == pb.FORBIDDEN and "PUB is needed" in resp.status.message
                rcv = svc.ReceiveMessageRequest()
                rcv.group.name, rcv.message_queue.topic.name = "G", "T"
                got = [r async for r in stub.ReceiveMessage(rcv, metadata=client_metadata("producer1",
                                                                                          "producer-secret"))]
                assert [r.status.code for r in got] == [pb.FORBIDDEN]
                got = [r async for r in stub.ReceiveMessage(rcv, metadata=client_metadata("consumer1",
                                                                                          "consumer-secret"))]
                assert [r.status.message for r in got] == ["received"]

                # Telemetry: a settings command announcing a subscription the account lacks ends the stream
                async def commands() -> AsyncIterator[svc.TelemetryCommand]:
                    cmd = svc.TelemetryCommand()
                    cmd.settings.client_type = pb.PRODUCER
                    cmd.settings.publishing.topics.add(name="T")
                    yield cmd

                out = [c async for c in stub.Telemetry(commands(), metadata=client_metadata("producer1",
                                                                                               "producer-secret"))]
                assert [c.status.message for c in out] == ["settings"]
                out = [c async for c in stub.Telemetry(commands(), metadata=client_metadata("consumer1",
                                                                                                "consumer-secret"))]
                assert [c.status.code for c in out] == [pb.FORBIDDEN]

                admin = admin_pb2_grpc.BrokerAdminStub(ch)
                with pytest.raises(grpc.aio.AioRpcError) as exc:
                    await admin.UpdateTopic(admin_pb2.UpdateTopicRequest(),
                                            metadata=client_metadata("producer1", "producer-secret"), timeout=5)
                assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED and "admin-only" in exc.value.details()
                with pytest.raises(grpc.aio.AioRpcError) as exc:
                    await admin.BrokerStatus(common_pb2.Empty(), timeout=5)
                assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED and "no credentials" in exc.value.details()
                await admin.UpdateTopic(admin_pb2.UpdateTopicRequest(),
                                        metadata=client_metadata("admin001", "admin-secret"), timeout=5)
        finally:
            await server.stop(None)

    run(main())
    assert guard.denied == 6


@pytest.mark.parametrize(("props", "fragment"), [
    ({"tls.server.mode": "strict"}, "expected one of disabled, permissive, enforcing"),
    ({"tls.server.mode": "enforcing"}, "needs tls.server.certPath"),
    ({"tls.server.mode": "enforcing", "tls.server.certPath": "/nonexistent.pem", "tls.server.keyPath": "/x"},
     "cannot be read"),
    ({"tls.server.need.client.auth": "sometimes"}, "expected one of none, optional, require"),
    ({"aclClockSkewSeconds": "-1"}, "must be at least 0"),
])
def test_bad_tls_settings_name_the_key(props: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        SecurityConfig.from_properties(props)


def test_require_needs_a_trust_file(certs: Path) -> None:
    props = tls_props(certs, **{"tls.server.need.client.auth": "require"})
    del props["tls.server.trustCertPath"]
    with pytest.raises(ConfigError, match=r"needs tls\.server\.trustCertPath"):
        SecurityConfig.from_properties(props)


def test_gencerts_cli_writes_private_keys_and_encrypts_them(tmp_path: Path) -> None:
    out = tmp_path / "dev"
    res = CliRunner().invoke(gen_certs, ["-o", str(out), "-H", "broker1.example", "--keyPassword", "pw-123456"])
    assert res.exit_code == 0, res.output
    assert "pw-123456" not in res.output
    for key in ("ca.key", "server.key", "client.key"):
        assert stat.S_IMODE((out / key).stat().st_mode) == 0o600
        assert b"ENCRYPTED" in (out / key).read_bytes()
    assert b"PRIVATE KEY" in load_private_key("k", str(out / "server.key"), "pw-123456", "p")
    with pytest.raises(ConfigError, match="set p"):
        load_private_key("k", str(out / "server.key"), None, "p")
    with pytest.raises(ConfigError, match="or p is wrong"):
        load_private_key("k", str(out / "server.key"), "wrong", "p")
    again = CliRunner().invoke(gen_certs, ["-o", str(out)])
    assert again.exit_code != 0 and "--force" in again.output
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((out / "server.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "broker1.example" in sans.get_values_for_type(x509.DNSName)
    assert "localhost" in sans.get_values_for_type(x509.DNSName)


def test_encrypted_keys_serve_tls(tmp_path: Path) -> None:
    generate_dev_certs(tmp_path, key_password="pw-123456")

    async def main() -> None:
        server, listener, _ = await serve(tls_props(tmp_path, **{"tls.server.keyPassword": "pw-123456"}))
        try:
            async with grpc.aio.secure_channel(f"127.0.0.1:{listener.port}", creds(tmp_path)) as ch:
                assert (await route(ch)).status.message == "route"
        finally:
            await server.stop(None)

    run(main())


def test_metrics_over_https(certs: Path) -> None:
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    Counter("acl_test_events", "test", registry=registry).inc()
    tls = SecurityConfig.from_properties(tls_props(certs)).server_tls
    httpd, _ = start_metrics_server(0, "127.0.0.1", registry, tls)
    try:
        ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        port = httpd.server_address[1]
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=5) as resp:
            assert b"acl_test_events_total 1.0" in resp.read()
    finally:
        httpd.shutdown()
        httpd.server_close()
