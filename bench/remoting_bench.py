"""Produce over remoting (Apache's Go client v2) against produce over gRPC (official Python client), one broker.

    .venv/bin/python bench/remoting_bench.py [--messages 3000] [--rounds 2] [--quick]

A quick figure for issue 19, reported and never asserted: one name server and one broker
(ASYNC_FLUSH), 1 KiB bodies, each phase on its own topic:

* go remoting: tests/clients/go's rmqgo (``SendSync`` in ``depth`` goroutines; ``batch 32`` =
  SEND_BATCH_MESSAGE of 32 messages with 8 batches in flight);
* python gRPC: rocketmq-python-client, depth 1 = synchronous ``send``, 64 = ``send_async`` with
  64 in flight (bench/load.py ``pipelined_sends``).

Rounds alternate which protocol goes first (the second one in a round runs measurably slower
on a shared 2-core machine); medians are reported with the broker's CPU per message, which
swings far less with other load than msg/s.  Results: bench/results/remoting.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from common import machine_info, rocketscope_broker, table, write_json  # noqa: E402
from load import cpu_seconds, pipelined_sends  # noqa: E402

BODY = 1024


def go_binary() -> str:
    res = subprocess.run(["bash", str(HERE.parent / "tests/clients/go/build.sh")], capture_output=True, text=True,
                         check=True)
    return res.stdout.strip().splitlines()[-1]


def go_phase(c: Any, broker_pid: int, rmqgo: str, topic: str, messages: int, depth: int, batch: int
             ) -> dict[str, float]:
    c.admin("updateTopic", "-t", topic, "-r", "8", "-w", "8")
    cmd = [rmqgo, "produce", "-ns", c.namesrv_addr, "-topic", topic, "-n", str(messages), "-size", str(BODY),
           "-depth", str(depth), "-batch", str(batch), "-quiet"]
    subprocess.run([*cmd[:6], "-n", "200", *cmd[8:]], capture_output=True, check=True)  # warm route and connection
    cpu0 = cpu_seconds(broker_pid)
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    cpu = cpu_seconds(broker_pid) - cpu0
    summary = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")][-1]
    return {"msgs_per_s": summary["rate"], "broker_cpu_us_per_msg": cpu / max(1, summary["sent"]) * 1e6,
            "failed": float(summary["failed"])}


def grpc_phase(c: Any, node: Any, broker_pid: int, topic: str, messages: int, depth: int) -> dict[str, float]:
    from rmq import message, producer

    c.admin("updateTopic", "-t", topic, "-r", "8", "-w", "8")
    body = b"x" * BODY
    with producer(node.endpoint, topic) as p:
        for _ in range(100):
            p.send(message(topic, body))
        if depth == 1:
            cpu0, t0 = cpu_seconds(broker_pid), time.perf_counter()
            for _ in range(messages):
                p.send(message(topic, body))
            elapsed = time.perf_counter() - t0
            return {"msgs_per_s": messages / elapsed,
                    "broker_cpu_us_per_msg": (cpu_seconds(broker_pid) - cpu0) / messages * 1e6, "failed": 0.0}
        out = pipelined_sends(p, lambda: message(topic, body), messages, depth, broker_pid)
        return {k: out[k] for k in ("msgs_per_s", "broker_cpu_us_per_msg", "failed")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="500 messages, one round")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "remoting.json")
    args = ap.parse_args()
    if args.quick:
        args.messages, args.rounds = 500, 1
    rmqgo = go_binary()
    phases = [("go remoting", 1, 1), ("go remoting", 64, 1), ("go remoting", 8, 32),
              ("python gRPC", 1, 1), ("python gRPC", 64, 1)]
    results: dict[str, list[dict[str, float]]] = {}
    with rocketscope_broker("rs-remoting-bench-") as (c, node):
        pid = node.proc.popen.pid
        for rnd in range(args.rounds):
            order = phases if rnd % 2 == 0 else phases[3:] + phases[:3]
            for kind, depth, batch in order:
                topic = f"RB{rnd}_{kind.split()[0]}_{depth}_{batch}"
                n = args.messages if depth > 1 or kind.startswith("go") else max(200, args.messages // 3)
                if kind.startswith("go"):
                    r = go_phase(c, pid, rmqgo, topic, n * (8 if batch > 1 else 1), depth, batch)
                else:
                    r = grpc_phase(c, node, pid, topic, n, depth)
                label = f"{kind}, depth {depth}" + (f", batches of {batch}" if batch > 1 else "")
                results.setdefault(label, []).append(r)
                print(f"round {rnd + 1}: {label}: {r['msgs_per_s']:,.0f} msg/s, broker "
                      f"{r['broker_cpu_us_per_msg']:.0f} µs/msg, failed {r['failed']:.0f}", flush=True)
    rows, summary = [], {}
    for label, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        summary[label] = med
        rows.append([label, f"{med['msgs_per_s']:,.0f}", f"{med['broker_cpu_us_per_msg']:.0f}", f"{med['failed']:.0f}"])
    print(table(["phase (1 KiB, ASYNC_FLUSH)", "msg/s", "broker µs/msg", "failed"], rows))
    write_json({"machine": machine_info(), "messages": args.messages, "rounds": args.rounds, "results": summary,
                "runs": results}, args.out)


if __name__ == "__main__":
    main()
