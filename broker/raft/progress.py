"""What the leader knows about each follower's log, and the flow control built on it.

PROBE: the leader does not know where the follower's log matches; it sends one append at
a time and waits for the answer (or the next heartbeat response) before the next.
REPLICATE: the follower is known to match; the leader streams appends optimistically,
moving ``next`` past what it sent, bounded by a window of ``max_inflight`` messages.  A
rejection drops back to PROBE from the last known match.
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum


class ProgressState(IntEnum):
    PROBE = 0
    REPLICATE = 1


class Progress:
    __slots__ = ("inflight", "match", "max_inflight", "next", "probe_sent", "recent_active", "state")

    def __init__(self, next_index: int, max_inflight: int) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.recent_active = False
        self.max_inflight = max_inflight
        self.inflight: deque[int] = deque()  # last index of each unacknowledged append

    def __repr__(self) -> str:
        return (f"Progress(match={self.match}, next={self.next}, state={self.state.name}, "
                f"inflight={len(self.inflight)}, probe_sent={self.probe_sent})")

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        return len(self.inflight) >= self.max_inflight

    def become_probe(self) -> None:
        self.state = ProgressState.PROBE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.inflight.clear()

    def maybe_update(self, index: int) -> bool:
        """An acknowledgement up to ``index``; True when it is news (match moved)."""
        updated = False
        if self.match < index:
            self.match = index
            self.probe_sent = False
            updated = True
        if self.next < index + 1:
            self.next = index + 1
        return updated

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """A rejection of the append whose previous index was ``rejected``.

        Returns False for stale rejections (of an append sent before a newer decision),
        which must be ignored or the leader would walk back for nothing.
        """
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def sent(self, last_index: int) -> None:
        """An append ending at ``last_index`` (0: empty) was sent."""
        if self.state is ProgressState.REPLICATE:
            if last_index:
                self.next = last_index + 1
                self.inflight.append(last_index)
        else:
            self.probe_sent = True

    def free_to(self, index: int) -> None:
        inflight = self.inflight
        while inflight and inflight[0] <= index:
            inflight.popleft()

    def free_first(self) -> None:
        if self.inflight:
            self.inflight.popleft()
