"""`rocketscope demo` as a user runs it, as a real subprocess: every part comes up, and nothing is left behind.

Two runs (about 2.5 minutes together on 2 cores):
* ``--quick --keep-running`` to the end: name server, three brokers, a leader change, the Spark tables, the
  dashboard answering HTTP 200 (checked from here), then SIGINT (Ctrl-C): every process the demo started
  (recorded PIDs, each leading its own process group, and every descendant seen while it ran) is gone;
* SIGTERM in the middle of the Spark step, when a JVM is running: that is gone too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import wait_until

pytestmark = pytest.mark.e2e

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


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, pgid, start time) of a live process, from /proc/PID/stat (the comm field may hold spaces)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    if fields[0] == "Z":
        return None  # a zombie has exited; only its parent's wait is missing
    return int(fields[1]), int(fields[2]), fields[19]


def descendants(root: int) -> dict[int, str]:
    """Every live descendant of ``root`` (children of children too, e.g. Spark's JVM), PID -> start time."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))):
            table[int(entry.name)] = st
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, start) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = start
                frontier.append(pid)
    return found


def still_alive(pids: dict[int, str]) -> list[int]:
    """Those of ``pids`` still running (the same process: same start time, not a reused PID)."""
    return [pid for pid, start in pids.items() if (st := _stat(pid)) and st[2] == start]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_running(pgids: list[int]) -> list[str]:
    """The processes still running in any of the process groups ``pgids``, as "pid comm (group)".

    Read from /proc rather than ``killpg(pgid, 0)``: that also answers for a group whose last members are zombies,
    a SIGKILLed grandchild (Spark's JVM, Streamlit's server) that has exited and waits for PID 1 to reap it.
    """
    wanted, running = set(pgids), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) and st[1] in wanted:
            running.append(f"{entry.name} {_comm(int(entry.name))} (group {st[1]})")
    return running


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except OSError:
        return 0


@contextlib.contextmanager
def demo_process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The demo as a user starts it; killed (whole tree) if the test fails half-way."""
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN), "demo", *args], stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            for pid in [*descendants(proc.pid), proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait(10)


def wait_for_line(proc: subprocess.Popen[bytes], log: Path, text: str, timeout: float,
                  seen: dict[int, str] | None = None) -> None:
    """Wait until the demo printed ``text``; meanwhile record every descendant ever seen into ``seen``."""
    def check() -> bool:
        if seen is not None:
            for pid, start in descendants(proc.pid).items():
                seen.setdefault(pid, start)
        return text in log.read_text() or proc.poll() is not None
    wait_until(check, timeout=timeout, interval=0.5, what=f"the demo to print {text!r}")
    assert proc.poll() is None, f"the demo exited ({proc.returncode}):\n{log.read_text()[-4000:]}"


@pytest.mark.timeout(480)  # about 140 s, Spark most of it; more when other Spark jobs share the cores
def test_quick_demo_every_part_comes_up_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    work, log = tmp_path / "demo", tmp_path / "demo.out"
    seen: dict[int, str] = {}
    with demo_process(["--quick", "--keep-running", "--data-dir", str(work)], log) as proc:
        wait_for_line(proc, log, "press Ctrl-C", timeout=400, seen=seen)
        out = log.read_text()
        summary = json.loads((work / "demo.json").read_text())
        # every part came up: name server, three brokers, a leader change, Prometheus when installed
        for line in ("name server on", "DLedger group broker-d: 3 nodes", "traffic flowing", "kill -9 of the leader",
                     "new leader", "rejoins as a follower", "Spark tables in", "dashboard: http://127.0.0.1:"):
            assert line in out, f"missing progress line {line!r}:\n{out}"
        assert len(summary["nodes"]) == 3
        assert summary["old_leader"] != summary["new_leader"], "the leader did not change"
        assert all(summary["ids"].values()), summary["ids"]
        # the dashboard answers, here and now (its home page and a page with a real message ID)
        url = summary["dashboard"]
        assert http_status(f"{url}/_stcore/health") == 200
        assert http_status(f"{url}/Trace?msg_id={summary['ids']['normal']}") == 200
        if summary["prometheus"]:
            assert http_status(f"{summary['prometheus']}/-/ready") == 200
        # the Spark tables hold the demo's messages and its failover
        assert set(summary["tables"]) >= {"message_timeline", "replication_latency", "failover_impact",
                                          "e2e_latency"}
        import pandas as pd

        timeline = pd.read_parquet(work / "analytics" / "message_timeline")
        assert summary["ids"]["normal"] in set(timeline["msg_id"])
        assert len(pd.read_parquet(work / "analytics" / "failover_impact")) >= 1
        # "where is my message?": the plain message was stored, committed and reached both groups
        traced = summary["normal_trace"]
        assert traced.get("commit_ms") is not None and len(traced["replicas"]) >= 2, traced
        assert traced["groups"] == ["audit", "billing"], traced

        for pid, start in descendants(proc.pid).items():
            seen.setdefault(pid, start)
        children = summary["pids"]
        assert len(children) >= 5  # name server, three brokers (one restarted), dashboard (+ Prometheus)
        assert all(group_alive(pid) for pid in children if Path(f"/proc/{pid}").exists())
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 130, log.read_text()[-3000:]
    assert "stopped every process" in log.read_text()
    # nothing left: by PID (all descendants ever seen), by process group, and by work directory
    # SIGKILLed processes vanish within moments, not necessarily before the demo's own exit
    wait_until(lambda: not still_alive(seen), timeout=15, what=f"every process of the demo gone: {still_alive(seen)}")
    try:
        wait_until(lambda: not group_running(children), timeout=15, what="every process group of the demo gone")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still running: {group_running(children)}") from None
    assert not processes_mentioning(str(work)), "a process of the demo is still running"


@pytest.mark.long  # ~30-60 s; make test keeps the quick demo's Ctrl-C test, which checks the same process cleanup
def test_sigterm_during_spark_stops_the_jvm_too(tmp_path: Path) -> None:
    work, log = tmp_path / "demo-term", tmp_path / "demo.out"
    seen: dict[int, str] = {}
    with demo_process(["--quick", "--no-dashboard", "--data-dir", str(work)], log) as proc:
        wait_for_line(proc, log, "Spark: rocketscope analyze", timeout=300, seen=seen)

        def jvm_running() -> bool:
            for pid, start in descendants(proc.pid).items():
                seen.setdefault(pid, start)
            return any(_comm(pid) == "java" for pid in seen) or proc.poll() is not None
        wait_until(jvm_running, timeout=120, interval=0.5, what="Spark's JVM")
        if proc.poll() is not None:
            pytest.fail(f"the demo ended before its Spark JVM was seen:\n{log.read_text()[-3000:]}")
        assert len(seen) >= 5, seen
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 130, log.read_text()[-3000:]
    assert "stopped every process" in log.read_text()
    wait_until(lambda: not still_alive(seen), timeout=30, what="every process of the demo gone")
    assert not processes_mentioning(str(work))


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
