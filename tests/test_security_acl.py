"""The ACL model: plain_acl.yml parsing, address patterns, RocketMQ's permission arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rocketscope.broker.security.acl import AclError, AddressPattern, Perm, load_acl, parse_acl, permits

ROOT = Path(__file__).resolve().parent.parent


def test_the_sample_acl_file_parses() -> None:
    acl = load_acl(ROOT / "deploy" / "conf" / "acl" / "plain_acl.yml")
    orders = acl.accounts["orderService"]
    assert orders.topic_perm("orders") == (Perm.PUB, True)
    assert orders.topic_perm("elsewhere") == (Perm.DENY, False)
    assert orders.group_perm("order-service") == (Perm.SUB, True)
    admin = acl.accounts["rocketscopeAdmin"]
    assert admin.admin and admin.default_topic_perm == Perm.PUB | Perm.SUB
    assert admin.address_allowed("10.0.0.6") and not admin.address_allowed("10.0.0.8")
    assert acl.address_allowed("127.0.0.1") and acl.address_allowed("192.168.7.9")
    assert not acl.address_allowed("172.16.0.1")


@pytest.mark.parametrize(("needed", "owned", "ok"), [
    (Perm.PUB, Perm.PUB, True),
    (Perm.PUB, Perm.SUB, False),
    (Perm.SUB, Perm.PUB | Perm.SUB, True),
    (Perm.PUB, Perm.DENY | Perm.PUB, False),  # DENY wins
    (Perm.ANY, Perm.SUB, True),
    (Perm.ANY, Perm.PUB, True),
    (Perm.ANY, Perm.DENY, False),
    (Perm.SUB, Perm.NONE, False),
])
def test_permission_arithmetic_is_rocketmqs(needed: Perm, owned: Perm, ok: bool) -> None:
    assert permits(needed, owned) is ok


@pytest.mark.parametrize("text", ["PUB|SUB", "sub|pub", " PUB | SUB "])
def test_perm_parsing_accepts_rocketmqs_spellings(text: str) -> None:
    assert Perm.parse(text, "x") == Perm.PUB | Perm.SUB


@pytest.mark.parametrize(("pattern", "yes", "no"), [
    ("*", ["1.2.3.4", "::1"], ["not-an-ip"]),
    ("192.168.0.1", ["192.168.0.1"], ["192.168.0.2"]),
    ("192.168.0.{1,2,3}", ["192.168.0.2"], ["192.168.0.4"]),
    ("192.168.*", ["192.168.200.1"], ["192.169.0.1"]),
    ("192.168.1-10.*", ["192.168.5.77"], ["192.168.11.1"]),
    ("10.0.0.0/8", ["10.200.3.4"], ["11.0.0.1"]),
    ("1.1.1.1,2.2.2.2", ["2.2.2.2"], ["3.3.3.3"]),
    ("::1", ["::1"], ["127.0.0.1"]),
    ("127.0.0.1", ["::ffff:127.0.0.1"], []),  # IPv4-mapped IPv6 peers match their IPv4 pattern
])
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    p = AddressPattern(pattern)
    assert all(p.matches(h) for h in yes)
    assert not any(p.matches(h) for h in no)


@pytest.mark.parametrize("bad", ["300.1.1.1", "a.b.c.d", "1.2.3.4.5", "1.2.9-3.4"])
def test_bad_address_patterns_are_errors(bad: str) -> None:
    with pytest.raises(AclError):
        AddressPattern(bad)


def _acl(**account: object) -> dict[str, object]:
    return {"accounts": [{"accessKey": "appUser1", "secretKey": "s3cret-value", **account}]}


@pytest.mark.parametrize(("account", "fragment"), [
    ({"topicPerm": ["a=PUB"]}, "unknown key(s) topicPerm"),
    ({"topicPerms": ["a=PUBLISH"]}, "unknown permission 'PUBLISH'"),
    ({"topicPerms": ["a"]}, "is not name=PERM"),
    ({"topicPerms": ["a=PUB", "a=SUB"]}, "a is listed twice"),
    ({"admin": "maybe"}, "expected true or false"),
    ({"whiteRemoteAddress": "10.x.0.1"}, "not understood"),
    ({"defaultTopicPerm": ""}, "permission is empty"),
])
def test_bad_accounts_are_refused_with_the_field_named(account: dict[str, object], fragment: str) -> None:
    with pytest.raises(AclError, match="accessKey 'appUser1'") as exc:
        parse_acl(_acl(**account))
    assert fragment in str(exc.value)


def test_key_errors_never_show_the_secret() -> None:
    with pytest.raises(AclError) as exc:
        parse_acl({"accounts": [{"accessKey": "appUser1", "secretKey": "abc"}]})
    assert "secretKey must be at least" in str(exc.value) and "abc" not in str(exc.value).replace("appUser1", "")
    with pytest.raises(AclError, match="listed twice"):
        parse_acl({"accounts": [{"accessKey": "appUser1", "secretKey": "12345678"}] * 2})


def test_yaml_errors_do_not_echo_the_file(tmp_path: Path) -> None:
    path = tmp_path / "acl.yml"
    path.write_text("accounts:\n  - accessKey: appUser1\n    secretKey: [topsecret-value\n")
    with pytest.raises(AclError) as exc:
        load_acl(path)
    assert "not valid YAML at line" in str(exc.value) and "topsecret" not in str(exc.value)


def test_numeric_secrets_and_rocketmq_defaults() -> None:
    acl = parse_acl(yaml.safe_load("accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n"))
    acct = acl.accounts["RocketMQ"]
    assert acct.secret_key == "12345678"
    assert acct.default_topic_perm == Perm.DENY and acct.default_group_perm == Perm.DENY and not acct.admin
    assert acl.address_allowed("203.0.113.9")  # no global list: any address
    assert "12345678" not in repr(acct)


def test_group_and_topic_perms_accept_a_mapping_too() -> None:
    acl = parse_acl(_acl(topicPerms={"t1": "SUB"}, groupPerms={"g1": "SUB|PUB"}))
    acct = acl.accounts["appUser1"]
    assert acct.topic_perm("t1") == (Perm.SUB, True)
    assert acct.group_perm("g1") == (Perm.PUB | Perm.SUB, True)
