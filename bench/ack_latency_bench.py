"""Ack latency with POP state in the replicated log (issue 15): what a consumer of the official client sees.

Since broker/pop_log.py an ack is answered only once its op record is committed in the
replicated log (``popStateReplicate``, the default), so an acknowledged message is never handed
out again after a leader change.  This measures what that costs, as the client sees it: the
round trip of ``SimpleConsumer.ack`` with the official Python client, next to the round trip
of a plain replicated ``Producer.send`` in the same group (the floor an ack that waits for one
replication round can reach).

Modes (one name server, brokers on loopback, default settings otherwise):

* ``dledger`` — three brokers in one DLedger group;
* ``controller`` — three controllers and a three-broker set with ``allAckInSyncStateSet``
  (Master/Slave with SYNC replication under a controller: the mode where the key acts);
* ``masterslave`` — a SYNC_MASTER and a SLAVE without controller: POP state is not journalled
  there (the key has no effect), so it is measured once, as the reference of an unreplicated ack.

For each mode and ``popStateReplicate`` true/false: ``--sends`` sends one at a time (send
latency), then ``--acks`` messages acked one at a time (sequential acks), then ``--acks``
messages acked ``--concurrency`` at a time from a thread pool (acks arriving together, as a
consumer acking a received batch in parallel does).  Median and p99 per phase into
bench/results/ack_latency.json; docs/BENCHMARKS.md has the table.

    .venv/bin/python bench/ack_latency_bench.py                     # every mode, ~500 acks each way
    .venv/bin/python bench/ack_latency_bench.py --modes dledger --acks 200
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from chaos.harness import ha_status  # noqa: E402
from cluster import LocalCluster, start_dledger_group, wait_until  # noqa: E402
from rmq import message, producer, simple_consumer  # noqa: E402
from test_e2e_controller import BROKER_TIMING, start_controllers  # noqa: E402

from bench.common import RESULTS, Progress, free_port, percentiles, scratch_dir, table, write_json  # noqa: E402

TOPIC = "AckBench"
GROUP = "AckBenchGroup"
MODES = ("dledger", "controller", "masterslave")
progress = Progress("ack_latency")


@contextmanager
def group_of(mode: str, root: Path, replicate: bool) -> Iterator[tuple[LocalCluster, str, str]]:
    """The mode's processes, stopped on exit: (cluster, client endpoint, admin address of the writer)."""
    c = LocalCluster(root)
    ctl: list[Any] = []
    try:
        c.start_namesrv()
        conf = {"popStateReplicate": str(replicate).lower()}
        if mode == "dledger":
            nodes = start_dledger_group(c, "broker-ab", preferredLeaderId="n0", **conf)
        elif mode == "controller":
            ctl, ports = start_controllers(root)
            addrs = ";".join(f"127.0.0.1:{p}" for p in ports)
            nodes = []
            for i in range(3):
                nodes.append(c.start_broker(f"c{i}", brokerName="broker-ab", enableControllerMode="true",
                                            controllerAddr=addrs, allAckInSyncStateSet="true", **BROKER_TIMING,
                                            **conf))
                if i == 0:
                    wait_until(lambda: (ha_status(nodes[0]) or {}).get("role") == "MASTER", timeout=90,
                               what="c0 master")
        else:
            ha = free_port()
            nodes = [c.start_broker("master", brokerName="broker-ab", brokerRole="SYNC_MASTER", haListenPort=ha,
                                    **conf)]
            nodes.append(c.start_broker("slave", brokerName="broker-ab", brokerRole="SLAVE", brokerId=1,
                                        haListenPort=free_port(), haMasterAddress=f"127.0.0.1:{ha}", **conf))

        def writer() -> tuple[Any] | None:
            for n in nodes:
                st = ha_status(n) or {}
                if str(st.get("role", "")).upper() in ("LEADER", "MASTER", "SYNC_MASTER"):
                    return (n,)
            return None

        def settled() -> bool:
            sts = [ha_status(n) for n in nodes]
            if any(s is None for s in sts):
                return False
            if mode == "dledger":
                return len({s["lastIndex"] for s in sts}) == 1 and writer() is not None  # type: ignore[index]
            if mode == "controller":
                m = [s for s in sts if s["role"] == "MASTER"]  # type: ignore[index]
                return len(m) == 1 and len(m[0]["syncStateSet"]) == 3
            return bool(sts[1]["connected"])  # type: ignore[index]

        (w,) = wait_until(writer, timeout=120, what=f"a writer in {mode}")
        wait_until(settled, timeout=120, interval=0.2, what=f"{mode} settled")
        for n in nodes:
            if mode != "masterslave" or n is nodes[0]:
                c.admin("updateTopic", "-b", n.admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
                c.admin("updateSubGroup", "-b", n.admin_addr, "-g", GROUP)
        yield c, ";".join(n.endpoint for n in nodes), w.admin_addr
    finally:
        c.stop()
        for p in ctl:
            p.stop()


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(endpoint: str, sends: int, acks: int, concurrency: int) -> dict[str, Any]:
    """Send latency, then sequential and concurrent ack latency, all through the official client."""
    send_s: list[float] = []
    with producer(endpoint, TOPIC) as p:
        for i in range(3):  # routes, channels, the leader's first writes
            p.send(message(TOPIC, f"warm-{i}".encode()))
        for i in range(max(sends, 2 * acks + 64)):  # a sequential batch may take up to 31 more than its share
            m = message(TOPIC, f"ack-bench-{i}".encode())
            if i < sends:
                send_s.append(timed(lambda m=m: p.send(m)))
            else:
                p.send(m)
    progress(f"{len(send_s)} timed sends done")
    seq_s: list[float] = []
    conc_s: list[float] = []
    failed = 0
    with simple_consumer(endpoint, GROUP, TOPIC, await_s=1) as consumer, \
            ThreadPoolExecutor(max(1, concurrency)) as pool:
        deadline = time.monotonic() + 300
        while (len(seq_s) < acks or len(conc_s) < acks) and time.monotonic() < deadline:  # all acked first
            try:
                got = consumer.receive(32, 60)
            except Exception:
                continue
            if len(seq_s) < acks:
                for m in got:
                    try:
                        seq_s.append(timed(lambda m=m: consumer.ack(m)))
                    except Exception:
                        failed += 1
            else:
                def one(m: Any) -> float | None:
                    try:
                        return timed(lambda: consumer.ack(m))
                    except Exception:
                        return None
                for r in pool.map(one, got):
                    if r is None:
                        failed += 1
                    else:
                        conc_s.append(r)
    return {"send": {"n": len(send_s), **percentiles(send_s)},
            "ack_sequential": {"n": len(seq_s), **percentiles(seq_s)},
            "ack_concurrent": {"n": len(conc_s), "concurrency": concurrency, **percentiles(conc_s)},
            "ack_failures": failed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--sends", type=int, default=300)
    ap.add_argument("--acks", type=int, default=500, help="acks per phase (sequential, concurrent)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--out", default=str(RESULTS / "ack_latency.json"))
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for mode in args.modes.split(","):
        for replicate in ((True, False) if mode != "masterslave" else (False,)):
            root = scratch_dir(f"ackbench-{mode}-")
            progress(f"{mode} popStateReplicate={replicate}: starting")
            with group_of(mode, root, replicate) as (_c, endpoint, _w):
                progress(f"{mode} popStateReplicate={replicate}: group up, measuring")
                res = measure(endpoint, args.sends, args.acks, args.concurrency)
            rows.append({"mode": mode, "popStateReplicate": replicate, **res})
            progress(f"{mode} popStateReplicate={replicate}: send p50 {res['send']['p50_ms']:.1f} ms, ack p50 "
                     f"{res['ack_sequential']['p50_ms']:.1f} ms sequential, {res['ack_concurrent']['p50_ms']:.1f} "
                     f"ms at {args.concurrency} concurrent")
    out = write_json({"runs": rows, "sends": args.sends, "acks": args.acks, "concurrency": args.concurrency},
                     Path(args.out))
    print(table(["mode", "replicate", "send p50", "send p99", "ack p50", "ack p99", "conc p50", "conc p99", "fail"],
                [[r["mode"], r["popStateReplicate"], r["send"]["p50_ms"], r["send"]["p99_ms"],
                  r["ack_sequential"]["p50_ms"], r["ack_sequential"]["p99_ms"], r["ack_concurrent"]["p50_ms"],
                  r["ack_concurrent"]["p99_ms"], r["ack_failures"]] for r in rows]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
