"""The ``hardstate`` file both Raft logs keep (broker/dledger/log_store.py, broker/controller/raft_log.py).

JSON ``{"term": T, "vote": V, "commit": C}``, replaced atomically (written aside, renamed over).
Only term and vote must be durable before a message leaves (a vote is a promise); the
commit index is re-learnt from the leader (docs/RAFT.md), so a commit-only change is
written at most once a second and never fsynced — it only spares a restarted member some
re-applying.  (Known risk, docs/RAFT.md: that unsynced file is renamed over the synced one;
ext4 flushes a file renamed over another, other file systems may leave it empty after a
power cut, forgetting term and vote.  tests/sim/disk.py models that strictly.)
Both logs wrote exactly this format before it moved here, so existing files load.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from .messages import HardState

COMMIT_WRITE_INTERVAL_S = 1.0


class HardStateFile:
    def __init__(self, path: Path, now: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.now = now
        self.hard_state = HardState()
        self._commit_written = -1e18

    def load(self) -> tuple[int, str | None, int] | None:
        """(term, vote, commit) as stored, or None when there is no readable file (a new member)."""
        try:
            d = json.loads(self.path.read_text())
            return int(d["term"]), d.get("vote"), int(d.get("commit", 0))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, hs: HardState, sync: bool) -> None:
        """Persist ``hs``: fsynced when ``sync`` and term or vote changed; commit-only changes lazily."""
        old = self.hard_state
        now = self.now()
        if (hs.term, hs.vote) == (old.term, old.vote) and now - self._commit_written < COMMIT_WRITE_INTERVAL_S:
            self.hard_state = hs
            return
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump({"term": hs.term, "vote": hs.vote, "commit": hs.commit}, fh)
            if sync and (hs.term, hs.vote) != (old.term, old.vote):
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        self._commit_written = now
        self.hard_state = hs
