"""Differential test of the consumer's retry policy (issue 21): the Settings answer each server sends a
SimpleConsumer and a PushConsumer of a group with retryMaxTimes=3 (backoff policy, max attempts, fifo,
batch size), and when a message received and not acked is delivered again (ground truth: the times
observed by the official Python SimpleConsumer). Apache RocketMQ 5.3.3 runs as the reference cluster
(tests/peers_support.py); differences are rows R1-R3 of docs/COMPATIBILITY.md.

    .venv/bin/pytest -q -m long tests/test_diff_retry_policy.py -s
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from typing import Any

import diff_support as d
import pytest
from cluster import LocalCluster
from peers_support import rc
from rocketmq.grpc_protocol import definition_pb2 as pb
from test_diff_grpc import apache_side, rocketscope_like_the_reference, rocketscope_side

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def rocketscope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with rocketscope_like_the_reference(tmp_path_factory.mktemp("diff-retry")) as c:
        yield c


@pytest.fixture(scope="module")
def sides(apache_rocketmq: rc.ReferenceCluster, rocketscope: LocalCluster) -> dict[str, d.Side]:
    return {"apache": apache_side(apache_rocketmq), "rocketscope": rocketscope_side(rocketscope)}


def settings_answer(side: d.Side, client_type: int, group: str, topic: str) -> dict[str, Any]:
    """The retry policy and subscription parts of the Settings the server answers a consumer with."""
    got = d.settings_answer(side, d.consumer_settings(side, group, topic, client_type))["settings"]
    return {k: v for k, v in got.items() if k in ("backoffPolicy", "subscription")}


def scenario_settings(side: d.Side) -> dict[str, Any]:
    topic, group = f"TopicRetry{uuid.uuid4().hex[:6]}", f"GroupRetry{uuid.uuid4().hex[:6]}"
    side.create_topic(topic, "NORMAL")
    side.create_group(group, False, 3)
    return {name: settings_answer(side, ct, group, topic)
            for name, ct in (("simple", pb.SIMPLE_CONSUMER), ("push", pb.PUSH_CONSUMER))}


def scenario_redelivery(side: d.Side) -> dict[str, Any]:
    """One message received with a 2 s invisible time and never acked: attempts and the gaps between them."""
    topic, group = f"TopicRedeliver{uuid.uuid4().hex[:6]}", f"GroupRedeliver{uuid.uuid4().hex[:6]}"
    side.create_topic(topic, "NORMAL")
    side.create_group(group, False, 2)
    with d.consumer(side, group, topic) as c:
        assert d.send_status(side, d.raw_message(topic, b"redeliver-me"))[0] == "OK"
        seen: list[tuple[float, int]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen) < 3:
            for m in d.receive(c, 1, 2):
                seen.append((time.monotonic(), m.delivery_attempt))
    gaps = [round(b[0] - a[0], 1) for a, b in itertools.pairwise(seen)]
    return {"attempts": [a for _, a in seen], "_gaps_s": gaps}


def both(sides: dict[str, d.Side], scenario: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    apache, ours = scenario(sides["apache"]), scenario(sides["rocketscope"])
    print(f"{scenario.__name__}\n  apache:      {apache}\n  rocketscope: {ours}")
    return apache, ours


def test_settings_answer_for_simple_and_push_consumers(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, scenario_settings)
    assert apache == ours  # row R1: max attempts retryMaxTimes + 1, the same customized back-off, batch, polling


def test_redelivery_of_an_unacked_message(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, scenario_redelivery)
    assert apache["attempts"] == ours["attempts"]  # row R2
    # row R3: neither redelivers before the invisible time; Apache later than it (5-10 s observed)
    assert all(g >= 1.9 for g in apache["_gaps_s"] + ours["_gaps_s"]), (apache, ours)
