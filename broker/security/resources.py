"""What each RPC needs: the resources (topic, group) and actions (PUB, SUB, ANY), or admin.

The client-facing table follows RocketMQ 5's proxy (PlainAccessResource.parse for gRPC):
sends need PUB on the topic; everything a consumer does needs SUB on the topic and on
the group; a route query needs ANY on the topic.  For the internal admin service every
call that changes state is admin-only and the read-only calls need a valid account.  An
RPC not in these tables is admin-only: a method added later fails closed until someone
decides what it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .acl import Perm

MESSAGING_SERVICE = "apache.rocketmq.v2.MessagingService"
ADMIN_SERVICES = ("rocketscope.internal.BrokerAdmin", "rocketscope.internal.ContainerAdmin")


@dataclass(frozen=True)
class Need:
    kind: str  # "topic" or "group"
    name: str
    perm: Perm


@dataclass(frozen=True)
class Requirement:
    """What a request needs besides valid credentials."""

    admin: bool = False
    needs: tuple[Need, ...] = ()
    authenticate_only: bool = False  # valid credentials suffice (needs is empty)


ANY_ACCOUNT = Requirement(authenticate_only=True)
ADMIN = Requirement(admin=True)


def split_method(method: str) -> tuple[str, str]:
    """'/pkg.Service/Method' -> ('pkg.Service', 'Method'); a bare name has no service."""
    path = method.strip("/")
    service, _, name = path.rpartition("/")
    return service, name


def _topic(name: str, perm: Perm) -> tuple[Need, ...]:
    return (Need("topic", name, perm),) if name else ()


def _group(name: str, perm: Perm) -> tuple[Need, ...]:
    return (Need("group", name, perm),) if name else ()


def _consume(group: str, topic: str) -> Requirement:
    return Requirement(needs=_group(group, Perm.SUB) + _topic(topic, Perm.SUB))


def _send(req: Any) -> Requirement:
    msgs = req.messages
    if len(msgs) == 1:
        return Requirement(needs=(Need("topic", msgs[0].topic.name, Perm.PUB),))
    topics = dict.fromkeys(m.topic.name for m in msgs)
    return Requirement(needs=tuple(Need("topic", t, Perm.PUB) for t in topics))


def telemetry_settings(cmd: Any) -> Requirement:
    """A Telemetry settings command: publishing topics need PUB, a subscription SUB."""
    if cmd.WhichOneof("command") != "settings":
        return ANY_ACCOUNT
    s = cmd.settings
    kind = s.WhichOneof("pub_sub")
    if kind == "publishing":
        return Requirement(needs=tuple(Need("topic", t.name, Perm.PUB) for t in s.publishing.topics if t.name))
    if kind == "subscription":
        sub = s.subscription
        needs = _group(sub.group.name, Perm.SUB)
        needs += tuple(Need("topic", e.topic.name, Perm.SUB) for e in sub.subscriptions if e.topic.name)
        return Requirement(needs=needs)
    return ANY_ACCOUNT


MESSAGING: dict[str, Callable[[Any], Requirement]] = {
    "QueryRoute": lambda r: Requirement(needs=_topic(r.topic.name, Perm.ANY)),
    "Heartbeat": lambda r: Requirement(needs=_group(r.group.name, Perm.SUB)) if r.group.name else ANY_ACCOUNT,
    "SendMessage": _send,
    "QueryAssignment": lambda r: _consume(r.group.name, r.topic.name),
    "ReceiveMessage": lambda r: _consume(r.group.name, r.message_queue.topic.name),
    "AckMessage": lambda r: _consume(r.group.name, r.topic.name),
    "ForwardMessageToDeadLetterQueue": lambda r: _consume(r.group.name, r.topic.name),
    "ChangeInvisibleDuration": lambda r: _consume(r.group.name, r.topic.name),
    "PullMessage": lambda r: _consume(r.group.name, r.message_queue.topic.name),
    "UpdateOffset": lambda r: _consume(r.group.name, r.message_queue.topic.name),
    "GetOffset": lambda r: _consume(r.group.name, r.message_queue.topic.name),
    "QueryOffset": lambda r: Requirement(needs=_topic(r.message_queue.topic.name, Perm.SUB)),
    "EndTransaction": lambda r: Requirement(needs=_topic(r.topic.name, Perm.PUB)),
    "RecallMessage": lambda r: Requirement(needs=_topic(r.topic.name, Perm.PUB)),
    "NotifyClientTermination": lambda r: (Requirement(needs=_group(r.group.name, Perm.SUB)) if r.group.name
                                          else ANY_ACCOUNT),
    "SyncLiteSubscription": lambda r: _consume(r.group.name, r.topic.name),
    "Telemetry": lambda r: ANY_ACCOUNT,  # the stream; each settings command is checked by telemetry_settings
}

ADMIN_READ_ONLY = frozenset({
    "GetTopicConfigs", "GetSubGroups", "ConsumerProgress", "ConsumerConnections", "BrokerStatus", "QueueOffsets",
    "ConsumerOffsets", "HaStatus", "HaEvents", "ContainerStatus", "GetMessageRequestModes",
})
ADMIN_ONLY = frozenset({"UpdateTopic", "DeleteTopic", "UpdateSubGroup", "DeleteSubGroup", "ChangeRole", "AddBroker",
                        "RemoveBroker", "ElectMaster", "UpdateBrokerConfig"})


def requirement(method: str, request: Any) -> Requirement:
    """What ``request`` to ``method`` ('/service/Method') needs.  ``request`` None: the method alone."""
    service, name = split_method(method)
    if service in ("", MESSAGING_SERVICE) and name in MESSAGING:
        if request is None:
            return ANY_ACCOUNT
        return MESSAGING[name](request)
    if service in ("", *ADMIN_SERVICES):
        if name in ADMIN_READ_ONLY:
            return ANY_ACCOUNT
        if name == "QueryMessage":
            topic = getattr(request, "topic", "") if request is not None else ""
            return Requirement(needs=_topic(topic, Perm.SUB)) if topic else ADMIN
    return ADMIN
