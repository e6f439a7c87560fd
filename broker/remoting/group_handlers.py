"""Apache mqadmin's subscription-group codes: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201).

Why here, apart from the other admin codes: the body of both is Apache's SubscriptionGroupConfig as fastjson
writes it (``groupName``, ``consumeEnable``, ``retryMaxTimes``, ``groupRetryPolicy``, ``attributes`` with
``+key``/``-key`` changes, ...), and the update goes through the same ``BrokerAdminService.update_group`` as
`rocketscope admin updateSubGroup`, so the attribute rules (broker/group_attributes.py) are one code.
`mqadmin updateSubGroup` sends 200; `mqadmin getConsumerConfig` reads 201.

Answers as Apache 5.5.0's AdminBrokerProcessor gives them (read from its jars): a group name outside the
rules is INVALID_PARAMETER; an attribute Apache refuses throws inside its SubscriptionGroupManager, which its
remoting layer answers as SYSTEM_ERROR with the exception's text (``java.lang.RuntimeException: unsupported
key: foo``); a request without a body is answered SUCCESS and changes nothing.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from ..group_attributes import AttributeRefused
from ..groups import DEFAULT_RETRY_MAX_TIMES, GroupConfig, group_name_problem
from ..retry_policy import parse_group_retry_policy
from .codec import RemotingCommand, ResponseCode, json_body
from .server import Connection, Handler

if TYPE_CHECKING:
    from ..admin_service import BrokerAdminService
    from ..groups import GroupManager

log = logging.getLogger(__name__)

UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201

# fastjson field -> (GroupConfig field, Java type, Apache's default when the body leaves it out)
FIELDS: dict[str, tuple[str, type, Any]] = {
    "consumeEnable": ("consume_enable", bool, True),
    "consumeFromMinEnable": ("consume_from_min_enable", bool, True),
    "consumeBroadcastEnable": ("consume_broadcast_enable", bool, True),
    "consumeMessageOrderly": ("consume_message_orderly", bool, False),
    "retryQueueNums": ("retry_queue_nums", int, 1),
    "retryMaxTimes": ("retry_max_times", int, DEFAULT_RETRY_MAX_TIMES),
    "brokerId": ("broker_id", int, 0),
    "whichBrokerWhenConsumeSlowly": ("which_broker_when_consume_slowly", int, 1),
    "notifyConsumerIdsChangedEnable": ("notify_consumer_ids_changed_enable", bool, True),
    "groupSysFlag": ("group_sys_flag", int, 0),
    "consumeTimeoutMinute": ("consume_timeout_minute", int, 15),
}


class BodyError(ValueError):
    """A body field of the wrong JSON type (fastjson's decode exception in Apache: SYSTEM_ERROR)."""


def config_from_json(obj: Any) -> tuple[GroupConfig, dict[str, str]]:
    """The GroupConfig of a SubscriptionGroupConfig JSON object and its attribute changes (signs kept)."""
    if not isinstance(obj, dict):
        raise BodyError("body: a SubscriptionGroupConfig JSON object expected")
    name = obj.get("groupName")
    if not isinstance(name, str):
        raise BodyError("groupName: a string expected")
    cfg = GroupConfig(name)
    for key, (attr, kind, default) in FIELDS.items():
        value = obj.get(key, default)
        if value is None:
            value = default
        if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
            raise BodyError(f"{key}: {json.dumps(value)[:64]} is not a {'boolean' if kind is bool else 'number'}")
        setattr(cfg, attr, value)
    policy = obj.get("groupRetryPolicy")
    if policy is not None:
        try:
            parsed = parse_group_retry_policy(json.dumps(policy))
        except ValueError as exc:
            raise BodyError(str(exc)) from None
        # Apache's default policy object (CUSTOMIZED without levels) is the default levels: kept as "no policy"
        given = policy.get("customizedRetryPolicy") if isinstance(policy, dict) else None
        cfg.retry_policy = None if parsed["type"] == "CUSTOMIZED" and not given else parsed
    attrs = obj.get("attributes") or {}
    if not isinstance(attrs, dict) or not all(isinstance(k, str) and isinstance(v, str | None)
                                              for k, v in attrs.items()):
        raise BodyError("attributes: a JSON object of strings expected")
    return cfg, {k: v or "" for k, v in attrs.items()}


def config_json(cfg: GroupConfig) -> dict[str, Any]:
    """A group as Apache's SubscriptionGroupConfig JSON (what mqadmin getConsumerConfig prints)."""
    out: dict[str, Any] = {"groupName": cfg.name}
    for key, (attr, _, _) in FIELDS.items():
        out[key] = getattr(cfg, attr)
    out["groupRetryPolicy"] = cfg.retry_policy or {"type": "CUSTOMIZED"}
    out["attributes"] = dict(cfg.attributes)
    return out


def group_handlers(groups: GroupManager, svc: BrokerAdminService) -> dict[int, Handler]:
    async def update_group(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if not cmd.body:
            log.info("updateSubGroup over remoting from %s without a body: nothing changed", conn.peer)
            return cmd.response()
        try:
            cfg, changes = config_from_json(json.loads(cmd.body.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"body: not a SubscriptionGroupConfig JSON object ({exc})")
        except BodyError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if problem := group_name_problem(cfg.name):
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"groupName: {problem}")
        try:
            svc.update_group(cfg, changes)
        except AttributeRefused as exc:
            log.info("updateSubGroup %s over remoting refused: %s", cfg.name, exc)
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"java.lang.RuntimeException: {exc}")
        except ValueError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, str(exc))
        return cmd.response()

    async def all_groups(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        table = {g.name: config_json(g) for g in groups.all()}
        stamp, counter = groups.data_version
        body = {"subscriptionGroupTable": table, "forbiddenTable": {},
                "dataVersion": {"counter": counter, "stateVersion": 0, "timestamp": stamp}}
        return cmd.response(ext_fields={"totalGroupNum": str(len(table))}, body=json_body(body))

    return {UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: update_group, GET_ALL_SUBSCRIPTIONGROUP_CONFIG: all_groups}
