"""The Go client programs of the remoting tests, run against Apache RocketMQ 5.3.3 and against RocketScope:
the same results (issue 19, "the same programs against the reference Apache RocketMQ give the same results").

tests/test_remoting_e2e.py runs these scenarios of Apache's Go client v2 (tests/clients/go) against
RocketScope inside `make test`; here each runs on both servers and the observable outcomes are compared:
what was sent, what a push consumer received (bodies, tags, how many), that a second run of the group finds
nothing new (offsets committed over remoting), and a message failed once coming back through the retry topic
with reconsumeTimes 1.  Apache runs as the session's reference cluster (tests/peers_support.py); its delay
levels are its defaults and so are RocketScope's here (the broker runs with the reference cluster's test
settings, tests/test_diff_grpc.py `rocketscope_like_the_reference`); timing is not compared.

    .venv/bin/pytest -q -m long tests/test_remoting_go_apache.py
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cluster import LocalCluster, wait_until
from go_clients import rmqgo, run_go, summary
from peers_support import rc, remoting
from test_diff_grpc import rocketscope_like_the_reference

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(900)]

CreateTopic = Callable[[str, int], None]


@pytest.fixture(scope="module")
def rocketscope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    rmqgo()  # build (or skip) before any process starts
    with rocketscope_like_the_reference(tmp_path_factory.mktemp("go-vs-apache")) as c:
        yield c


def routed(namesrv: str, topic: str) -> bool:
    try:
        return bool(remoting.route(namesrv, topic).get("queueDatas"))
    except (OSError, remoting.RemotingError):
        return False


def sides(apache: rc.ReferenceCluster, ours: LocalCluster) -> dict[str, tuple[str, CreateTopic]]:
    """Per server: the name server the Go client is given and how a topic is created there (mqadmin's
    updateTopic over remoting on Apache, `rocketscope admin updateTopic` here), waited for in the route."""
    def apache_topic(name: str, queues: int) -> None:
        remoting.create_topic(apache.broker_addr, name, queues=queues, message_type=None)
        wait_until(lambda: routed(apache.namesrv_addr, name), timeout=60, what=f"Apache's route of {name}")

    def our_topic(name: str, queues: int) -> None:
        ours.admin("updateTopic", "-t", name, "-r", str(queues), "-w", str(queues))
        wait_until(lambda: routed(ours.namesrv_addr, name), timeout=60, what=f"the route of {name}")

    return {"apache": (apache.namesrv_addr, apache_topic), "rocketscope": (ours.namesrv_addr, our_topic)}


def produce_and_consume(ns: str, create_topic: CreateTopic) -> dict[str, Any]:
    """20 sync and 20 batched sends (batches of 10), a push consumer group reading all 40, then the group again."""
    name, group = f"GoDiff{uuid.uuid4().hex[:6]}", f"GoDiffGroup{uuid.uuid4().hex[:6]}"
    create_topic(name, 4)
    single = run_go("produce", "-ns", ns, "-topic", name, "-n", "20", "-tag", "TagA")
    batch = run_go("produce", "-ns", ns, "-topic", name, "-n", "20", "-batch", "10", "-tag", "TagA")
    got = run_go("consume", "-ns", ns, "-topic", name, "-group", group, "-n", "40", "-timeout", "120", timeout=180)
    again = run_go("consume", "-ns", ns, "-topic", name, "-group", group, "-n", "1", "-timeout", "8")
    received = [e for e in got if e["event"] == "received"]
    single_ids = {e["msgId"] for e in single if e["event"] == "sent"}  # a batch's "sent" line names the batch
    return {"sent": (summary(single)["sent"], summary(batch)["sent"]),
            "distinct_offset_msg_ids": len({e["offsetMsgId"] for e in single if e["event"] == "sent"}),
            "bodies": sorted(e["body"] for e in received), "tags": sorted({e["tags"] for e in received}),
            "single_sends_received_by_id": single_ids <= {e["msgId"] for e in received} and len(single_ids) == 20,
            "second_run_received": summary(again)["received"]}


def retry_once(ns: str, create_topic: CreateTopic) -> dict[str, Any]:
    """One message the consumer fails once (RECONSUME_LATER): it comes back through %RETRY%<group>."""
    name, group = f"GoRetry{uuid.uuid4().hex[:6]}", f"GoRetryGroup{uuid.uuid4().hex[:6]}"
    create_topic(name, 1)
    create_topic(f"%RETRY%{group}", 1)  # as the broker creates it at the group's first heartbeat; not waited for
    run_go("produce", "-ns", ns, "-topic", name, "-n", "1")
    out = run_go("consume", "-ns", ns, "-topic", name, "-group", group, "-n", "1", "-fail-first", "1",
                 "-timeout", "120", timeout=180)
    failed = [e for e in out if e["event"] == "retry_later"]
    back = [e for e in out if e["event"] == "received"]
    return {"failed": [(e["body"], e["reconsumeTimes"]) for e in failed],
            "redelivered": [(e["body"], e["reconsumeTimes"], e["msgId"] == failed[0]["msgId"]) for e in back]}


def both(apache: rc.ReferenceCluster, ours: LocalCluster,
         scenario: Callable[[str, CreateTopic], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    got = {name: scenario(ns, create) for name, (ns, create) in sides(apache, ours).items()}
    print(f"{scenario.__name__}\n  apache:      {got['apache']}\n  rocketscope: {got['rocketscope']}")
    return got["apache"], got["rocketscope"]


def test_go_produce_batch_and_push_consume_like_apache(apache_rocketmq: rc.ReferenceCluster,
                                                      rocketscope: LocalCluster) -> None:
    apache, ours = both(apache_rocketmq, rocketscope, produce_and_consume)
    assert apache["single_sends_received_by_id"] and apache["sent"] == (20, 20)
    assert apache["bodies"] == sorted(f"go-{i}" for i in range(20) for _ in (0, 1))
    assert ours == apache


def test_go_retry_through_the_retry_topic_like_apache(apache_rocketmq: rc.ReferenceCluster,
                                                      rocketscope: LocalCluster) -> None:
    apache, ours = both(apache_rocketmq, rocketscope, retry_once)
    assert apache == {"failed": [("go-0", 0)], "redelivered": [("go-0", 1, True)]}
    assert ours == apache
