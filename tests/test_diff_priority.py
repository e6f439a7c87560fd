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
from pathlib import Path
from typing import Any

import diff_priority as f
import pytest
from cluster import LocalCluster
from peers_support import LITE_BROKER_CONF, ReferenceCluster, reference_cluster_55
from test_diff_grpc import apache_side, rocketscope_like_the_reference, rocketscope_side

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def apache55(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCluster]:
    yield from reference_cluster_55(tmp_path_factory)  # with LITE_BROKER_CONF: Lite mode on


@pytest.fixture(scope="module")
def rocketscope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """RocketScope with the keys the 5.5.0 fixture sets (Lite mode on: enableLmq, enableMultiDispatch)."""
    with rocketscope_like_the_reference(tmp_path_factory.mktemp("diff55-rocketscope"), **LITE_BROKER_CONF) as c:
        yield c


@pytest.fixture(scope="module")
def sides55(apache55, rocketscope):  # type: ignore[no-untyped-def]
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
    texts = apache.pop("_texts"), ours.pop("_texts")
    assert apache == f.APACHE_55_LITE
    assert ours == apache
    # the same text: "lite group <G> is expected to bind topic null, but actual is {topic}" (the groups differ by side)
    apache_text, our_text = (t["sync_lite_subscription"] for t in texts)
    assert apache_text.endswith("is expected to bind topic null, but actual is {topic}")
    assert our_text.endswith("is expected to bind topic null, but actual is {topic}")


def test_remoting_single_send_goes_to_the_priority_queue(apache55, rocketscope) -> None:  # type: ignore[no-untyped-def]
    for mtype in ("PRIORITY", "NORMAL"):
        apache_side(apache55).create_topic(ta := f"RemPrio{mtype}", mtype)
        rocketscope_side(rocketscope).create_topic(ts := f"RemPrio{mtype}", mtype)
        apache = f.remoting_priority_queues(apache55.broker_addr, ta)
        ours = f.remoting_priority_queues(rocketscope.brokers["broker-a"].admin_addr, ts)
        print(mtype, apache, ours)
        assert apache == f.APACHE_55_REMOTING
        assert ours == apache


def test_lite_push_consumer(apache55, rocketscope) -> None:  # type: ignore[no-untyped-def]
    def apache_group(group: str, topic: str) -> None:
        apache55.mqadmin("updateSubGroup", "-c", "DefaultCluster", "-g", group, "--attributes",
                         f"+lite.bind.topic={topic}")

    def our_group(group: str, topic: str) -> None:
        rocketscope.admin("updateSubGroup", "-c", "DefaultCluster", "-g", group, "--attributes",
                          f"+lite.bind.topic={topic}")

    apache = f.scenario_lite_push_consumer(apache_side(apache55), lambda t: apache55.create_topic(t, "LITE"),
                                           apache_group)
    print("apache 5.5.0:", apache)
    apache.pop("_why")
    # the ground truth: lite topics a, b, a, c were sent; the consumer subscribed to a
    assert apache == {"subscribe_lite": "OK", "received": [("L0", "a", "LITE"), ("L2", "a", "LITE")]}
    side = rocketscope_side(rocketscope)
    ours = f.scenario_lite_push_consumer(side, lambda t: side.create_topic(t, "LITE"), our_group)
    print("rocketscope:", ours)
    ours.pop("_why")
    assert ours == apache


def test_priority_order_asc_false_reads_the_lowest_queue_first(rocketscope) -> None:  # type: ignore[no-untyped-def]
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


# ------------------------------------------------------------ Lite mode, issue 21 session 16 (tests/diff_lite.py)
def lite_admin(namesrv: str, home: Path) -> tuple[Any, Any]:
    """(create a LITE topic, bind a group) with Apache's mqadmin 5.5.0 against ``namesrv``: the same tool on both
    sides, since RocketScope answers updateSubGroup (remoting code 200)."""
    import diff_lite

    def topic(name: str) -> None:
        out = diff_lite.mqadmin(namesrv, home, "updateTopic", "-c", "DefaultCluster", "-t", name, "-r", "4", "-w",
                                "4", "-a", "+message.type=LITE")
        assert "success" in out, out[-2000:]

    def group(name: str, bind: str, attrs: str = "") -> None:
        out = diff_lite.mqadmin(namesrv, home, "updateSubGroup", "-c", "DefaultCluster", "-g", name, "--attributes",
                                ",".join(filter(None, (f"+lite.bind.topic={bind}", attrs))))
        assert "success" in out, out[-2000:]

    return topic, group


