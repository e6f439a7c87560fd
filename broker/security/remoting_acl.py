"""The ACL on RocketMQ's remoting protocol: the same accounts and permissions as gRPC, its own signature.

A remoting client with credentials (Java's AclClientRPCHook, the Go client's
primitive.Credentials) adds ext fields ``AccessKey``, ``Signature`` and, when it has one,
``SecurityToken``.  The signed content is the values of every ext field except
``Signature`` (AccessKey and SecurityToken included; ``_UNIQUE_KEY_QUERY`` too, unless the
request's version is 4.9.3 or older, whose clients left it out), ordered by field name,
concatenated as UTF-8, followed by the body bytes; the signature is
Base64(HMAC-SHA1(content, secretKey)).  There is no date in it, so unlike gRPC there is
no clock-skew bound: a captured request can be replayed, as in RocketMQ (docs/SECURITY.md).

What each request code needs follows Apache's PlainAccessResource for remoting, with
groups checked as groups (RocketMQ checks ``%RETRY%group`` as a topic); SEND_BATCH_MESSAGE
needs PUB like the other sends; codes that change the broker's configuration or offsets
are admin-only; every other code needs valid credentials.  The decision itself (address
lists, accounts, permission arithmetic, counting and logging refusals) is
``guard.AclGuard``'s, so both front doors answer alike.  A refusal is NO_PERMISSION (16)
with a remark naming the cause, never the secret.
"""

from __future__ import annotations

import base64
import hmac
import json
from collections.abc import Callable
from typing import Any

from rocketscope.names import RETRY_PREFIX

from ..remoting.codec import CODE_NAMES, RemotingCommand, RequestCode, ResponseCode
from .acl import Perm
from .guard import FORBIDDEN, UNAUTHORIZED, AclGuard, Decision
from .resources import ADMIN, ANY_ACCOUNT, Need, Requirement

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
# MQVersion.Version.V4_9_3's ordinal: clients up to it did not sign _UNIQUE_KEY_QUERY, later ones do
# (checked against Apache's 5.3.3 jars: AclClientRPCHook signs it; the broker skips it only up to this version)
V4_9_3 = 399

# state-changing admin codes (Apache's Permission.needAdminPerm list, plus the offset reset and
# SET_MESSAGE_REQUEST_MODE, mqadmin setConsumeMode)
ADMIN_CODES = frozenset({17, 25, 200, 207, 215, 222, 401})


def content(fields: dict[str, str], body: bytes, version: int = V4_9_3 + 1) -> bytes:
    """What the client signed: the values of the ext fields sorted by name, then the body."""
    skip = (SIGNATURE, UNIQUE_KEY_QUERY) if version <= V4_9_3 else (SIGNATURE,)
    text = "".join([fields[k] for k in sorted(fields) if k not in skip])
    return text.encode("utf-8") + (body or b"")


def sign(fields: dict[str, str], body: bytes, secret_key: str, version: int = V4_9_3 + 1) -> str:
    """Base64(HMAC-SHA1) of ``content``: what a client puts in the Signature field (also used by tests)."""
    mac = hmac.digest(secret_key.encode("utf-8"), content(fields, body, version), "sha1")
    return base64.b64encode(mac).decode("ascii")


def _need(kind: str, name: str | None, perm: Perm) -> tuple[Need, ...]:
    return (Need(kind, name, perm),) if name else ()


def _send(f: dict[str, str], topic_key: str, group_key: str) -> Requirement:
    topic = f.get(topic_key, "")
    if topic.startswith(RETRY_PREFIX):  # a consumer sending back to its retry topic
        return Requirement(needs=_need("group", f.get(group_key) or topic[len(RETRY_PREFIX):], Perm.SUB))
    return Requirement(needs=_need("topic", topic, Perm.PUB))


_BAD_JSON = object()


def _json_body(body: bytes) -> Any:
    """The parsed JSON body, or ``_BAD_JSON`` (the handler answers the bad body)."""
    try:
        return json.loads(body or b"{}")
    except ValueError:
        return _BAD_JSON


def _sub(group: str | None, topic: str | None) -> tuple[Need, ...]:
    """SUB on a consumer group and the topic it reads; a retry topic needs the group only."""
    needs = _need("group", group, Perm.SUB)
    if not str(topic or "").startswith(RETRY_PREFIX):
        needs += _need("topic", topic, Perm.SUB)
    return needs


def _heartbeat(body: bytes) -> Requirement:
    """Every consumer group of the heartbeat and every topic it subscribes: SUB."""
    data = _json_body(body)
    if data is _BAD_JSON:
        return ANY_ACCOUNT
    needs: list[Need] = []
    for cd in (data.get("consumerDataSet") or []) if isinstance(data, dict) else []:
        if not isinstance(cd, dict):
            continue
        needs += _need("group", cd.get("groupName"), Perm.SUB)
        for sd in cd.get("subscriptionDataSet") or []:
            if isinstance(sd, dict) and not str(sd.get("topic", "")).startswith(RETRY_PREFIX):
                needs += _need("topic", sd.get("topic"), Perm.SUB)
    return Requirement(needs=tuple(dict.fromkeys(needs)))


