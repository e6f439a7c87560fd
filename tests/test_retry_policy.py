"""groupRetryPolicy parsing and the back-off it gives a consumer's Settings (broker/retry_policy.py, issue 21).

The JSON shapes are mqadmin updateSubGroup -p's; what Apache RocketMQ 5.3.3's proxy answers for them is
compared in tests/test_diff_push_nack.py (long). Here: the normal form, the errors naming the field, and the
protobuf the official client reads.
"""

from __future__ import annotations

import pytest
from google.protobuf import json_format
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketscope.broker.retry_policy import fill_backoff, parse_group_retry_policy


def backoff(policy: dict | None, attempts: int = 3) -> dict:
    out = pb.RetryPolicy()
    fill_backoff(out, policy, attempts)
    return json_format.MessageToDict(out)


def test_exponential_and_customized_policies_reach_the_settings() -> None:
    exp = parse_group_retry_policy('{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":2000,"max":60000,'
                                   '"multiplier":3}}')
    assert backoff(exp) == {"maxAttempts": 3, "exponentialBackoff": {"initial": "2s", "max": "60s",
                                                                     "multiplier": 3.0}}
    cus = parse_group_retry_policy('{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1500,4000]}}')
    assert backoff(cus, 5) == {"maxAttempts": 5, "customizedBackoff": {"next": ["1.500s", "4s"]}}


def test_no_policy_is_apaches_default_levels() -> None:
    got = backoff(None, 17)
    assert got["maxAttempts"] == 17
    levels = got["customizedBackoff"]["next"]
    assert levels[:3] == ["1s", "5s", "10s"] and levels[-1] == "7200s" and len(levels) == 18
    # a CUSTOMIZED policy without levels is the same default; an EXPONENTIAL one without numbers takes mqadmin's
    assert backoff(parse_group_retry_policy('{"type":"CUSTOMIZED"}'), 17) == got
    assert parse_group_retry_policy('{"type":"exponential"}')["exponentialRetryPolicy"] == {
        "initial": 5000, "max": 7200000, "multiplier": 2}


@pytest.mark.parametrize(("text", "field"), [
    ("not json", "groupRetryPolicy: not JSON"),
    ("[1]", "groupRetryPolicy: a JSON object"),
    ('{"type":"LINEAR"}', "groupRetryPolicy.type"),
    ('{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":0}}', "exponentialRetryPolicy.initial"),
    ('{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":5000,"max":1000}}', "exponentialRetryPolicy.max"),
    ('{"type":"EXPONENTIAL","exponentialRetryPolicy":{"multiplier":0.5}}', "exponentialRetryPolicy.multiplier"),
    ('{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[]}}', "customizedRetryPolicy.next"),
    ('{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,"x"]}}', "customizedRetryPolicy.next"),
])
def test_bad_policies_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        parse_group_retry_policy(text)
