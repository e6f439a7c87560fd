"""Replicated throughput: SYNC_MASTER with one slave against a NATS JetStream R3 stream (issue 5).

    .venv/bin/python bench/masterslave_bench.py [--messages 3000] [--depth 64] [--rounds 2] [--no-apache]

RocketScope: a name server, a SYNC_MASTER (inSyncReplicas=2, the default: a send is
acknowledged once the slave holds it) and its slave, SYNC_FLUSH on both, started with the
end-to-end harness; the official client sends 1 KiB messages with ``--depth`` send_async
calls in flight (bench/load.py), the master's CPU per message measured from /proc.
JetStream: three nats-server nodes, an R3 file stream, nats-py publishing with as many
concurrent tasks (bench/failover_bench.py's cluster and loop). Apache RocketMQ 5.3.3 (the
reference cluster of `make peers`, peers/reference_cluster.py): a SYNC_MASTER with one SLAVE,
SYNC_FLUSH on both, reached by the same official client through Apache's proxy (Apache's
brokers speak no gRPC themselves); its CPU per message is the master JVM's, with the proxy's
reported beside it.  The Apache cluster starts once (three to four JVMs take minutes here) and
serves every round.  Rounds alternate between the systems and the medians are compared, so all
see the same machine load. Results: bench/results/masterslave.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from cluster import LocalCluster, wait_until  # noqa: E402
from failover_bench import BODY, jetstream_throughput  # noqa: E402
from load import cpu_seconds, pipelined_sends  # noqa: E402


def progress(text: str) -> None:
    print(f"[masterslave-bench] {text}", flush=True)


def sync_master_throughput(messages: int, depth: int) -> dict[str, float]:
    from rmq import message, producer

    root = Path(tempfile.mkdtemp(prefix="rs-ms-tput-"))
    c = LocalCluster(root)
    try:
        c.start_namesrv()
        master = c.start_broker("master", brokerName="broker-a", brokerRole="SYNC_MASTER", flushDiskType="SYNC_FLUSH",
                                mappedFileSizeCommitLog=64 * 1024 * 1024)
        slave = c.start_broker("slave", brokerName="broker-a", brokerRole="SLAVE", brokerId=1,
                               flushDiskType="SYNC_FLUSH", mappedFileSizeCommitLog=64 * 1024 * 1024)
        c.admin("updateTopic", "-b", master.admin_addr, "-t", "Bench", "-r", "4", "-w", "4")

        def slave_connected() -> bool:
            st = json.loads(c.admin("haStatus", "-b", master.admin_addr).stdout)[master.admin_addr]
            return any(s["connected"] for s in st.get("slaves", []))
        wait_until(slave_connected, timeout=30, what="the slave replicating")
        assert slave.proc.alive
        with producer(master.endpoint, "Bench") as p:
            for _ in range(50):
                p.send(message("Bench", BODY))
            assert master.proc.popen is not None
            result = pipelined_sends(p, lambda: message("Bench", BODY), messages, depth, master.proc.popen.pid)
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    return result


class ApacheSyncMaster:
    """Apache RocketMQ's SYNC_MASTER + SLAVE pair behind its proxy, started once for all rounds."""

    def __init__(self) -> None:
        sys.path.insert(0, str(ROOT / "peers"))
        import reference_cluster as rc

        why = rc.missing()
        if why:
            raise RuntimeError(why)
        self.root = Path(tempfile.mkdtemp(prefix="rs-ms-apache-"))
        self.cluster = rc.ReferenceCluster(self.root, slave=True, broker_conf={
            "brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": 64 * 1024 * 1024})

    def start(self) -> ApacheSyncMaster:
        t0 = time.monotonic()
        self.cluster.start(timeout=900)
        progress(f"Apache RocketMQ SYNC_MASTER + SLAVE + proxy ready in {time.monotonic() - t0:.0f} s")
        self.cluster.create_topic("Bench", queues=4)
        return self

    def stop(self) -> None:
        self.cluster.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def throughput(self, messages: int, depth: int) -> dict[str, float]:
        from rmq import message, producer

        c = self.cluster
        with producer(c.endpoint, "Bench") as p:
            for _ in range(50):
                p.send(message("Bench", BODY))  # fails unless the slave replicates (SYNC_MASTER)
            proxy0 = cpu_seconds(c.pids["proxy"])
            result = pipelined_sends(p, lambda: message("Bench", BODY), messages, depth, c.pids["broker"])
            result["proxy_cpu_us_per_msg"] = (cpu_seconds(c.pids["proxy"]) - proxy0) / messages * 1e6
        return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "masterslave.json"))
    ap.add_argument("--no-apache", action="store_true", help="leave out the Apache RocketMQ column")
    args = ap.parse_args()
    if not shutil.which("nats-server"):
        sys.exit("nats-server is missing: apt-get install -y nats-server")
    rs: list[dict[str, float]] = []
    js: list[dict[str, float]] = []
    ap_rounds: list[dict[str, float]] = []
    apache = None if args.no_apache else ApacheSyncMaster().start()
    try:
        for r in range(args.rounds):
            _round(r, args, rs, js, ap_rounds, apache)
    finally:
        if apache is not None:
            apache.stop()
    _report(args, rs, js, ap_rounds)


