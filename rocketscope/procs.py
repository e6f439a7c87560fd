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
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
    _reap(proc, timeout)


def _reap(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait up to ``timeout`` for a process sent SIGTERM, then SIGKILL its group (what is left of it too)."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the process group now (the demo's failover), and forget it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    if proc in _children:
        _children.remove(proc)


def stop_all(timeout: float = 10.0) -> None:
    """Stop every child: all but the first together, then the first (the demo's name server, which
    the brokers unregister from as they stop).

    Together, not one after the other: each gets SIGTERM at once and the same ``timeout`` before
    SIGKILL, so their graceful shutdowns (1-4 s for a broker) overlap instead of adding up.
    """
    first, rest = _children[:1], _children[:0:-1]
    for wave in (rest, first):
        for proc in wave:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in wave:
            _reap(proc, max(0.0, deadline - time.monotonic()))
    _children.clear()


def wait_for(cond: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


atexit.register(stop_all)
