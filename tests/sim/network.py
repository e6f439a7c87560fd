"""A simulated network: every fault is drawn from the simulation's single seeded RNG.

Messages are queued with a delivery tick; delays reorder them, duplicates deliver the
same message twice, partitions (a set of blocked directed pairs, so asymmetric ones are
possible) are checked both when a message is sent and when it would be delivered.
"""

from __future__ import annotations

import heapq
import random

from rocketscope.broker.raft import Message


class Network:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._heap: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.blocked: set[tuple[str, str]] = set()
        self.drop_p = 0.0
        self.dup_p = 0.0
        self.delay_p = 0.0
        self.max_delay = 1
        self.reorder = False
        self.sent = 0
        self.dropped = 0
        self.delivered = 0
        self.now = 0  # the scenario's tick; nodes' drivers send through this object (their Transport)

    def send(self, m: Message, now: int | None = None) -> None:
        """Queue ``m`` (``now`` defaults to the simulation time the scenario keeps in ``self.now``)."""
        if now is None:
            now = self.now
        self.sent += 1
        rng = self.rng
        if (m.frm, m.to) in self.blocked or (self.drop_p and rng.random() < self.drop_p):
            self.dropped += 1
            return
        copies = 2 if self.dup_p and rng.random() < self.dup_p else 1
        for _ in range(copies):
            delay = rng.randint(1, self.max_delay) if self.delay_p and rng.random() < self.delay_p else 0
            heapq.heappush(self._heap, (now + delay, self._seq, m))
            self._seq += 1

    def requeue(self, m: Message, at: int) -> None:
        heapq.heappush(self._heap, (at, self._seq, m))
        self._seq += 1

    def due(self, now: int) -> list[Message]:
        heap = self._heap
        out: list[Message] = []
        blocked = self.blocked
        while heap and heap[0][0] <= now:
            m = heapq.heappop(heap)[2]
            if (m.frm, m.to) in blocked:
                self.dropped += 1
            else:
                out.append(m)
        if self.reorder and len(out) > 1:
            self.rng.shuffle(out)
        self.delivered += len(out)
        return out

    def partition(self, groups: list[list[str]]) -> None:
        """Only nodes in the same group can talk (symmetric)."""
        self.blocked = {
            (a, b) for gi, ga in enumerate(groups) for gj, gb in enumerate(groups) if gi != gj for a in ga for b in gb
        }

    def block(self, pairs: list[tuple[str, str]]) -> None:
        """Drop messages from a to b for each pair (asymmetric)."""
        self.blocked |= set(pairs)

    def heal(self) -> None:
        self.blocked = set()

    def quiet(self) -> None:
        """No more random faults (the heal phase)."""
        self.drop_p = self.dup_p = self.delay_p = 0.0
