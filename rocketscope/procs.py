"""Child processes of the demo: started on free loopback ports, always stopped.

Every child runs in its own process group; stopping sends SIGTERM, waits, then SIGKILLs
the group, and an atexit hook does the same for anything left, so Ctrl-C never leaves
a process behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rocketscope.ports import free_port, port_open  # noqa: F401 - re-exported for the demo

_children: list[subprocess.Popen[bytes]] = []




def spawn(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``rocketscope <args>`` in its own process group, output appended to ``log_path``."""
    return spawn_exe([str(Path(sys.executable).parent / "rocketscope"), *args], log_path)


def spawn_exe(argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Any program in its own process group (so stopping it stops its children too), tracked for stop_all."""
    with open(log_path, "ab") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    _children.append(proc)
    return proc


def children() -> list[subprocess.Popen[bytes]]:
    """The processes started and not yet stopped (the demo's self-check reads their PIDs)."""
    return list(_children)


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM the process group, wait, SIGKILL what is left (also children of a leader that already exited)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        except ProcessLookupError:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the process group now (the demo's failover), and forget it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    if proc in _children:
        _children.remove(proc)


def stop_all() -> None:
    for proc in reversed(_children):
        stop(proc)
    _children.clear()


def wait_for(cond: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


atexit.register(stop_all)
