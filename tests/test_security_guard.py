"""Signature verification and access decisions, against the official client's own signing code."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.v5.util.signature import Signature

from rocketscope import signature as sig
from rocketscope.broker.protocol import admin_pb2
from rocketscope.broker.security.acl import parse_acl
from rocketscope.broker.security.config import SecurityConfig
from rocketscope.broker.security.guard import FORBIDDEN, UNAUTHORIZED, AclGuard, peer_host
from rocketscope.broker.security.watcher import FileWatcher

V2 = "/apache.rocketmq.v2.MessagingService/"
ADMIN = "/rocketscope.internal.BrokerAdmin/"
PEER = "ipv4:127.0.0.1:40000"
ACL = {
    "accounts": [
        {"accessKey": "producer1", "secretKey": "producer-secret", "defaultTopicPerm": "PUB",
         "topicPerms": ["Forbidden=DENY", "ReadOnly=SUB"]},
        {"accessKey": "consumer1", "secretKey": "consumer-secret", "defaultTopicPerm": "SUB",
         "defaultGroupPerm": "SUB", "groupPerms": ["OtherGroup=DENY"], "topicPerms": ["RMQ_SYS_TRACE_TOPIC=DENY"]},
        {"accessKey": "admin001", "secretKey": "admin-secret", "admin": True},
        {"accessKey": "faraway", "secretKey": "faraway-secret", "defaultTopicPerm": "PUB|SUB",
         "whiteRemoteAddress": "10.9.*.*"},
    ],
}


class Counter:
    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []

    def add(self, amount: int, attributes: dict[str, str] | None = None) -> None:
        self.calls.append(dict(attributes or {}))


def official_metadata(ak: str, sk: str) -> list[tuple[str, str]]:
    """Exactly what rocketmq-python-client sends."""
    config = SimpleNamespace(credentials=SimpleNamespace(ak=ak, sk=sk), namespace="")
    return Signature.metadata(config, "client-1")


def guard(counter: Counter | None = None, **acl: Any) -> AclGuard:
    return AclGuard(parse_acl({**ACL, **acl}), denied_counter=counter)


def send(topic: str) -> svc.SendMessageRequest:
    req = svc.SendMessageRequest()
    req.messages.add(body=b"x").topic.name = topic
    return req


def receive(group: str, topic: str) -> svc.ReceiveMessageRequest:
    req = svc.ReceiveMessageRequest()
    req.group.name = group
    req.message_queue.topic.name = topic
    return req


def test_the_official_clients_signature_verifies() -> None:
    md = official_metadata("producer1", "producer-secret")
    d = guard().authorize(V2 + "SendMessage", send("Orders"), md, PEER)
    assert d.allowed and d.account == "producer1"


@given(secret=st.text(min_size=1, max_size=40), other=st.text(min_size=1, max_size=40),
       when=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 1, 1)))
def test_sign_and_verify_round_trip(secret: str, other: str, when: datetime) -> None:
    md = dict(sig.client_metadata("someone", secret, when))
    auth = sig.parse_authorization(md[sig.AUTH_HEADER])
    sig.verify(auth, md[sig.DATE_HEADER], secret)
    if other != secret:
        with pytest.raises(sig.SignatureError):
            sig.verify(auth, md[sig.DATE_HEADER], other)


@pytest.mark.parametrize(("md", "kind", "fragment"), [
    (official_metadata("producer1", "wrong-secret"), "signature", "does not match"),
    (official_metadata("nobody", "whatever1"), "account", "unknown access key 'nobody'"),
    ([("x-mq-client-id", "c")], "account", "no credentials"),
    ([("authorization", "AWS4 Credential=x"), ("x-mq-date-time", "20240101T000000Z")], "signature", "algorithm"),
    (sig.client_metadata("producer1", "producer-secret", sig.utc_now() - timedelta(hours=2)), "signature",
     "expired"),
])
def test_bad_credentials_are_unauthorized(md: list[tuple[str, str]], kind: str, fragment: str) -> None:
    counter = Counter()
    d = guard(counter).authorize(V2 + "SendMessage", send("Orders"), md, PEER)
    assert not d.allowed and d.code == UNAUTHORIZED and d.kind == kind
    assert fragment in d.reason
    assert d.grpc_status.name == "UNAUTHENTICATED"
    assert counter.calls == [{"resource_type": "account", "action": "AUTH", "reason": kind}]


def test_clock_skew_accepts_utc_or_local_and_zero_disables() -> None:
    now_utc, now_local = datetime(2024, 5, 1, 12, 0, 0), datetime(2024, 5, 1, 14, 0, 0)  # broker in UTC+2
    for client_time in ("20240501T120500Z", "20240501T135500Z"):  # a UTC client, a client in the broker's zone
        sig.check_fresh(client_time, 900, now_utc, now_local)
    with pytest.raises(sig.SignatureError, match="3600 s away"):
        sig.check_fresh("20240501T110000Z", 900, now_utc, now_local)
    sig.check_fresh("19990101T000000Z", 0, now_utc, now_local)
    with pytest.raises(sig.SignatureError, match="is not yyyyMMddTHHmmssZ"):
        sig.check_fresh("yesterday", 0)


@pytest.mark.parametrize(("ak", "sk", "method", "request_", "allowed", "fragment"), [
    ("producer1", "producer-secret", "SendMessage", send("Forbidden"), False, "DENY on topic Forbidden"),
    ("producer1", "producer-secret", "SendMessage", send("ReadOnly"), False, "SUB on topic ReadOnly, PUB is needed"),
    ("consumer1", "consumer-secret", "SendMessage", send("Orders"), False, "PUB is needed"),
    ("consumer1", "consumer-secret", "ReceiveMessage", receive("MyGroup", "Orders"), True, ""),
    ("consumer1", "consumer-secret", "ReceiveMessage", receive("OtherGroup", "Orders"), False, "group OtherGroup"),
    ("producer1", "producer-secret", "ReceiveMessage", receive("MyGroup", "Orders"), False, "on group MyGroup"),
    ("producer1", "producer-secret", "SendMessage", send("RMQ_SYS_TRACE_TOPIC"), True, ""),
    ("consumer1", "consumer-secret", "SendMessage", send("RMQ_SYS_TRACE_TOPIC"), False, "DENY"),  # explicit
    ("consumer1", "consumer-secret", "QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="T")), True, ""),
    ("producer1", "producer-secret", "QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="Forbidden")),
     False, "ANY is needed"),
    ("faraway", "faraway-secret", "SendMessage", send("Orders"), False, "may not be used from 127.0.0.1"),
])
def test_permissions(ak: str, sk: str, method: str, request_: Any, allowed: bool, fragment: str) -> None:
    d = guard().authorize(V2 + method, request_, official_metadata(ak, sk), PEER)
    assert d.allowed is allowed, d
    if not allowed:
        assert d.code == FORBIDDEN and fragment in d.reason and d.grpc_status.name == "PERMISSION_DENIED"


def test_admin_operations_need_an_admin_account() -> None:
    g, counter = guard(), Counter()
    g.denied_counter = counter
    update = admin_pb2.UpdateTopicRequest()
    d = g.authorize(ADMIN + "UpdateTopic", update, official_metadata("producer1", "producer-secret"), PEER)
    assert not d.allowed and d.code == FORBIDDEN and "admin-only" in d.reason
    assert counter.calls == [{"resource_type": "admin", "action": "ADMIN", "reason": "permission"}]
    assert g.authorize(ADMIN + "UpdateTopic", update, official_metadata("admin001", "admin-secret"), PEER).allowed
    assert g.authorize(ADMIN + "BrokerStatus", None, official_metadata("producer1", "producer-secret"), PEER).allowed
    # a method nobody classified fails closed
    assert not g.authorize("/rocketscope.internal.BrokerAdmin/Brand", None,
                           official_metadata("producer1", "producer-secret"), PEER).allowed


def test_global_address_list_refuses_before_credentials() -> None:
    g = guard(globalWhiteRemoteAddresses=["10.0.0.0/8"])
    d = g.authorize(V2 + "SendMessage", send("Orders"), official_metadata("producer1", "producer-secret"), PEER)
    assert not d.allowed and d.code == FORBIDDEN and d.kind == "ip" and "globalWhiteRemoteAddresses" in d.reason
    assert g.authorize(V2 + "SendMessage", send("Orders"), official_metadata("producer1", "producer-secret"),
                       "ipv4:10.1.2.3:5000").allowed


def test_unparseable_requests_are_only_authenticated() -> None:
    from rocketscope.broker.grpc_registration import Unparseable

    g = guard()
    bad = Unparseable("SendMessageRequest", "truncated")
    assert g.authorize(V2 + "SendMessage", bad, official_metadata("consumer1", "consumer-secret"), PEER).allowed
    assert not g.authorize(V2 + "SendMessage", bad, official_metadata("consumer1", "nope-nope"), PEER).allowed


def test_refusals_are_logged_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    md = official_metadata("producer1", "wrong-secret")
    guard().authorize(V2 + "SendMessage", send("Orders"), md, PEER)
    text = caplog.text
    assert "producer1" in text and "SendMessage" in text and "127.0.0.1" in text
    signature_hex = dict(md)["authorization"].rpartition("Signature=")[2]
    for secret in ("wrong-secret", "producer-secret", signature_hex):
        assert secret not in text


@pytest.mark.parametrize(("peer", "host"), [("ipv4:10.1.2.3:80", "10.1.2.3"), ("ipv6:[::1]:80", "::1"),
                                            ("ipv6:%5B::1%5D:80", "::1"), ("unix:/tmp/x", "unix:/tmp/x")])
def test_peer_host(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def test_reload_takes_the_new_file_and_keeps_the_old_on_errors(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    import yaml

    path = tmp_path / "acl.yml"
    path.write_text(yaml.safe_dump(ACL))
    g = AclGuard.from_file(path)
    md = official_metadata("consumer1", "consumer-secret")
    assert not g.authorize(V2 + "SendMessage", send("Orders"), md, PEER).allowed
    watcher = FileWatcher(path, g.reload, 1.0)

    granted = {**ACL, "accounts": [*ACL["accounts"][:1], {**ACL["accounts"][1], "topicPerms": ["Orders=PUB|SUB"]},
                                   *ACL["accounts"][2:]]}
    path.write_text(yaml.safe_dump(granted) + "\n# edited\n")
    assert asyncio.run(watcher.check_now())
    assert g.authorize(V2 + "SendMessage", send("Orders"), official_metadata("consumer1", "consumer-secret"),
                       PEER).allowed

    path.write_text("accounts: [ {accessKey: x")  # a broken edit keeps the last good ACL
    assert asyncio.run(watcher.check_now())
    assert "ACL reload failed, keeping the previous ACL" in caplog.text
    assert g.authorize(V2 + "SendMessage", send("Orders"), md, PEER).allowed
    assert not asyncio.run(watcher.check_now())  # nothing changed since


def test_watcher_task_reloads_by_itself(tmp_path: Path) -> None:
    path = tmp_path / "acl.yml"
    path.write_text("accounts: []\n")
    seen = []

    async def main() -> None:
        changed = asyncio.Event()
        loop = asyncio.get_running_loop()
        w = FileWatcher(path, lambda: (seen.append(1), loop.call_soon_threadsafe(changed.set)), 0.01)
        w.start()
        path.write_text("accounts: []\n# changed\n")
        await asyncio.wait_for(changed.wait(), 10)
        await w.stop()

    asyncio.run(main())
    assert seen


def test_security_config_requires_an_acl_file_and_hides_inner_secret() -> None:
    from rocketscope.config import ConfigError

    with pytest.raises(ConfigError, match="aclEnable=true needs aclFile"):
        SecurityConfig.from_properties({"aclEnable": "true"})
    with pytest.raises(ConfigError, match="innerClientAuthenticationCredentials"):
        SecurityConfig.from_properties({"innerClientAuthenticationCredentials": "ak:sk"})
    cfg = SecurityConfig.from_properties({"innerClientAuthenticationCredentials":
                                          '{"accessKey": "admin001", "secretKey": "admin-secret"}'})
    assert "admin-secret" not in repr(cfg)
    assert guard().authorize(ADMIN + "GetTopicConfigs", None, cfg.inner_metadata(), PEER).allowed
