"""Metrics overhead and scrape cost (issue 6).

    .venv/bin/python bench/telemetry_bench.py [--messages 6000] [--rounds 10] [--topics 1000] [--groups 10]

1. Produce throughput (official client, 1 KiB, 64 in flight, ASYNC_FLUSH) against two brokers
   started side by side, one metricsExporterType=PROM and one DISABLE, in ``--rounds``
   alternating rounds (as many with each broker first); medians of msg/s and of the broker's
   CPU per message (/proc, all threads: on a machine shared with other work throughput swings,
   CPU per message much less), and the geometric mean of the per-round PROM/DISABLE ratios;
   then both brokers' CPU over 10 s idle (what PROM costs by the clock: snapshots, pre-rendering).
2. The recording cost of the send path in process: BrokerMetrics.on_put + on_rpc per message
   (PROM telemetry vs DISABLE), median of 5 runs of 20,000.
3. /metrics scrape time and size of a PROM broker holding ``--topics`` topics with
   ``--groups`` consumer groups each (committed offsets set with UpdateOffset, so every
   (group, topic) has lag series): 5 plain scrapes after two snapshots (average, median,
   max, first; back to back, so all but the first may reuse the lines of an unchanged snapshot),
   5 spaced 2.5 s apart (each after a new snapshot, as a 15 s Prometheus interval sees it) and 5
   with ``Accept-Encoding: gzip`` (as Prometheus sends).
Results to bench/results/telemetry.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
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


from load import cpu_seconds, pipelined_sends  # noqa: E402

IDLE_S = 10.0


def produce_rounds(messages: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    """Both brokers up at once; each round sends ``messages`` to DISABLE then PROM (order
    alternates between rounds), so both see the same background load."""
    from rmq import message, producer

    root = Path(tempfile.mkdtemp(prefix="rs-tel-"))
    c = LocalCluster(root)
    runs: dict[str, list[dict[str, float]]] = {"DISABLE": [], "PROM": []}
    try:
        c.start_namesrv()
        nodes = {}
        for mode in ("DISABLE", "PROM"):
            conf: dict[str, object] = {"metricsExporterType": mode}
            if mode == "PROM":
                conf.update(metricsPromExporterHost="127.0.0.1", metricsPromExporterPort=free_port())
            node = nodes[mode] = c.start_broker(f"bench-{mode.lower()}", flushDiskType="ASYNC_FLUSH",
                                                mappedFileSizeCommitLog=128 * 1024 * 1024, **conf)
            c.admin("updateTopic", "-b", node.admin_addr, "-t", f"Bench{mode}", "-r", "8", "-w", "8")
        for r in range(rounds):
            for mode in (("DISABLE", "PROM") if r % 2 == 0 else ("PROM", "DISABLE")):
                node, topic = nodes[mode], f"Bench{mode}"
                assert node.proc.popen is not None
                pid = node.proc.popen.pid
                with producer(node.endpoint, topic) as p:
                    for _ in range(50):
                        p.send(message(topic, BODY))
                    sent = pipelined_sends(p, lambda topic=topic: message(topic, BODY), messages, 64, pid)
                res = {"msgs_per_s": sent["msgs_per_s"], "broker_cpu_us_per_msg": sent["broker_cpu_us_per_msg"]}
                runs[mode].append(res)
                progress(f"round {r + 1} {mode}: {res['msgs_per_s']:.0f} msg/s, broker CPU "
                         f"{res['broker_cpu_us_per_msg']:.0f} us/msg")
        # what PROM costs by the clock rather than by the message (snapshots every 2 s, label
        # pre-rendering, the idle /metrics server): both brokers idle, side by side
        pids = {mode: node.proc.popen.pid for mode, node in nodes.items() if node.proc.popen is not None}
        before = {mode: cpu_seconds(pid) for mode, pid in pids.items()}
        time.sleep(IDLE_S)
        idle = {mode: (cpu_seconds(pid) - before[mode]) / IDLE_S * 1000 for mode, pid in pids.items()}
        runs["idle_cpu_ms_per_s"] = [idle]  # type: ignore[list-item]
        progress(f"idle broker CPU: PROM {idle['PROM']:.1f} ms/s, DISABLE {idle['DISABLE']:.1f} ms/s")
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    return runs


def record_cost(n: int = 20_000, runs: int = 5) -> dict[str, float]:
    """Median microseconds per message of BrokerMetrics.on_put + on_rpc (the send path's metrics)."""
    from types import SimpleNamespace

    from rocketscope.broker.metrics import BrokerMetrics
    from rocketscope.broker.store.message_store import PutStatus
    from rocketscope.telemetry import Telemetry, TelemetryConfig

    def once(mode: str) -> float:
        props = {"metricsExporterType": mode, "metricsPromExporterHost": "127.0.0.1", "metricsPromExporterPort": "0"}
        tel = Telemetry.start(TelemetryConfig.from_properties(props), "broker", "DefaultCluster", "bench-0")
        try:
            metrics = BrokerMetrics(SimpleNamespace(dledger=None), tel)  # type: ignore[arg-type]
            msg = SimpleNamespace(properties={"__MSGTYPE": "NORMAL"}, topic="Bench", size=1100)
            results = [SimpleNamespace(message=msg, status=PutStatus.PUT_OK)]
            for _ in range(1000):
                metrics.on_put(results)  # type: ignore[arg-type]
                metrics.on_rpc("SendMessage", "ok", True, 0.0012, False)
            t0 = time.perf_counter()
            for _ in range(n):
                metrics.on_put(results)  # type: ignore[arg-type]
                metrics.on_rpc("SendMessage", "ok", True, 0.0012, False)
            return (time.perf_counter() - t0) / n * 1e6
        finally:
            tel.stop()

    out = {}
    for mode in ("DISABLE", "PROM"):
        out[mode] = statistics.median(once(mode) for _ in range(runs))
        progress(f"recording cost {mode}: {out[mode]:.2f} us/msg")
    return out


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
        # as Prometheus sees it (scrape interval >> 2 s): every scrape after a new snapshot
        spaced = []
        for _ in range(5):
            time.sleep(2.5)
            t0 = time.perf_counter()
            urllib.request.urlopen(url, timeout=60).read()
            spaced.append(time.perf_counter() - t0)
        gz_times, gz_size = [], 0
        for _ in range(5):
            req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
            t0 = time.perf_counter()
            with urllib.request.urlopen(req, timeout=60) as resp:
                gz_body = resp.read()
                gzipped = resp.headers.get("Content-Encoding") == "gzip"
            gz_times.append(time.perf_counter() - t0)
            gz_size = len(gz_body)
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    return {"scrape_ms_avg": sum(times) / len(times) * 1000, "scrape_ms_median": statistics.median(times) * 1000,
            "scrape_ms_max": max(times) * 1000, "scrape_ms_first": times[0] * 1000,
            "spaced_scrape_ms_median": statistics.median(spaced) * 1000, "spaced_scrape_ms_max": max(spaced) * 1000,
            "spaced_scrape_ms_avg": sum(spaced) / len(spaced) * 1000, "bytes": size, "samples": lines,
            "gzip_scrape_ms_median": statistics.median(gz_times) * 1000, "gzip_scrape_ms_max": max(gz_times) * 1000,
            "gzip_bytes": gz_size if gzipped else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=10, help="rounded up to an even number (both orders equally)")
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "telemetry.json"))
    args = ap.parse_args()
    args.rounds += args.rounds % 2
    runs = produce_rounds(args.messages, args.rounds)
    idle = runs.pop("idle_cpu_ms_per_s")[0]
    median = {m: statistics.median(r["msgs_per_s"] for r in v) for m, v in runs.items()}
    cpu = {m: statistics.median(r["broker_cpu_us_per_msg"] for r in v) for m, v in runs.items()}
    # each round runs PROM and DISABLE back to back under the same background load, and whichever
    # runs first in a round is measurably faster (the other broker is still flushing its burst):
    # with as many rounds of each order, the geometric mean of the per-round ratios cancels both
    # the drift between rounds and the order effect
    paired = statistics.geometric_mean(p["msgs_per_s"] / d["msgs_per_s"]
                                       for p, d in zip(runs["PROM"], runs["DISABLE"], strict=True))
    recording = record_cost()
    scrape = scrape_cost(args.topics, args.groups)
    result = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "rounds": runs, "median_msgs_per_s": median,
              "median_broker_cpu_us_per_msg": cpu, "ratio_prom_vs_disable": median["PROM"] / median["DISABLE"],
              "paired_ratio_prom_vs_disable": paired, "idle_broker_cpu_ms_per_s": idle,
              "cpu_ratio_prom_vs_disable": cpu["PROM"] / cpu["DISABLE"], "recording_us_per_msg": recording,
              "scrape": scrape, "topics": args.topics, "groups": args.groups, "messages": args.messages}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nproduce (median of {args.rounds}) PROM {median['PROM']:.0f} vs DISABLE {median['DISABLE']:.0f} msg/s: "
          f"{result['ratio_prom_vs_disable']:.2f}x (geometric mean of per-round ratios {paired:.2f}x); "
          f"broker CPU {cpu['PROM']:.0f} vs {cpu['DISABLE']:.0f} us/msg: "
          f"{result['cpu_ratio_prom_vs_disable']:.2f}x")
    print(f"send-path recording: PROM {recording['PROM']:.2f} us/msg, DISABLE {recording['DISABLE']:.2f} us/msg")
    print(f"/metrics with {args.topics} topics x {args.groups} groups: {scrape['scrape_ms_avg']:.0f} ms avg, "
          f"{scrape['scrape_ms_median']:.0f} ms median, {scrape['scrape_ms_max']:.0f} ms max, "
          f"{scrape['scrape_ms_first']:.0f} ms first; after a new snapshot {scrape['spaced_scrape_ms_median']:.0f} ms "
          f"median, {scrape['spaced_scrape_ms_max']:.0f} ms max; "
          f"{scrape['bytes'] / 1e6:.1f} MB, {scrape['samples']} samples; gzip {scrape['gzip_scrape_ms_median']:.0f} ms "
          f"median, {(scrape['gzip_bytes'] or 0) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
