"""Consumer-group attributes as Apache RocketMQ 5.5.0 changes them (broker/group_attributes.py) and the remoting
codes 200/201 that carry them (broker/remoting/group_handlers.py), without processes.

The expected texts are Apache 5.5.0's (its AttributeUtil and attribute classes, read from the jars); the e2e
run of Apache's own mqadmin against a broker is tests/test_lite.py ``test_apache_mqadmin_update_sub_group``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rocketscope.broker.admin_service import BrokerAdminService
from rocketscope.broker.group_attributes import AttributeRefused, alter, signed
from rocketscope.broker.groups import GroupManager
from rocketscope.broker.remoting.codec import RemotingCommand
from rocketscope.broker.remoting.group_handlers import (
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    group_handlers,
)


def test_a_new_group_only_adds() -> None:
    assert alter(True, {}, {"+lite.bind.topic": "T"}) == {"lite.bind.topic": "T"}
    with pytest.raises(AttributeRefused, match=r"^only add attribute is supported while creating topic\. key: "
                                               r"lite\.sub\.model$"):
        alter(True, {}, {"-lite.sub.model": ""})


def test_an_update_changes_what_it_names_and_keeps_the_rest() -> None:
    cur = {"lite.bind.topic": "T", "lite.sub.model": "Exclusive"}
    assert alter(False, cur, {}) == cur  # an update without attributes keeps the bind topic
    assert alter(False, cur, {"+lite.bind.topic": "U"}) == {"lite.bind.topic": "U", "lite.sub.model": "Exclusive"}
    assert alter(False, cur, {"-lite.sub.model": ""}) == {"lite.bind.topic": "T"}
    assert alter(False, cur, {"+lite.sub.client.quota": "5"})["lite.sub.client.quota"] == "5"


@pytest.mark.parametrize(("create", "change", "text"), [
    (True, {"+foo": "1"}, "unsupported key: foo"),
    (False, {"+foo": "1"}, "unsupported key: foo"),
    (False, {"-lite.bind.topic": ""}, "attempt to delete a nonexistent key: lite.bind.topic"),
    (False, {"lite.bind.topic": "T"}, "wrong format key: ite.bind.topic"),  # Apache drops the first character
    (True, {"+": "x"}, "kv string format wrong."),
    (True, {"+lite.sub.model": "Single"}, "value is not in set: [Shared, Exclusive]"),
    (True, {"+lite.sub.client.quota": "-2"}, "value is not in range(-1, 9223372036854775807)"),
    (True, {"+lite.sub.client.quota": "many"}, 'For input string: "many"'),
    (True, {"+lite.sub.client.max.event.cnt": "9"}, "value is not in range(10, 9223372036854775807)"),
    (True, {"+lite.sub.reset.offset.exclusive": "yes"}, "boolean attribute format is wrong."),
    (True, {"+priority.factor": "101"}, "value is not in range(0, 100)"),
])
def test_refusals_carry_apache_texts(create: bool, change: dict[str, str], text: str) -> None:
    with pytest.raises(AttributeRefused) as err:
        alter(create, {}, change)
    assert str(err.value) == text


def test_rocketscope_admin_keys_without_a_sign_add() -> None:
    assert signed({"lite.bind.topic": "T", "-lite.sub.model": ""}) == {"+lite.bind.topic": "T",
                                                                        "-lite.sub.model": ""}


def call(handlers: dict[int, Any], code: int, body: Any = None) -> RemotingCommand:
    raw = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    cmd = RemotingCommand(code=code, opaque=1, body=raw)
    return asyncio.run(handlers[code](cmd, SimpleNamespace(peer="127.0.0.1:1")))


def test_remoting_update_and_get_all(tmp_path: Path) -> None:
    """What mqadmin updateSubGroup sends (fastjson's SubscriptionGroupConfig) and what getConsumerConfig reads."""
    groups = GroupManager(tmp_path / "groups.json")
    h = group_handlers(groups, BrokerAdminService(SimpleNamespace(groups=groups)))  # type: ignore[arg-type]
    body = {"groupName": "GL", "consumeEnable": True, "consumeBroadcastEnable": False, "retryMaxTimes": 3,
            "retryQueueNums": 1, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1, "groupSysFlag": 0,
            "notifyConsumerIdsChangedEnable": True, "consumeMessageOrderly": False, "consumeTimeoutMinute": 15,
            "groupRetryPolicy": {"type": "CUSTOMIZED"}, "attributes": {"+lite.bind.topic": "LT"}}
    assert call(h, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body).code == 0
    cfg = groups.get("GL")
    assert cfg is not None and cfg.retry_max_times == 3 and cfg.lite_bind_topic == "LT" and cfg.retry_policy is None
    # an update naming no attribute keeps the bind topic (Apache's alterCurrentAttributes)
    assert call(h, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {**body, "attributes": {}, "retryMaxTimes": 5}).code == 0
    assert groups.get("GL").lite_bind_topic == "LT"  # type: ignore[union-attr]
    bad = call(h, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {**body, "attributes": {"+foo": "1"}})
    assert (bad.code, bad.remark) == (1, "java.lang.RuntimeException: unsupported key: foo")
    assert "foo" not in groups.get("GL").attributes  # type: ignore[union-attr]
    named = call(h, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {**body, "groupName": "bad group"})
    assert named.code == 29 and named.remark.startswith("groupName: ")
    typed = call(h, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {**body, "retryMaxTimes": "x"})
    assert typed.code == 1 and typed.remark.startswith("retryMaxTimes: ")
    assert call(h, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, b"{not json").code == 1
    assert call(h, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP).code == 0 and groups.all() == [groups.get("GL")]

    got = call(h, GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    table = json.loads(got.body)["subscriptionGroupTable"]
    assert got.code == 0 and got.fields["totalGroupNum"] == "1"
    assert table["GL"]["retryMaxTimes"] == 5 and table["GL"]["attributes"] == {"lite.bind.topic": "LT"}
    assert table["GL"]["consumeBroadcastEnable"] is False