def test_update_sub_group(apache55, rocketscope, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Apache's mqadmin updateSubGroup / getConsumerConfig with lite attributes, and the attributes Apache refuses."""
    import diff_lite

    apache = diff_lite.scenario_update_sub_group(apache_side(apache55), apache55.namesrv_addr, tmp_path / "a")
    ours = diff_lite.scenario_update_sub_group(rocketscope_side(rocketscope), rocketscope.namesrv_addr, tmp_path / "o")
    print("apache 5.5.0:", apache, "\nrocketscope: ", ours)
    apache.pop("_names"), ours.pop("_names")
    assert apache == diff_lite.APACHE_55_SUB_GROUP
    assert ours == apache


def test_lite_exclusive(apache55, rocketscope, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import diff_lite

    apache = diff_lite.scenario_exclusive(apache_side(apache55), *lite_admin(apache55.namesrv_addr, tmp_path / "a"))
    ours = diff_lite.scenario_exclusive(rocketscope_side(rocketscope),
                                        *lite_admin(rocketscope.namesrv_addr, tmp_path / "o"))
    print("apache 5.5.0:", apache, "\nrocketscope: ", ours)
    assert apache == diff_lite.APACHE_55_EXCLUSIVE
    assert ours == apache


def test_lite_quota_and_offsets(apache55, rocketscope, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import diff_lite

    apache = diff_lite.scenario_quota_and_offsets(apache_side(apache55),
                                                  *lite_admin(apache55.namesrv_addr, tmp_path / "a"))
    ours = diff_lite.scenario_quota_and_offsets(rocketscope_side(rocketscope),
                                                *lite_admin(rocketscope.namesrv_addr, tmp_path / "o"))
    print("apache 5.5.0:", apache, "\nrocketscope: ", ours)
    assert apache == diff_lite.APACHE_55_QUOTA_OFFSETS
    assert ours == apache


def test_lite_topic_expiry(tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    """lite.topic.expiration on both sides, each with TTL_CONF (their own clusters: the module's keep Apache's 15 min
    minLiteTTl).  ROCKETSCOPE_APACHE55_TTL_DIR: a 5.5.0 cluster started with those keys too.  About 2 minutes."""
    import os
    import threading

    import diff_lite
    from peers_support import BROKER_TEST_CONF, PROXY_TEST_CONF, ReferenceCluster, _throwaway

    conf = {**LITE_BROKER_CONF, **diff_lite.TTL_CONF}
    attached = os.environ.get("ROCKETSCOPE_APACHE55_TTL_DIR")
    apache_clusters = iter([ReferenceCluster.attach(Path(attached))]) if attached else _throwaway(ReferenceCluster(
        tmp_path_factory.mktemp("apache55-ttl"), proxy_conf=dict(PROXY_TEST_CONF),
        broker_conf={**BROKER_TEST_CONF, **conf}, version="5.5.0"))
    apache55 = next(apache_clusters)
    try:
        with rocketscope_like_the_reference(tmp_path_factory.mktemp("diff55-ttl"), **conf) as ours_cluster:
            results: dict[str, Any] = {}

            def run(name: str, side: Any, namesrv: str) -> None:
                _, group_of = lite_admin(namesrv, tmp_path_factory.mktemp(f"ttl-{name}"))

                def topic(t: str) -> None:
                    out = diff_lite.mqadmin(namesrv, tmp_path_factory.mktemp(f"ttl-t-{name}"), "updateTopic", "-c",
                                            "DefaultCluster", "-t", t, "-r", "4", "-w", "4", "-a",
                                            "+message.type=LITE,+lite.topic.expiration=1")
                    assert "success" in out, out[-2000:]

                results[name] = diff_lite.scenario_expiry(side, topic, group_of)

            threads = [threading.Thread(target=run, args=("apache", apache_side(apache55), apache55.namesrv_addr)),
                       threading.Thread(target=run, args=("rocketscope", rocketscope_side(ours_cluster),
                                                          ours_cluster.namesrv_addr))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(600)
            print("apache 5.5.0:", results.get("apache"), "\nrocketscope: ", results.get("rocketscope"))
            assert results["apache"] == diff_lite.APACHE_55_EXPIRY
            assert results["rocketscope"] == results["apache"]
    finally:
        for _ in apache_clusters:  # ends the throwaway cluster
            pass


def test_lite_order(apache55, rocketscope, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A lite queue is popped in order on Apache 5.5.0: nothing more of it while a hand-out is in flight, then the
    same message again, in place, with the ones after it."""
    import diff_lite

    apache = diff_lite.scenario_lite_order(apache_side(apache55), *lite_admin(apache55.namesrv_addr, tmp_path / "a"))
    ours = diff_lite.scenario_lite_order(rocketscope_side(rocketscope),
                                         *lite_admin(rocketscope.namesrv_addr, tmp_path / "o"))
    print("apache 5.5.0:", apache, "\nrocketscope: ", ours)
    assert apache == diff_lite.APACHE_55_ORDER
    assert ours == apache


def test_lmq_reads_over_remoting(sides55) -> None:  # type: ignore[no-untyped-def]
    """LMQ queues read over the broker's remoting port with enableLmq (tests/diff_lmq.py; docs/COMPATIBILITY.md
    R28-R29): pulls, offsets, a consumer offset, queue 1, an empty LMQ queue; malformed names are the deviation."""
    import diff_lmq
    from test_diff_grpc import public

    from rocketscope.broker.remoting.codec import ResponseCode

    apache, ours = both(sides55, diff_lmq.scenario_lmq_reads)
    assert public(apache) == diff_lmq.APACHE_55_LMQ
    assert public(ours) == public(apache)
    assert {code for code, _ in apache["_bad"].values()} == {ResponseCode.PULL_NOT_FOUND}  # read as any name
    assert {code for code, _ in ours["_bad"].values()} == {ResponseCode.INVALID_PARAMETER}
