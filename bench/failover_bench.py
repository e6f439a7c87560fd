"""Failover and replicated throughput: a RocketScope DLedger group against a NATS JetStream R3 stream
and an Apache RocketMQ 5.3.3 DLedger group.

    .venv/bin/python bench/failover_bench.py [--runs 10] [--messages 3000] [--depth 64] [--no-apache]

Failover time = from kill -9 of the leader to the first successful send by a client that
keeps sending (one at a time, 1 KiB, every 10 ms), median and max over ``--runs`` kills;
the killed node is restarted and the group settles between runs.  Throughput = 1 KiB
messages with ``--depth`` sends in flight from one client (the official RocketMQ client's
send_async; nats-py's JetStream publish with as many tasks), both durable on a majority.
Everything runs on loopback; results go to bench/results/failover.json and a table.
The RocketScope cluster is started with the end-to-end test harness (tests/cluster.py).
Apache RocketMQ (from `make peers`, peers/reference_cluster.py with ``dledger=True``): a name server,
three brokers of broker-a in one DLedger group (SYNC_FLUSH) and its proxy, started once for both
measurements; the same official client sends through the proxy (Apache's brokers do not serve gRPC)
and the kill -9 hits the JVM of the broker registered as the group's master (its leader).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from cluster import LocalCluster, wait_until  # noqa: E402
from conftest import free_port  # noqa: E402
from load import client_ceiling  # noqa: E402

BODY = b"x" * 1024


def progress(text: str) -> None:
    print(f"[failover-bench] {text}", flush=True)


# ------------------------------------------------------------------ RocketScope
def start_group(root: Path) -> tuple[LocalCluster, list]:
    c = LocalCluster(root)
    c.start_namesrv()
    ports = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = [c.start_broker(f"d{i}", brokerName="broker-d", enableDLegerCommitLog="true", dLegerGroup="broker-d",
                            dLegerPeers=peers, dLegerSelfId=f"n{i}", flushDiskType="SYNC_FLUSH",
                            mappedFileSizeCommitLog=64 * 1024 * 1024) for i in range(3)]
    return c, nodes


def leader_of(c: LocalCluster, nodes: list) -> int | None:
    for i, n in enumerate(nodes):
        if not n.proc.alive:
            continue
        try:
            st = json.loads(c.admin("haStatus", "-b", n.admin_addr).stdout)[n.admin_addr]
        except AssertionError:
            continue
        if st["role"] == "LEADER":
            return i
    return None


def rocketscope_failover(runs: int) -> list[float]:
    from rmq import message, producer

    root = Path(tempfile.mkdtemp(prefix="rs-failover-"))
    c, nodes = start_group(root)
    times: list[float] = []
    try:
        wait_until(lambda: leader_of(c, nodes) is not None, timeout=30, what="leader")
        c.admin("updateTopic", "-b", nodes[leader_of(c, nodes)].admin_addr, "-t", "Bench", "-r", "4", "-w", "4")
        endpoint = ";".join(n.endpoint for n in nodes)
        with producer(endpoint, "Bench") as p:
            for run in range(runs):
                wait_until(lambda: leader_of(c, nodes) is not None and all(n.proc.alive for n in nodes), timeout=60,
                           what="a settled group")
                p.send(message("Bench", BODY))
                leader = leader_of(c, nodes)
                assert leader is not None
                killed_at = time.monotonic()
                nodes[leader].proc.kill9()
                recovered = None
                while recovered is None and time.monotonic() - killed_at < 60:
                    started = time.monotonic()
                    try:
                        p.send(message("Bench", BODY))
                        recovered = time.monotonic()
                    except Exception:
                        time.sleep(0.01)
                    if started < killed_at:
                        recovered = None
                assert recovered is not None, "no successful send within 60 s of the kill"
                times.append(recovered - killed_at)
                progress(f"RocketScope run {run + 1}/{runs}: first successful send {times[-1] * 1000:.0f} ms "
                         f"after kill -9 of n{leader}")
                c.start_broker(f"d{leader}")
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    return times


def rocketscope_throughput(messages: int, depth: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="rs-tput-"))
    c, nodes = start_group(root)
    try:
        wait_until(lambda: leader_of(c, nodes) is not None, timeout=30, what="leader")
        leader = nodes[leader_of(c, nodes)]
        c.admin("updateTopic", "-b", leader.admin_addr, "-t", "Bench", "-r", "4", "-w", "4")
        return send_window(leader.endpoint, messages, depth)
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def send_window(endpoint: str, messages: int, depth: int) -> dict[str, float]:
    """``messages`` sends of the official client with ``depth`` in flight (send_async) after 50 warm-up sends."""
    from rmq import message, producer

    with producer(endpoint, "Bench") as p:
        for _ in range(50):
            p.send(message("Bench", BODY))
        lat: list[float] = []
        failed = [0]
        lock = threading.Semaphore(depth)
        done = threading.Event()
        count = [0]
        t0, client0 = time.perf_counter(), time.process_time()

        def finished(fut, started: float) -> None:  # type: ignore[no-untyped-def]
            lat.append(time.perf_counter() - started)
            if fut.exception() is not None:
                failed[0] += 1
            lock.release()
            count[0] += 1
            if count[0] == messages:
                done.set()

        for _ in range(messages):
            lock.acquire()
            s = time.perf_counter()
            f = p.send_async(message("Bench", BODY))
            f.add_done_callback(lambda fut, s=s: finished(fut, s))
        done.wait(300)
        elapsed = time.perf_counter() - t0
        ceiling = client_ceiling(time.process_time() - client0, messages)
    lat.sort()
    return {"msgs_per_s": messages / elapsed, "p50_ms": lat[len(lat) // 2] * 1000,
            "p99_ms": lat[int(len(lat) * 0.99)] * 1000, "failed": failed[0], **ceiling}


# ------------------------------------------------------------------ Apache RocketMQ
def apache_group() -> Any:
    """Apache RocketMQ 5.3.3: name server, a three-broker DLedger group (SYNC_FLUSH) and the proxy, started."""
    sys.path.insert(0, str(ROOT / "peers"))
    import reference_cluster as rc

    why = rc.missing()
    if why:
        sys.exit(f"{why} (or leave Apache RocketMQ out: --no-apache)")
    cluster = rc.ReferenceCluster(Path(tempfile.mkdtemp(prefix="rmq-failover-")), heap="384m", dledger=True,
                                  broker_conf={"flushDiskType": "SYNC_FLUSH", "sendMessageThreadPoolNums": 4})
    t0 = time.monotonic()
    cluster.start(timeout=900)
    progress(f"Apache RocketMQ DLedger group + proxy ready in {time.monotonic() - t0:.0f} s")
    cluster.create_topic("Bench", None)  # no message.type attribute: peers/reference_cluster.py says why
    return cluster


def _apache_settled(cluster: Any) -> bool:
    """A leader is routed as brokerId 0 and all three members run and are registered."""
    import remoting

    if cluster.master_role() is None or not all(cluster.alive(r) for r in cluster.member_ports):
        return False
    data = remoting.route(cluster.namesrv_addr, "Bench")
    return sum(len(b.get("brokerAddrs", {})) for b in data.get("brokerDatas", [])) == 3


def apache_failover(cluster: Any, runs: int) -> list[float]:
    from rmq import message, producer

    times: list[float] = []
    with producer(cluster.endpoint, "Bench") as p:
        for run in range(runs):
            wait_until(lambda: _apache_settled(cluster), timeout=300, what="a settled Apache DLedger group")
            wait_until(lambda: p.send(message("Bench", BODY)), timeout=120, what="a send through the proxy")
            leader = cluster.master_role()
            assert leader is not None
            killed_at = time.monotonic()
            cluster.kill(leader)
            recovered = None
            while recovered is None and time.monotonic() - killed_at < 120:
                try:
                    p.send(message("Bench", BODY))
                    recovered = time.monotonic()
                except Exception:
                    time.sleep(0.01)
            assert recovered is not None, "no successful send within 120 s of the kill"
            times.append(recovered - killed_at)
            progress(f"Apache RocketMQ run {run + 1}/{runs}: first successful send {times[-1] * 1000:.0f} ms "
                     f"after kill -9 of {leader}")
            cluster.relaunch(leader)
    return times


# ------------------------------------------------------------------- JetStream
class NatsCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.client_ports = [free_port() for _ in range(3)]
        self.route_ports = [free_port() for _ in range(3)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None, None, None]

    def start(self, i: int) -> None:
        routes = ",".join(f"nats-route://127.0.0.1:{p}" for j, p in enumerate(self.route_ports) if j != i)
        conf = self.root / f"n{i}.conf"
        conf.write_text(f"server_name: n{i}\nlisten: 127.0.0.1:{self.client_ports[i]}\n"
                        f"jetstream {{ store_dir: '{self.root / f'js{i}'}' }}\n"
                        f"cluster {{ name: bench, listen: 127.0.0.1:{self.route_ports[i]}, routes: [{routes}] }}\n")
        self.procs[i] = subprocess.Popen(["nats-server", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)

    def kill(self, i: int) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def stop(self) -> None:
        for i in range(3):
            self.kill(i)

    @property
    def servers(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]


async def _js_setup(servers: list[str]):  # type: ignore[no-untyped-def]
    import nats
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(servers=servers, max_reconnect_attempts=-1, reconnect_time_wait=0.05)
    js = nc.jetstream(timeout=5)
    deadline = time.monotonic() + 60
    while True:
        try:
            await js.add_stream(StreamConfig(name="BENCH", subjects=["bench"], num_replicas=3,
                                             storage=StorageType.FILE))
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    return nc, js


async def jetstream_failover(runs: int) -> list[float]:
    root = Path(tempfile.mkdtemp(prefix="js-failover-"))
    cl = NatsCluster(root)
    times: list[float] = []
    for i in range(3):
        cl.start(i)
    try:
        nc, js = await _js_setup(cl.servers)
        for run in range(runs):
            deadline = time.monotonic() + 60
            while True:
                try:
                    info = await js.stream_info("BENCH")
                    if info.cluster and info.cluster.leader and all(
                            r.current for r in (info.cluster.replicas or [])):
                        break
                except Exception:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("JetStream stream never settled")
                await asyncio.sleep(0.1)
            await js.publish("bench", BODY)
            leader = int(info.cluster.leader[1:])
            killed_at = time.monotonic()
            cl.kill(leader)
            while True:
                try:
                    await js.publish("bench", BODY, timeout=1)
                    break
                except Exception:
                    await asyncio.sleep(0.01)
            times.append(time.monotonic() - killed_at)
            progress(f"JetStream run {run + 1}/{runs}: first successful publish {times[-1] * 1000:.0f} ms after "
                     f"kill -9 of n{leader}")
            cl.start(leader)
        await nc.close()
    finally:
        cl.stop()
        shutil.rmtree(root, ignore_errors=True)
    return times


async def jetstream_throughput(messages: int, depth: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="js-tput-"))
    cl = NatsCluster(root)
    for i in range(3):
        cl.start(i)
    try:
        nc, js = await _js_setup(cl.servers)
        for _ in range(50):
            await js.publish("bench", BODY)
        lat: list[float] = []
        sem = asyncio.Semaphore(depth)

        async def one() -> None:
            async with sem:
                s = time.perf_counter()
                await js.publish("bench", BODY)
                lat.append(time.perf_counter() - s)

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(messages)))
        elapsed = time.perf_counter() - t0
        await nc.close()
    finally:
        cl.stop()
        shutil.rmtree(root, ignore_errors=True)
    lat.sort()
    return {"msgs_per_s": messages / elapsed, "p50_ms": lat[len(lat) // 2] * 1000,
            "p99_ms": lat[int(len(lat) * 0.99)] * 1000}


def summary(times: list[float]) -> dict[str, float]:
    return {"runs": len(times), "median_ms": statistics.median(times) * 1000, "max_ms": max(times) * 1000,
            "min_ms": min(times) * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "failover.json"))
    ap.add_argument("--no-apache", action="store_true", help="leave out the Apache RocketMQ column")
    args = ap.parse_args()
    if not shutil.which("nats-server"):
        sys.exit("nats-server is missing: apt-get install -y nats-server")
    ap_fail: dict[str, float] | None = None
    ap_tput: dict[str, float] | None = None
    if not args.no_apache:
        progress("Apache RocketMQ DLedger group (minutes: five JVMs)")
        apache = apache_group()
        try:
            progress("Apache RocketMQ DLedger failover")
            ap_fail = summary(apache_failover(apache, args.runs))
            wait_until(lambda: _apache_settled(apache), timeout=300, what="a settled Apache DLedger group")
            progress(f"Apache RocketMQ replicated throughput, {args.messages} x 1 KiB, {args.depth} in flight")
            ap_tput = send_window(apache.endpoint, args.messages, args.depth)
        finally:
            apache.stop(graceful=False)
            shutil.rmtree(apache.root, ignore_errors=True)
    progress("RocketScope DLedger failover")
    rs_fail = summary(rocketscope_failover(args.runs))
    progress("JetStream R3 failover")
    js_fail = summary(asyncio.run(jetstream_failover(args.runs)))
    progress(f"replicated throughput, {args.messages} x 1 KiB, {args.depth} in flight")
    rs_tput = rocketscope_throughput(args.messages, args.depth)
    js_tput = asyncio.run(jetstream_throughput(args.messages, args.depth))
    result: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, loopback", "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average_1m_at_end": os.getloadavg()[0],
        "failover": {"rocketscope_dledger": rs_fail, "jetstream_r3": js_fail,
                     "ratio_median": rs_fail["median_ms"] / js_fail["median_ms"]},
        "throughput": {"depth": args.depth, "rocketscope_dledger": rs_tput, "jetstream_r3": js_tput,
                       "ratio": rs_tput["msgs_per_s"] / js_tput["msgs_per_s"]},
    }
    if ap_fail is not None and ap_tput is not None:
        result["failover"]["apache_dledger"] = ap_fail
        result["failover"]["ratio_median_to_apache"] = rs_fail["median_ms"] / ap_fail["median_ms"]
        result["throughput"]["apache_dledger"] = ap_tput
        result["throughput"]["ratio_to_apache"] = rs_tput["msgs_per_s"] / ap_tput["msgs_per_s"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\n{'':28}{'RocketScope DLedger':>22}{'JetStream R3':>16}{'ratio':>8}")
    print(f"{'failover median (ms)':28}{rs_fail['median_ms']:>22.0f}{js_fail['median_ms']:>16.0f}"
          f"{result['failover']['ratio_median']:>8.2f}")
    print(f"{'failover max (ms)':28}{rs_fail['max_ms']:>22.0f}{js_fail['max_ms']:>16.0f}")
    print(f"{'throughput (msg/s)':28}{rs_tput['msgs_per_s']:>22.0f}{js_tput['msgs_per_s']:>16.0f}"
          f"{result['throughput']['ratio']:>8.2f}")
    print(f"{'p50 / p99 latency (ms)':28}{rs_tput['p50_ms']:>13.1f} / {rs_tput['p99_ms']:<6.1f}"
          f"{js_tput['p50_ms']:>8.1f} / {js_tput['p99_ms']:<6.1f}")
    print(f"{'client ceiling (msg/s)':28}{rs_tput['client_ceiling_msgs_per_s']:>22.0f}{'':>16}"
          f"{rs_tput['client_ceiling_msgs_per_s'] / js_tput['msgs_per_s']:>8.2f}   "
          f"(1 s / the official client's {rs_tput['client_cpu_us_per_msg']:.0f} us of CPU per message)")
    if ap_fail is not None and ap_tput is not None:
        print(f"Apache RocketMQ DLedger (through its proxy): failover median {ap_fail['median_ms']:.0f} ms, max "
              f"{ap_fail['max_ms']:.0f} ms; throughput {ap_tput['msgs_per_s']:.0f} msg/s ({ap_tput['failed']} failed), "
              f"p50 / p99 {ap_tput['p50_ms']:.1f} / {ap_tput['p99_ms']:.1f} ms")
    print(f"\nresults in {args.out}")


if __name__ == "__main__":
    main()
