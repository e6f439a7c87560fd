"""10,000 messages, traced end to end: an instrumented and an uninstrumented producer, two consumer
groups (one instrumented), retries and a dead-lettered message; then a broker restart.

Every message must end with exactly one Pub record and, for each group, a SubBefore and a
successful SubAfter (or the DLQ move), whoever wrote them (client or broker), and the
lookup timelines of a retried and of the dead-lettered message must tell what happened.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, defaultdict
from typing import Any

import pytest
from cluster import LocalCluster, wait_until
from rmq import config, message
from rocketmq import FilterExpression, Producer, SimpleConsumer

from rocketscope.topic_reader import discover_queues, pull_messages, queue_bounds
from rocketscope.trace import instrument
from rocketscope.trace.codec import PubRecord, SubAfterRecord, SubBeforeRecord, decode
from rocketscope.trace.lookup import TraceLookup

TOPIC = "TopicFull"
PER_PRODUCER = 5_000
RETRY_EVERY = 1_000


def all_records(namesrv: str) -> list[Any]:
    out: list[Any] = []
    for q in discover_queues(namesrv, ["RMQ_SYS_TRACE_TOPIC"]):
        lo, hi = queue_bounds(q)
        for m in pull_messages(q, lo, hi, 512):
            out.extend(decode(bytes(m.body)))
    return out


def send_all(producer: Producer, prefix: str) -> list[str]:
    ids: list[str] = []
    futures = []
    for i in range(PER_PRODUCER):
        body = f"{prefix}-{i}" + ("-poison" if prefix == "plain" and i == 7 else "")
        futures.append(producer.send_async(message(TOPIC, body.encode(), keys=[f"{prefix}-{i}"])))
        if len(futures) >= 128:
            ids.extend(f.result(timeout=60).message_id for f in futures)
            futures = []
    ids.extend(f.result(timeout=60).message_id for f in futures)
    return ids


def consume(consumer: SimpleConsumer, expected: set[str], fail_once: bool, stop: threading.Event,
            done: set[str]) -> None:
    """Ack everything, except (fail_once) every RETRY_EVERY-th message on its first delivery and the poison."""
    while not stop.is_set() and not expected <= done:
        for m in consumer.receive(32, 3):
            body = bytes(m.body).decode()
            if fail_once and (body.endswith("-poison") or
                              (int(body.split("-")[1]) % RETRY_EVERY == 0 and m.delivery_attempt == 1)):
                continue
            try:
                consumer.ack(m)
                done.add(m.message_id)
            except Exception:
                continue  # expired on a loaded machine: it comes again


@pytest.mark.e2e
@pytest.mark.long  # ~50 s: completeness at scale; completeness of small workloads is checked by test_e2e_trace
def test_ten_thousand_messages_are_traced_completely(tmp_path_factory: pytest.TempPathFactory) -> None:
    c = LocalCluster(tmp_path_factory.mktemp("trace-full"))
    try:
        c.start_namesrv()
        node = c.start_broker("broker-tf", traceTopicEnable="true", brokerTraceEnable="true",
                              minInvisibleTimeMillsForRecv=1000)
        c.admin("updateTopic", "-b", node.admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
        c.admin("updateSubGroup", "-b", node.admin_addr, "-g", "GroupPlain", "-r", "1")
        cfg = config(node.endpoint)
        traced_p = instrument(Producer(cfg, (TOPIC,)))
        plain_p = Producer(cfg, (TOPIC,))
        for p in (traced_p, plain_p):
            p.startup()
        try:
            traced_ids = send_all(traced_p, "traced")
            plain_ids = send_all(plain_p, "plain")
        finally:
            traced_p.shutdown()
            plain_p.shutdown()
        ids = set(traced_ids) | set(plain_ids)
        assert len(ids) == 2 * PER_PRODUCER
        poison = plain_ids[7]
        retried = plain_ids[RETRY_EVERY]

        consumers = {"GroupTraced": instrument(SimpleConsumer(cfg, "GroupTraced", {TOPIC: FilterExpression("*")},
                                                              await_duration=2)),
                     "GroupPlain": SimpleConsumer(cfg, "GroupPlain", {TOPIC: FilterExpression("*")},
                                                  await_duration=2)}
        done: dict[str, set[str]] = {g: set() for g in consumers}
        stop = threading.Event()
        threads = []
        for group, consumer in consumers.items():
            consumer.startup()
            want = ids - {poison} if group == "GroupPlain" else ids
            threads.append(threading.Thread(target=consume, args=(consumer, want, group == "GroupPlain", stop,
                                                                  done[group]), daemon=True))
            threads[-1].start()
        try:
            wait_until(lambda: len(done["GroupTraced"]) == len(ids) and len(done["GroupPlain"]) == len(ids) - 1,
                       timeout=240, interval=0.5, what="both groups consumed everything")
        finally:
            stop.set()
            for t in threads:
                t.join(30)
            for consumer in consumers.values():
                consumer.shutdown()

        def summary() -> tuple[Counter[str], dict[str, set[str]], dict[str, set[str]]]:
            pubs: Counter[str] = Counter()
            before: dict[str, set[str]] = defaultdict(set)
            after_ok: dict[str, set[str]] = defaultdict(set)
            for r in all_records(c.namesrv_addr):
                if isinstance(r, PubRecord) and r.success:
                    pubs[r.msg_id] += 1
                elif isinstance(r, SubBeforeRecord):
                    before[r.group].add(r.msg_id)
                elif isinstance(r, SubAfterRecord) and r.success:
                    after_ok[r.group].add(r.msg_id)
            return pubs, before, after_ok

        missing: dict[str, int] = {}

        def complete() -> bool:
            pubs, before, after_ok = summary()
            missing.update({"pub": len(ids - set(pubs)),
                            **{f"before {g}": len(ids - before[g]) for g in consumers},
                            "after GroupTraced": len(ids - after_ok["GroupTraced"]),
                            "after GroupPlain": len(ids - {poison} - after_ok["GroupPlain"])})
            return not any(missing.values())
        try:
            wait_until(complete, timeout=120, interval=1.0, what="every message's trace complete")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; missing records: {missing}") from None
        pubs, _, _ = summary()
        # the instrumented producer's messages: its own record only (the broker wrote none for them);
        # the plain producer's: one per store (the client resends after a timeout: at least once)
        twice = [i for i in traced_ids if pubs[i] != 1]
        assert not twice, f"{len(twice)} instrumented sends have {pubs[twice[0]]} Pub records"
        assert min(pubs[i] for i in plain_ids) >= 1

        lookup = TraceLookup(c.namesrv_addr)
        dead = asyncio.run(lookup.lookup(poison)).to_dict()
        plain_group = next(g for g in dead["groups"] if g["group"] == "GroupPlain")
        assert plain_group["dlq"] is not None and len(plain_group["deliveries"]) >= 2
        again = asyncio.run(lookup.lookup(retried)).to_dict()
        deliveries = next(g for g in again["groups"] if g["group"] == "GroupPlain")["deliveries"]
        assert [d["status"] for d in deliveries][-1] == "success" and len(deliveries) >= 2

        # the trace survives a broker restart: the same records are there afterwards
        before_restart = len(all_records(c.namesrv_addr))
        node.proc.stop()
        c.start_broker("broker-tf")
        wait_until(lambda: len(all_records(c.namesrv_addr)) >= before_restart, timeout=60,
                   what="the trace topic after the restart")
        assert asyncio.run(lookup.lookup(poison)).to_dict()["groups"]
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()
