"""Metrics overhead and scrape cost (issue 6).

    .venv/bin/python bench/telemetry_bench.py [--messages 3000] [--topics 1000] [--groups 10]

1. Produce throughput (official client, 1 KiB, 64 in flight, ASYNC_FLUSH) with
   metricsExporterType=PROM against DISABLE, alternating runs in one command.
2. /metrics scrape time and size of a PROM broker holding ``--topics`` topics with
   ``--groups`` consumer groups each (committed offsets set with UpdateOffset, so every
   (group, topic) has lag series), averaged over 5 scrapes after a snapshot.
Results to bench/results/telemetry.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from cluster import LocalCluster  # noqa: E402
from conftest import free_port  # noqa: E402

BODY = b"x" * 1024


def progress(text: str) -> None:
    print(f"[telemetry-bench] {text}", flush=True)


def produce(mode: str, messages: int) -> float:
    from rmq import message, producer

    root = Path(tempfile.mkdtemp(prefix="rs-tel-"))
    c = LocalCluster(root)
    conf = {"metricsExporterType": mode}
    if mode == "PROM":
        conf.update(metricsPromExporterHost="127.0.0.1", metricsPromExporterPort=free_port())
    try:
        c.start_namesrv()
        node = c.start_broker("bench", flushDiskType="ASYNC_FLUSH", mappedFileSizeCommitLog=128 * 1024 * 1024,
                              **conf)
        c.admin("updateTopic", "-c", "DefaultCluster", "-t", "Bench", "-r", "8", "-w", "8")
        with producer(node.endpoint, "Bench") as p:
            for _ in range(50):
                p.send(message("Bench", BODY))
            sem, done, count = threading.Semaphore(64), threading.Event(), [0]

            def fin(_f: object) -> None:
                sem.release()
                count[0] += 1
                if count[0] == messages:
                    done.set()

            t0 = time.perf_counter()
            for _ in range(messages):
                sem.acquire()
                p.send_async(message("Bench", BODY)).add_done_callback(fin)
            done.wait(600)
            rate = messages / (time.perf_counter() - t0)
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    progress(f"{mode}: {rate:.0f} msg/s")
    return rate


def scrape_cost(topics: int, groups: int) -> dict[str, float]:
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as svc
    from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

    from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2

    root = Path(tempfile.mkdtemp(prefix="rs-scrape-"))
    c = LocalCluster(root)
    port = free_port()
    try:
        c.start_namesrv()
        node = c.start_broker("bench", metricsExporterType="PROM", metricsPromExporterHost="127.0.0.1",
                              metricsPromExporterPort=port)
        with grpc.insecure_channel(node.admin_addr) as ch:
            admin = admin_pb2_grpc.BrokerAdminStub(ch)
            for t in range(topics):
                cfg = common_pb2.TopicConfig(topic_name=f"T{t:04d}", read_queue_nums=1, write_queue_nums=1, perm=6)
                admin.UpdateTopic(admin_pb2.UpdateTopicRequest(config=cfg), timeout=10)
        progress(f"{topics} topics created")
        with grpc.insecure_channel(node.endpoint) as ch:
            stub = svc_grpc.MessagingServiceStub(ch)
            for t in range(topics):
                for g in range(groups):
                    mq = pb.MessageQueue(id=0, topic=pb.Resource(name=f"T{t:04d}"))
                    stub.UpdateOffset(svc.UpdateOffsetRequest(group=pb.Resource(name=f"G{g}"), message_queue=mq,
                                                              offset=0), metadata=(("x-mq-client-id", "b"),),
                                      timeout=10)
        progress(f"{topics * groups} (group, topic) offsets set")
        time.sleep(5)  # two metric snapshots (every 2 s)  — a benchmark, not a test
        url = f"http://127.0.0.1:{port}/metrics"
        times, size = [], 0
        for _ in range(5):
            t0 = time.perf_counter()
            body = urllib.request.urlopen(url, timeout=60).read()
            times.append(time.perf_counter() - t0)
            size = len(body)
        lines = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    return {"scrape_ms_avg": sum(times) / len(times) * 1000, "scrape_ms_max": max(times) * 1000,
            "bytes": size, "samples": lines}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "telemetry.json"))
    args = ap.parse_args()
    rates = {"DISABLE": [], "PROM": []}  # type: dict[str, list[float]]
    for _ in range(2):
        for mode in ("DISABLE", "PROM"):
            rates[mode].append(produce(mode, args.messages))
    best = {m: max(v) for m, v in rates.items()}
    scrape = scrape_cost(args.topics, args.groups)
    result = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "produce_msgs_per_s": rates, "best": best,
              "ratio_prom_vs_disable": best["PROM"] / best["DISABLE"], "scrape": scrape,
              "topics": args.topics, "groups": args.groups}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nproduce PROM {best['PROM']:.0f} vs DISABLE {best['DISABLE']:.0f} msg/s: "
          f"{result['ratio_prom_vs_disable']:.2f}x")
    print(f"/metrics with {args.topics} topics x {args.groups} groups: {scrape['scrape_ms_avg']:.0f} ms avg, "
          f"{scrape['scrape_ms_max']:.0f} ms max, {scrape['bytes'] / 1e6:.1f} MB, {scrape['samples']} samples")


if __name__ == "__main__":
    main()
