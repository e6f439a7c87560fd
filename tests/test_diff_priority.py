"""Differential tests of priority messages and Lite mode (issue 21) against Apache RocketMQ 5.5.0, the second
reference (scenarios in tests/diff_priority.py).  Every difference asserted here is a row of
docs/COMPATIBILITY.md ("Priority messages and Lite mode", P1-P10).

    .venv/bin/python peers/reference_cluster.py start --dir /tmp/rmq55 --version 5.5.0 --test-conf \
        --broker-conf enableLmq=true --broker-conf enableMultiDispatch=true
    ROCKETSCOPE_APACHE55_DIR=/tmp/rmq55 .venv/bin/pytest tests/test_diff_priority.py -m long

Without the variable the module starts its own 5.5.0 cluster (2-4 minutes of JVM start on a loaded machine,
hence ``long``).  tests/test_priority.py runs the same scenarios on RocketScope alone in `make test`, against
the answers recorded here from Apache.
"""

from __future__ import annotations

from collections.abc import Iterator

import diff_priority as f
import pytest
from peers_support import ReferenceCluster, reference_cluster_55
from test_diff_grpc import apache_side, rocketscope, rocketscope_side  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def apache55(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCluster]:
    yield from reference_cluster_55(tmp_path_factory)  # with LITE_BROKER_CONF: Lite mode on


@pytest.fixture(scope="module")
def sides55(apache55, rocketscope):  # type: ignore[no-untyped-def]  # noqa: F811
    return {"apache": apache_side(apache55), "rocketscope": rocketscope_side(rocketscope)}


def both(sides, scenario):  # type: ignore[no-untyped-def]
    apache, ours = scenario(sides["apache"]), scenario(sides["rocketscope"])
    print(f"{scenario.__name__}\n  apache 5.5.0: {apache}\n  rocketscope:  {ours}")
    return apache, ours


def test_priority_backlog_drains_most_urgent_first(sides55) -> None:  # type: ignore[no-untyped-def]
    apache, ours = both(sides55, f.scenario_priority_backlog)
    assert apache["drained"] == f.expected_drain()  # the ground truth: the priorities sent
    assert apache["types"] == ["PRIORITY"]
    assert ours == apache


def test_priority_rules(sides55) -> None:  # type: ignore[no-untyped-def]
    apache, ours = both(sides55, f.scenario_priority_rules)
    apache.pop("_texts"), ours.pop("_texts")
    assert apache == f.APACHE_55_RULES
    # deviation P6: Apache fails a negative priority with INTERNAL_SERVER_ERROR (an exception in its proxy)
    assert ours.pop("negative_priority") == f.OURS_NEGATIVE_PRIORITY
    apache.pop("negative_priority")
    assert ours == apache


def test_lite_without_lite_topics(sides55) -> None:  # type: ignore[no-untyped-def]
    apache, ours = both(sides55, f.scenario_lite_refusals)
    apache.pop("_texts"), ours.pop("_texts")
    assert apache == f.APACHE_55_LITE
    assert ours["lite_on_normal_topic"] == apache["lite_on_normal_topic"]
    # deviation P9: Lite mode is not implemented: the lite consumers' call is not served
    assert ours["sync_lite_subscription"] == f.OURS_SYNC_LITE


def test_remoting_single_send_goes_to_the_priority_queue(apache55, rocketscope) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    for mtype in ("PRIORITY", "NORMAL"):
        apache_side(apache55).create_topic(ta := f"RemPrio{mtype}", mtype)
        rocketscope_side(rocketscope).create_topic(ts := f"RemPrio{mtype}", mtype)
        apache = f.remoting_priority_queues(apache55.broker_addr, ta)
        ours = f.remoting_priority_queues(rocketscope.brokers["broker-a"].admin_addr, ts)
        print(mtype, apache, ours)
        assert apache == f.APACHE_55_REMOTING
        assert ours == apache


def test_lite_push_consumer(apache55, rocketscope) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    def apache_group(group: str, topic: str) -> None:
        apache55.mqadmin("updateSubGroup", "-c", "DefaultCluster", "-g", group, "--attributes",
                         f"+lite.bind.topic={topic}")

    apache = f.scenario_lite_push_consumer(apache_side(apache55), lambda t: apache55.create_topic(t, "LITE"),
                                           apache_group)
    print("apache 5.5.0:", apache)
    apache.pop("_why")
    assert apache == {"subscribe_lite": "OK", "received": [("L0", "a", "LITE"), ("L2", "a", "LITE")]}
    # deviation P9: no Lite mode; the topic is a MIXED one (RocketScope refuses message.type=LITE), the group plain
    ours = f.scenario_lite_push_consumer(rocketscope_side(rocketscope), lambda t: None, lambda g, t: None)
    print("rocketscope:", ours)
    ours.pop("_why")
    assert ours == {"subscribe_lite": f.OURS_LITE_SUBSCRIBE, "received": []}


def test_priority_order_asc_false_reads_the_lowest_queue_first(rocketscope) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """RocketScope alone: priorityOrderAsc (hot-reloadable here) turned to false drains queue 0 first (Apache's
    PopMessageProcessor reads the queues in ascending order then; by source)."""
    side = rocketscope_side(rocketscope)
    topic = side.unique("AscPrio")
    side.create_topic(topic, "PRIORITY")
    rocketscope.admin("updateBrokerConfig", "-c", "DefaultCluster", "-k", "priorityOrderAsc", "-v", "false")
    try:
        for body, priority in ((b"high", 3), (b"low", 0)):
            m = f.d.raw_message(topic, body=body, mtype=f.pb.PRIORITY)
            m.system_properties.priority = priority
            assert f.d.send_status(side, m)[0] == "OK"
        assert [m.body for m in f.receive_raw(side, topic, 2)] == [b"low", b"high"]
    finally:
        rocketscope.admin("updateBrokerConfig", "-c", "DefaultCluster", "-k", "priorityOrderAsc", "-v", "true")
    assert [m.body for m in f.receive_raw(side, topic, 2)] == [b"high", b"low"]  # a new group, the default order
