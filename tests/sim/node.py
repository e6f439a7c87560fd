"""A simulated server: a RaftNode plus storage with a durable part and an unsynced part.

``live`` is what the running process sees (the page cache): every Ready is written there
at once.  ``durable`` only gets a Ready when the node syncs it, and only then may the
Ready's messages leave, as the Ready contract says.  A crash between the write and the
sync loses the unsynced Ready (or keeps it, as a lucky OS flush would): both are legal,
since nobody has been told about it.
"""

from __future__ import annotations

from rocketscope.broker.raft import MemoryStorage, RaftConfig, RaftNode, Ready


class SimNode:
    def __init__(self, config: RaftConfig) -> None:
        self.id = config.node_id
        self.config = config
        self.durable = MemoryStorage()
        self.live = self.durable
        self.raft: RaftNode | None = None
        self.pending: Ready | None = None
        self.applied = 0
        self.up = False
        self.lose_on_restart = False
        self.starts = 0
        self.paused_until = 0  # SIGSTOP: no ticks, no processing, messages wait

    def start(self, rng_seed: int) -> None:
        self.live = self.durable.copy()
        self.raft = RaftNode(self.config, self.live, self.live.hard_state, rng_seed)
        self.pending = None
        self.applied = 0
        self.up = True
        self.starts += 1

    def crash(self, lose_unsynced: bool) -> None:
        self.up = False
        self.paused_until = 0
        self.raft = None
        self.lose_on_restart = lose_unsynced

    def restart(self, rng_seed: int) -> bool:
        """Start again from disk; returns True when an unsynced Ready was lost."""
        lost = False
        if self.pending is not None:
            if self.lose_on_restart:
                lost = True
            else:
                self.durable.save(self.pending.hard_state, self.pending.entries)
        self.start(rng_seed)
        return lost

    def write(self) -> Ready:
        assert self.raft is not None
        rd = self.raft.ready()
        self.live.save(rd.hard_state, rd.entries)
        self.pending = rd
        return rd

    def sync(self, lazy_commit: bool) -> Ready:
        """fsync the pending Ready; a commit-only hard state may stay unsynced (``lazy_commit``)."""
        rd = self.pending
        assert rd is not None
        self.pending = None
        hs = rd.hard_state if (rd.must_sync or not lazy_commit) else None
        self.durable.save(hs, rd.entries)
        return rd
