"""Timer benchmark (issue 21): a million pending delayed messages, RocketScope next to Apache RocketMQ 5.3.3.

    .venv/bin/python bench/timer_bench.py                      # 1,000,000 pending, both brokers
    .venv/bin/python bench/timer_bench.py --pending 100000 --no-apache

For each broker, in the same run:

* **RSS** of the broker process (VmRSS, RssAnon, RssFile from /proc) with nothing pending
  and with ``--pending`` messages pending (due in 2-3 hours), so "flat in the number
  pending" is read off the anonymous memory;
* **restart time to serving**: SIGTERM, start again, until the name server routes the
  broker again (and, for RocketScope, until the timer's writer is ready);
* **delivery lateness** at the due time, with all of them still pending: ``--probe``
  messages due 8-18 s after they are sent, received by the official Python client
  (SimpleConsumer, long polling); lateness = receive time − due time, so it includes the
  consumer's own poll; each must arrive once.

How the pending messages are written (say which in any report):

* Apache: over the remoting protocol by Apache's Go client (``--apache-loader go``, the default:
  ``rmqgo timerload``, peers/go/timerload.go, 512 async sends in flight, a refused send retried
  after a pause) or by tests/timer_load.py (``--apache-loader python``: pipelined SEND_MESSAGE_V2,
  about 600 a second into Apache here); both set RocketMQ 5's TIMER_DELIVER_MS property, the
  property Apache's broker reads.
* RocketScope, ``--load store`` (default): through the broker's own write path in a separate
  process while the broker is stopped — Broker.timer.wrap then MessageStore.append_batch,
  the same code a send runs after decoding — because the Python broker takes about
  1,000–3,000 remoting sends a second on this 2-core machine (a million would take 10+
  minutes).  The broker's first start after that rebuilds the timer index from the timer
  topic (reported as ``index_build_s``).  ``--load remoting`` uses the same loader as Apache.

JSON goes to bench/results/timer.json (with the load average before each part).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "peers"))

from cluster import LocalCluster, wait_until  # noqa: E402
from timer_load import send_delayed  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TOPIC = "TopicTimerBench"
PROBE = "TopicTimerProbe"
MAX_DELAY_S = 4 * 3600  # timerMaxDelaySec of both brokers


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def rss(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("RssAnon:", "RssFile:", "VmRSS:")):
            k, v = line.split(":")
            out[k + "_MiB"] = round(int(v.split()[0]) / 1024, 1)
    return out


def log(msg: str) -> None:
    print(f"[timer-bench {time.strftime('%H:%M:%S')} load {load_avg()}] {msg}", flush=True)


def due_far(i: int, start_ms: int) -> int:
    return start_ms + 2 * 3600_000 + (i % 3600) * 1000  # 2-3 h ahead: pending for the whole run


def probe_lateness(send_addr: str, endpoint: str, n: int) -> dict[str, Any]:
    """``n`` messages due 8-18 s after sending; lateness of their first receipt by the official client."""
    from test_e2e_timer import collect

    t0 = time.time()
    due_ms = {i: int((t0 + 8 + 10 * i / n) * 1000) for i in range(n)}
    tag = f"p{int(t0)}-"
    res = send_delayed(send_addr, PROBE, n, lambda i: due_ms[i], key_prefix=tag)
    due = {f"{tag}{i}": due_ms[i] / 1000 for i in res["ids"]}
    # 5 s long polls: Apache's proxy refuses shorter ones (docs/COMPATIBILITY.md row 40); a poll returns as soon
    # as a message is there, so its length adds no lateness
    got = collect(endpoint, f"GroupTimerProbe{int(t0)}", PROBE, set(due), timeout=120, await_s=5)
    late = sorted(min(r[0] for r in got[k]) - due[k] for k in due if k in got)
    twice = sum(1 for k, v in got.items() if sum(1 for r in v if r[1] == 1) > 1)
    early = sum(1 for x in late if x < 0)

    def pct(q: float) -> float | None:
        return round(late[min(len(late) - 1, int(q * len(late)))], 3) if late else None

    return {"probe_sent": res["sent"], "received": len(late), "missing": len(due) - len(late), "twice": twice,
            "early": early, "late_p50_s": pct(0.5), "late_p99_s": pct(0.99), "late_max_s": pct(1.0)}


# ------------------------------------------------------------------------------------- RocketScope
def preload_store(conf: Path, n: int, start_ms: int, batch: int = 2000) -> float:
    """Write ``n`` delayed messages through Broker.timer.wrap + MessageStore.append_batch (broker stopped)."""
    from rocketscope.broker.broker import Broker
    from rocketscope.broker.broker_config import load_broker_config
    from rocketscope.broker.store.record import StoredMessage
    from rocketscope.config import read_properties

    b = Broker(load_broker_config(read_properties(conf)))

    async def go() -> float:
        await b.store.start()
        b.topics.create_if_absent(TOPIC, 4)
        b.topics.create_if_absent("rmq_sys_wheel_timer", 1, system=True)
        started = time.monotonic()
        for first in range(0, n, batch):
            msgs = []
            for i in range(first, min(n, first + batch)):
                m = StoredMessage(topic=TOPIC, queue_id=i % 4, body=f"timer-{i}".encode(),
                                  properties={"UNIQ_KEY": f"PRELOAD{i:09d}", "WAIT": "true"},
                                  born_timestamp=int(time.time() * 1000), born_host="127.0.0.1:1")
                b.timer.wrap(m, due_far(i, start_ms))
                msgs.append(m)
            b.store.append_batch(msgs)
            b.store.dispatch_confirmed()
            if (first // batch) % 50 == 0:
                log(f"preloaded {first + len(msgs)} of {n}")
        secs = time.monotonic() - started
        await b.store.shutdown()
        return secs

    return asyncio.run(go())


def broker_status(addr: str) -> dict[str, str]:
    import grpc

    from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2

    with grpc.insecure_channel(addr) as ch:
        return dict(admin_pb2_grpc.BrokerAdminStub(ch).BrokerStatus(common_pb2.Empty(), timeout=10).table)


def over_max(addr: str, max_delay_s: int) -> str:
    """The answer to a remoting send due 60 s beyond timerMaxDelaySec: "<code>: <remark>"."""
    now = int(time.time() * 1000)
    res = send_delayed(addr, PROBE, 1, lambda i: now + (max_delay_s + 60) * 1000)
    return res["errors"][0] if res["errors"] else "accepted"


def run_rocketscope(root: Path, n: int, probe: int, load: str) -> dict[str, Any]:
    out: dict[str, Any] = {"broker": "RocketScope", "load_mode": load, "pending": n}
    root.mkdir(parents=True, exist_ok=True)
    c = LocalCluster(root)
    try:
        c.start_namesrv()
        conf = {"timerMaxDelaySec": MAX_DELAY_S, "mappedFileSizeCommitLog": 256 << 20, "maxIndexNum": 4_000_000,
                "maxHashSlotNum": 1_000_000, "mappedFileSizeConsumeQueue": 20 * 300_000}
        node = c.start_broker("broker-tb", **conf)
        for t in (TOPIC, PROBE):
            c.admin("updateTopic", "-c", "DefaultCluster", "-t", t, "-r", "4", "-w", "4")
        time.sleep(3)
        out["rss_0_pending"] = rss(node.proc.popen.pid)
        start_ms = int(time.time() * 1000)
        out["load_avg_before_load"] = load_avg()
        if load == "store":
            node.proc.stop()
            secs = preload_store(node.conf, n, start_ms)
            out["load_s"], out["load_rate"] = round(secs, 1), round(n / secs)
            log(f"preloaded {n} in {secs:.1f} s; starting the broker (fresh timer index: rebuilt from the topic)")
            t = time.monotonic()
            c.start_broker("broker-tb")
            out["first_start_to_serving_s"] = round(time.monotonic() - t, 2)
            wait_until(lambda: int(broker_status(node.admin_addr).get("timerPending", "0")) >= n
                       and broker_status(node.admin_addr)["timerOffsetBehind"] == "0", timeout=1800, interval=1,
                       what="the timer index rebuilt")
            out["index_build_s"] = round(time.monotonic() - t, 2)
        else:
            res = send_delayed(node.admin_addr, TOPIC, n, lambda i: due_far(i, start_ms), window=256)
            out["load_s"], out["load_rate"], out["load_failed"] = res["seconds"], res["rate"], res["failed"]
        log(f"{n} pending: {broker_status(node.admin_addr).get('timerPending')}")
        time.sleep(5)
        out["rss_pending"] = rss(node.proc.popen.pid)
        out["timer_log_bytes"] = int(broker_status(node.admin_addr).get("timerLogBytes", "0"))
        out["load_avg_before_restart"] = load_avg()
        node.proc.stop(timeout=60)
        t = time.monotonic()
        c.start_broker("broker-tb")
        out["restart_to_serving_s"] = round(time.monotonic() - t, 2)
        wait_until(lambda: broker_status(node.admin_addr).get("timerWriterReady") == "True", timeout=600,
                   interval=0.1, what="the timer writer ready")
        out["restart_to_timer_ready_s"] = round(time.monotonic() - t, 2)
        time.sleep(3)
        out["rss_after_restart"] = rss(node.proc.popen.pid)
        out["pending_after_restart"] = int(broker_status(node.admin_addr).get("timerPending", "0"))
        out["load_avg_before_probe"] = load_avg()
        out.update(probe_lateness(node.admin_addr, node.endpoint, probe))
        out["load_avg_after_probe"] = load_avg()
        out["over_timerMaxDelaySec"] = over_max(node.admin_addr, MAX_DELAY_S)
    finally:
        c.stop()
    return out


# ------------------------------------------------------------------------------------- Apache
def go_timer_load(rmqgo: Path, namesrv: str, n: int, start_ms: int) -> dict[str, Any]:
    """Load ``n`` delayed messages (due_far's times) with Apache's Go client, async sends (peers/go/timerload.go)."""
    cmd = [str(rmqgo), "timerload", "-n", namesrv, "-t", TOPIC, "-c", str(n), "-start-ms", str(start_ms),
           "-window", "512"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, stdin=subprocess.DEVNULL)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"rmqgo timerload exited {proc.returncode}: {proc.stderr[-2000:]}")
    res: dict[str, Any] = json.loads(lines[-1])
    res["errors"] = res.get("errors") or []
    return res


def run_apache(root: Path, n: int, probe: int, loader: str = "go", rmqgo: Path | None = None) -> dict[str, Any]:
    import reference_cluster as rc

    why = rc.missing()
    if why:
        return {"broker": "Apache RocketMQ 5.3.3", "skipped": why}
    rmqgo = rmqgo or rc.CACHE / "bin" / "rmqgo"
    out: dict[str, Any] = {"broker": "Apache RocketMQ 5.3.3", "load_mode": "remoting", "pending": n}
    cl = rc.ReferenceCluster(root, heap="1g", broker_conf={"timerMaxDelaySec": MAX_DELAY_S})
    cl.start(timeout=600)  # three cold JVMs: minutes on this loaded 2-core machine
    try:
        for t in (TOPIC, PROBE):
            cl.create_topic(t, "DELAY")
        time.sleep(3)
        out["rss_0_pending"] = rss(cl.procs["broker"].pid)
        start_ms = int(time.time() * 1000)
        out["load_avg_before_load"] = load_avg()
        if loader == "go":
            res = go_timer_load(rmqgo, cl.namesrv_addr, n, start_ms)
            out["load_mode"] = "remoting, Apache's Go client (rmqgo timerload)"
            out["load_retried"] = res["retried"]
        else:
            res = send_delayed(cl.broker_addr, TOPIC, n, lambda i: due_far(i, start_ms), window=256)
        out["load_s"], out["load_rate"] = round(res["seconds"], 1), round(res["rate"])
        out["load_failed"] = res["failed"]
        out["load_avg_after_load"] = load_avg()
        if res["errors"]:
            out["load_errors"] = res["errors"]
        log(f"Apache: {res['sent']} pending sent in {res['seconds']:.1f} s")
        time.sleep(5)
        out["rss_pending"] = rss(cl.procs["broker"].pid)
        out["load_avg_before_restart"] = load_avg()
        proc = cl.procs["broker"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        t = time.monotonic()
        cl._launch("broker", ["-c", str(cl.root / "broker.conf")], heap=cl.heap, detach=False,
                   extra=[f"-XX:MaxDirectMemorySize={cl.heap}"])
        # gone from the route once it stopped; serving again when the name server routes it
        rc.wait_until(cl._broker_routed, 600, "the restarted broker in the route", cl._dead)
        out["restart_to_serving_s"] = round(time.monotonic() - t, 2)
        time.sleep(3)
        out["rss_after_restart"] = rss(cl.procs["broker"].pid)
        out["load_avg_before_probe"] = load_avg()
        try:
            out.update(probe_lateness(cl.broker_addr, cl.endpoint, probe))
        except Exception as exc:  # the proxy timing out under load: keep the other figures
            out["probe_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        out["load_avg_after_probe"] = load_avg()
        out["over_timerMaxDelaySec"] = over_max(cl.broker_addr, MAX_DELAY_S)
    finally:
        cl.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--probe", type=int, default=300)
    ap.add_argument("--load", choices=("store", "remoting"), default="store")
    ap.add_argument("--apache-loader", choices=("go", "python"), default="go",
                    help="Apache's pending messages: rmqgo timerload (async sends) or tests/timer_load.py")
    ap.add_argument("--rmqgo", type=Path, default=None, help="the rmqgo binary (default: the peers cache's)")
    ap.add_argument("--no-apache", action="store_true")
    ap.add_argument("--no-rocketscope", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS / "timer.json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="timer-bench-") as tmp:
        if not args.no_rocketscope:
            log("RocketScope")
            rows.append(run_rocketscope(Path(tmp) / "rs", args.pending, args.probe, args.load))
            print(json.dumps(rows[-1], indent=1), flush=True)
        if not args.no_apache:
            log("Apache RocketMQ")
            try:
                rows.append(run_apache(Path(tmp) / "apache", args.pending, args.probe, args.apache_loader, args.rmqgo))
            except Exception as exc:  # e.g. the proxy did not start in time on a loaded machine: keep the rest
                rows.append({"broker": "Apache RocketMQ 5.3.3", "error": f"{type(exc).__name__}: {exc}"})
            print(json.dumps(rows[-1], indent=1), flush=True)
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
              "command": " ".join(sys.argv), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    log(f"written {args.out}")


if __name__ == "__main__":
    main()
