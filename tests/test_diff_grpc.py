"""Differential tests: the official Python client, and Apache's Java gRPC client, run one scenario against
Apache RocketMQ 5.3.3 (the reference cluster of `make peers`, through its proxy) and against RocketScope,
and the observable results are compared (issue 18).  Every difference asserted here as a deviation is a
row of docs/COMPATIBILITY.md; a new difference fails the test.

`make test` runs the quick ones (about 30 s with the session's Apache cluster, which
tests/test_peers_observe.py starts anyway); the scenarios that wait on invisible times, retries, delays
and transaction checks are marked long:
`.venv/bin/pytest tests/test_diff_grpc.py -m "long or not long"` (8-10 minutes on a loaded machine)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import diff_support as d
import pytest
from cluster import LocalCluster
from peers_support import rc, remoting

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@contextmanager
def rocketscope_like_the_reference(root: Path, **extra: str) -> Iterator[LocalCluster]:
    """A name server and one broker with the reference cluster's test settings, so that the two sides
    of a differential test differ in the product only (also used by tests/test_diff_retry_policy.py);
    ``extra``: broker keys both sides set (tests/test_diff_priority.py: the Lite mode keys)."""
    c = LocalCluster(root)
    try:
        c.start_namesrv()
        # 8 MiB segments: maxMessageSize is lowered to what fits one segment (broker/broker_config.py), and the
        # test harness's 1 MiB segments would tell clients 960 KiB where Apache tells them its 4 MiB
        c.start_broker("broker-a", **rc.TEST_BROKER_CONF, mappedFileSizeCommitLog=8 << 20,
                       minInvisibleTimeMillsForRecv=rc.TEST_PROXY_CONF["minInvisibleTimeMillsForRecv"], **extra)
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
                  lambda: remoting.topic_list(cluster.namesrv_addr), cluster.broker_addr)


def rocketscope_side(c: LocalCluster) -> d.Side:
    def create_topic(topic: str, mtype: str) -> None:
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4",
                "-a", f"+message.type={mtype}", *(["-o"] if mtype == "FIFO" else []))

    def create_group(group: str, orderly: bool, retry: int) -> None:
        c.admin("updateSubGroup", "-c", "DefaultCluster", "-g", group, "-o", str(orderly).lower(), "-r", str(retry))

    return d.Side("rocketscope", c.brokers["broker-a"].endpoint, create_topic, create_group,
                  lambda: set(c.admin_json("topicList")), c.brokers["broker-a"].admin_addr)


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


def test_priority_as_recorded_from_apache_55(rocketscope: LocalCluster) -> None:
    """RocketScope alone against Apache RocketMQ 5.5.0's recorded answers (tests/diff_priority.py; compared live,
    with the type rules on NORMAL topics and the Lite refusals, by the long tests/test_diff_priority.py): a
    priority backlog drains most urgent first, a priority past the last queue lands in it, a negative one and
    a type mismatch are refused.  Here because this module's broker is already running; one topic, one admin
    call (each is a process start)."""
    import diff_priority as prio

    side = rocketscope_side(rocketscope)
    topic = side.unique("QuickPrio")
    side.create_topic(topic, "PRIORITY")
    ours = prio.backlog_on(side, topic, side.unique("GID_quick_prio"))  # the group is auto-created
    assert ours["drained"] == prio.expected_drain() and ours["types"] == ["PRIORITY"], ours
    for mtype, priority, want in ((d.pb.PRIORITY, 100, "OK"), (d.pb.PRIORITY, -1, prio.OURS_NEGATIVE_PRIORITY),
                                  (d.pb.NORMAL, None, prio.APACHE_55_RULES["normal_on_priority_topic"])):
        m = d.raw_message(topic, body=b"p100", mtype=mtype)
        if priority is not None:
            m.system_properties.priority = priority
        assert d.send_status(side, m)[0] == want, (mtype, priority)
    got = prio.receive_raw(side, topic, len(prio.PRIORITIES) + 1)  # a new group: the backlog again, and p100
    assert [(m.body, m.system_properties.queue_id, m.system_properties.priority) for m in got
            if m.body == b"p100"] == [(b"p100", 3, 100)]
    assert prio.remoting_priority_queues(rocketscope.brokers["broker-a"].admin_addr, topic) == prio.APACHE_55_REMOTING


def test_lmq_names_with_lmq_off(sides: dict[str, d.Side]) -> None:
    """enableLmq off (both defaults): a record naming LMQ queues is stored in its topic only, and a pull or an
    offset commit of an LMQ name is TOPIC_NOT_EXIST (tests/diff_lmq.py; docs/COMPATIBILITY.md R28)."""
    import diff_lmq

    apache, ours = both(sides, diff_lmq.scenario_lmq_off)
    assert apache == diff_lmq.APACHE_533_LMQ_OFF
    assert ours == apache


def test_topic_and_group_auto_creation(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_auto_creation)
    assert apache["new_group_receives"] == ours["new_group_receives"] == [True]
    # deviation: a gRPC send never creates a topic on Apache (the proxy sees no message type for it)
    assert apache["send_to_missing_topic"][0] == "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"
    assert not apache["topic_created_by_the_send"]
    assert ours["send_to_missing_topic"][0] == "OK" and ours["topic_created_by_the_send"]


def test_settings_answers_and_client_metrics(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_settings_answers)
    print("differences:", {k: (apache[k], ours[k]) for k in apache if apache[k] != ours[k]})
    assert ours == apache


def test_consumer_progress(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_consumer_progress)
    assert apache["acked"] == 12 and apache["broker_offsets_total"] == 12
    assert ours == apache


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


@pytest.mark.slow
@pytest.mark.long
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


@pytest.mark.slow
@pytest.mark.long
def test_invisible_time(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_invisible_time)
    assert public(apache) == {"first": [(True, 1)], "within_invisible_time": 0, "second": [(True, 2)],
                              "second_not_before_invisible_time": True}
    assert public(ours) == public(apache)


@pytest.mark.slow
@pytest.mark.long
def test_retry_and_dead_letter_naming_and_counts(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_retry_and_dlq)
    assert apache["delivery_attempts"] == ours["delivery_attempts"] == [1, 2]  # retryMaxTimes=1
    assert {"%DLQ%{group}", "%RETRY%{group}"} <= set(apache["topics_named_after_group"])
    # deviation: Apache's pop consumption may also create %RETRY%<group>_<topic> (its v1 pop retry topic):
    # seen in one run of two, so only its absence from RocketScope is asserted
    assert set(apache["topics_named_after_group"]) - set(ours["topics_named_after_group"]) <= {"%RETRY%{group}_{topic}"}
    assert ours["topics_named_after_group"] == ["%DLQ%{group}", "%RETRY%{group}"]


@pytest.mark.slow
@pytest.mark.long
def test_delay(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_delay)
    assert public(apache) == {"received": [True], "not_before_due": True, "delivery_timestamp_s": [0],
                              "message_type": [3]}
    assert public(ours) == public(apache)


@pytest.mark.slow
@pytest.mark.long
def test_fifo(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_fifo)
    in_order = {g: [f"{g}{i}" for i in range(6)] for g in ("A", "B")}
    assert apache["order"] == ours["order"] == in_order
    # both hand out a run of one message group's consecutive messages in one receive (docs/COMPATIBILITY.md row
    # 36): all 12 were sent before the consumer started, so RocketScope's first receive has both groups' six
    # (10 beyond one per group); Apache's count depends on which queues its pops reach first
    assert apache["batches_with_two_of_one_group"] >= 1
    assert ours["batches_with_two_of_one_group"] == 10


@pytest.mark.slow
@pytest.mark.long
def test_transaction_with_check_back(sides: dict[str, d.Side]) -> None:
    apache, ours = both(sides, d.scenario_transaction)
    for result in (apache, ours):
        assert set(result["received"]) == {"commit", "check-commit"}
        assert {"check-commit", "check-rollback"} <= set(result["checked"])
    assert ours == {"received": ["check-commit", "commit"], "checked": ["check-commit", "check-rollback"]}
    # Apache may check back a half message again after the client resolved it (its checks run every
    # transactionCheckInterval and resolution is asynchronous), and a repeated COMMIT delivers the
    # message again: seen once here with 3 copies of check-commit.  Not asserted: timing-dependent.


# ---------------------------------------------------------------------------- every scenario with the Java client
# peers/java/src/GrpcDiffTool.java: the scenarios above run by Apache's Java client, all in one JVM per server,
# both servers side by side (docs/COMPATIBILITY.md rows 45, 46, 48-62).  Two runs: the quick scenarios
# (make test) and the ones that wait on the servers' timers (long).
QUICK_JAVA = ("normal", "bad_input")
LONG_JAVA = ("fifo", "delay", "transaction", "recall", "retry_dlq", "invisible_time", "change_invisible")


def java_on_both(sides: dict[str, d.Side], scenarios: tuple[str, ...]) -> dict[str, dict[str, dict[str, Any]]]:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        runs = {name: pool.submit(d.java_scenarios, side, scenarios) for name, side in sides.items()}
        out = {name: run.result() for name, run in runs.items()}
    for scenario in out["apache"]:
        print(f"java {scenario}\n  apache:      {out['apache'][scenario]}\n"
              f"  rocketscope: {out['rocketscope'].get(scenario)}")
    return out


@pytest.fixture(scope="module")
def java_quick(sides: dict[str, d.Side]) -> dict[str, dict[str, dict[str, Any]]]:
    return java_on_both(sides, QUICK_JAVA)


@pytest.fixture(scope="module")
def java(sides: dict[str, d.Side]) -> dict[str, dict[str, dict[str, Any]]]:
    return java_on_both(sides, LONG_JAVA)


def java_pair(java: dict[str, dict[str, dict[str, Any]]], scenario: str) -> tuple[dict[str, Any], dict[str, Any]]:
    apache, ours = java["apache"][scenario], java["rocketscope"][scenario]
    assert "error" not in apache and "error" not in ours, (apache, ours)
    return apache, ours


def test_java_normal(java_quick: dict[str, dict[str, dict[str, Any]]]) -> None:
    apache, ours = java_pair(java_quick, "normal")
    # body, tag, keys, user property, topic as sent, delivery attempt, message group?, delivery timestamp?,
    # born host set, born timestamp within 2 minutes
    assert apache == {"sent": 3, "same_ids": True, "messages": [
        [f"n{i}", "TagA", [f"k{i}"], str(i), True, 1, False, False, True, True] for i in range(3)]}
    assert ours == apache


@pytest.mark.slow
@pytest.mark.long
def test_java_fifo(java: dict[str, dict[str, dict[str, Any]]]) -> None:
    apache, ours = java_pair(java, "fifo")
    assert apache["order"] == ours["order"] == {g: [f"{g}{i}" for i in range(6)] for g in ("A", "B")}
    # both hand out a message group's consecutive messages together: all 12 were sent before the consumer
    # started, so RocketScope's first receive has both groups' six (10 beyond one per group); Apache's count
    # depends on which queues its pops reach first
    assert apache["batches_with_two_of_one_group"] >= 1
    assert ours["batches_with_two_of_one_group"] == 10


@pytest.mark.slow
@pytest.mark.long
def test_java_delay_invisible_time_and_change(java: dict[str, dict[str, dict[str, Any]]]) -> None:
    for scenario, expected in {
        "delay": {"received": [True], "not_before_due": True, "delivery_timestamp_minus_due_ms": [0]},
        "invisible_time": {"first": [[True, 1]], "within_invisible_time": 0, "second": [[True, 2]],
                           "second_not_before_invisible_time": True},
        "change_invisible": {"change": {"outcome": "ok", "code": 0}, "first": [[True, 1]], "second": [[True, 2]],
                             "second_before_the_first_invisible_time": True},
    }.items():
        apache, ours = java_pair(java, scenario)
        assert public(apache) == expected, scenario
        assert public(ours) == expected, scenario


@pytest.mark.slow
@pytest.mark.long
def test_java_transaction_with_check_back(java: dict[str, dict[str, dict[str, Any]]]) -> None:
    apache, ours = java_pair(java, "transaction")
    for result in (apache, ours):
        assert set(result["received"]) == {"commit", "check-commit"}
        assert {"check-commit", "check-rollback"} <= set(result["checked"])
    assert public(ours) == {"received": ["check-commit", "commit"], "checked": ["check-commit", "check-rollback"]}
    # Apache may also check back the messages the client had committed or rolled back, and each COMMIT of
    # check-commit delivers it again (row 39; seen with 4 copies here): not asserted, timing-dependent


@pytest.mark.slow
@pytest.mark.long
def test_java_recall(java: dict[str, dict[str, dict[str, Any]]]) -> None:
    apache, ours = java_pair(java, "recall")
    # deviation: Apache 5.3.3 hands out a recall handle but refuses every recall while its broker's
    # recallMessageEnable is false (the default): INTERNAL_SERVER_ERROR "recall failed, operation is forbidden",
    # and the message is delivered; a made-up handle is INTERNAL_SERVER_ERROR too.  RocketScope serves recall.
    forbidden = {"outcome": "server", "code": 50001, "exception": "InternalErrorException",
                 "message": "recall failed, operation is forbidden"}
    assert apache["has_recall_handle"] is True and apache["received"] == ["drop", "keep"]
    assert apache["recall"] == apache["recall_again"] == forbidden
    assert (apache["recall_bad_handle"]["outcome"], apache["recall_bad_handle"]["code"]) == ("server", 50001)
    assert ours["has_recall_handle"] is True and ours["received"] == ["keep"]
    assert ours["recall"] == {"outcome": "ok", "code": 0}
    assert (ours["recall_again"]["code"], ours["recall_again"]["exception"]) == (40400, "NotFoundException")
    assert (ours["recall_bad_handle"]["code"], ours["recall_bad_handle"]["exception"]) == (40000, "BadRequestException")
    assert "recall_handle" in ours["recall_bad_handle"]["message"]


@pytest.mark.slow
@pytest.mark.long
def test_java_retry_and_dead_letter(java: dict[str, dict[str, dict[str, Any]]]) -> None:
    apache, ours = java_pair(java, "retry_dlq")
    assert apache["delivery_attempts"] == ours["delivery_attempts"] == [1, 2]  # retryMaxTimes=1
    assert {"%DLQ%{group_dlq}", "%RETRY%{group_dlq}"} <= set(apache["topics_named_after_group"])
    assert set(apache["topics_named_after_group"]) - set(ours["topics_named_after_group"]) <= {
        "%RETRY%{group_dlq}_{topic_Dlq}"}  # row 33
    assert ours["topics_named_after_group"] == ["%DLQ%{group_dlq}", "%RETRY%{group_dlq}"]


# (outcome, code) where the two servers differ, as docs/COMPATIBILITY.md records them: (Apache, RocketScope)
JAVA_BAD_INPUT_DEVIATIONS = {
    "send: topic nobody created": (("server", 40402), ("ok", 0)),  # row 5
    "producer: started on a topic nobody created": (("client", 0), ("ok", 0)),  # row 46
    "consumer: topic nobody created": (("client", 0), ("ok", 0)),  # row 5: Apache's route query fails
    "receive: batch 2000": (("ok", 0), ("server", 40000)),  # row 24
    "ack: the same receipt again": (("ok", 0), ("server", 40013)),
    "changeInvisibleDuration: after the ack": (("ok", 0), ("server", 40013)),
}


def test_java_bad_input(java_quick: dict[str, dict[str, dict[str, Any]]]) -> None:
    apache, ours = java_pair(java_quick, "bad_input")
    assert apache.keys() == ours.keys()
    differing = {case: ((apache[case]["outcome"], apache[case]["code"]), (ours[case]["outcome"], ours[case]["code"]))
                 for case in apache if (apache[case]["outcome"], apache[case]["code"]) !=
                 (ours[case]["outcome"], ours[case]["code"])}
    assert differing == JAVA_BAD_INPUT_DEVIATIONS
    # the Java client refuses these itself, from what each server's route and Settings told it (message types
    # the topic accepts, the largest body): the same words on both, so the servers told it the same things
    client_side = [case for case in apache if apache[case]["outcome"] == "client" and case not in differing]
    assert len(client_side) == 9, client_side
    for case in client_side:
        assert ours[case] == apache[case], case
    assert "max size=4194304" in apache["send: body of 4 MiB + 1"]["message"]
    assert apache["receive: invisible 100 ms"]["code"] == ours["receive: invisible 100 ms"]["code"] == 40011
    assert all("1000" in side["receive: invisible 100 ms"]["message"] for side in (apache, ours))
    for case in ("ack: the same receipt again", "changeInvisibleDuration: after the ack"):
        assert "receipt_handle" in ours[case]["message"]  # RocketScope names the field and why
