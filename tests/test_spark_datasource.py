"""The ``rocketscope`` Spark data source against a live name server and broker (real processes).

Messages are sent with the official client; its send receipts give each message's ID and
queue offset, so the rows read back are checked field by field, not just counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import LocalCluster, start_dledger_group, wait_until
from rmq import message, producer

from rocketscope.spark.datasource import OptionError, as_rows, parse_offsets, read_topics, register, stream_topics

pytestmark = pytest.mark.e2e

TOPIC = "TopicSpark"
BROKER = "broker-a"
Sent = dict[str, dict[str, Any]]


def _send(endpoint: str, topic: str, bodies: list[bytes], **extra: Any) -> Sent:
    """Send with the official client; {msg_id: what was sent and where the receipt says it went}."""
    sent: Sent = {}
    with producer(endpoint, topic) as p:
        for i, body in enumerate(bodies):
            tag, keys, props = f"t{i % 3}", [f"k{i}", f"order-{i}"], {"seq": str(i), **extra}
            receipt = p.send(message(topic, body, tag=tag, keys=keys, props=props))
            # The receipt's offset is the broker's answer; its message_queue is only the client's pick, which
            # the broker (like RocketMQ's proxy) does not have to honour, so the queue is not taken from it.
            sent[receipt.message_id] = {"body": body, "tag": tag, "keys": keys, "props": props,
                                        "broker": receipt.message_queue.message_queue0().broker.name,
                                        "offset": receipt.offset}
    return sent


def _route_brokers(c: LocalCluster, topic: str) -> set[str]:
    """Broker groups with queues of ``topic`` on the name server (empty while it has no route)."""
    res = c.admin("topicRoute", "-t", topic, "--json", check=False)
    if res.returncode != 0:
        return set()
    return {q["brokerName"] for q in json.loads(res.stdout).get("queueDatas", [])}


def _create_topic(c: LocalCluster, topic: str, queues: int = 2) -> None:
    node = next(iter(c.brokers.values()))
    c.admin("updateTopic", "-b", node.admin_addr, "-t", topic, "-r", str(queues), "-w", str(queues))
    wait_until(lambda: _route_brokers(c, topic), timeout=30, what=f"route of {topic}")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Sent]]:
    c = LocalCluster(tmp_path_factory.mktemp("spark-live"))
    try:
        c.start_namesrv()
        node = c.start_broker(BROKER, defaultTopicQueueNums=2)
        _create_topic(c, TOPIC)
        yield c, _send(node.endpoint, TOPIC, [f"spark-{i}".encode() for i in range(12)])
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def test_batch_read_returns_every_message_exactly(spark: Any, live: Any) -> None:
    c, sent = live
    df = read_topics(spark, c.namesrv_addr, [TOPIC])
    assert df.rdd.getNumPartitions() == 2  # one input partition per queue
    rows = df.collect()
    assert len(rows) == len(sent)
    by_id = {r["msg_id"]: r for r in rows}
    assert set(by_id) == set(sent)
    for msg_id, want in sent.items():
        r = by_id[msg_id]
        assert (r["topic"], r["broker"], r["queue_offset"]) == (TOPIC, want["broker"], want["offset"])
        assert r["body"] == want["body"] and r["tags"] == want["tag"] and sorted(r["keys"]) == sorted(want["keys"])
        assert r["properties"] == want["props"]  # user properties only: no broker-internal ones leak
        assert r["commitlog_offset"] >= 0 and r["store_timestamp"] is not None and r["born_timestamp"] is not None
        assert r["born_timestamp"] <= r["store_timestamp"]
    assert len({r["commitlog_offset"] for r in rows}) == len(rows)
    # every queue's offsets are dense from 0, and both queues were used
    for qid in (0, 1):
        offsets = sorted(r["queue_offset"] for r in rows if r["queue_id"] == qid)
        assert offsets == list(range(len(offsets))) and offsets, (qid, offsets)
    # a queue's messages are in commit-log order too (the consume queue points into the commit log)
    for qid in (0, 1):
        by_offset = sorted((r["queue_offset"], r["commitlog_offset"]) for r in rows if r["queue_id"] == qid)
        assert [cl for _, cl in by_offset] == sorted(cl for _, cl in by_offset)
    # The jobs' projection: KEYS as one string, the message ID as UNIQ_KEY.
    projected = {r["properties"]["UNIQ_KEY"]: r for r in as_rows(df).collect()}
    some = next(iter(sent))
    assert sorted(projected[some]["keys"].split()) == sorted(sent[some]["keys"])
    assert projected[some]["body"] == sent[some]["body"]


def test_starting_and_ending_offsets_per_queue(spark: Any, live: Any) -> None:
    c, _ = live

    def got(**options: str) -> list[tuple[int, int]]:
        return sorted((r["queue_id"], r["queue_offset"]) for r in read_topics(spark, c.namesrv_addr, [TOPIC],
                                                                              **options).collect())

    everything = got()  # checked message by message above
    per_queue = {q: sum(1 for qid, _ in everything if qid == q) for q in (0, 1)}
    assert min(per_queue.values()) >= 4, per_queue  # the broker spreads sends over both queues

    def _expected(ranges: dict[int, tuple[int, int]]) -> list[tuple[int, int]]:
        return [(q, o) for q, o in everything if q in ranges and ranges[q][0] <= o < ranges[q][1]]

    # broker level (one topic), -1 = latest: queue 1 starts at its end and yields nothing
    assert got(startingOffsets=json.dumps({BROKER: {"0": 2, "1": -1}}),
               endingOffsets=json.dumps({BROKER: {"0": 4}})) == _expected({0: (2, 4)})
    # topic level, -2 = earliest, unnamed queues default to earliest / latest
    assert got(startingOffsets=json.dumps({TOPIC: {BROKER: {"1": 3}}}),
               endingOffsets=json.dumps({TOPIC: {BROKER: {"0": -2}}})) == _expected({1: (3, per_queue[1])})
    assert got(startingOffsets="latest") == []
    assert got(endingOffsets="earliest") == []


def test_bad_options_name_the_option(spark: Any, live: Any) -> None:
    c, _ = live
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_offsets("{not json", [TOPIC], "startingOffsets", -2)
    register(spark)

    def load(**options: str) -> None:
        reader = spark.read.format("rocketscope")
        for k, v in options.items():
            reader = reader.option(k, v)
        reader.load().collect()

    cases = [
        ({"topic": "NoSuchTopic"}, "option topic: topic NoSuchTopic has no route"),
        ({"topic": TOPIC, "startingOffsets": "{not json"}, "option startingOffsets must be earliest, latest or JSON"),
        ({"topic": TOPIC, "endingOffsets": '{"broker-a": {"0": "x"}}'}, "option endingOffsets: queue '0'"),
        ({"topic": TOPIC, "startingOffsets": '{"broker-x": {"0": 1}}'},
         "option startingOffsets names queue.*TopicSpark/broker-x/0"),
        ({"topic": TOPIC, "startingOffsets": '{"OtherTopic": {"broker-a": {"0": 1}}}'},
         "option startingOffsets: queue 'broker-a' of broker 'OtherTopic'"),  # one topic: the top level is brokers
        ({"topic": TOPIC, "batchSize": "0"}, "option batchSize must be between 1 and 1024"),
        ({"topic": TOPIC, "startingOffset": "earliest"}, "unknown option.*startingoffset"),
    ]
    for options, message_re in cases:
        with pytest.raises(Exception, match=message_re):
            load(namesrv=c.namesrv_addr, **options)
    with pytest.raises(Exception, match="option namesrv is required"):
        load(topic=TOPIC)
    with pytest.raises(Exception, match="option namesrv: no name server answered"):
        load(namesrv="127.0.0.1:1", topic=TOPIC, timeoutMs="2000")
    with pytest.raises(Exception, match="option endingOffsets is for batch reads only"):
        query = stream_topics(spark, c.namesrv_addr, [TOPIC], endingOffsets="latest").writeStream.format("noop") \
            .start()
        try:
            query.awaitTermination(120)  # the reader is made when the query plans its first batch
        finally:
            query.stop()


def _ids(spark: Any, path: Path) -> list[str]:
    """Every msg_id committed to a Parquet file sink so far (its _spark_metadata log hides partial files)."""
    if not (path / "_spark_metadata").exists():
        return []
    return [r["msg_id"] for r in spark.read.parquet(str(path)).select("msg_id").collect()]


def test_stream_picks_up_new_messages_and_resumes_from_its_checkpoint(spark: Any, live: Any,
                                                                      tmp_path: Path) -> None:
    c, _ = live
    topic = "TopicSparkStream"
    _create_topic(c, topic)
    endpoint = c.brokers[BROKER].endpoint
    checkpoint, out = tmp_path / "ckpt", tmp_path / "out"
    before = _send(endpoint, topic, [f"before-{i}".encode() for i in range(4)])

    def start(**trigger: Any) -> Any:
        stream = stream_topics(spark, c.namesrv_addr, [topic], maxMessagesPerTrigger="3")
        return (stream.writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())

    query = start(processingTime="1 second")
    try:
        def written(n: int) -> bool:
            if not query.isActive:  # a failed query: stop waiting, the assertion below shows why
                return True
            return len(_ids(spark, out)) >= n

        wait_until(lambda: written(len(before)), timeout=120, interval=0.5,
                   what="the messages sent before the query started")
        assert query.exception() is None and sorted(_ids(spark, out)) == sorted(before)
        during = _send(endpoint, topic, [f"during-{i}".encode() for i in range(5)])
        wait_until(lambda: written(len(before) + len(during)), timeout=120, interval=0.5,
                   what="the messages sent while the query ran")
        assert query.exception() is None
        # maxMessagesPerTrigger=3 held: no micro-batch read more
        assert max(p["numInputRows"] for p in query.recentProgress) <= 3
    finally:
        query.stop()
    assert sorted(_ids(spark, out)) == sorted([*before, *during])
    offsets = sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = json.loads(offsets[-1].read_text().splitlines()[-1])
    assert sum(last[topic][BROKER].values()) == len(before) + len(during)  # the checkpoint holds next offsets

    after = _send(endpoint, topic, [f"after-{i}".encode() for i in range(3)])
    query = start(availableNow=True)
    query.awaitTermination(180)
    assert not query.isActive, "the availableNow query did not finish"
    assert query.exception() is None
    ids = _ids(spark, out)
    assert len(ids) == len(set(ids)) == len(before) + len(during) + len(after)  # resumed, nothing twice
    assert set(ids) == {*before, *during, *after}


@pytest.mark.long  # ~120 s; the live DLedger source through Spark stays in make test (test_truth_consumers_failover)
def test_analyze_cli_reads_a_live_dledger_group_with_broker_trace(spark: Any,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    """``rocketscope analyze all --namesrv`` end to end: broker-side trace records and the HA events of a
    three-node DLedger group, read live by the data source in a fresh Spark driver, give the tables; the
    streaming variant over the same live topics gives the same e2e table."""
    import pyarrow.parquet as pq
    from rmq import drain, simple_consumer

    from rocketscope.spark.streaming import start_stream

    root = tmp_path_factory.mktemp("spark-traced")
    c = LocalCluster(root)
    try:
        c.start_namesrv()
        nodes = start_dledger_group(c, "broker-t", traceTopicEnable="true", brokerTraceEnable="true",
                                    defaultTopicQueueNums=2)
        endpoints = ";".join(n.endpoint for n in nodes)
        for n in nodes:  # the leader takes the topic; followers forward or refuse, either is fine
            c.admin("updateTopic", "-b", n.admin_addr, "-t", "TopicTraced", "-r", "2", "-w", "2", check=False)
        wait_until(lambda: "broker-t" in _route_brokers(c, "TopicTraced"), timeout=60, what="route of TopicTraced")
        with producer(endpoints, "TopicTraced") as p:
            ids = {p.send(message("TopicTraced", f"tr-{i}".encode())).message_id for i in range(6)}
        with simple_consumer(endpoints, "GroupTraced", "TopicTraced") as consumer:
            assert {m.message_id for m in drain(consumer, 6, timeout=60)} >= ids
        out = root / "tables"
        cmd = [str(Path(sys.executable).parent / "rocketscope"), "analyze", "all", "--namesrv", c.namesrv_addr,
               "--output", str(out), "--master", "local[2]", "--driver-memory", "512m", "--quick-start"]

        # Broker-side trace records reach the trace topic asynchronously: wait until all are there, then
        # run the CLI once (each run is a fresh Spark driver).
        def traced() -> bool:
            records = read_topics_local(c.namesrv_addr)
            return sum(b.count(b"SubAfter") for b in records) >= 6 and sum(b.count(b"Pub") for b in records) >= 6

        wait_until(traced, timeout=120, interval=1, what="Pub and SubAfter trace records of all six messages")
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, res.stderr[-4000:]
        assert set(json.loads(res.stdout.strip().splitlines()[-1])["seconds"]) == {
            "message_timeline", "replication_latency", "failover_impact", "e2e_latency"}
        e2e = [r for r in pq.read_table(out / "e2e_latency").to_pylist()
               if (r["topic"], r["group"]) == ("TopicTraced", "GroupTraced")]
        assert sum(r["samples"] for r in e2e) >= 6, e2e
        timeline = {r["msg_id"]: r for r in pq.read_table(out / "message_timeline").to_pylist()}
        assert ids <= set(timeline)
        for msg_id in ids:
            row = timeline[msg_id]
            assert row["topic"] == "TopicTraced" and row["broker_group"] == "broker-t", row
            assert row["ha_mode"] == "dledger" and row["committed_ts"] is not None, row
        repl = [r for r in pq.read_table(out / "replication_latency").to_pylist() if r["topic"] == "TopicTraced"]
        assert {r["replica"] for r in repl} >= {"__quorum__"} and sum(r["samples"] for r in repl) > 0, repl

        # analyze stream --namesrv --available-now, in this process: same live topics, same table
        streamed = root / "streamed"
        query = start_stream(spark, [], streamed, jobs=["e2e_latency"], namesrv=c.namesrv_addr, progress=False)
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        got = [r for r in pq.read_table(streamed / "e2e_latency").to_pylist()
               if (r["topic"], r["group"]) == ("TopicTraced", "GroupTraced")]
        assert sum(r["samples"] for r in got) == sum(r["samples"] for r in e2e)
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def read_topics_local(namesrv: str) -> list[bytes]:
    """Bodies of the trace topic read with the same pull code, without Spark (a cheap readiness poll)."""
    from rocketscope import topic_reader

    bodies = []
    for q in topic_reader.discover_queues(namesrv, ["RMQ_SYS_TRACE_TOPIC"]):
        lo, hi = topic_reader.queue_bounds(q)
        bodies += [bytes(m.body) for m in topic_reader.pull_messages(q, lo, hi)]
    return bodies
