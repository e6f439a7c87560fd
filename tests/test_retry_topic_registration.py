"""Retry and dead-letter topics reach the name server's topic list as soon as the broker creates them
(issue 18's open difference: right after a retry/DLQ scenario Apache's topicList had %RETRY%<group>
and %DLQ%<group>, RocketScope's did not, because topics the broker creates itself, in
broker/pop.py, waited for the next periodic registration).

The periodic registration is set to its maximum, 60 s, here, so only the registration sent on creation can
put them in the list within the test's bounds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from cluster import LocalCluster, wait_until
from rmq import message, producer, simple_consumer

from rocketscope.admin_client import AdminClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("retry-registration"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a", registerNameServerPeriod=60_000, minInvisibleTimeMillsForRecv=1000)
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def namesrv_topics(namesrv: str) -> set[str]:
    async def go() -> set[str]:
        client = AdminClient(namesrv)
        try:
            return set(await client.topics())
        finally:
            await client.close()

    return asyncio.run(go())


def test_retry_and_dlq_topics_are_in_the_topic_list_once_created(cluster: LocalCluster) -> None:
    topic, group = f"RegT{uuid.uuid4().hex[:6]}", f"GID_reg_{uuid.uuid4().hex[:6]}"
    cluster.admin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1")
    cluster.admin("updateSubGroup", "-c", "DefaultCluster", "-g", group, "-r", "1")  # retryMaxTimes=1
    wait_until(lambda: topic in namesrv_topics(cluster.namesrv_addr), timeout=30, what=f"{topic} registered")
    with producer(cluster.brokers["broker-a"].endpoint, topic) as p:
        p.send(message(topic, b"doomed"))
    attempts = []
    with simple_consumer(cluster.brokers["broker-a"].endpoint, group, topic) as c:
        deadline = time.monotonic() + 60
        while len(attempts) < 2 and time.monotonic() < deadline:
            attempts += [m.delivery_attempt for m in c.receive(1, 1)]  # never acked: 1 s invisible each time
    assert attempts == [1, 2]
    # the second delivery came from %RETRY%<group>; after its invisible time the message goes to %DLQ%<group>
    wait_until(lambda: {f"%RETRY%{group}", f"%DLQ%{group}"} <= namesrv_topics(cluster.namesrv_addr), timeout=20,
               interval=0.2, what=f"%RETRY%{group} and %DLQ%{group} in the name server's topic list")