def _assignment(body: bytes) -> Requirement:
    """QUERY_ASSIGNMENT: SUB on the group and the topic its body names (the retry topic: the group only)."""
    data = _json_body(body)
    if data is _BAD_JSON or not isinstance(data, dict):
        return ANY_ACCOUNT
    return Requirement(needs=_sub(data.get("consumerGroup"), str(data.get("topic") or "")))


def _batch_ack(body: bytes) -> Requirement:
    """BATCH_ACK_MESSAGE: SUB on every group and topic its acks name (as an ACK_MESSAGE of each)."""
    data = _json_body(body)
    if data is _BAD_JSON:
        return ANY_ACCOUNT
    needs: list[Need] = []
    for ack in (data.get("acks") or []) if isinstance(data, dict) else []:
        if isinstance(ack, dict):
            needs += _sub(str(ack.get("c") or ""), str(ack.get("t") or ""))
    return Requirement(needs=tuple(dict.fromkeys(needs)))


def requirement(code: int, fields: dict[str, str], body: bytes) -> Requirement:
    """What a remoting request needs besides valid credentials."""
    R = RequestCode
    if code == R.SEND_MESSAGE:
        return _send(fields, "topic", "producerGroup")
    if code in (R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE):
        return _send(fields, "b", "a") if "b" in fields else _send(fields, "topic", "producerGroup")
    if code in (R.PULL_MESSAGE, R.LITE_PULL_MESSAGE, R.UPDATE_CONSUMER_OFFSET, R.QUERY_CONSUMER_OFFSET,
                R.POP_MESSAGE, R.ACK_MESSAGE, R.CHANGE_MESSAGE_INVISIBLETIME):
        topic = fields.get("topic") or ""
        # an ack of a retried POP message names the retry topic (Apache's client: %RETRY%<group>_<topic>)
        topic_need = () if topic.startswith(RETRY_PREFIX) else _need("topic", topic, Perm.SUB)
        return Requirement(needs=_need("group", fields.get("consumerGroup"), Perm.SUB) + topic_need)
    if code == R.CONSUMER_SEND_MSG_BACK:
        return Requirement(needs=_need("group", fields.get("group"), Perm.SUB))
    if code in (R.UNREGISTER_CLIENT, R.GET_CONSUMER_LIST_BY_GROUP):
        return Requirement(needs=_need("group", fields.get("consumerGroup"), Perm.SUB))
    if code == R.QUERY_MESSAGE:
        return Requirement(needs=_need("topic", fields.get("topic"), Perm.SUB))
    if code == R.HEART_BEAT:
        return _heartbeat(body)
    if code == R.QUERY_ASSIGNMENT:
        return _assignment(body)
    if code == R.BATCH_ACK_MESSAGE:
        return _batch_ack(body)
    if code in ADMIN_CODES:
        return ADMIN
    return ANY_ACCOUNT


class RemotingAcl:
    """Checks each remoting request against ``guard``; ``gate`` is the server's hook."""

    def __init__(self, guard: AclGuard) -> None:
        self.guard = guard

    def decide(self, cmd: RemotingCommand, peer: str) -> Decision:
        g = self.guard
        method = f"remoting/{CODE_NAMES.get(cmd.code, str(cmd.code))}"
        host = peer.rpartition(":")[0].strip("[]") or peer
        acl = g.acl
        if not acl.address_allowed(host):
            return g.deny(FORBIDDEN, "ip", f"address {host} is not in globalWhiteRemoteAddresses", method, host,
                          resource_type="address", action="ANY")
        fields = cmd.fields
        access_key = fields.get(ACCESS_KEY, "")
        given = fields.get(SIGNATURE, "")
        if not access_key or not given:
            return g.deny(UNAUTHORIZED, "account", "no credentials: the broker has aclEnable=true; configure an "
                          "access key and secret key (ext fields AccessKey and Signature are missing)", method, host)
        account = acl.accounts.get(access_key)
        if account is None:
            return g.deny(UNAUTHORIZED, "account", f"unknown access key {access_key!r}", method, host, access_key)
        if not hmac.compare_digest(sign(fields, cmd.body, account.secret_key, cmd.version), given.strip()):
            return g.deny(UNAUTHORIZED, "signature", f"signature does not match for access key {access_key!r} "
                          "(wrong secret key?)", method, host, access_key)
        if not account.address_allowed(host):
            return g.deny(FORBIDDEN, "ip", f"access key {access_key!r} may not be used from {host} "
                          "(whiteRemoteAddress)", method, host, access_key, resource_type="address", action="ANY")
        return g.check(method, account, requirement(cmd.code, fields, cmd.body), host)

    def gate(self, cmd: RemotingCommand, conn: Any) -> RemotingCommand | None:
        """None to let the request through, else the NO_PERMISSION answer to send instead."""
        decision = self.decide(cmd, str(getattr(conn, "peer", "")))
        if decision.allowed:
            return None
        return cmd.response(ResponseCode.NO_PERMISSION, f"ACL: {decision.reason}")


Gate = Callable[[RemotingCommand, Any], RemotingCommand | None]
