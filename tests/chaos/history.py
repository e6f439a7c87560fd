"""The run's history: every operation of the workload and of the nemesis, Jepsen-style.

Each event is ``{"t": seconds since the run began, "type": invoke|ok|fail|info, "f": the
operation, "proc": who did it, ...values}``.  ``info`` means the outcome is unknown to the
client (a send that raised may still have been stored), which is how the checker treats it.
Appending to a list is atomic under the GIL, so the workload threads share one history.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class History:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[dict[str, Any]] = []
        # the wall clock at t = 0, so tests/chaos/timeline.py can place the servers' log lines on the history
        self.add("info", "clock", "runner", wall=round(time.time(), 4))

    def now(self) -> float:
        return time.monotonic() - self.t0

    def add(self, type_: str, f: str, proc: str, **values: Any) -> dict[str, Any]:
        event = {"t": round(self.now(), 4), "type": type_, "f": f, "proc": proc, **values}
        self.events.append(event)
        return event

    def of(self, f: str, type_: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e["f"] == f and (type_ is None or e["type"] == type_)]

    def dump(self, path: Path) -> None:
        path.write_text("\n".join(json.dumps(e, sort_keys=True) for e in self.events) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        h = cls()
        h.events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return h
