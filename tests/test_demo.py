"""`rocketscope demo` as a user runs it: every part comes up, and nothing is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cluster import wait_until

BIN = Path(sys.executable).parent / "rocketscope"


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line mentions ``text`` (every child of the demo names its work directory)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


def test_quick_demo_runs_every_part_and_stops_everything(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    res = subprocess.run([str(BIN), "demo", "--quick", "--exit", "--data-dir", str(work)], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    summary = json.loads((work / "demo.json").read_text())
    assert summary["old_leader"] != summary["new_leader"], "the leader did not change"
    assert set(summary["tables"]) >= {"message_timeline", "replication_latency", "failover_impact", "e2e_latency"}
    assert summary["dashboard"].startswith("http://127.0.0.1:")
    assert all(summary["ids"].values()), summary["ids"]
    # "where is my message?": the plain message's trace has both replicas, the commit and both groups
    traced = summary["normal_trace"]
    assert len(traced["replicas"]) == 2 and traced["commit_ms"] is not None, traced
    assert traced["groups"] == ["audit", "billing"], traced
    # the Spark tables hold the demo's messages, and its failover
    import pandas as pd

    timeline = pd.read_parquet(work / "analytics" / "message_timeline")
    assert summary["ids"]["normal"] in set(timeline["msg_id"])
    assert len(pd.read_parquet(work / "analytics" / "failover_impact")) >= 1
    for line in ("name server on", "DLedger group broker-d", "kill -9 of the leader", "new leader", "dashboard:",
                 "stopped every process"):
        assert line in res.stdout, f"missing progress line {line!r}:\n{res.stdout}"
    # nothing left: neither the recorded children nor anything else started for this work directory
    alive = [pid for pid in summary["pids"] if Path(f"/proc/{pid}").exists()]
    assert not alive, f"processes left behind: {alive}"
    assert not processes_mentioning(str(work)), "a process of the demo is still running"


def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    work = tmp_path / "demo-int"
    log = tmp_path / "demo.out"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN), "demo", "--failover-after", "600", "--data-dir", str(work)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "traffic flowing" in log.read_text() or proc.poll() is not None, timeout=180,
                   what="the demo's traffic")
        assert proc.poll() is None, log.read_text()
        assert len(processes_mentioning(str(work))) >= 4  # name server, three brokers (and Prometheus)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stopped every process" in log.read_text()
    wait_until(lambda: not processes_mentioning(str(work)), timeout=30, what="every demo process gone")
