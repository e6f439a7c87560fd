"""The ``hardstate`` file both Raft logs keep (broker/dledger/log_store.py, broker/controller/raft_log.py).

JSON ``{"term": T, "vote": V, "commit": C}``, written aside, fsynced and renamed over, each
time term or vote changes: those must be durable before a message leaves (a vote is a
promise).  The commit index is only a hint (it is re-learnt from the leader, docs/RAFT.md;
it spares a restarted member some re-applying), so a commit-only change goes to a sibling
file, ``hardstate.commit`` (``{"commit": C}``), at most once a second and never fsynced.

Why two files: the commit-only write used to rename unsynced bytes over ``hardstate``
itself, and a power cut can leave such a file empty on file systems that do not flush a
file renamed over another (ext4 does); term and vote were then forgotten and a member could
vote twice in a term.  The simulator's dledger family found it (tests/sim/disk.py models
that rename strictly; seed 330).  Loading takes the larger commit of the two files and
ignores an unreadable ``hardstate.commit``; a ``hardstate`` written before the split (commit
inside, no sibling) loads as it did.
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
        self.commit_path = self.path.with_name(self.path.name + ".commit")
        self.now = now
        self.hard_state = HardState()
        self._commit_written = -1e18

    def load(self) -> tuple[int, str | None, int] | None:
        """(term, vote, commit) as stored, or None when there is no readable file (a new member)."""
        try:
            d = json.loads(self.path.read_text())
            term, vote, commit = int(d["term"]), d.get("vote"), int(d.get("commit", 0))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        try:
            commit = max(commit, int(json.loads(self.commit_path.read_text())["commit"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no lazy commit written, or one a crash cut short: the hint in hardstate stands
        return term, vote, commit

    def save(self, hs: HardState, sync: bool) -> None:
        """Persist ``hs``: term and vote at once (fsynced when ``sync``), a commit-only change lazily."""
        old = self.hard_state
        now = self.now()
        if (hs.term, hs.vote) != (old.term, old.vote):
            self._replace(self.path, {"term": hs.term, "vote": hs.vote, "commit": hs.commit}, sync)
        elif now - self._commit_written >= COMMIT_WRITE_INTERVAL_S:
            self._replace(self.commit_path, {"commit": hs.commit}, False)
        else:
            self.hard_state = hs
            return
        self._commit_written = now
        self.hard_state = hs

    @staticmethod
    def _replace(path: Path, doc: dict[str, object], sync: bool) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        with open(tmp, "w") as fh:
            json.dump(doc, fh)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
