"""Differential tests: the official Python client runs one scenario against Apache RocketMQ 5.3.3
(the reference cluster of `make peers`, through its proxy) and against RocketScope, and the
observable results are compared (issue 18).  Every difference asserted here as a deviation is a
row of docs/COMPATIBILITY.md; a new difference fails the test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import diff_support as d
import pytest
from cluster import LocalCluster
from peers_support import rc, remoting

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]


@contextmanager
def rocketscope_like_the_reference(root: Path) -> Iterator[LocalCluster]:
    """A name server and one broker with the reference cluster's test settings, so that the two sides
    of a differential test differ in the product only (also used by tests/test_diff_retry_policy.py)."""
    c = LocalCluster(root)
    try:
        c.start_namesrv()
        c.start_broker("broker-a", **rc.TEST_BROKER_CONF,
                       minInvisibleTimeMillsForRecv=rc.TEST_PROXY_CONF["minInvisibleTimeMillsForRecv"])
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


@pytest.fixture(scope="module")
def rocketscope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with rocketscope_like_the_reference(tmp_path_factory.mktemp("diff-rocketscope")) as c:
        yield c


def apache_side(cluster: rc.ReferenceCluster) -> d.Side:
    return d.Side("apache", cluster.endpoint, cluster.create_topic,
                  lambda g, orderly, retry: cluster.create_group(g, orderly, retry),
                  lambda: remoting.topic_list(cluster.namesrv_addr))


def rocketscope_side(c: LocalCluster) -> d.Side:
    def create_topic(topic: str, mtype: str) -> None:
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4",
                "-a", f"+message.type={mtype}", *(["-o"] if mtype == "FIFO" else []))

    def create_group(group: str, orderly: bool, retry: int) -> None:
        c.admin("updateSubGroup", "-c", "DefaultCluster", "-g", group, "-o", str(orderly).lower(), "-r", str(retry))

    return d.Side("rocketscope", c.brokers["broker-a"].endpoint, create_topic, create_group,
                  lambda: set(c.admin_json("topicList")))


@pytest.fixture(scope="module")
def sides(apache_rocketmq: rc.ReferenceCluster, rocketscope: LocalCluster) -> dict[str, d.Side]:
    return {"apache": apache_side(apache_rocketmq), "rocketscope": rocketscope_side(rocketscope)}


def both(sides: dict[str, d.Side], scenario: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``scenario`` on each side; print both answers (shown when the test fails)."""
    apache, ours = scenario(sides["apache"]), scenario(sides["rocketscope"])
    print(f"{scenario.__name__}\n  apache:      {apache}\n  rocketscope: {ours}")
    return apache, ours


def public(result: dict[str, Any]) -> dict[str, Any]:
    """The compared part: keys starting with _ are measurements shown, not compared."""
    return {k: v for k, v in result.items() if not k.startswith("_")}


def test_normal_send_and_receive(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_normal)
    assert apache["ids"]
    assert apache["messages"] == [(f"n{i}", "TagA", (f"k{i}",), str(i), "{topic}", 1, None) for i in range(3)]
    assert ours == apache


def test_query_route_and_assignment(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_route_and_assignment)
    same = {"route.status", "route.queue_ids", "route.permissions", "route.accept_message_types", "route.brokers",
            "route.broker_endpoint_is_the_requested_one", "assignment.status", "assignment.permissions"}
    assert {k: ours[k] for k in same} == {k: apache[k] for k in same}
    assert apache["route.queue_ids"] == [0, 1, 2, 3] and apache["route.broker_endpoint_is_the_requested_one"]
    # deviation: Apache's proxy assigns one pseudo-queue (-1: "any queue of the broker"), RocketScope every queue
    assert apache["assignment.queue_ids"] == [-1]
    assert ours["assignment.queue_ids"] == [0, 1, 2, 3]
    # deviation: RocketScope creates a topic on its first route query (autoCreateTopicEnable)
    assert apache["missing_topic.route"][0] == "TOPIC_NOT_FOUND"
    assert ours["missing_topic.route"][0] == "OK"


def test_topic_and_group_auto_creation(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_auto_creation)
    assert apache["new_group_receives"] == ours["new_group_receives"] == [True]
    # deviation: a gRPC send never creates a topic on Apache (the proxy sees no message type for it)
    assert apache["send_to_missing_topic"][0] == "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"
    assert not apache["topic_created_by_the_send"]
    assert ours["send_to_missing_topic"][0] == "OK" and ours["topic_created_by_the_send"]


