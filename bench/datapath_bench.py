"""The data path near the machine's limit (issue 20): every server, every path, one command, efficient clients.

    .venv/bin/python bench/datapath_bench.py [--messages 20000] [--depth 64] [--batch 32] [--only rs-async,js-r1]
                                             [--profile DIR] [--quick] [--depths 1,64,256]

1 KiB messages, ``--depth`` sends in flight, in the same run:

========== ===================================================================================
setup      servers
========== ===================================================================================
rs-async   RocketScope name server + one broker, ASYNC_FLUSH
rs-sync    the same with SYNC_FLUSH
rs-master  SYNC_MASTER (SYNC_FLUSH) + SLAVE
rs-master-async  SYNC_MASTER + SLAVE with ASYNC_FLUSH: a send waits for the slave's copy, not for a disk;
           JetStream R3's policy (nats-server 2.9 fsyncs in the background: bench/common.py nats_jetstream)
rs-dledger DLedger group of 3, each member fsyncing its appends before they count (dLegerSyncAppends true:
           Raft as written; the default)
rs-dledger-async  the same with dLegerSyncAppends false: appends count once written, the log fsynced every 10 ms in
           the background: Apache DLedger's policy (its FlushDataService, flushFileInterval 10 ms; its SYNC_FLUSH
           setting does not reach the DLedger log) and JetStream R3's
js-r1      nats-server 2.9, JetStream R1 file stream (it fsyncs in the background: ASYNC_FLUSH's peer)
js-r3      3 nats-servers, JetStream R3 file stream
apache     Apache RocketMQ 5.3.3 name server + broker (ASYNC_FLUSH) + proxy (``make peers``)
apache-master  Apache's SYNC_MASTER (SYNC_FLUSH) + SLAVE: the peer of rs-master
apache-master-async  the same with ASYNC_FLUSH: the peer of rs-master-async
apache-dledger Apache's DLedger group of 3: the peer of rs-dledger-async by policy (see above), compared with both
grpc-floor a bare ``grpc.aio`` server answering SendMessage with protobuf and nothing else
           (bench/grpc_floor.py): the floor of any gRPC send in this design; ``grpc-floor-raw``: the same
           without protobuf (grpc.aio alone)
========== ===================================================================================

and, per setup, the load generators that are cheaper per message than the servers:

* ``go remoting``: Apache's Go client v2 (tests/clients/go rmqgo, ``SendSync`` in ``depth``
  goroutines); ``go remoting batch``: SEND_BATCH_MESSAGE of ``--batch`` messages with
  ``depth / batch`` batches (rounded up to at least 2) in flight;
* ``java gRPC``: Apache's rocketmq-client-java 5 (peers/java/src/GrpcLoad.java, ``sendAsync`` with
  ``depth`` in flight), against RocketScope's gRPC port and Apache's proxy;
* ``go gRPC``: one pre-serialised SendMessage request sent again and again over one HTTP/2 connection
  with ``depth`` calls in flight (tests/clients/go grpcraw, grpc-go): a gRPC client far cheaper than
  the Java client, against RocketScope's gRPC port, Apache's proxy and the two floor servers;
* ``java remoting``: Apache's remoting client 5.3.3 (peers/java/src/RemotingLoad.java, ``send`` with a
  callback, ``depth`` in flight); ``java remoting batch``: batches of ``--batch`` from ``depth / batch``
  threads (at least 2), against RocketScope's and Apache's name server (compiled on first use);
* ``go nats``: nats.go (tests/clients/go natspub), ``depth`` goroutines each publishing to the
  JetStream stream and waiting for its ack (the ratios use this row);
* ``go remoting raw`` and ``go nats raw``: the same sends with no client library (tests/clients/go remotingraw
  and natsraw: SEND_MESSAGE_V2 frames with the Go client's fields and properties, JetStream publishes with a
  reply inbox; ``depth`` goroutines over one connection whose writer sends everything queued in one write, as
  nats.go's flusher does).  Apache's Go remoting client costs 40-50 µs of CPU per single send, nats.go 16-21:
  on two shared cores that difference, not the servers, can decide a ratio.  The raw rows cost a few µs per
  message on every side, so their ratio (``go remoting raw`` against ``go nats raw``) compares the servers;
* ``nats-py``: JetStream publishes awaiting their acks, ``depth`` in flight split over
  ``--nats-procs`` processes (one nats-py process costs more CPU per message than nats-server).

Every generator sends ``--warmup`` untimed messages first and prints a ``warm`` line; the CPU of
every process (servers, proxy, generators; /proc/<pid>/stat, all threads) is read there and at the
generator's summary line, so each row reports CPU µs per message of each process beside msg/s and
the latency p50/p99 of a send as the client saw it; a row with failed sends also records the RocketScope
servers' log lines on leader changes and errors (``server_log_notes``: the setup's logs are deleted with
it).  Ratios are against JetStream R1 (standalone rows), R3 (replicated rows) and Apache (same client; for rs-master
and rs-dledger Apache's SYNC_MASTER or DLedger setup when it ran, else its standalone broker).
Each row records the 1-min load average at its warm-up line and at its end; the JSON records the send path
the RocketScope servers ran (``send_path``: "c", or "python" when this command runs with
ROCKETSCOPE_PURE_PYTHON=1, which the servers inherit: broker/speedups.py).
JSON: bench/results/datapath.json.
``--idle SECONDS`` runs no load at all: each chosen setup's CPU ms per second of every server process
over SECONDS, ``--settle`` (10) seconds after it is up (timers, ticks, heartbeats and checkpoints: the
fixed cost every rate pays).
``--profile DIR`` also records a py-spy profile (``--native``) of the RocketScope broker (the leader
or master) during each RocketScope row: ``DIR/<setup>-<path>.txt`` (collapsed stacks) and a summary
in the JSON; a DLedger group's followers too, at the same time (``DIR/<setup>-<path>-followerN.txt``,
``profile_followerN`` in the JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests"), str(HERE.parent / "peers")]

from common import (  # noqa: E402
    RESULTS,
    Progress,
    machine_info,
    nats_jetstream,
    proc_cpu_s,
    py_spy,
    scratch_dir,
    start_profile,
    summarise_profile,
    table,
    wait_for,
    write_json,
)

BODY = 1024
SUBJECT = "bench.data"
progress = Progress("datapath")
SETUPS = ("rs-async", "rs-sync", "rs-master", "rs-master-async", "rs-dledger", "rs-dledger-async", "js-r1", "js-r3",
          "apache", "apache-master", "apache-master-async",
          "apache-dledger", "grpc-floor", "grpc-floor-raw")


@dataclass
class Target:
    """What a load generator needs to reach a setup, and the server processes to account."""

    name: str
    pids: dict[str, int]
    namesrv: str = ""  # remoting clients
    grpc: str = ""  # gRPC clients (the broker's gRPC port, or Apache's proxy)
    nats: list[str] = field(default_factory=list)
    create_topic: Any = None  # callable(topic)
    profile_pid: int = 0
    notable_logs: Any = None  # callable() -> the servers' log lines on leadership and errors (RocketScope setups)


# ------------------------------------------------------------------ load generators
def go_binary() -> str:
    res = subprocess.run(["bash", str(HERE.parent / "tests/clients/go/build.sh")], capture_output=True, text=True,
                         check=True)
    return res.stdout.strip().splitlines()[-1]


def java_cmd() -> list[str]:
    from reference_cluster import CACHE, GRPC_CLIENT_LIB

    cls = CACHE / "classes" / "grpc"
    if not (cls / "GrpcLoad.class").exists():
        raise RuntimeError("peers/java/src/GrpcLoad.java is not built: run make peers")
    return ["java", "-Xms256m", "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{cls}:{GRPC_CLIENT_LIB}/*", "GrpcLoad"]


def nats_load_main(argv: list[str]) -> None:
    """``--nats-load URL N DEPTH WARMUP``: one nats-py process; same JSON lines as rmqgo and GrpcLoad."""
    import nats

    url, n, depth, warmup = argv[0], int(argv[1]), int(argv[2]), int(argv[3])

    async def run() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=30)

        async def drive(count: int, lat: list[float] | None) -> int:
            budget, failed = [count], [0]

            async def one() -> None:
                while budget[0] > 0:
                    budget[0] -= 1
                    t0 = time.perf_counter()
                    try:
                        await js.publish(SUBJECT, b"x" * BODY)
                    except Exception:
                        failed[0] += 1
                        continue
                    if lat is not None:
                        lat.append(time.perf_counter() - t0)

            await asyncio.gather(*(one() for _ in range(depth)))
            return failed[0]

        await drive(warmup, None)
        print(json.dumps({"event": "warm", "sent": warmup}), flush=True)
        lat: list[float] = []
        cpu0, t0 = time.process_time(), time.perf_counter()
        failed = await drive(n, lat)
        secs, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        lat.sort()
        ok = n - failed
        pick = lambda q: lat[max(0, min(len(lat) - 1, round(q * len(lat) + 0.5) - 1))] * 1000 if lat else 0.0  # noqa
        print(json.dumps({"event": "summary", "sent": ok, "failed": failed, "seconds": secs, "rate": ok / secs,
                          "p50_ms": pick(0.5), "p99_ms": pick(0.99), "cpu_s": cpu,
                          "cpu_us_per_msg": cpu / max(1, ok) * 1e6}), flush=True)
        await nc.close()

    asyncio.run(run())


@dataclass
class Load:
    kind: str  # "go", "go-batch", "java", "nats"
    label: str


def remoting_java_cmd() -> list[str]:
    """peers/java/src/RemotingLoad.java compiled against rocketmq-5.3.3/lib once per source version."""
    import hashlib

    from reference_cluster import CACHE, JDK17_OPENS, LIB

    source = HERE.parent / "peers" / "java" / "src" / "RemotingLoad.java"
    out = CACHE / "classes" / f"RemotingLoad-{hashlib.sha1(source.read_bytes()).hexdigest()[:12]}"
    if not (out / "RemotingLoad.class").exists():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-d", str(tmp), "-cp", f"{LIB}/*", str(source)], check=True,
                       capture_output=True, timeout=600)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return ["java", "-Xms256m", "-Xmx256m", "-XX:+UseSerialGC", *JDK17_OPENS, "-Drocketmq.log.level=WARN",
            "-cp", f"{out}:{LIB}/*", "RemotingLoad"]


def generator_cmds(load: Load, t: Target, topic: str, n: int, depth: int, batch: int, warmup: int,
                   nats_procs: int, java_warmup: int = 0) -> list[list[str]]:
    if load.kind in ("go", "go-batch"):
        b = batch if load.kind == "go-batch" else 1
        d = max(2, -(-depth // b)) if b > 1 else depth
        return [[go_binary(), "produce", "-ns", t.namesrv, "-topic", topic, "-n", str(n), "-size", str(BODY),
                 "-depth", str(d), "-batch", str(b), "-warmup", str(warmup), "-quiet"]]
    if load.kind == "go-grpc":
        from grpc_floor import SEND_METHOD, client_headers, request_bytes

        where = scratch_dir("dp-grpcraw-")
        atexit.register(shutil.rmtree, where, True)
        request = where / "request.bin"
        request.write_bytes(request_bytes(topic, BODY))
        exe = str(Path(go_binary()).with_name("grpcraw"))
        headers = [a for h in client_headers(f"grpcraw-{os.getpid()}") for a in ("-header", h)]
        return [[exe, "-addr", t.grpc, "-method", SEND_METHOD, "-request", str(request), "-n", str(n),
                 "-depth", str(depth), "-warmup", str(max(warmup, java_warmup) if t.name == "apache" else warmup),
                 *headers]]
    if load.kind == "java":  # a JVM (client, and Apache's proxy) needs far more warm-up for its JIT
        return [[*java_cmd(), t.grpc, topic, str(n), str(depth), str(BODY), str(max(warmup, java_warmup))]]
    if load.kind in ("java-remoting", "java-remoting-batch"):
        b = batch if load.kind == "java-remoting-batch" else 1
        d = max(2, -(-depth // b)) if b > 1 else depth
        return [[*remoting_java_cmd(), t.namesrv, topic, str(n), str(d), str(BODY), str(max(warmup, java_warmup)),
                 str(b)]]
    if load.kind == "go-raw":
        exe = str(Path(go_binary()).with_name("remotingraw"))
        return [[exe, "-ns", t.namesrv, "-topic", topic, "-n", str(n), "-size", str(BODY), "-depth", str(depth),
                 "-warmup", str(warmup)]]
    if load.kind == "natsraw":
        exe = str(Path(go_binary()).with_name("natsraw"))
        return [[exe, "-url", t.nats[0], "-subject", SUBJECT, "-n", str(n), "-size", str(BODY), "-depth", str(depth),
                 "-warmup", str(warmup)]]
    if load.kind == "natsgo":
        exe = str(Path(go_binary()).with_name("natspub"))
        return [[exe, "-url", t.nats[0], "-subject", SUBJECT, "-n", str(n), "-size", str(BODY), "-depth", str(depth),
                 "-warmup", str(warmup)]]
    if load.kind == "nats":
        per = max(1, depth // nats_procs)
        return [[sys.executable, str(Path(__file__).resolve()), "--nats-load", t.nats[i % len(t.nats)],
                 str(n // nats_procs), str(per), str(warmup // nats_procs)] for i in range(nats_procs)]
    raise ValueError(load.kind)


def run_load(load: Load, t: Target, topic: str, args: argparse.Namespace, profile_to: Path | None,
             depth: int | None = None) -> dict[str, Any]:
    """Start the generator(s), wait for every ``warm`` line, read every process's CPU, wait for the summaries.
    ``depth``: sends in flight (default ``--depth``)."""
    depth = args.depth if depth is None else depth
    if t.create_topic is not None:
        t.create_topic(topic)
    # a JVM server (Apache's broker and proxy) needs the JIT's warm-up too, whatever the client
    warmup = max(args.warmup, args.java_warmup) if t.name == "apache" else args.warmup
    cmds = generator_cmds(load, t, topic, args.messages, depth, args.batch, warmup, args.nats_procs,
                          args.java_warmup)
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for c in cmds]
    try:
        def line_of(p: subprocess.Popen[str], event: str) -> dict[str, Any]:
            assert p.stdout is not None
            for line in p.stdout:
                if line.startswith("{"):
                    doc = json.loads(line)
                    if doc.get("event") == event:
                        return doc
                    if doc.get("event") == "error":
                        break
            err = p.stderr.read()[-3000:] if p.stderr else ""
            raise RuntimeError(f"{load.label}: no {event} line (exit {p.wait()}): {err}")

        for p in procs:
            line_of(p, "warm")
        load_at_warm = os.getloadavg()
        pids = dict(t.pids) | {f"client{i}" if len(procs) > 1 else "client": p.pid for i, p in enumerate(procs)}
        cpu0 = {k: proc_cpu_s(v) for k, v in pids.items()}
        prof = None
        follower_profs: dict[str, Any] = {}
        if profile_to is not None and t.profile_pid:
            prof = start_profile(t.profile_pid, args.profile_seconds, profile_to, rate=200, native=True)
            # a replicated setup's other members too (a DLedger follower's costs are not the leader's)
            for k, v in t.pids.items():
                if k.startswith("follower"):
                    follower_profs[k] = start_profile(v, args.profile_seconds, _member_profile(profile_to, k),
                                                      rate=200, native=True)
        t0 = time.perf_counter()
        sums = []
        for p in procs:
            sums.append(line_of(p, "summary"))
        wall = time.perf_counter() - t0
        cpu1 = {k: proc_cpu_s(v) for k, v in pids.items()}
        for p in procs:
            p.wait(60)
        for fp in [prof, *follower_profs.values()]:
            if fp is not None:
                fp.wait(args.profile_seconds + 60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    sent = sum(s["sent"] for s in sums)
    failed = sum(s["failed"] for s in sums)
    # several nats-py processes: the rate is the sum, the latency the worst of the processes' percentiles
    rate = sum(s["rate"] for s in sums) if len(sums) > 1 else sums[0]["rate"]
    cpu_us = {k: (cpu1[k] - cpu0[k]) / max(1, sent) * 1e6 for k in pids}
    out = {"msgs_per_s": rate, "sent": sent, "failed": failed, "wall_s": wall, "loadavg_at_warm": load_at_warm,
           "p50_ms": max(s["p50_ms"] for s in sums), "p99_ms": max(s["p99_ms"] for s in sums),
           "cpu_us_per_msg": cpu_us,
           "server_cpu_us_per_msg": sum(v for k, v in cpu_us.items() if not k.startswith("client")),
           "client_cpu_us_per_msg": sum(v for k, v in cpu_us.items() if k.startswith("client")),
           "client_self_reported_cpu_us_per_msg": sum(s["cpu_s"] for s in sums) / max(1, sent) * 1e6}
    if profile_to is not None and profile_to.exists():
        out["profile"] = summarise_profile(profile_to, drop_idle=True)
        out["profile"]["file"] = str(profile_to)
        for k in follower_profs:
            fpath = _member_profile(profile_to, k)
            if fpath.exists():
                out[f"profile_{k}"] = summarise_profile(fpath, drop_idle=True) | {"file": str(fpath)}
    return out


def _member_profile(profile_to: Path, member: str) -> Path:
    """Where a follower's profile goes beside the leader's: ``DIR/<setup>-<path>-<member>.txt``."""
    return profile_to.with_name(f"{profile_to.stem}-{member}{profile_to.suffix}")


# ------------------------------------------------------------------ setups
def _rs_create(c: Any, addr: str | None = None) -> Any:
    def create(topic: str) -> None:
        extra = ["-b", addr] if addr else ["-c", "DefaultCluster"]
        res = c.admin("updateTopic", "-t", topic, "-r", "8", "-w", "8", *extra, check=False)
        if res.returncode != 0:
            c.admin("updateTopic", "-t", topic, "-r", "8", "-w", "8")
    return create


BIG = {"mappedFileSizeCommitLog": 256 << 20, "mappedFileSizeConsumeQueue": 300000 * 20,
       "maxHashSlotNum": 500000, "maxIndexNum": 2000000, "traceOn": "false"}


NOTABLE = re.compile(r"leader of term|no longer leader|ERROR|Traceback|link to .* down")


def _notable_lines(c: Any) -> Callable[[], list[str]]:
    """The servers' log lines that explain failed sends (a leader change, an error), for a row that had some:
    the setup's directory, and its logs, are deleted when the setup stops."""
    def lines() -> list[str]:
        return [f"{n.name}: {line}" for n in c.brokers.values() for line in n.proc.log().splitlines()
                if NOTABLE.search(line)]
    return lines


