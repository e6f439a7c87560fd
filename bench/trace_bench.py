"""Message trace benchmark (issue 7): cost of tracing, completeness, lookup latency.

    .venv/bin/python bench/trace_bench.py [--messages 3000] [--rounds 3] [--lookup-sizes 1000000,10000000] [--quick]

1. Produce-and-consume throughput with the official client, trace off (plain clients, broker
   without trace) against trace on (instrumented producer and consumer, broker-side trace on
   for everyone else), in the same run, alternating rounds, 64 sends in flight.  Target >= 0.90x.
2. Completeness at that load: every traced message must have its Pub, SubBefore and SubAfter
   on the trace topic; the dispatcher's dropped/failed counters are reported.  Target 100 %.
   Because wall-clock rates swing with whatever else runs on a shared machine, the CPU time
   per message of the client process and of the broker process (``/proc``) is measured
   in the same rounds; off/on of that is the throughput ratio a CPU-bound machine would see.
3. Lookup latency of the embedded index by msgId (``MessageStore.lookup``, what
   queryMsgById and the trace lookup use per broker), p50/p99 over 2,000 random IDs, with
   1 and 10 million 200-byte messages stored.  The store is filled through its own API
   (MessageStore.put in batches), not through gRPC: 10 M sends through the client would take
   hours here; the index is the same.  Target p99 < 20 ms.
Results to bench/results/trace.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from cluster import LocalCluster  # noqa: E402
from load import cpu_seconds, wait_quiet  # noqa: E402
from rmq import config, message  # noqa: E402
from rocketmq import FilterExpression, Producer, SimpleConsumer  # noqa: E402

from rocketscope.topic_reader import discover_queues, pull_messages, queue_bounds  # noqa: E402
from rocketscope.trace import instrument  # noqa: E402
from rocketscope.trace.codec import PubRecord, SubAfterRecord, SubBeforeRecord, decode  # noqa: E402


def say(text: str) -> None:
    print(f"[trace-bench] {text}", flush=True)


def produce_consume(endpoint: str, topic: str, group: str, n: int, traced: bool) -> tuple[float, list[str], Any]:
    """msgs/s for sending n messages (64 in flight) and consuming them all; the ids; the producer's dispatcher."""
    producer = Producer(config(endpoint), (topic,))
    consumer = SimpleConsumer(config(endpoint), group, {topic: FilterExpression("*")}, await_duration=1)
    if traced:
        producer, consumer = instrument(producer), instrument(consumer)
    producer.startup()
    consumer.startup()
    ids: list[str] = []
    got: set[str] = set()
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set() and len(got) < n:
            for m in consumer.receive(32, 15):
                consumer.ack(m)
                got.add(m.message_id)

    t0 = time.perf_counter()
    th = threading.Thread(target=consume, daemon=True)
    th.start()
    futures = []
    for i in range(n):
        futures.append(producer.send_async(message(topic, b"x" * 1024, keys=[f"k{i}"])))
        if len(futures) >= 64:
            ids.extend(f.result(60).message_id for f in futures)
            futures = []
    ids.extend(f.result(60).message_id for f in futures)
    th.join(300)
    elapsed = time.perf_counter() - t0
    stop.set()
    dispatcher = getattr(producer, "_rocketscope_trace", None)
    producer.shutdown()
    consumer.shutdown()
    return n / elapsed, ids, dispatcher


def completeness(namesrv: str, ids: list[str], group: str) -> dict[str, Any]:
    kinds: dict[str, set[str]] = {"pub": set(), "before": set(), "after": set()}
    for q in discover_queues(namesrv, ["RMQ_SYS_TRACE_TOPIC"]):
        lo, hi = queue_bounds(q)
        for m in pull_messages(q, lo, hi, 512):
            for r in decode(bytes(m.body)):
                if isinstance(r, PubRecord):
                    kinds["pub"].add(r.msg_id)
                elif isinstance(r, SubBeforeRecord) and r.group == group:
                    kinds["before"].add(r.msg_id)
                elif isinstance(r, SubAfterRecord):
                    kinds["after"].add(r.msg_id)
    want = set(ids)
    return {k: round(len(want & v) / len(want), 6) for k, v in kinds.items()}


