"""The ACL model: RocketMQ's plain_acl.yml, parsed and answered.

File format (RocketMQ 4.x ACL 1.0)::

    globalWhiteRemoteAddresses: [10.10.103.*, 192.168.0.*]
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress: 192.168.1.*
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]

Permission arithmetic is RocketMQ's (``Permission.checkPermission``): DENY wins, ANY is
satisfied by PUB or SUB, otherwise the needed bit must be owned.  Two deliberate
differences, both failing closed (see docs/SECURITY.md): the address lists are
*allow-lists* (RocketMQ treats a match as "skip the signature"), and an admin account's
unspecified defaults are PUB|SUB instead of DENY.

Why strict parsing: a typo in a permission (``topicPerm:``) silently granting nothing, or
worse, is the classic ACL outage.  Any unknown account key or bad value is an AclError
naming the account (by access key, never the secret) and the field.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntFlag
from pathlib import Path
from typing import Any

from rocketscope.config import parse_bool


class AclError(ValueError):
    """A bad ACL file; the message names the account and field, never a secret."""


class Perm(IntFlag):
    """RocketMQ's permission bits (org.apache.rocketmq.acl.common.Permission)."""

    NONE = 0
    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8

    @classmethod
    def parse(cls, text: str | None, where: str) -> Perm:
        if text is None or str(text).strip() == "":
            raise AclError(f"{where}: permission is empty (use DENY, PUB, SUB or PUB|SUB)")
        perm = cls.NONE
        for part in str(text).upper().replace(" ", "").split("|"):
            if part not in ("DENY", "PUB", "SUB", "ANY"):
                raise AclError(f"{where}: unknown permission {part!r} (use DENY, PUB, SUB or PUB|SUB)")
            perm |= cls[part]
        return perm

    def label(self) -> str:
        return "|".join(p.name for p in (Perm.DENY, Perm.ANY, Perm.PUB, Perm.SUB) if p & self and p.name) or "NONE"


_DENY, _ANY, _PUB_OR_SUB = int(Perm.DENY), int(Perm.ANY), int(Perm.PUB | Perm.SUB)


def permits(needed: Perm, owned: Perm) -> bool:
    """RocketMQ's Permission.checkPermission (on plain ints: this runs per request, and enum flag
    arithmetic costs a microsecond per operator)."""
    n, o = int(needed), int(owned)
    if o & _DENY:
        return False
    if n & _ANY:
        return bool(o & _PUB_OR_SUB)
    return bool(n & o)


# ------------------------------------------------------------------ addresses
_SEGMENT = re.compile(r"^(\*|\d{1,3}|\d{1,3}-\d{1,3})$")


class AddressPattern:
    """One RocketMQ remote-address pattern.

    Accepted (RocketMQ's RemoteAddressStrategyFactory, plus CIDR): ``*`` and ``*.*.*.*``
    (anyone), an exact IPv4/IPv6 address, ``192.168.0.{1,2,3}`` (choices in the last
    segment), ``192.168.*`` / ``192.168.1-10.*`` (wildcard and range segments; missing
    trailing segments are wildcards), ``a,b,c`` (any of), and ``10.0.0.0/8`` CIDR.
    """

    def __init__(self, text: str) -> None:
        self.text = text.strip()
        self._alternatives: list[Any] = []
        if not self.text:
            raise AclError("empty address pattern")
        for alt in self._split(self.text):
            self._alternatives.append(self._compile(alt))

    @staticmethod
    def _split(text: str) -> list[str]:
        m = re.fullmatch(r"(.*)\.\{([^}]*)\}", text)
        if m:  # 192.168.0.{1,2}
            return [f"{m.group(1)}.{choice.strip()}" for choice in m.group(2).split(",") if choice.strip()]
        return [t.strip() for t in text.split(",") if t.strip()]

    def _compile(self, alt: str) -> Any:
        if alt in ("*", "*.*.*.*"):
            return True
        try:
            return ipaddress.ip_network(alt, strict=False)
        except ValueError:
            pass
        parts = alt.rstrip(".").split(".")
        if len(parts) > 4 or not all(_SEGMENT.match(p) for p in parts):
            raise AclError(f"address pattern {self.text!r} is not understood")
        ranges = []
        for p in parts + ["*"] * (4 - len(parts)):
            if p == "*":
                ranges.append((0, 255))
            elif "-" in p:
                lo, hi = (int(x) for x in p.split("-"))
                ranges.append((lo, hi))
            else:
                ranges.append((int(p), int(p)))
        if any(not (0 <= lo <= hi <= 255) for lo, hi in ranges):
            raise AclError(f"address pattern {self.text!r} has a segment outside 0-255")
        return tuple(ranges)

    def matches(self, host: str) -> bool:
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        for alt in self._alternatives:
            if alt is True:
                return True
            if isinstance(alt, ipaddress.IPv4Network | ipaddress.IPv6Network):
                if addr.version == alt.version and addr in alt:
                    return True
            elif addr.version == 4:
                octets = addr.packed
                if all(lo <= o <= hi for o, (lo, hi) in zip(octets, alt, strict=True)):
                    return True
        return False

    def __repr__(self) -> str:
        return f"AddressPattern({self.text!r})"


def any_matches(patterns: Iterable[AddressPattern], host: str) -> bool:
    return any(p.matches(host) for p in patterns)


