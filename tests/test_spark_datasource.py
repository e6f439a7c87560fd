"""The ``rocketscope`` Spark data source against a live name server and broker (real processes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import LocalCluster, wait_until
from rmq import message, producer

from rocketscope.spark.datasource import OptionError, parse_offsets, read_topics, register

TOPIC = "TopicSpark"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, dict[str, Any]]]]:
    c = LocalCluster(tmp_path_factory.mktemp("spark-live"))
    try:
        c.start_namesrv()
        node = c.start_broker("broker-a", defaultTopicQueueNums=2)
        c.admin("updateTopic", "-b", node.admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
        wait_until(lambda: any(r.get("brokerName") == "broker-a" for r in _route(c)), what="topic route")
        sent: dict[str, dict[str, Any]] = {}
        with producer(node.endpoint, TOPIC) as p:
            for i in range(12):
                body = f"spark-{i}".encode()
                receipt = p.send(message(TOPIC, body, tag=f"t{i % 3}", keys=[f"k{i}", f"order-{i}"],
                                         props={"seq": str(i)}))
                sent[receipt.message_id] = {"body": body, "tag": f"t{i % 3}", "keys": f"k{i} order-{i}",
                                            "seq": str(i)}
        yield c, sent
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


def _route(c: LocalCluster) -> list[dict[str, Any]]:
    res = c.admin("topicRoute", "-t", TOPIC, "--json", check=False)
    if res.returncode != 0:
        return []
    data = json.loads(res.stdout)
    return data.get("brokerDatas", data.get("brokers", [])) if isinstance(data, dict) else []


def test_batch_read_returns_every_message_with_its_fields(spark: Any, live: Any) -> None:
    c, sent = live
    rows = read_topics(spark, c.namesrv_addr, [TOPIC]).collect()
    assert len(rows) == len(sent)
    by_id = {r["properties"]["UNIQ_KEY"]: r for r in rows}
    assert set(by_id) == set(sent)
    for msg_id, want in sent.items():
        r = by_id[msg_id]
        assert r["topic"] == TOPIC and r["body"] == want["body"] and r["tags"] == want["tag"]
        assert set(r["keys"].split()) == set(want["keys"].split()) and r["properties"]["seq"] == want["seq"]
        assert r["commitlog_offset"] >= 0 and r["store_timestamp"] is not None and r["born_timestamp"] is not None
    # queue offsets are dense per queue and commit-log offsets are distinct
    for qid in (0, 1):
        offsets = sorted(r["queue_offset"] for r in rows if r["queue_id"] == qid)
        assert offsets == list(range(len(offsets)))
    assert len({r["commitlog_offset"] for r in rows}) == len(rows)


def test_starting_and_ending_offsets_per_queue(spark: Any, live: Any) -> None:
    c, _ = live
    df = read_topics(spark, c.namesrv_addr, [TOPIC], startingOffsets=json.dumps({"broker-a": {"0": 2, "1": -1}}),
                     endingOffsets=json.dumps({"broker-a": {"0": 4}}))
    got = sorted((r["queue_id"], r["queue_offset"]) for r in df.collect())
    assert got == [(0, 2), (0, 3)]  # queue 1 starts at its end: nothing


def test_bad_options_name_the_option(spark: Any, live: Any) -> None:
    c, _ = live
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_offsets("{not json", [TOPIC], "startingOffsets", -2)
    with pytest.raises(OptionError, match="endingOffsets"):
        parse_offsets('{"broker-a": {"0": "x"}}', [TOPIC], "endingOffsets", -1)
    register(spark)
    with pytest.raises(Exception, match="option topic"):
        spark.read.format("rocketscope").option("namesrv", c.namesrv_addr).option("topic", "NoSuchTopic").load() \
            .collect()
    with pytest.raises(Exception, match="option namesrv is required"):
        spark.read.format("rocketscope").option("topic", TOPIC).load().collect()


def test_streaming_picks_up_new_messages_and_resumes_from_its_checkpoint(spark: Any, live: Any,
                                                                         tmp_path: Path) -> None:
    c, sent = live
    register(spark)
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")

    def run_once() -> list[str]:
        """One availableNow run of the same query (same checkpoint); all ids written so far."""
        stream = (spark.readStream.format("rocketscope").option("namesrv", c.namesrv_addr).option("topic", TOPIC)
                  .option("startingOffsets", "earliest").load())
        query = (stream.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert not query.isActive, "the availableNow query did not finish"
        return [r["id"] for r in spark.read.parquet(out).selectExpr("properties['UNIQ_KEY'] AS id").collect()]

    first = run_once()
    assert sorted(first) == sorted(sent)
    node = c.brokers["broker-a"]
    with producer(node.endpoint, TOPIC) as p:
        new_ids = {p.send(message(TOPIC, f"late-{i}".encode())).message_id for i in range(3)}
    second = run_once()
    assert sorted(second) == sorted([*sent, *new_ids])  # the new ones once each, the old ones not again


def test_analyze_reads_a_live_traced_broker(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The jobs run on what the data source reads: broker-side trace records and HA events of a live broker."""
    from rmq import drain, simple_consumer

    from rocketscope.spark.run import run_jobs

    c = LocalCluster(tmp_path_factory.mktemp("spark-traced"))
    try:
        c.start_namesrv()
        node = c.start_broker("broker-t", traceTopicEnable="true", brokerTraceEnable="true")
        c.admin("updateTopic", "-b", node.admin_addr, "-t", "TopicTraced", "-r", "2", "-w", "2")
        with producer(node.endpoint, "TopicTraced") as p:
            ids = {p.send(message("TopicTraced", f"tr-{i}".encode())).message_id for i in range(6)}
        with simple_consumer(node.endpoint, "GroupTraced", "TopicTraced") as consumer:
            assert {m.message_id for m in drain(consumer, 6)} >= ids
        wait_until(lambda: read_topics(spark, c.namesrv_addr, ["RMQ_SYS_TRACE_TOPIC"]).count() > 0, timeout=60,
                   what="trace records on the trace topic")
        # trace messages carry their original topic as the tag (the jobs read Sub records' topic there)
        tags = {r["tags"] for r in read_topics(spark, c.namesrv_addr, ["RMQ_SYS_TRACE_TOPIC"]).collect()}
        assert tags == {"TopicTraced"}, tags
        out = tmp_path_factory.mktemp("spark-traced-out")
        rows = read_topics(spark, c.namesrv_addr, ["RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_HA_EVENTS"])
        run_jobs(spark, rows, out, ["message_timeline", "e2e_latency"], progress=False)
        timeline = spark.read.parquet(str(out / "message_timeline")).select("msg_id").collect()
        assert ids <= {r["msg_id"] for r in timeline}
        e2e = spark.read.parquet(str(out / "e2e_latency")).collect()
        assert {(r["topic"], r["group"]) for r in e2e} >= {("TopicTraced", "GroupTraced")}
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()