def bench_throughput(messages: int, rounds: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="rs-trace-bench-"))
    c = LocalCluster(work)
    try:
        c.start_namesrv()
        plain = c.start_broker("broker-plain")
        traced = c.start_broker("broker-traced", traceTopicEnable="true", brokerTraceEnable="true")
        rates: dict[str, list[float]] = {"off": [], "on": []}
        cpu: dict[str, dict[str, list[float]]] = {side: {"off": [], "on": []} for side in ("client", "broker")}
        complete: list[dict[str, Any]] = []
        drops = Counter()
        for r in range(rounds):
            order = [("off", plain), ("on", traced)] if r % 2 == 0 else [("on", traced), ("off", plain)]
            for mode, node in order:
                # a name per run: both brokers register with one name server, and a topic created on both
                # would route half of the second run's sends to the other broker (it did until session 5)
                topic, group = f"TopicBench{r}{mode.title()}", f"GroupBench{r}{mode.title()}"
                c.admin("updateTopic", "-b", node.admin_addr, "-t", topic, "-r", "4", "-w", "4")
                wait_quiet([plain.proc.popen.pid, traced.proc.popen.pid])
                client0, broker0 = time.process_time(), cpu_seconds(node.proc.popen.pid)
                rate, ids, disp = produce_consume(node.endpoint, topic, group, messages, mode == "on")
                # the broker's work after the last ack (flushes, broker-side trace records) is this run's
                tail_s = wait_quiet([node.proc.popen.pid])
                cpu["client"][mode].append((time.process_time() - client0) * 1000 / messages)
                cpu["broker"][mode].append((cpu_seconds(node.proc.popen.pid) - broker0) * 1000 / messages)
                rates[mode].append(rate)
                say(f"round {r + 1} trace {mode}: {rate:.0f} msg/s produced and consumed; CPU per message: "
                    f"client {cpu['client'][mode][-1]:.2f} ms, broker {cpu['broker'][mode][-1]:.2f} ms "
                    f"(broker quiet {tail_s:.1f} s after the run)")
                if mode == "on":
                    stats = disp.stats() if disp else None
                    if stats:
                        drops.update({"dropped": stats.dropped, "failed": stats.failed, "written": stats.written})
                    complete.append(completeness(c.namesrv_addr, ids, group))
                    say(f"round {r + 1} completeness {complete[-1]}")
        on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
        cpu_total = {mode: statistics.median(c + b for c, b in zip(cpu["client"][mode], cpu["broker"][mode],
                                                                    strict=True)) for mode in ("on", "off")}
        # per round, on and off run back to back under the same background load (either order, as often):
        # the geometric mean of the per-round ratios cancels drift between rounds and the order effect
        paired = statistics.geometric_mean(a / b for a, b in zip(rates["on"], rates["off"], strict=True))
        cpu_paired = statistics.geometric_mean(
            (cpu["client"]["off"][i] + cpu["broker"]["off"][i]) / (cpu["client"]["on"][i] + cpu["broker"]["on"][i])
            for i in range(rounds))
        return {"messages_per_round": messages, "rounds": rounds, "msgs_per_s": rates,
                "median_on": on, "median_off": off, "ratio_on_off": on / off,
                "paired_ratio_on_off": paired, "paired_cpu_ratio_off_on": cpu_paired,
                "cpu_ms_per_message": cpu, "cpu_ms_per_message_median_total": cpu_total,
                "cpu_ratio_off_on": cpu_total["off"] / cpu_total["on"],
                "completeness": complete, "producer_dispatcher": dict(drops)}
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)


def bench_lookup(size: int, samples: int = 2000) -> dict[str, Any]:
    from rocketscope.broker.store.message_store import MessageStore, StoreConfig
    from rocketscope.broker.store.record import StoredMessage

    work = Path(tempfile.mkdtemp(prefix="rs-trace-lookup-"))

    async def go() -> dict[str, Any]:
        store = MessageStore(StoreConfig(root=work, index_slot_num=5_000_000, index_num=20_000_000,
                                         checkpoint_interval_s=3600))
        await store.start()
        t0 = time.perf_counter()
        batch: list[StoredMessage] = []
        for i in range(size):
            batch.append(StoredMessage(topic="TopicLookup", queue_id=i % 8, body=b"x" * 200,
                                       properties={"UNIQ_KEY": f"0102FC{i:026X}", "KEYS": f"order-{i}"}))
            if len(batch) == 512:
                await store.put(batch)
                batch = []
            if i and i % 1_000_000 == 0:
                say(f"lookup store: {i:,}/{size:,} messages ({i / (time.perf_counter() - t0):,.0f}/s)")
        if batch:
            await store.put(batch)
        fill_s = time.perf_counter() - t0
        rng = random.Random(7)
        lat = []
        for _ in range(samples):
            i = rng.randrange(size)
            t = time.perf_counter()
            found = store.lookup(None, f"0102FC{i:026X}", limit=1)
            lat.append((time.perf_counter() - t) * 1000)
            assert found and found[0].msg_id == f"0102FC{i:026X}"
        await store.shutdown()
        lat.sort()
        return {"messages": size, "fill_s": round(fill_s, 1), "p50_ms": lat[len(lat) // 2],
                "p99_ms": lat[int(len(lat) * 0.99)], "max_ms": lat[-1], "samples": samples}

    try:
        return asyncio.run(go())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=4, help="rounded up to an even number (both orders equally)")
    ap.add_argument("--lookup-sizes", default="1000000,10000000")
    ap.add_argument("--quick", action="store_true", help="300 messages, 1 round, 100k lookup store")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "trace.json")
    args = ap.parse_args()
    if args.quick:
        args.messages, args.rounds, args.lookup_sizes = 300, 1, "100000"
    args.rounds += args.rounds % 2 if not args.quick else 0
    result: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)}
    result["throughput"] = bench_throughput(args.messages, args.rounds)
    t = result["throughput"]
    say(f"trace on / off = {t['median_on']:.0f} / {t['median_off']:.0f} = {t['ratio_on_off']:.2f}x (target >= 0.90)")
    c = t["cpu_ms_per_message_median_total"]
    say(f"CPU per message (client + broker): on {c['on']:.2f} ms, off {c['off']:.2f} ms: off/on = "
        f"{t['cpu_ratio_off_on']:.2f}x (the throughput a CPU-bound machine could keep)")
    say(f"geometric means of the per-round ratios: throughput on/off {t['paired_ratio_on_off']:.2f}x, "
        f"CPU per message off/on {t['paired_cpu_ratio_off_on']:.2f}x")
    result["lookup"] = []
    if not args.lookup_sizes and args.out.exists():  # keep the last lookup figures, saying from when
        previous = json.loads(args.out.read_text())
        result["lookup"] = [dict(x, measured=x.get("measured", previous.get("when")))
                            for x in previous.get("lookup", [])]
    for size in (int(s) for s in args.lookup_sizes.split(",") if s):
        res = bench_lookup(size)
        result["lookup"].append(res)
        say(f"lookup by msgId with {size:,} stored: p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.2f} ms "
            f"(target p99 < 20 ms)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    say(f"results in {args.out}")


if __name__ == "__main__":
    main()
