"""What the remoting ACL asks of the POP codes and QUERY_ASSIGNMENT (broker/security/remoting_acl.py): SUB on the
consumer group and the topic, as for PULL_MESSAGE (docs/SECURITY.md, "ACL over the remoting protocol")."""

from __future__ import annotations

import json

import pytest

from rocketscope.broker.remoting.codec import RequestCode
from rocketscope.broker.security.acl import Perm
from rocketscope.broker.security.remoting_acl import requirement


@pytest.mark.parametrize("code", [RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE,
                                  RequestCode.CHANGE_MESSAGE_INVISIBLETIME])
def test_pop_codes_need_sub_on_group_and_topic(code: int) -> None:
    req = requirement(code, {"consumerGroup": "G", "topic": "T", "extraInfo": "0 1 2 0 0 b 0 5"}, b"")
    assert not req.admin
    assert {(n.kind, n.name, n.perm) for n in req.needs} == {("group", "G", Perm.SUB), ("topic", "T", Perm.SUB)}
    retried = requirement(code, {"consumerGroup": "G", "topic": "%RETRY%G_T", "extraInfo": "0 1 2 0 1 b 0 5"}, b"")
    assert {(n.kind, n.name) for n in retried.needs} == {("group", "G")}  # the retry topic: the group's right


def test_query_assignment_reads_group_and_topic_from_its_body() -> None:
    body = json.dumps({"topic": "T", "consumerGroup": "G", "clientId": "c", "strategyName": "AVG"}).encode()
    req = requirement(RequestCode.QUERY_ASSIGNMENT, {}, body)
    assert {(n.kind, n.name, n.perm) for n in req.needs} == {("group", "G", Perm.SUB), ("topic", "T", Perm.SUB)}
    retry = requirement(RequestCode.QUERY_ASSIGNMENT, {}, json.dumps({"topic": "%RETRY%G", "consumerGroup": "G"})
                        .encode())
    assert {(n.kind, n.name) for n in retry.needs} == {("group", "G")}
    assert requirement(RequestCode.QUERY_ASSIGNMENT, {}, b"not json").authenticate_only


def test_batch_ack_needs_sub_on_every_group_and_topic_of_its_acks() -> None:
    ack = {"r": "0", "so": 0, "q": 0, "pt": 1, "b": "AQ=="}
    body = json.dumps({"brokerName": "b", "acks": [{**ack, "c": "G", "t": "T"}, {**ack, "c": "H", "t": "U"}]})
    req = requirement(RequestCode.BATCH_ACK_MESSAGE, {}, body.encode())
    assert not req.admin
    assert {(n.kind, n.name, n.perm) for n in req.needs} == {("group", "G", Perm.SUB), ("topic", "T", Perm.SUB),
                                                             ("group", "H", Perm.SUB), ("topic", "U", Perm.SUB)}
    assert requirement(RequestCode.BATCH_ACK_MESSAGE, {}, b"not json").authenticate_only
