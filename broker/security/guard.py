"""The access decision: who is calling (signature), from where (address lists), for what (permissions).

``AclGuard.authorize(method, request, metadata, peer)`` is the one entry point; the gRPC
interceptor calls it for every request, and anything else (a handler, a test) can too.
A refusal is a ``Decision`` carrying the RocketMQ v2 code (UNAUTHORIZED 40100 for
credentials, FORBIDDEN 40300 for addresses and permissions), the gRPC status for
services without v2 codes, a reason a human can act on, and the metric labels.  Every
refusal is counted in ``rocketmq_acl_denied_total`` and logged (rate-limited) with the
access key, address, method and reason, never a secret key or signature.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf.message import Message

from rocketscope import signature as sig
from rocketscope.names import TRACE_TOPIC

from .acl import Account, AclConfig, AclError, Perm, load_acl, permits
from .listener import real_peer
from .resources import Need, Requirement, requirement, split_method

log = logging.getLogger(__name__)

UNAUTHORIZED = 40100  # apache.rocketmq.v2.Code
FORBIDDEN = 40300
OK = 20000


class Counter(Protocol):
    def add(self, amount: int, attributes: dict[str, str] | None = ...) -> None: ...


@dataclass(frozen=True)
class Decision:
    allowed: bool
    code: int = OK
    reason: str = ""
    account: str = ""
    resource_type: str = ""  # metric label: topic, group, admin, account
    action: str = ""  # metric label: PUB, SUB, ANY, ADMIN, AUTH
    kind: str = ""  # metric label reason: signature, account, ip, permission

    @property
    def grpc_status(self) -> grpc.StatusCode:
        if self.allowed:
            return grpc.StatusCode.OK
        return grpc.StatusCode.UNAUTHENTICATED if self.code == UNAUTHORIZED else grpc.StatusCode.PERMISSION_DENIED


ALLOW = Decision(True)


def peer_host(peer: str) -> str:
    """The IP of a gRPC peer string ('ipv4:1.2.3.4:5', 'ipv6:[::1]:5', 'ipv6:%5B::1%5D:5')."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        rest = rest.replace("%5B", "[").replace("%5D", "]")
        if rest.startswith("["):
            return rest[1:rest.find("]")]
        return rest.rpartition(":")[0]
    return peer


class _RateLimitedLog:
    """At most ``per_second`` refusal lines a second; the rest are summarised."""

    def __init__(self, per_second: int = 20) -> None:
        self.per_second = per_second
        self.window = 0
        self.count = 0
        self.suppressed = 0
        self.lock = threading.Lock()

    def __call__(self, msg: str, *args: object) -> None:
        now = int(time.monotonic())
        with self.lock:
            if now != self.window:
                if self.suppressed:
                    log.warning("ACL: %d more refusals in the last second were not logged", self.suppressed)
                self.window, self.count, self.suppressed = now, 0, 0
            self.count += 1
            if self.count > self.per_second:
                self.suppressed += 1
                return
        log.warning(msg, *args)