def _round(r: int, args: argparse.Namespace, rs: list[dict[str, float]], js: list[dict[str, float]],
           ap_rounds: list[dict[str, float]], apache: ApacheSyncMaster | None) -> None:
    rs.append(sync_master_throughput(args.messages, args.depth))
    progress(f"round {r + 1} SYNC_MASTER+slave: {rs[-1]['msgs_per_s']:.0f} msg/s, "
             f"master CPU {rs[-1]['broker_cpu_us_per_msg']:.0f} us/msg, {rs[-1]['failed']:.0f} failed; "
             f"client CPU {rs[-1]['client_cpu_us_per_msg']:.0f} us/msg (one client process caps at "
             f"{rs[-1]['client_ceiling_msgs_per_s']:.0f} msg/s)")
    js.append(asyncio.run(jetstream_throughput(args.messages, args.depth)))
    progress(f"round {r + 1} JetStream R3: {js[-1]['msgs_per_s']:.0f} msg/s")
    if apache is not None:
        ap_rounds.append(apache.throughput(args.messages, args.depth))
        a = ap_rounds[-1]
        progress(f"round {r + 1} Apache RocketMQ SYNC_MASTER+slave: {a['msgs_per_s']:.0f} msg/s, master CPU "
                 f"{a['broker_cpu_us_per_msg']:.0f} us/msg, proxy CPU {a['proxy_cpu_us_per_msg']:.0f} us/msg, "
                 f"{a['failed']:.0f} failed")


def _report(args: argparse.Namespace, rs: list[dict[str, float]], js: list[dict[str, float]],
            ap_rounds: list[dict[str, float]]) -> None:
    rs_med = statistics.median(x["msgs_per_s"] for x in rs)
    js_med = statistics.median(x["msgs_per_s"] for x in js)
    result = {"machine": f"{os.cpu_count()} cores, loopback", "when": time.strftime("%Y-%m-%d %H:%M:%S"),
              "messages": args.messages, "depth": args.depth, "rounds": {"sync_master": rs, "jetstream_r3": js},
              "median_msgs_per_s": {"sync_master": rs_med, "jetstream_r3": js_med}, "ratio": rs_med / js_med,
              # the official client's own ceiling (one process, one GIL) against the peer: the best ratio any
              # broker could reach when driven by this client on this machine
              "client_ceiling_msgs_per_s": statistics.median(x["client_ceiling_msgs_per_s"] for x in rs),
              "client_ceiling_ratio": statistics.median(x["client_ceiling_msgs_per_s"] for x in rs) / js_med,
              "load_average_1m_at_end": os.getloadavg()[0]}
    if ap_rounds:
        ap_med = statistics.median(x["msgs_per_s"] for x in ap_rounds)
        result["rounds"]["apache_sync_master"] = ap_rounds
        result["median_msgs_per_s"]["apache_sync_master"] = ap_med
        result["ratio_to_apache"] = rs_med / ap_med
        result["median_cpu_us_per_msg"] = {
            "sync_master": statistics.median(x["broker_cpu_us_per_msg"] for x in rs),
            "apache_sync_master": statistics.median(x["broker_cpu_us_per_msg"] for x in ap_rounds),
            "apache_proxy": statistics.median(x["proxy_cpu_us_per_msg"] for x in ap_rounds)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nSYNC_MASTER + slave {rs_med:.0f} msg/s vs JetStream R3 {js_med:.0f} msg/s at {args.depth} in flight: "
          f"ratio {rs_med / js_med:.2f}; the official client's own ceiling {result['client_ceiling_msgs_per_s']:.0f} "
          f"msg/s = {result['client_ceiling_ratio']:.2f}x JetStream; results in {args.out}")
    if ap_rounds:
        cpu = result["median_cpu_us_per_msg"]
        ap_med = result["median_msgs_per_s"]["apache_sync_master"]
        print(f"Apache RocketMQ SYNC_MASTER + slave (through its proxy) {ap_med:.0f} msg/s: "
              f"RocketScope / Apache {result['ratio_to_apache']:.2f}; CPU per message: RocketScope master "
              f"{cpu['sync_master']:.0f} us, Apache master {cpu['apache_sync_master']:.0f} us + proxy "
              f"{cpu['apache_proxy']:.0f} us; load average {result['load_average_1m_at_end']:.1f}")


if __name__ == "__main__":
    main()
