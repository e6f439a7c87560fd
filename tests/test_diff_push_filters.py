"""Differential test of the PushConsumer's tag and SQL92 subscriptions (issue 21: filtering per consumer type).

tests/test_diff_filters.py compares the SimpleConsumer's filters with Apache RocketMQ 5.3.3; here the
official Python PushConsumer subscribes with a tag expression (``TA||TC``) and with a SQL92 one, on Apache
(tests/peers_support.py, ``enablePropertyFilter=true``) and on RocketScope. Ground truth: the 12 messages
sent, with their tags and properties; each consumer must get exactly the ones that match (RocketScope: each
once; Apache delivers at least once and a duplicate was seen, so it is tolerated there).
Row F18 of docs/COMPATIBILITY.md.

    .venv/bin/pytest -q -m long tests/test_diff_push_filters.py -s
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import diff_support as d
import pytest
import rmq
from cluster import LocalCluster
from peers_support import rc
from rocketmq import FilterExpression, PushConsumer
from rocketmq.grpc_protocol import FilterType
from test_diff_grpc import apache_side, rocketscope_like_the_reference, rocketscope_side

from rocketscope.trace.client_trace import close_client_metrics

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]

SQL = "n > 5 AND color = 'red'"
QUIET_S = 8.0  # after the expected messages: anything more would show within a few long polls


@pytest.fixture(scope="module")
def rocketscope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with rocketscope_like_the_reference(tmp_path_factory.mktemp("diff-push-filters")) as c:
        yield c


@pytest.fixture(scope="module")
def sides(apache_rocketmq: rc.ReferenceCluster, rocketscope: LocalCluster) -> dict[str, d.Side]:
    return {"apache": apache_side(apache_rocketmq), "rocketscope": rocketscope_side(rocketscope)}


def sent_messages() -> list[tuple[str, str, dict[str, str]]]:
    """(body, tag, properties) of the 12 messages: tags TA, TB, TC in turn, n = i, every other one red."""
    return [(f"p{i}", ("TA", "TB", "TC")[i % 3], {"n": str(i), "color": "red" if i % 2 == 0 else "blue"})
            for i in range(12)]


def push_subscribe(side: d.Side, topic: str, expr: FilterExpression, expected: int) -> list[str]:
    """Bodies a PushConsumer of a new group subscribed with ``expr`` receives (consume from the first offset:
    a new group of a pop consumer starts at the beginning of a topic sent to before it existed on neither)."""
    group = side.unique("GID_push_filter")
    side.create_group(group, False, 16)
    listener = rmq.RecordingListener()
    c = PushConsumer(rmq.config(side.endpoint), group, listener, {topic: expr}, consumption_thread_count=2)
    c.startup()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and listener.count() < expected:
            time.sleep(0.2)
        time.sleep(QUIET_S)
    finally:
        c.shutdown()
        close_client_metrics(c)
    return sorted(m.body.decode() for m in listener.messages)


def scenario(side: d.Side) -> dict[str, Any]:
    topic = side.unique("DiffPushFilter")
    side.create_topic(topic, "NORMAL")
    with rmq.producer(side.endpoint, topic) as p:
        for body, tag, props in sent_messages():
            p.send(rmq.message(topic, body.encode(), tag=tag, props=props))
    want_tag = sorted(b for b, t, _ in sent_messages() if t in ("TA", "TC"))
    want_sql = sorted(b for b, _, p in sent_messages() if int(p["n"]) > 5 and p["color"] == "red")
    return {"tag": push_subscribe(side, topic, FilterExpression("TA||TC"), len(want_tag)),
            "sql92": push_subscribe(side, topic, FilterExpression(SQL, FilterType.SQL), len(want_sql)),
            "_want_tag": want_tag, "_want_sql": want_sql}


def test_push_consumer_tag_and_sql92_subscriptions(sides: dict[str, d.Side]) -> None:
    apache, ours = scenario(sides["apache"]), scenario(sides["rocketscope"])
    print(f"push filters\n  apache:      {apache}\n  rocketscope: {ours}")
    # exactly the matching messages (ground truth: what was sent); RocketScope each once. Apache's delivery is
    # at-least-once and its duplicates are tolerated, not bounded: its tag consumer got p0 twice in the first
    # run of this test (2026-11-27, load 30); they are counted in the printout
    for side in (apache, ours):
        assert sorted(set(side["tag"])) == side["_want_tag"] and sorted(set(side["sql92"])) == side["_want_sql"], (
            apache, ours)
    assert ours["tag"] == ours["_want_tag"] and ours["sql92"] == ours["_want_sql"], ours
