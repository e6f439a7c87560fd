"""Controller-mode failover: kill -9 of the master to the first successful send, next to DLedger's figure.

    .venv/bin/python bench/controller_bench.py [--runs 10]

Three controllers and a three-broker set (allAckInSyncStateSet=true) on loopback, started
with the end-to-end harness.  A client sends one 1 KiB message at a time (retrying every
10 ms); the master is killed with SIGKILL, and the time to the first send that started
after the kill and succeeded is recorded; the killed broker is restarted and rejoins the
SyncStateSet before the next run.  Broker timing: heartbeat every 200 ms, dead after
1000 ms without one (RocketMQ: 1 s / 10 s; a crash there is seen at once through the
closed channel); controllers scan every 200 ms.  Results: bench/results/controller.json;
the DLedger figure is read from bench/results/failover.json when present.
"""

from __future__ import annotations

import argparse
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

from cluster import LocalCluster, wait_until  # noqa: E402
from test_e2e_controller import start_controllers  # noqa: E402

BODY = b"x" * 1024
TIMING = {"brokerHeartbeatInterval": 200, "controllerHeartBeatTimeoutMills": 1000, "syncBrokerMetadataPeriod": 1000,
          "checkSyncStateSetPeriod": 500, "haMaxTimeSlaveNotCatchup": 3000, "slaveTimeout": 2000,
          "sendHeartbeatTimeoutMillis": 300}


def progress(text: str) -> None:
    print(f"[controller-bench] {text}", flush=True)


def status(c: LocalCluster, node) -> dict:  # type: ignore[no-untyped-def, type-arg]
    return json.loads(c.admin("haStatus", "-b", node.admin_addr).stdout)[node.admin_addr]


def master_of(c: LocalCluster, nodes: list) -> int | None:  # type: ignore[type-arg]
    for i, n in enumerate(nodes):
        if not n.proc.alive:
            continue
        try:
            if status(c, n)["role"] == "MASTER":
                return i
        except (AssertionError, KeyError):
            continue
    return None


def controller_failover(runs: int) -> list[float]:
    from rmq import message, producer

    root = Path(tempfile.mkdtemp(prefix="rs-ctl-failover-"))
    c = LocalCluster(root)
    ctls, ports = start_controllers(root, scanNotActiveBrokerInterval=200, scanInactiveMasterInterval=200)
    times: list[float] = []
    try:
        c.start_namesrv()
        addrs = ";".join(f"127.0.0.1:{p}" for p in ports)
        nodes = [c.start_broker(f"c{i}", brokerName="broker-c", enableControllerMode="true", controllerAddr=addrs,
                                allAckInSyncStateSet="true", flushDiskType="SYNC_FLUSH",
                                mappedFileSizeCommitLog=64 * 1024 * 1024, **TIMING) for i in range(3)]
        wait_until(lambda: master_of(c, nodes) is not None, timeout=30, what="master")
        c.admin("updateTopic", "-b", nodes[master_of(c, nodes)].admin_addr, "-t", "Bench", "-r", "4", "-w", "4")
        endpoint = ";".join(n.endpoint for n in nodes)

        def settled() -> bool:
            m = master_of(c, nodes)
            return m is not None and all(n.proc.alive for n in nodes) and len(status(c, nodes[m])["syncStateSet"]) == 3

        with producer(endpoint, "Bench") as p:
            for run in range(runs):
                wait_until(settled, timeout=60, what="a settled set")
                p.send(message("Bench", BODY))
                m = master_of(c, nodes)
                assert m is not None
                killed_at = time.monotonic()
                nodes[m].proc.kill9()
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
                progress(f"run {run + 1}/{runs}: first successful send {times[-1] * 1000:.0f} ms after kill -9 "
                         f"of c{m}")
                c.start_broker(f"c{m}")
    finally:
        c.stop()
        for proc in ctls:
            proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "controller.json"))
    args = ap.parse_args()
    times = controller_failover(args.runs)
    fig = {"runs": len(times), "median_ms": statistics.median(times) * 1000, "max_ms": max(times) * 1000,
           "min_ms": min(times) * 1000}
    dledger = None
    with_dl = ROOT / "bench" / "results" / "failover.json"
    if with_dl.exists():
        dledger = json.loads(with_dl.read_text())["failover"]["rocketscope_dledger"]
    result = {"machine": f"{os.cpu_count()} cores, loopback", "when": time.strftime("%Y-%m-%d %H:%M:%S"),
              "broker_timing": TIMING, "failover": {"rocketscope_controller": fig, "rocketscope_dledger": dledger}}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\ncontroller-mode failover: median {fig['median_ms']:.0f} ms, max {fig['max_ms']:.0f} ms over "
          f"{fig['runs']} kills" + (f"; DLedger median {dledger['median_ms']:.0f} ms" if dledger else ""))
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