class AclGuard:
    """Holds the current ACL (replaced atomically on reload) and decides requests."""

    def __init__(self, acl: AclConfig, *, path: str | Path | None = None, trace_topic: str = TRACE_TOPIC,
                 max_skew_s: float = sig.DEFAULT_SKEW_S, denied_counter: Counter | None = None) -> None:
        self.acl = acl
        self.path = Path(path) if path is not None else None
        self.trace_topic = trace_topic
        self.max_skew_s = max_skew_s
        self.denied_counter = denied_counter
        self.denied = 0
        self._log = _RateLimitedLog()
        # (authorization, date) -> (the ACL it was verified under, account, request epoch): the official
        # client signs with a one-second date, so at any real rate most requests repeat a verified header
        self._verified: dict[tuple[str, str], tuple[AclConfig, Account, float]] = {}
        self._allowed: dict[str, Decision] = {}

    @classmethod
    def from_file(cls, path: str | Path, **kw: Any) -> AclGuard:
        """Load the ACL file; AclError when it is missing or bad (the broker must not start)."""
        return cls(load_acl(path), path=path, **kw)

    # ------------------------------------------------------------- reloading
    def reload(self) -> bool:
        """Re-read the ACL file.  On any error keep the current ACL (fail safe) and log why."""
        if self.path is None:
            return False
        try:
            new = load_acl(self.path)
        except AclError as exc:
            log.error("ACL reload failed, keeping the previous ACL: %s", exc)
            return False
        self.acl = new
        log.info("ACL reloaded from %s: %d accounts, %d global address patterns", self.path, len(new.accounts),
                 len(new.global_white_addresses))
        return True

    # -------------------------------------------------------------- deciding
    def deny(self, code: int, kind: str, reason: str, method: str, host: str, account: str = "",
             resource_type: str = "account", action: str = "AUTH") -> Decision:
        self.denied += 1
        if self.denied_counter is not None:
            try:
                self.denied_counter.add(1, {"resource_type": resource_type, "action": action, "reason": kind})
            except Exception:  # metrics must never turn a refusal into an internal error
                log.debug("counting an ACL refusal failed", exc_info=True)
        self._log("ACL refused %s from %s (access key %r): %s", split_method(method)[1] or method, host or "?",
                  account, reason)
        return Decision(False, code, reason, account, resource_type, action, kind)

    def authenticate(self, method: str, metadata: Sequence[tuple[str, Any]] | None,
                     peer: str) -> tuple[Account | None, Decision, str]:
        """(account, ALLOW, host) for valid credentials from an allowed address, else (None, refusal, host)."""
        host = peer_host(real_peer(peer))
        acl = self.acl
        if not acl.address_allowed(host):
            return None, self.deny(FORBIDDEN, "ip", f"address {host} is not in globalWhiteRemoteAddresses",
                                   method, host, resource_type="address", action="ANY"), host
        header = sig.metadata_get(metadata, sig.AUTH_HEADER)
        if not header:
            return None, self.deny(UNAUTHORIZED, "account", "no credentials: the broker has aclEnable=true; "
                                   "configure an access key and secret key", method, host), host
        date = sig.metadata_get(metadata, sig.DATE_HEADER) or ""
        hit = self._verified.get((header, date))
        if hit is not None and hit[0] is acl and (self.max_skew_s <= 0 or sig.skew_of(hit[2]) <= self.max_skew_s):
            account = hit[1]
        else:
            try:
                auth = sig.parse_authorization(header)
            except sig.SignatureError as exc:
                return None, self.deny(UNAUTHORIZED, exc.kind, exc.message, method, host), host
            found = acl.accounts.get(auth.access_key)
            if found is None:
                return None, self.deny(UNAUTHORIZED, "account", f"unknown access key {auth.access_key!r}", method,
                                       host, auth.access_key), host
            try:
                if not date:
                    raise sig.SignatureError("signature", f"metadata {sig.DATE_HEADER} is missing")
                sig.verify(auth, date, found.secret_key)
                epoch = sig.check_fresh(date, self.max_skew_s)
            except sig.SignatureError as exc:
                return None, self.deny(UNAUTHORIZED, exc.kind, exc.message, method, host, auth.access_key), host
            account = found
            if len(self._verified) >= 4096:
                self._verified.clear()
            self._verified[(header, date)] = (acl, account, epoch)
        if not account.address_allowed(host):
            return None, self.deny(FORBIDDEN, "ip", f"access key {account.access_key!r} may not be used from "
                                   f"{host} (whiteRemoteAddress)", method, host, account.access_key,
                                   resource_type="address", action="ANY"), host
        return account, ALLOW, host

    def owned(self, account: Account, need: Need) -> Perm:
        if need.kind == "group":
            return account.group_perm(need.name)[0]
        perm, explicit = account.topic_perm(need.name)
        if need.name == self.trace_topic and not explicit:
            perm = (perm & ~Perm.DENY) | Perm.PUB  # every account may write trace records
        return perm

    def check(self, method: str, account: Account, req: Requirement, host: str) -> Decision:
        """Permission check of an authenticated account."""
        if req.admin and not account.admin:
            return self.deny(FORBIDDEN, "permission", f"{split_method(method)[1] or method} is admin-only and "
                             f"access key {account.access_key!r} is not an admin", method, host,
                             account.access_key, "admin", "ADMIN")
        for need in req.needs:
            owned = self.owned(account, need)
            if not permits(need.perm, owned):
                return self.deny(FORBIDDEN, "permission",
                                 f"access key {account.access_key!r} has {owned.label()} on {need.kind} "
                                 f"{need.name}, {need.perm.label()} is needed", method, host,
                                 account.access_key, need.kind, need.perm.label())
        allowed = self._allowed.get(account.access_key)
        if allowed is None:
            allowed = self._allowed[account.access_key] = Decision(True, account=account.access_key)
        return allowed

    def authorize(self, method: str, request: Any, metadata: Sequence[tuple[str, Any]] | None,
                  peer: str) -> Decision:
        """The whole decision for one request.  A request that did not parse (not a protobuf message) is
        only authenticated; its handler answers BAD_REQUEST."""
        account, decision, host = self.authenticate(method, metadata, peer)
        if account is None:
            return decision
        req = requirement(method, request if isinstance(request, Message) else None)
        return self.check(method, account, req, host)
