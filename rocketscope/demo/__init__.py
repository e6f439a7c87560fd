"""`rocketscope demo` (what `make demo` runs): a replicated cluster, traffic, a failover, Spark and the dashboard.

Steps, each printed with the elapsed time:
1. a name server and a three-node DLedger group on loopback (metrics in PROM mode,
   broker-side trace on), and Prometheus scraping them when it is installed;
2. a producer and two consumer groups (official client), with retries and one
   dead-lettered message;
3. after ``--failover-after`` seconds (about a minute by default), kill -9 of the
   leader, a new leader, and the old one restarted;
4. `rocketscope analyze all --namesrv` (Spark, local mode) over the trace topic and
   RMQ_SYS_HA_EVENTS (the dashboard starts meanwhile);
5. the dashboard, its URL and message IDs worth looking up; then it runs until Ctrl-C.

``--quick`` shortens every wait (seconds, not minutes), checks that each part came up
and stops by itself unless ``--keep-running``; the tests run it that way.  Ctrl-C or
SIGTERM at any point (the Spark step included) stops every child process
(rocketscope.procs: each child leads its own process group; SIGTERM, then SIGKILL).
``--screenshots DIR`` saves every dashboard page as a PNG (docs/screenshots).  The work
directory's demo.json records the URLs, message IDs, child PIDs and the steps' times.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import click

from rocketscope.procs import children, free_port, spawn, stop_all, wait_for

from .cluster import GROUP, DemoCluster
from .workload import GROUPS, TOPIC, Workload, wait_for_traffic


@dataclass(frozen=True)
class DemoOptions:
    quick: bool = False
    failover_after_s: float = 60.0
    dashboard: bool = True
    dashboard_port: int = 0
    data_dir: str = ""
    keep_running: bool | None = None  # None: keep running unless --quick
    rate_per_s: float = 20.0
    screenshots: str = ""  # a directory: PNGs of every dashboard page once it is up (docs/screenshots)


class Progress:
    """One line per step with the elapsed time; the steps also go to demo.json (the tests and docs read them)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.steps: list[tuple[float, str]] = []

    def step(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        self.steps.append((round(elapsed, 1), text))
        click.echo(click.style(f"[{elapsed:6.1f}s] ", fg="cyan") + text)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_demo(options: DemoOptions) -> int:
    work = Path(options.data_dir) if options.data_dir else Path(tempfile.mkdtemp(prefix="rocketscope-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)  # also when started in the background, where SIGINT is ignored
    p = Progress()
    workload: Workload | None = None
    try:
        p.step(f"work directory {work} (configs, logs, stores, analytics)")
        cluster = DemoCluster(work)
        cluster.start_namesrv()
        p.step(f"name server on {cluster.namesrv}")
        cluster.start_group()
        leader = cluster.wait_leader(60)
        p.step(f"DLedger group {GROUP}: 3 nodes ({', '.join(n.endpoint for n in cluster.nodes)}), "
               f"leader {leader.self_id}, term {cluster.term()}")
        if cluster.start_prometheus():
            p.step(f"Prometheus scraping every node: {cluster.prometheus_url}")
        else:
            p.step("Prometheus not installed (apt-get install prometheus): the dashboard scrapes /metrics itself")
        cluster.admin("updateTopic", "-b", leader.admin_addr, "-t", TOPIC, "-r", "4", "-w", "4")
        cluster.admin("updateSubGroup", "-b", leader.admin_addr, "-g", "audit", "-r", "1")
        cluster.admin("updateSubGroup", "-b", leader.admin_addr, "-g", "billing")

        workload = Workload(cluster.endpoints, options.rate_per_s)
        workload.start()
        warmup = 5 if options.quick else options.failover_after_s
        if not wait_for_traffic(workload, 10, 90):
            raise RuntimeError(f"no traffic after 90 s: {workload.summary()} (logs in {work})")
        p.step(f"traffic flowing: {workload.summary()}; failover in {warmup:.0f} s")
        _sleep(warmup, p, workload)

        old = cluster.wait_leader(30)
        old_term = cluster.term()
        p.step(f"kill -9 of the leader {old.self_id} ({old.endpoint})")
        workload.failover_at = time.time()
        killed_at = time.monotonic()
        cluster.kill9(old)
        new = cluster.wait_leader(60, exclude=old)
        failover_s = time.monotonic() - killed_at
        p.step(f"new leader {new.self_id} after {failover_s:.2f} s (term {old_term} -> {cluster.term()})")
        # the traffic after the failover goes on while the old leader restarts (a broker's start-up is
        # seconds of imports): the wait below counts from the restart, not from when it is listening
        cluster.start_node(old, wait=False)
        _sleep(5 if options.quick else 20, p, workload)
        cluster.wait_node(old)
        p.step(f"restarted {old.self_id}; it rejoins as a follower")
        workload.stop()
        p.step(f"traffic stopped: {workload.summary()}")

        analytics = work / "analytics"
        url = ""
        if options.dashboard:
            # started now and waited for after Spark: its start-up (Python imports, a few CPU seconds) runs
            # while Spark's driver is busy on one core; it reads the tables per page view, not at start
            port = options.dashboard_port or free_port()
            args = ["dashboard", "--namesrv", cluster.namesrv, "--analytics", str(analytics), "--port", str(port)]
            if cluster.prometheus_url:
                args += ["--prometheus", cluster.prometheus_url]
            spawn(args, work / "dashboard.log")
            url = f"http://127.0.0.1:{port}"
        p.step("Spark: rocketscope analyze all --namesrv (local mode, reads the trace topic and RMQ_SYS_HA_EVENTS)")
        # its own process group like every other child, so Ctrl-C here also stops Spark's JVM
        spark = spawn(["analyze", "all", "--namesrv", cluster.namesrv, "--output", str(analytics),
                       "--master", "local[2]", "--quick-start"], work / "analyze.log")
        code = spark.wait(900)
        if code != 0:
            tail = (work / "analyze.log").read_text(errors="replace").strip()[-1500:]
            raise RuntimeError(f"the Spark analysis failed ({code}): {tail}")
        tables = sorted(d.name for d in analytics.iterdir() if d.is_dir())
        p.step(f"Spark tables in {analytics}: {', '.join(tables)}")

        if url:
            wait_for(lambda: _http_ok(f"{url}/_stcore/health"), 90, "the dashboard")
            p.step(f"dashboard: {url}")
        s = workload.stats
        traced = _trace_summary(cluster.namesrv, s.normal_id)
        p.step(f"trace of {s.normal_id}: {traced.get('text', 'not found')}")
        click.echo("\nMessage IDs worth looking up (Trace page, or rocketscope admin queryMsgTraceById -i ID):")
        picks = (("a plain message", s.normal_id), ("retried once by audit", s.retried_id),
                 ("dead-lettered by audit", s.poison_id), ("sent after the failover", s.after_failover_id))
        for label, msg_id in picks:
            if msg_id:
                click.echo(f"  {label:28} {msg_id}" + (f"   {url}/Trace?msg_id={msg_id}" if url else ""))
        ids = {"normal": s.normal_id, "retried": s.retried_id, "dlq": s.poison_id,
               "after_failover": s.after_failover_id}
        if options.screenshots and url:
            from rocketscope.dashboards.screenshots import take

            shots = take(url, ids, Path(options.screenshots))
            p.step(f"screenshots of {len(shots)} pages in {options.screenshots}")
        # every child is the leader of its own process group (pid == pgid): the tests check both are gone
        summary = {"work": str(work), "namesrv": cluster.namesrv, "dashboard": url,
                   "prometheus": cluster.prometheus_url, "tables": tables, "old_leader": old.self_id,
                   "new_leader": new.self_id,
                   "failover_s": round(failover_s, 2), "nodes": [n.endpoint for n in cluster.nodes],
                   "groups": list(GROUPS), "pids": [c.pid for c in children()], "normal_trace": traced,
                   "traffic": workload.summary(), "redelivered": dict(s.redelivered),
                   "redelivered_id": s.redelivered_id, "ids": ids, "steps": p.steps}
        (work / "demo.json").write_text(json.dumps(summary, indent=2))
        keep = options.keep_running if options.keep_running is not None else not options.quick
        if keep:
            p.step("running; press Ctrl-C to stop everything")
            while True:
                time.sleep(1)
        return 0
    except KeyboardInterrupt:
        click.echo("\ninterrupted")
        return 130
    except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
        click.echo(click.style(f"demo failed: {exc}", fg="red"), err=True)
        return 1
    finally:
        if workload is not None:
            workload.stop_event.set()
        stop_all()
        p.step("stopped every process")


def _sleep(seconds: float, p: Progress, workload: Workload) -> None:
    """Wait, printing the traffic every 15 s so a long wait shows progress."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(15.0, left))
        if deadline - time.monotonic() > 1:
            p.step(f"... {workload.summary()}")


def _trace_summary(namesrv: str, msg_id: str) -> dict[str, object]:
    """What "where is my message?" answers for one message: its replicas, commit and consumer groups."""
    import asyncio

    from rocketscope.trace.lookup import TraceLookup, TraceLookupError

    try:
        doc = asyncio.run(TraceLookup(namesrv).lookup(msg_id)).to_dict()
    except TraceLookupError as exc:
        return {"text": str(exc)}
    rep = doc.get("replication") or {}
    replicas = [r["replica"] for r in rep.get("replicas", [])]
    groups = sorted(g["group"] for g in doc.get("groups", []))
    commit_ms = rep.get("commit_latency_ms")
    text = (f"stored on {rep.get('broker_group', '?')}, acked by replicas {', '.join(replicas) or 'none'}, "
            f"committed after {commit_ms} ms, delivered to {', '.join(groups) or 'no group'}")
    return {"text": text, "replicas": replicas, "commit_ms": commit_ms, "groups": groups}


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