# Cases whose status code differs, as docs/COMPATIBILITY.md records them: (Apache, RocketScope)
CODE_DEVIATIONS = {
    "send: no messages": ("MESSAGE_CORRUPTED", "BAD_REQUEST"),
    "receive: client never sent Settings": ("INTERNAL_SERVER_ERROR", "MESSAGE_NOT_FOUND"),
    "receive: queue id -1 (any queue)": ("MESSAGE_NOT_FOUND", "BAD_REQUEST"),
    "receive: batch 0": ("MESSAGE_NOT_FOUND", "BAD_REQUEST"),
    "receive: batch 100000": ("MESSAGE_NOT_FOUND", "BAD_REQUEST"),
    "ack: receipt handle not-a-handle": ("INTERNAL_SERVER_ERROR", "INVALID_RECEIPT_HANDLE"),
    "changeInvisibleDuration: receipt handle not-a-handle": ("INTERNAL_SERVER_ERROR", "INVALID_RECEIPT_HANDLE"),
}


def test_bad_input_status_codes(sides: dict[str, d.Side]) -> None:
    """Every malformed request gets Apache's status code, except the recorded deviations.  The messages
    are compared by hand in docs/COMPATIBILITY.md: the codes match, the wording is RocketScope's own."""
    apache, ours = both(sides, d.scenario_bad_input)
    assert apache.keys() == ours.keys()
    differing = {case: (apache[case][0], ours[case][0]) for case in apache if apache[case][0] != ours[case][0]}
    assert differing == CODE_DEVIATIONS
    same = [case for case in apache if case not in CODE_DEVIATIONS]
    assert len(same) == 14
    # a message says what was wrong on both sides: the offending value or the limit appears in each
    assert "bad topic" in apache["send: topic with a space"][1] and "bad topic" in ours["send: topic with a space"][1]
    assert "127" in apache["send: topic of 200 chars"][1] and "127" in ours["send: topic of 200 chars"][1]
    assert "1000" in apache["receive: invisible 100 ms"][1] and "1000" in ours["receive: invisible 100 ms"][1]


def test_invisible_time(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_invisible_time)
    assert public(apache) == {"first": [(True, 1)], "within_invisible_time": 0, "second": [(True, 2)],
                              "second_not_before_invisible_time": True}
    assert public(ours) == public(apache)


def test_retry_and_dead_letter_naming_and_counts(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_retry_and_dlq)
    assert apache["delivery_attempts"] == ours["delivery_attempts"] == [1, 2]  # retryMaxTimes=1
    assert {"%DLQ%{group}", "%RETRY%{group}"} <= set(apache["topics_named_after_group"])
    # deviation: Apache's pop consumption may also create %RETRY%<group>_<topic> (its v1 pop retry topic):
    # seen in one run of two, so only its absence from RocketScope is asserted
    assert set(apache["topics_named_after_group"]) - set(ours["topics_named_after_group"]) <= {"%RETRY%{group}_{topic}"}
    assert ours["topics_named_after_group"] == ["%DLQ%{group}", "%RETRY%{group}"]


def test_delay(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_delay)
    assert public(apache) == {"received": [True], "not_before_due": True, "delivery_timestamp_s": [0],
                              "message_type": [3]}
    assert public(ours) == public(apache)


def test_fifo(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_fifo)
    in_order = {g: [f"{g}{i}" for i in range(6)] for g in ("A", "B")}
    assert apache["order"] == ours["order"] == in_order
    # deviation: Apache hands out several messages of one group in one receive (in order); RocketScope one
    # message per group until it is acked.  The count for Apache depends on timing: at least one such batch.
    assert apache["batches_with_two_of_one_group"] >= 1
    assert ours["batches_with_two_of_one_group"] == 0


def test_transaction_with_check_back(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_transaction)
    for result in (apache, ours):
        assert set(result["received"]) == {"commit", "check-commit"}
        assert {"check-commit", "check-rollback"} <= set(result["checked"])
    assert ours == {"received": ["check-commit", "commit"], "checked": ["check-commit", "check-rollback"]}
    # Apache may check back a half message again after the client resolved it (its checks run every
    # transactionCheckInterval and resolution is asynchronous), and a repeated COMMIT delivers the
    # message again: seen once here with 3 copies of check-commit.  Not asserted: timing-dependent.


# ---------------------------------------------------------------------------- Apache's Java gRPC client
def test_java_client_normal_send_and_receive(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.java_scenario_normal)
    assert apache == {"exit": 0, "sent": 3, "same_ids": True, "bodies": ["java-0", "java-1", "java-2"],
                      "delivery_attempts": [1, 1, 1]}
    assert ours == apache


def test_java_client_send_to_missing_topic(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.java_scenario_send_to_missing_topic)
    # Apache's proxy has no route for the topic: the Java producer fails to start (its route query is refused)
    assert apache == {"exit": 1, "sent": 0, "error_class": "java.lang.IllegalStateException", "topic_created": False}
    # deviation (as with the Python client, docs/COMPATIBILITY.md): RocketScope creates the topic on its first
    # route query (autoCreateTopicEnable), so the Java producer starts and sends
    assert ours == {"exit": 0, "sent": 1, "error_class": "", "topic_created": True}