# -------------------------------------------------------------------- accounts
@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    white_addresses: tuple[AddressPattern, ...] = ()
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: Mapping[str, Perm] = field(default_factory=dict)
    group_perms: Mapping[str, Perm] = field(default_factory=dict)

    def address_allowed(self, host: str) -> bool:
        return not self.white_addresses or any_matches(self.white_addresses, host)

    def topic_perm(self, topic: str) -> tuple[Perm, bool]:
        """(owned permission, whether it was listed explicitly)."""
        if topic in self.topic_perms:
            return self.topic_perms[topic], True
        return self.default_topic_perm, False

    def group_perm(self, group: str) -> tuple[Perm, bool]:
        if group in self.group_perms:
            return self.group_perms[group], True
        return self.default_group_perm, False


@dataclass(frozen=True)
class AclConfig:
    accounts: Mapping[str, Account]
    global_white_addresses: tuple[AddressPattern, ...] = ()
    source: str = ""

    def address_allowed(self, host: str) -> bool:
        return not self.global_white_addresses or any_matches(self.global_white_addresses, host)


ACCOUNT_KEYS = {"accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm", "defaultGroupPerm",
                "topicPerms", "groupPerms"}
TOP_KEYS = {"globalWhiteRemoteAddresses", "accounts", "dataVersion"}
MIN_KEY_LENGTH = 6  # RocketMQ's AclUtils rule for accessKey and secretKey


def _as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    try:
        return parse_bool(str(value))
    except ValueError:
        raise AclError(f"{where}: expected true or false, got {value!r}") from None


def _addresses(value: Any, where: str) -> tuple[AddressPattern, ...]:
    if value is None or value == "":
        return ()
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        try:
            out.append(AddressPattern(str(item)))
        except AclError as exc:
            raise AclError(f"{where}: {exc}") from None
    return tuple(out)


def _perm_map(value: Any, where: str) -> dict[str, Perm]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        entries = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        entries = []
        for item in value:
            name, sep, perm = str(item).partition("=")
            if not sep or not name.strip():
                raise AclError(f"{where}: entry {item!r} is not name=PERM")
            entries.append((name.strip(), perm))
    else:
        raise AclError(f"{where}: expected a list of name=PERM entries")
    out: dict[str, Perm] = {}
    for name, perm in entries:
        if name in out:
            raise AclError(f"{where}: {name} is listed twice")
        out[name] = Perm.parse(perm, f"{where}[{name}]")
    return out


def parse_acl(data: Any, source: str = "") -> AclConfig:
    """An AclConfig from the parsed YAML document."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise AclError("the ACL document must be a mapping with 'accounts'")
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise AclError(f"unknown top-level key(s) {', '.join(sorted(map(str, unknown)))}")
    raw_accounts = data.get("accounts") or []
    if not isinstance(raw_accounts, list):
        raise AclError("accounts must be a list")
    accounts: dict[str, Account] = {}
    for i, raw in enumerate(raw_accounts):
        if not isinstance(raw, Mapping):
            raise AclError(f"accounts[{i}] must be a mapping")
        ak = "" if raw.get("accessKey") is None else str(raw.get("accessKey")).strip()
        where = f"accounts[{i}] (accessKey {ak!r})"
        bad = set(raw) - ACCOUNT_KEYS
        if bad:
            raise AclError(f"{where}: unknown key(s) {', '.join(sorted(map(str, bad)))}")
        sk = "" if raw.get("secretKey") is None else str(raw.get("secretKey"))
        if len(ak) < MIN_KEY_LENGTH:
            raise AclError(f"{where}: accessKey must be at least {MIN_KEY_LENGTH} characters")
        if len(sk) < MIN_KEY_LENGTH:
            raise AclError(f"{where}: secretKey must be at least {MIN_KEY_LENGTH} characters")
        if ak in accounts:
            raise AclError(f"{where}: accessKey is listed twice")
        admin = _as_bool(raw.get("admin"), f"{where}.admin")
        default = Perm.PUB | Perm.SUB if admin else Perm.DENY
        topic_default = raw.get("defaultTopicPerm")
        group_default = raw.get("defaultGroupPerm")
        accounts[ak] = Account(
            access_key=ak, secret_key=sk, admin=admin,
            white_addresses=_addresses(raw.get("whiteRemoteAddress"), f"{where}.whiteRemoteAddress"),
            default_topic_perm=default if topic_default is None else Perm.parse(topic_default,
                                                                                 f"{where}.defaultTopicPerm"),
            default_group_perm=default if group_default is None else Perm.parse(group_default,
                                                                                 f"{where}.defaultGroupPerm"),
            topic_perms=_perm_map(raw.get("topicPerms"), f"{where}.topicPerms"),
            group_perms=_perm_map(raw.get("groupPerms"), f"{where}.groupPerms"))
    return AclConfig(accounts, _addresses(data.get("globalWhiteRemoteAddresses"), "globalWhiteRemoteAddresses"),
                     source)


def load_acl(path: str | Path) -> AclConfig:
    """Read and parse an ACL file; AclError (never a partial config) on any problem."""
    import yaml  # only a broker with an ACL file reads YAML: not imported at every process start

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise AclError(f"cannot read ACL file {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise AclError(f"ACL file {p} is not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise AclError(f"ACL file {p} is not valid YAML{where}") from None
    try:
        return parse_acl(data, str(p))
    except AclError as exc:
        raise AclError(f"ACL file {p}: {exc}") from None
