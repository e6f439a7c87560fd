"""Emit replication events: to the RMQ_SYS_HA_EVENTS topic when this node may write it.

Only a node whose commit log is authoritative (a master, a Raft leader) may append to
its own log, so a slave or follower keeps its events in a bounded buffer and writes them
when it becomes writable (a bounded buffer: a process crash loses what was buffered, and
overflow drops the oldest events, counted in ``dropped``).  Replica-ack events are
throttled per replica (``haEventAckIntervalMillis``), because every acked batch would
otherwise produce one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from .events import COMMIT_ADVANCED, HA_EVENTS_TOPIC, REPLICA_ACK, HaEvent

log = logging.getLogger(__name__)

Append = Callable[[list[HaEvent]], Awaitable[bool]]


class HaEventLog:
    def __init__(self, cluster: str, group: str, node: str, address: str, append: Append,
                 writable: Callable[[], bool], ack_interval_ms: int = 100, capacity: int = 100_000) -> None:
        self.cluster, self.group, self.node, self.address = cluster, group, node, address
        self._append = append
        self._writable = writable
        self.ack_interval_ms = ack_interval_ms
        self.pending: deque[HaEvent] = deque(maxlen=capacity)
        self.dropped = 0
        self.written = 0
        self.recent: deque[HaEvent] = deque(maxlen=1000)  # for admin haEvents and status pages
        # role changes, elections, set changes and truncations: rare, and a busy minute of acks and commits
        # would push them out of ``recent``
        self.recent_changes: deque[HaEvent] = deque(maxlen=1000)
        self._last_ack: dict[str, int] = {}
        self._last_offset: dict[str, int] = {}
        self.data_end = 0  # end of the newest record that is not itself a replication event
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.listeners: list[Callable[[HaEvent], None]] = []

    def note_data(self, end_offset: int) -> None:
        """A record other than a replication event now ends at ``end_offset``."""
        self.data_end = max(self.data_end, end_offset)

    def emit(self, type_: str, **fields: Any) -> HaEvent | None:
        now = int(time.time() * 1000)
        if type_ in (REPLICA_ACK, COMMIT_ADVANCED):
            # events are records too: an ack or commit that only covers event records says nothing new
            # (and would feed back: its own event record would be acked again)
            key = f"{type_}:{fields.get('replica', '')}"
            offset = int(fields.get("offset", -1))
            if self.data_end <= self._last_offset.get(key, -1) or offset <= self._last_offset.get(key, -1):
                return None
            if type_ == REPLICA_ACK and now - self._last_ack.get(key, 0) < self.ack_interval_ms:
                return None
            self._last_ack[key] = now
            self._last_offset[key] = offset
        event = HaEvent(type=type_, cluster=self.cluster, group=self.group, node=self.node, ts=now,
                        address=self.address, **fields)
        if len(self.pending) == self.pending.maxlen:
            self.dropped += 1
        self.pending.append(event)
        self.recent.append(event)
        if type_ not in (REPLICA_ACK, COMMIT_ADVANCED):
            self.recent_changes.append(event)
            log.info("ha event %s: %s", type_, {k: v for k, v in fields.items() if v not in ("", -1, ())})
        for listener in self.listeners:
            listener(event)
        self._wake.set()
        return event

    def latest(self, limit: int) -> list[HaEvent]:
        """The newest ``limit`` events, plus every remembered change older than those, oldest first."""
        tail = list(self.recent)[-limit:] if limit > 0 else []
        shown = {id(e) for e in tail}
        return sorted([e for e in self.recent_changes if id(e) not in shown] + tail, key=lambda e: e.ts)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ha-events")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self.pending and self._writable():
            await self.flush()

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), 0.5)
            except TimeoutError:
                pass
            self._wake.clear()
            if self.pending and self._writable():
                try:
                    await self.flush()
                except Exception:
                    log.exception("writing replication events to %s failed; keeping them", HA_EVENTS_TOPIC)

    async def flush(self) -> None:
        while self.pending and self._writable():
            batch = [self.pending.popleft() for _ in range(min(len(self.pending), 256))]
            if not await self._append(batch):
                self.pending.extendleft(reversed(batch))
                return
            self.written += len(batch)
