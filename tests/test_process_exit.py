"""A server process exits promptly after SIGTERM, measured from outside (rocketscope/fast_exit.py).

Ground truth: the broker's and name server's own log lines ("... stopped", written when their
shutdown is done) and the moment ``waitpid`` returns here.  Before fast_exit.py, a broker exited
0.6-1.3 s after its "stopped" line (CPython's module teardown; 9 runs at load 10-19) and a name
server 1.1-1.2 s; after it, 0.03-0.18 s at the same load.  The bound of 0.5 s separates the two
with room for a loaded CI machine, and every e2e test stops brokers, so a regression shows here
first.
"""

from __future__ import annotations

import datetime as dt
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import LocalCluster, Proc, cluster_with_namesrv
from conftest import failed_call

pytestmark = pytest.mark.e2e

# after the "stopped" line: what the process still does (threading's exit hooks, atexit hooks, flushing)
AFTER_STOPPED_S = 0.5


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path, lambda: failed_call(request)) as c:
        yield c


def _logged_at(log: str, pattern: str) -> float:
    """Wall-clock time of the last log line matching ``pattern`` (rocketscope/logs.py's asctime, local time)."""
    stamps = [m.group(1) for m in re.finditer(r"^(\S+ \S+) INFO .*" + pattern, log, re.M)]
    assert stamps, f"no log line matching {pattern!r}"
    return dt.datetime.strptime(stamps[-1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _sigterm_and_wait(proc: Proc) -> tuple[float, float]:
    """(wall-clock time of the SIGTERM, seconds until the process was gone), with its exit status 0."""
    assert proc.popen is not None
    sent, t0 = time.time(), time.monotonic()
    proc.popen.send_signal(signal.SIGTERM)
    code = proc.popen.wait(15)
    took = time.monotonic() - t0
    assert code == 0, f"{proc.name} exited with {code} after SIGTERM"
    return sent, took


def test_broker_and_name_server_exit_within_half_a_second_of_their_shutdown(cluster: LocalCluster) -> None:
    node = cluster.start_broker("broker-a")
    sent, took = _sigterm_and_wait(node.proc)
    log = node.proc.log()
    stopped = _logged_at(log, r"broker broker-a stopped")
    shutting = _logged_at(log, r"broker broker-a shutting down")
    gone = sent + took
    assert shutting >= sent - 0.01  # the lines are of this stop (ms resolution)
    print(f"broker: SIGTERM -> exit {took:.3f} s, shutdown logged {stopped - shutting:.3f} s, "
          f"exit after 'stopped' {gone - stopped:.3f} s")
    assert gone - stopped < AFTER_STOPPED_S, f"the broker exited {gone - stopped:.3f} s after its 'stopped' line"

    namesrv = cluster.namesrvs[0]
    sent, took = _sigterm_and_wait(namesrv)
    stopped = _logged_at(namesrv.log(), r"name server stopped")
    after = sent + took - stopped
    print(f"name server: SIGTERM -> exit {took:.3f} s, exit after 'stopped' {after:.3f} s")
    assert after < AFTER_STOPPED_S, f"the name server exited {after:.3f} s after its 'stopped' line"


def test_exit_process_keeps_the_exit_hooks_non_daemon_work_and_the_status(tmp_path: Path) -> None:
    """What the fast exit must not lose: an atexit hook, work queued on a thread pool, buffered stdout,
    a logging handler's file, and the status of ``sys.exit``'s argument."""
    log_file = tmp_path / "out.log"
    script = textwrap.dedent(f"""
        import atexit, concurrent.futures, logging, sys, time
        from rocketscope.fast_exit import exit_process
        logging.basicConfig(filename={str(log_file)!r}, level=logging.INFO)
        atexit.register(lambda: print("atexit hook ran"))
        pool = concurrent.futures.ThreadPoolExecutor(1)
        pool.submit(lambda: (time.sleep(0.2), print("queued work ran")))
        logging.getLogger("t").info("logged line")
        print("buffered", end="")
        exit_process(sys.argv[1] if sys.argv[1] == "text" else int(sys.argv[1]))
    """)
    for arg, status in (("0", 0), ("3", 3), ("text", 1)):
        res = subprocess.run([sys.executable, "-c", script, arg], capture_output=True, text=True, timeout=60)
        assert res.returncode == status, res
        assert res.stdout.startswith("buffered") and "queued work ran" in res.stdout, res
        assert "atexit hook ran" in res.stdout, res
        assert "logged line" in log_file.read_text()
        assert ("text" in res.stderr) == (arg == "text"), res
