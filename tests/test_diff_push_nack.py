"""Differential test of the PushConsumer's nack back-off (issue 21), what tests/test_diff_retry_policy.py leaves out.

That file compares the Settings answer of a concurrent group and the redelivery of a SimpleConsumer's
unacked message. Here the official Python PushConsumer's listener answers FAILURE to every delivery
(ground truth: the listener's own calls, their times and delivery attempts), on Apache RocketMQ 5.3.3
(tests/peers_support.py) and on RocketScope, for both kinds of group:

* concurrent group, retryMaxTimes=2: the client nacks with ChangeInvisibleDuration of the server's
  customized back-off for the attempt (1 s after attempt 1, 5 s after attempt 2); the server redelivers
  and, after the last attempt, moves the message to ``%DLQ%<group>``;
* orderly group (FIFO topic), retryMaxTimes=2: the server's Settings say fifo; the client retries
  locally with the back-off (1 s, 5 s) and then forwards the message itself
  (ForwardMessageToDeadLetterQueue); the server must not deliver it again.

and the Settings answer of groups given a ``groupRetryPolicy`` (``updateSubGroup -p``: mqadmin on Apache,
``rocketscope admin`` on RocketScope), exponential and customized.

Rows N1-N5 of docs/COMPATIBILITY.md (the retry-policy table).

    .venv/bin/pytest -q -m long tests/test_diff_push_nack.py -s
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from typing import Any

import diff_support as d
import pytest
import rmq
from cluster import LocalCluster
from peers_support import rc
from rocketmq import ConsumeResult, Message
from rocketmq.grpc_protocol import definition_pb2 as pb
from test_diff_grpc import apache_side, rocketscope_like_the_reference, rocketscope_side
from test_diff_retry_policy import settings_answer

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]

QUIET_S = 25.0  # after the last expected delivery: longer than Apache's revive delay (5-10 s, row R3) + 10 s back-off


@pytest.fixture(scope="module")
def rocketscope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with rocketscope_like_the_reference(tmp_path_factory.mktemp("diff-push-nack")) as c:
        yield c


@pytest.fixture(scope="module")
def sides(apache_rocketmq: rc.ReferenceCluster, rocketscope: LocalCluster) -> dict[str, d.Side]:
    return {"apache": apache_side(apache_rocketmq), "rocketscope": rocketscope_side(rocketscope)}


POLICIES = {
    "exponential": '{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":2000,"max":60000,"multiplier":3}}',
    "customized": '{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[2000,4000]}}',
}


def policy_settings(side: d.Side, set_group: Any) -> dict[str, Any]:
    """The Settings answer to a PushConsumer of a group created with each of POLICIES (retryMaxTimes 2)."""
    topic = side.unique("DiffPolicy")
    side.create_topic(topic, "NORMAL")
    out = {}
    for name, policy in POLICIES.items():
        group = side.unique(f"GID_policy_{name}")
        set_group(group, policy)
        out[name] = settings_answer(side, pb.PUSH_CONSUMER, group, topic)
    return out


def test_group_retry_policy_in_the_settings_answer(sides: dict[str, d.Side], apache_rocketmq: rc.ReferenceCluster,
                                                   rocketscope: LocalCluster) -> None:
    apache = policy_settings(sides["apache"], lambda g, p: apache_rocketmq.mqadmin(
        "updateSubGroup", "-c", "DefaultCluster", "-g", g, "-r", "2", "-p", p))
    ours = policy_settings(sides["rocketscope"], lambda g, p: rocketscope.admin(
        "updateSubGroup", "-c", "DefaultCluster", "-g", g, "-r", "2", "-p", p))
    print(f"group retry policy\n  apache:      {apache}\n  rocketscope: {ours}")
    assert apache == ours  # row N5
    assert ours["exponential"]["backoffPolicy"] == {
        "maxAttempts": 3, "exponentialBackoff": {"initial": "2s", "max": "60s", "multiplier": 3.0}}
    assert ours["customized"]["backoffPolicy"] == {"maxAttempts": 3, "customizedBackoff": {"next": ["2s", "4s"]}}


def dlq_count(side: d.Side, group: str, body: bytes) -> int | str:
    """Messages with ``body`` in ``%DLQ%<group>``, read by a SimpleConsumer of another group; the error's
    class name when the dead-letter topic cannot be read that way."""
    dlq = f"%DLQ%{group}"
    try:
        with d.consumer(side, side.unique("GID_dlq_reader"), dlq) as c:
            return sum(1 for m in d.drain(c, 1, timeout=20) if m.body == body)
    except Exception as exc:  # what the server says is the observation
        return type(exc).__name__


def push_failing(side: d.Side, fifo: bool) -> dict[str, Any]:
    """One message whose every consumption fails: the listener's calls, then quiet, then the DLQ."""
    topic = side.unique("DiffNackFifo" if fifo else "DiffNack")
    group = side.unique("GID_nack_fifo" if fifo else "GID_nack")
    side.create_topic(topic, "FIFO" if fifo else "NORMAL")
    side.create_group(group, fifo, 2)
    body = f"nack-{uuid.uuid4().hex[:6]}".encode()
    calls: list[tuple[float, int]] = []

    def fail(m: Message) -> ConsumeResult:
        if m.body == body:
            calls.append((time.monotonic(), m.delivery_attempt))
        return ConsumeResult.FAILURE

    listener = rmq.RecordingListener(fail)
    with rmq.push_consumer(side.endpoint, group, topic, listener):
        settings = settings_answer(side, pb.PUSH_CONSUMER, group, topic)
        time.sleep(2)  # the push consumer's first assignment query; a message sent earlier is found anyway
        msg = d.raw_message(topic, body, mtype=pb.FIFO if fifo else pb.NORMAL, group="g1" if fifo else None)
        assert d.send_status(side, msg)[0] == "OK"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(calls) < 3:
            time.sleep(0.2)
        quiet_until = time.monotonic() + QUIET_S
        while time.monotonic() < quiet_until:
            time.sleep(0.5)
    gaps = [round(b[0] - a[0], 1) for a, b in itertools.pairwise(calls)]
    backoff = settings.get("backoffPolicy", {})
    return {"settings_fifo": settings.get("subscription", {}).get("fifo", False),
            "settings_max_attempts": backoff.get("maxAttempts"),
            "settings_backoff_first": backoff.get("customizedBackoff", {}).get("next", [])[:3],
            "listener_calls": len(calls), "attempts": [a for _, a in calls],
            "dlq": dlq_count(side, group, body), "_gaps_s": gaps}