@contextlib.contextmanager
def setup(name: str) -> Iterator[Target]:
    """Start the servers of one setup; yield its Target; stop them."""
    from cluster import LocalCluster, start_dledger_group, wait_until

    if name.startswith("rs-"):
        root = scratch_dir(f"dp-{name}-")
        c = LocalCluster(root)
        try:
            c.start_namesrv()
            pids = {"namesrv": c.namesrvs[0].popen.pid}
            if name in ("rs-async", "rs-sync"):
                node = c.start_broker("bench", flushDiskType="ASYNC_FLUSH" if name == "rs-async" else "SYNC_FLUSH",
                                      **BIG)
                pids["broker"] = node.proc.popen.pid
                yield Target(name, pids, namesrv=c.namesrv_addr, grpc=node.endpoint,
                             create_topic=_rs_create(c, node.admin_addr), profile_pid=pids["broker"],
                             notable_logs=_notable_lines(c))
            elif name in ("rs-master", "rs-master-async"):
                flush = "ASYNC_FLUSH" if name == "rs-master-async" else "SYNC_FLUSH"
                master = c.start_broker("master", brokerName="broker-a", brokerRole="SYNC_MASTER",
                                        flushDiskType=flush, **BIG)
                slave = c.start_broker("slave", brokerName="broker-a", brokerRole="SLAVE", brokerId=1,
                                       flushDiskType=flush, **BIG)

                def slave_connected() -> bool:
                    st = json.loads(c.admin("haStatus", "-b", master.admin_addr).stdout)[master.admin_addr]
                    return any(s["connected"] for s in st.get("slaves", []))
                wait_until(slave_connected, timeout=60, what="the slave replicating")
                pids |= {"master": master.proc.popen.pid, "slave": slave.proc.popen.pid}
                yield Target(name, pids, namesrv=c.namesrv_addr, grpc=master.endpoint,
                             create_topic=_rs_create(c, master.admin_addr), profile_pid=pids["master"],
                             notable_logs=_notable_lines(c))
            else:
                sync_appends = "false" if name == "rs-dledger-async" else "true"
                nodes = start_dledger_group(c, "broker-d", 3, flushDiskType="SYNC_FLUSH",
                                            dLegerSyncAppends=sync_appends, **BIG)

                def leader() -> Any:
                    for n in nodes:
                        with contextlib.suppress(AssertionError, KeyError, ValueError):
                            st = json.loads(c.admin("haStatus", "-b", n.admin_addr).stdout)[n.admin_addr]
                            if st["role"] == "LEADER":
                                return n
                    return None
                lead = wait_until(leader, timeout=60, what="a DLedger leader")
                for i, n in enumerate(nodes):
                    pids[("leader" if n is lead else f"follower{i}")] = n.proc.popen.pid
                yield Target(name, pids, namesrv=c.namesrv_addr, grpc=lead.endpoint,
                             create_topic=_rs_create(c, lead.admin_addr), profile_pid=lead.proc.popen.pid,
                             notable_logs=_notable_lines(c))
        except BaseException:
            sys.stderr.write(c.logs()[-4000:] + "\n")
            raise
        finally:
            c.stop()
            shutil.rmtree(root, ignore_errors=True)
    elif name.startswith("js-"):
        nodes = 1 if name == "js-r1" else 3
        with nats_jetstream(nodes) as ns:
            asyncio.run(_js_stream(ns.urls[0], nodes))
            yield Target(name, {f"nats{i}": p for i, p in enumerate(ns.pids)}, nats=ns.urls)
    elif name.startswith("apache"):
        from reference_cluster import ReferenceCluster

        root = scratch_dir(f"dp-{name}-")
        flush = "ASYNC_FLUSH" if name == "apache-master-async" else "SYNC_FLUSH"
        replicated = {"broker_conf": {"brokerRole": "SYNC_MASTER", "flushDiskType": flush}, "slave": True} \
            if name.startswith("apache-master") else {"broker_conf": {"flushDiskType": "SYNC_FLUSH"}, "dledger": True} \
            if name == "apache-dledger" else {}
        rc = ReferenceCluster(root, heap="1g", **replicated)
        try:
            rc.start()

            def create(topic: str) -> None:
                # a DLedger group's topics carry no message.type (reference_cluster.py _create_topic_on_brokers)
                rc.create_topic(topic, queues=8, **({"message_type": None} if rc.dledger else {}))
                wait_for(lambda: rc.grpc_route(topic), 30, f"{topic} routed by the proxy")
            yield Target(name, dict(rc.pids), namesrv=rc.namesrv_addr, grpc=rc.endpoint, create_topic=create)
        finally:
            rc.stop()
            shutil.rmtree(root, ignore_errors=True)
    elif name.startswith("grpc-floor"):
        root = scratch_dir("dp-floor-")
        port_file = Path(root) / "port"
        mode = "raw" if name == "grpc-floor-raw" else "proto"
        proc = subprocess.Popen([sys.executable, str(HERE / "grpc_floor.py"), "serve", "--mode", mode,
                                 "--port-file", str(port_file)], stdout=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for(port_file.exists, 30, f"the {name} server's port")
            yield Target(name, {"floor": proc.pid}, grpc=f"127.0.0.1:{port_file.read_text().strip()}")
        finally:
            proc.kill()
            proc.wait(10)
            shutil.rmtree(root, ignore_errors=True)
    else:
        raise ValueError(name)


async def _js_stream(url: str, replicas: int) -> None:
    import nats
    from common import jetstream_ready
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(url)
    js = await jetstream_ready(nc)
    await js.add_stream(StreamConfig(name="BENCH", subjects=[SUBJECT], storage=StorageType.FILE, num_replicas=replicas))
    await nc.close()


GO_REMOTING = [Load("go", "go remoting"), Load("go-batch", "go remoting batch"), Load("go-raw", "go remoting raw")]
GO_NATS = [Load("natsgo", "go nats"), Load("nats", "nats-py"), Load("natsraw", "go nats raw")]
JVM_AND_GRPC = [Load("java", "java gRPC"), Load("java-remoting", "java remoting"),
                Load("java-remoting-batch", "java remoting batch"), Load("go-grpc", "go gRPC")]
LOADS = {
    "rs-async": [*GO_REMOTING, *JVM_AND_GRPC],
    "rs-sync": GO_REMOTING,
    "rs-master": GO_REMOTING,
    "rs-master-async": GO_REMOTING,
    "rs-dledger": GO_REMOTING,
    "rs-dledger-async": GO_REMOTING,
    "js-r1": GO_NATS,
    "js-r3": GO_NATS,
    "apache": [*GO_REMOTING, *JVM_AND_GRPC],
    "apache-master": GO_REMOTING,
    "apache-master-async": GO_REMOTING,
    "apache-dledger": GO_REMOTING,
    "grpc-floor": [Load("go-grpc", "go gRPC")],
    "grpc-floor-raw": [Load("go-grpc", "go gRPC")],
}
PEER_OF = {"rs-async": "js-r1", "rs-sync": "js-r1", "rs-master": "js-r3", "rs-master-async": "js-r3",
           "rs-dledger": "js-r3", "rs-dledger-async": "js-r3"}
# Apache's setup each RocketScope setup is compared with (the same replication; "apache" when not run)
APACHE_OF = {"rs-master": "apache-master", "rs-master-async": "apache-master-async", "rs-dledger": "apache-dledger",
             "rs-dledger-async": "apache-dledger"}


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    rows = []
    for key, r in results.items():
        setup_name, label = key.split(" / ")
        at = label[label.index(" @"):] if " @" in label else ""  # " @<depth>" with --depths
        if "error" in r:
            rows.append([setup_name, label, "error", "", "", "", "", "", "", r["error"][:60]])
            continue
        peer = PEER_OF.get(setup_name)
        # the Go client: nats-py is the slower side; a raw row against the raw JetStream row
        js_path = "go nats raw" if label.startswith("go remoting raw") else "go nats"
        js = results.get(f"{peer} / {js_path}{at}") if peer else None
        js = js if js and "error" not in js else None
        ap = results.get(f"{APACHE_OF.get(setup_name, 'apache')} / {label}") or results.get(f"apache / {label}")
        ratio_js = f"{r['msgs_per_s'] / js['msgs_per_s']:.2f}" if js and setup_name.startswith("rs") else ""
        ratio_ap = (f"{r['msgs_per_s'] / ap['msgs_per_s']:.2f}" if ap and "error" not in ap
                    and setup_name.startswith("rs") else "")
        per = ", ".join(f"{k} {v:.0f}" for k, v in r["cpu_us_per_msg"].items())
        rows.append([setup_name, label, f"{r['msgs_per_s']:,.0f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
                     f"{r['server_cpu_us_per_msg']:.0f}", f"{r['client_cpu_us_per_msg']:.0f}", ratio_js, ratio_ap,
                     per])
    return table(["setup", "path", "msg/s", "p50 ms", "p99 ms", "server µs/msg", "client µs/msg", "x JS", "x Apache",
                  "CPU µs/msg per process"], rows)


def idle_main(args: argparse.Namespace) -> None:
    """``--idle``: the fixed cost of each setup with no client at all (timers, ticks, heartbeats, checkpoints).

    CPU of every server process from /proc over ``--idle`` seconds, read ``--settle`` seconds after the
    setup reported itself up (start-up work such as registering and the first election is then over)."""
    chosen = [s for s in SETUPS if not args.only or s in args.only.split(",")]
    results: dict[str, dict[str, Any]] = {}
    for name in chosen:
        progress(f"starting {name} (idle)")
        with setup(name) as t:
            time.sleep(args.settle)
            before = {k: proc_cpu_s(p) for k, p in t.pids.items()}
            load0, t0 = os.getloadavg()[0], time.monotonic()
            time.sleep(args.idle)
            secs = time.monotonic() - t0
            per = {k: (proc_cpu_s(p) - before[k]) * 1000 / secs for k, p in t.pids.items()}
            results[f"{name} / idle"] = {"seconds": secs, "cpu_ms_per_s": per, "loadavg_start": load0,
                                         "loadavg": os.getloadavg()}
            progress(f"{name} idle: " + json.dumps({k: round(v, 1) for k, v in per.items()})
                     + f" ms/s, load {load0:.1f}-{os.getloadavg()[0]:.1f}")
    text = table(["setup", "CPU ms/s per process", "load"],
                 [[k.split(" / ")[0], ", ".join(f"{p} {v:.1f}" for p, v in r["cpu_ms_per_s"].items()),
                   f"{r['loadavg_start']:.1f}-{r['loadavg'][0]:.1f}"] for k, r in results.items()])
    print(text)
    write_json({"idle_seconds": args.idle, "settle_seconds": args.settle, "results": results, "table": text,
                "machine_end": machine_info()}, args.out)
    progress(f"wrote {args.out}")


def implementation() -> str:
    """The RocketScope servers' send path (broker/speedups.py): "c", or "python" with ROCKETSCOPE_PURE_PYTHON=1
    in this command's environment, which the servers it starts inherit."""
    from rocketscope.broker import speedups

    return speedups.IMPLEMENTATION


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--nats-load":
        nats_load_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20000, help="timed messages per row")
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--depths", default="", help="comma-separated depths run one after the other in each setup "
                    "(e.g. 1,64,256; rows are labelled '<path> @<depth>'); default: --depth only")
    ap.add_argument("--java-warmup", type=int, default=10000,
                    help="untimed sends of the Java gRPC rows and of every row against Apache (JIT warm-up)")
    ap.add_argument("--nats-procs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated setups (" + ",".join(SETUPS) + ")")
    ap.add_argument("--paths", default="", help="comma-separated path labels to keep (e.g. 'go remoting')")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy profiles of the RocketScope rows into DIR")
    ap.add_argument("--profile-seconds", type=float, default=6.0)
    ap.add_argument("--quick", action="store_true", help="2,000 messages (short warm-ups), rs-async and js-r1 only")
    ap.add_argument("--out", type=Path, default=RESULTS / "datapath.json")
    ap.add_argument("--idle", type=float, default=0.0, metavar="SECONDS",
                    help="no load: each chosen setup's CPU ms per second of every server process over SECONDS "
                    "(after --settle), instead of the rows")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds between a setup's start and an --idle reading")
    args = ap.parse_args()
    if args.profile and py_spy() is None:  # else every row would run and no profile be written, silently
        ap.error("--profile needs py-spy: .venv/bin/pip install py-spy (a benchmark tool, not a project dependency)")
    if args.idle:
        idle_main(args)
        return
    if args.quick:
        args.messages, args.warmup, args.java_warmup = 2000, 500, 1000
        args.only = args.only or "rs-async,js-r1"
    chosen = [s for s in SETUPS if not args.only or s in args.only.split(",")]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    depths = [int(d) for d in args.depths.split(",") if d.strip()] or [args.depth]
    progress(f"load average {os.getloadavg()}; setups {chosen}; send path {implementation()}")
    results: dict[str, dict[str, Any]] = {}
    for name in chosen:
        progress(f"starting {name}")
        try:
            with setup(name) as t:
                progress(f"{name} up: {t.pids}")
                rows = [(i, load, d) for i, load in enumerate(LOADS[name]) for d in depths]
                for i, load, depth in rows:
                    if paths and load.label not in paths:
                        continue
                    topic = f"DP_{name.replace('-', '_')}_{i}"
                    prof = (args.profile / f"{name}-{load.label.replace(' ', '-')}.txt"
                            if args.profile and name.startswith("rs-") else None)
                    key = f"{name} / {load.label}" + (f" @{depth}" if args.depths else "")
                    try:
                        r = run_load(load, t, topic, args, prof, depth)
                        r["loadavg"] = os.getloadavg()
                        if r["failed"] and t.notable_logs is not None:
                            r["server_log_notes"] = t.notable_logs()[-40:]
                    except Exception as exc:  # one failing row must not lose the others
                        r = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                    results[key] = r
                    progress(f"{key}: " + (r["error"][:300] if "error" in r else
                                           f"{r['msgs_per_s']:,.0f} msg/s p50 {r['p50_ms']:.1f} p99 "
                                           f"{r['p99_ms']:.1f} ms, CPU µs/msg "
                                           + json.dumps({k: round(v) for k, v in r['cpu_us_per_msg'].items()})
                                           + f", failed {r['failed']}, load {r['loadavg_at_warm'][0]:.1f}"
                                           + f"-{r['loadavg'][0]:.1f}"))
        except Exception as exc:
            progress(f"{name} failed to start: {exc}")
            results[f"{name} / (setup)"] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    text = report(results, args)
    print(text)
    write_json({"messages": args.messages, "depth": args.depth, "depths": depths, "batch": args.batch, "body": BODY,
                "send_path": implementation(),
                "results": results, "table": text, "machine_end": machine_info()}, args.out)
    progress(f"wrote {args.out}")


if __name__ == "__main__":
    main()
