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
    the number of failed sends, and the client's own ceiling (:func:`client_ceiling`)."""
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
    return {"msgs_per_s": messages / elapsed, "broker_cpu_us_per_msg": cpu / messages * 1e6,
            "failed": float(errors[0]), **client_ceiling(time.process_time() - client0, messages)}


def client_ceiling(client_cpu_s: float, messages: int) -> dict[str, float]:
    """This (client) process's CPU per message and the send rate that caps: the official Python
    client runs under one GIL, so one process sends at most 1 s / its CPU per message."""
    client_us = client_cpu_s / messages * 1e6
    return {"client_cpu_us_per_msg": client_us, "client_ceiling_msgs_per_s": 1e6 / client_us if client_us else 0.0}


def wait_quiet(pids: list[int], window_s: float = 0.3, busy_share: float = 0.1, timeout_s: float = 30.0) -> float:
    """Wait until every process in ``pids`` has used under ``busy_share`` of a core for two windows in a row.

    A broker keeps working after the last ack of a run (consume-queue and index flushes, the
    broker-side trace records' 0.2 s flush, closing the clients' streams).  Without this wait
    that work lands in the *next* run on the same broker, and a run sharing the machine with
    another broker's tail is slowed.  Returns the seconds waited."""
    t0 = time.perf_counter()
    quiet = 0
    last = [cpu_seconds(p) for p in pids]
    while quiet < 2 and time.perf_counter() - t0 < timeout_s:
        time.sleep(window_s)
        now = [cpu_seconds(p) for p in pids]
        busy = max(b - a for a, b in zip(last, now, strict=True)) / window_s
        quiet = quiet + 1 if busy < busy_share else 0
        last = now
    return time.perf_counter() - t0