def both(sides: dict[str, d.Side], fifo: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    apache, ours = push_failing(sides["apache"], fifo), push_failing(sides["rocketscope"], fifo)
    print(f"push nack fifo={fifo}\n  apache:      {apache}\n  rocketscope: {ours}")
    return apache, ours


def test_push_consumer_nack_concurrent_group(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, fifo=False)
    same = ("settings_fifo", "settings_max_attempts", "settings_backoff_first", "listener_calls", "attempts", "dlq")
    assert {k: apache[k] for k in same} == {k: ours[k] for k in same}  # rows N1, N2
    assert ours["attempts"] == [1, 2, 3] and ours["dlq"] == 1
    # row N2: no redelivery before the back-off the client asked for (1 s, then 5 s); Apache at the end of the
    # consumer's 20 s long poll
    for side in (apache, ours):
        assert side["_gaps_s"][0] >= 0.9 and side["_gaps_s"][1] >= 4.9, (apache, ours)


def test_push_consumer_nack_orderly_group(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, fifo=True)
    same = ("settings_fifo", "settings_max_attempts", "settings_backoff_first", "listener_calls", "attempts", "dlq")
    assert {k: apache[k] for k in same} == {k: ours[k] for k in same}  # rows N3, N4
    assert ours["settings_fifo"] is True and ours["listener_calls"] == 3 and ours["dlq"] == 1
    # local retries: the client sleeps the back-off itself, so the gaps are the same on both (1 s, 5 s)
    for side in (apache, ours):
        assert side["_gaps_s"][0] >= 0.9 and side["_gaps_s"][1] >= 4.9, (apache, ours)
