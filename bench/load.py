"""Shared load loop of the broker benchmarks: sends with a fixed number in flight, timed, with the broker's CPU.

Kept free of side effects at import (no signal handlers, no atexit), so any benchmark script can use it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all threads) from /proc: contention on a shared machine changes
    throughput a lot, the broker's CPU per message much less."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pipelined_sends(producer: Any, make_message: Callable[[], Any], messages: int, depth: int,
                    broker_pid: int, timeout_s: float = 600.0) -> dict[str, float]:
    """``messages`` send_async calls with at most ``depth`` in flight; msgs/s, broker CPU per message,
    the number of failed sends, and this (client) process's CPU per message with the rate it caps:
    the official Python client runs under one GIL, so 1 s / its CPU per message is the most one
    client process can send however fast the broker is."""
    sem, done = threading.Semaphore(depth), threading.Event()
    count, errors = [0], [0]

    def finished(future: Any) -> None:
        if future.exception() is not None:
            errors[0] += 1
        sem.release()
        count[0] += 1
        if count[0] == messages:
            done.set()

    cpu0, client0, t0 = cpu_seconds(broker_pid), time.process_time(), time.perf_counter()
    for _ in range(messages):
        sem.acquire()
        producer.send_async(make_message()).add_done_callback(finished)
    if not done.wait(timeout_s):
        raise RuntimeError(f"sends did not finish in {timeout_s:.0f} s")
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(broker_pid) - cpu0
    client_us = (time.process_time() - client0) / messages * 1e6
    return {"msgs_per_s": messages / elapsed, "broker_cpu_us_per_msg": cpu / messages * 1e6,
            "failed": float(errors[0]), "client_cpu_us_per_msg": client_us,
            "client_ceiling_msgs_per_s": 1e6 / client_us if client_us else 0.0}
