"""The store checkpoint: how far consume queues and indexes are known to be durable.

Recovery re-dispatches the commit log from ``dispatched`` on; everything before it is
trusted.  Written with write-then-rename, so a crash leaves the old or the new one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Checkpoint:
    dispatched: int = 0
    commitlog_synced: int = 0
    timestamp: int = 0

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        try:
            data = json.loads(Path(path).read_text())
            return cls(int(data.get("dispatched", 0)), int(data.get("commitlog_synced", 0)),
                       int(data.get("timestamp", 0)))
        except (OSError, ValueError, TypeError):
            return cls()

    def save(self, path: Path) -> None:
        path = Path(path)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(asdict(self), fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
