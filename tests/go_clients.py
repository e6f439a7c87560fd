"""Apache's Go client v2 (remoting protocol) as a test driver: tests/clients/go, built once into the cache."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from conftest import missing_install

GO_DIR = Path(__file__).parent / "clients" / "go"


@cache
def rmqgo() -> str:
    """Path of the built rmqgo; without Go, a failure under CI or root, else a skip saying why."""
    res = subprocess.run(["bash", str(GO_DIR / "build.sh")], capture_output=True, text=True, timeout=900)
    if res.returncode == 3:  # Go is not installed
        missing_install(res.stderr.strip() + " (make go-clients)")
    if res.returncode != 0:
        raise AssertionError(f"building the Go clients failed:\n{res.stderr[-4000:]}")
    return res.stdout.strip().splitlines()[-1]


def run_go(*args: str, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Run ``rmqgo ARGS``; its JSON lines (every outcome is one) as dicts."""
    res = subprocess.run([rmqgo(), *args], capture_output=True, text=True, timeout=timeout)
    events = []
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    if res.returncode != 0 and not events:
        raise AssertionError(f"rmqgo {' '.join(args)} failed ({res.returncode}): {res.stderr[-3000:]}")
    return events


def summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e.get("event") == "summary")
