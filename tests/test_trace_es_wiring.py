"""traceStore=elasticsearch end to end: a real broker process bulk-indexes what reaches its trace topic
(client-written and broker-written records) into the in-process Elasticsearch 8 fake, and lookup by
msgId (TraceLookup, `rocketscope queryMsgTraceById --es-hosts`) reads the records back by term query.

The fake (tests/test_trace_elasticsearch.py) is all this has ever run against: no Elasticsearch
server exists where these tests run.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import LocalCluster, wait_until
from rmq import config, drain, message
from rocketmq import FilterExpression, Producer, SimpleConsumer
from test_trace_elasticsearch import FakeElasticsearch8

from rocketscope.trace import instrument
from rocketscope.trace.elasticsearch_store import ElasticsearchTraceStore
from rocketscope.trace.lookup import TraceLookup

pytestmark = pytest.mark.e2e

TOPIC = "TopicEs"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeElasticsearch8]:
    server = FakeElasticsearch8()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, fake: FakeElasticsearch8) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("trace-es"))
    try:
        c.start_namesrv()
        node = c.start_broker("broker-es", traceTopicEnable="true", brokerTraceEnable="true",
                              traceStore="elasticsearch", traceElasticsearchHosts=fake.url,
                              traceElasticsearchIndexPrefix="rs-trace")
        c.admin("updateTopic", "-b", node.admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def indexed_ids(fake: FakeElasticsearch8) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for docs in list(fake.indices.values()):
        for doc in list(docs.values()):
            out.setdefault(doc["msg_id"], set()).add(doc["type"])
    return out


def test_broker_indexes_client_and_broker_records_and_lookup_uses_them(cluster: LocalCluster,
                                                                       fake: FakeElasticsearch8) -> None:
    c = cluster
    endpoint = c.brokers["broker-es"].endpoint
    traced = instrument(Producer(config(endpoint), (TOPIC,)))  # client-written Pub
    plain = Producer(config(endpoint), (TOPIC,))  # broker-written Pub
    for p in (traced, plain):
        p.startup()
    try:
        client_id = traced.send(message(TOPIC, b"client traced", keys=["order-7"])).message_id
        broker_id = plain.send(message(TOPIC, b"broker traced")).message_id
    finally:
        traced.shutdown()
        plain.shutdown()
    consumer = SimpleConsumer(config(endpoint), "GroupEs", {TOPIC: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    try:
        assert len(drain(consumer, 2, timeout=30)) == 2
    finally:
        consumer.shutdown()

    want = {"Pub", "SubBefore", "SubAfter"}
    wait_until(lambda: want <= indexed_ids(fake).get(client_id, set()) and
               want <= indexed_ids(fake).get(broker_id, set()), timeout=60, what="both messages' records in ES")
    # the template and daily indices of the configured prefix
    assert "rs-trace" in fake.templates
    assert fake.templates["rs-trace"]["index_patterns"] == ["rs-trace-*"]
    assert fake.indices and all(name.startswith("rs-trace-20") for name in fake.indices)
    bulk = [r for r in fake.requests if r["path"] == "/_bulk"]
    assert bulk and all("compatible-with=8" in r["headers"]["content-type"] for r in bulk)

    store = ElasticsearchTraceStore(fake.url, index_prefix="rs-trace")
    try:
        searches_before = sum(r["path"].endswith("/_search") for r in fake.requests)
        timeline = asyncio.run(TraceLookup(c.namesrv_addr, es_store=store).lookup(client_id)).to_dict()
        assert sum(r["path"].endswith("/_search") for r in fake.requests) == searches_before + 1
        term = json.loads(fake.requests[-1]["body"]) if fake.requests[-1]["path"].endswith("/_search") else None
        assert term is None or term["query"] == {"term": {"msg_id": client_id}}
        assert timeline["sends"][0]["status"] == "success" and timeline["keys"] == "order-7"
        assert [g["group"] for g in timeline["groups"]] == ["GroupEs"]
        assert timeline["groups"][0]["deliveries"][0]["status"] == "success"
    finally:
        store.close()

    # the CLI reads the same records from Elasticsearch
    res = subprocess.run([str(Path(sys.executable).parent / "rocketscope"), "admin", "queryMsgTraceById",
                          "-n", c.namesrv_addr, "-i", broker_id, "--json", "--es-hosts", fake.url,
                          "--es-index-prefix", "rs-trace"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["msg_id"] == broker_id and doc["groups"][0]["group"] == "GroupEs"


def test_lookup_of_unknown_id_in_es_is_a_clear_not_found(cluster: LocalCluster, fake: FakeElasticsearch8) -> None:
    from rocketscope.trace.http_api import lookup_response

    store = ElasticsearchTraceStore(fake.url, index_prefix="rs-trace")
    try:
        status, doc = lookup_response(cluster.namesrv_addr, "0102FC00000000000000000000000DEAD", "RMQ_SYS_TRACE_TOPIC",
                                      store)
    finally:
        store.close()
    assert status == 404 and "unknown message id" in doc["error"]


def test_indexer_keeps_records_while_elasticsearch_refuses_and_bounds_its_buffer(fake: FakeElasticsearch8) -> None:
    """Elasticsearch refusing (or down) must cost neither the broker nor the records: they wait and go later;
    beyond the buffer bound, new ones are dropped and counted."""
    from rocketscope.broker.store.record import StoredMessage
    from rocketscope.trace.codec import PubRecord, decode, encode
    from rocketscope.trace.es_indexer import TraceIndexer

    def trace_message(msg_id: str) -> StoredMessage:
        pub = PubRecord(1_700_000_000_000, "R", "", "TopicUnit", msg_id, "", "", "h:1", 1, 1, 0, "", True)
        return StoredMessage(topic="RMQ_SYS_TRACE_TOPIC", queue_id=0, body=encode([pub]).encode(), properties={})

    store = ElasticsearchTraceStore(fake.url, index_prefix="unit-trace")
    indexer = TraceIndexer(store, "RMQ_SYS_TRACE_TOPIC", max_buffered=3)

    async def go() -> None:
        first = trace_message("UNIT-A")
        fake.fail_bulk_ids.add(ElasticsearchTraceStore.document_id(decode(first.body)[0]))
        indexer.on_dispatch(first)
        indexer.on_dispatch(StoredMessage(topic="OtherTopic", queue_id=0, body=b"not trace", properties={}))
        indexer.on_dispatch(StoredMessage(topic="RMQ_SYS_TRACE_TOPIC", queue_id=0, body=b"\xff", properties={}))
        assert not await indexer.flush()  # refused: kept
        assert indexer.stats()["buffered"] == 1 and indexer.failures == 1
        for i in range(4):
            indexer.on_dispatch(trace_message(f"UNIT-{i}"))
        assert indexer.dropped == 2 and indexer.undecodable == 1  # bound of 3
        fake.fail_bulk_ids.clear()
        assert await indexer.flush()
        await indexer.stop()

    asyncio.run(go())
    assert indexer.indexed == 3
    found = {doc["msg_id"] for name, docs in fake.indices.items() if name.startswith("unit-trace-")
             for doc in docs.values()}
    assert found == {"UNIT-A", "UNIT-0", "UNIT-1"}
