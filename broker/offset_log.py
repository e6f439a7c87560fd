"""Consumer offsets through the replicated log, so a new writer redelivers little (issue 15).

POP state (what a consumer group acknowledged) lives in the writer's memory and its
offset table; replicas used to copy that table only every few seconds (the follower
metadata sync of broker/broker.py), so a new DLedger leader or controller-mode master
redelivered everything acknowledged in those seconds — 92 of 200 acknowledged messages
in tests/test_failover_client_visible.py::test_redeliveries_after_leader_kill_are_few.

Here the writer appends the offsets that changed, every ``consumerOffsetReplicateInterval``
ms, as one record of the system topic ``RMQ_SYS_CONSUMER_OFFSETS``.  The record travels
the replicated log like any message (Raft in DLedger mode, the HA stream in controller
mode), and every replica applies it to its offset table when it is dispatched, i.e.
once it is committed.  RocketMQ 5 keeps POP state in its commit log for the same reason
(the checkpoint and ack records of its revive topic).  A failover therefore redelivers
at most what was acknowledged within one interval plus the commit latency, and the
messages in flight (handed out, not yet acknowledged) at the old writer.

A replica applies a record as it is (so an offset reset reaches it too).  A writer
applies only offsets ahead of its own: those come from its predecessor and become
visible only when the new writer's first entry commits, possibly after it already
rebuilt POP state from older offsets; that state is then dropped and rebuilt.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from rocketscope.names import CONSUMER_OFFSETS_TOPIC

from .store.record import StoredMessage

if TYPE_CHECKING:
    from .offsets import OffsetManager
    from .pop import PopService
    from .store.message_store import MessageStore
    from .topics import TopicManager

log = logging.getLogger(__name__)
Key = tuple[str, str, int]


class OffsetLog:
    """Given what it uses (issue 17): the store it writes and reads through, the offsets it replicates,
    the POP engine whose state an applied offset may outdate, and whether this node is the writer."""

    def __init__(self, store: MessageStore, topics: TopicManager, offsets: OffsetManager, pop: PopService,
                 is_writer: Callable[[], bool], interval_s: float) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.pop = pop
        self.is_writer = is_writer
        self.interval_s = interval_s
        self._written: dict[Key, int] = {}  # what this node, as the writer, last put in the log
        self._was_writer = False
        self.records_written = 0
        self.offsets_applied = 0

    def start(self) -> asyncio.Task[None] | None:
        """Register the dispatch listener and, unless the interval is 0, start the writer loop."""
        self.topics.create_if_absent(CONSUMER_OFFSETS_TOPIC, 1, system=True)
        self.store.add_topic_listener(CONSUMER_OFFSETS_TOPIC, self.on_dispatch)
        if self.interval_s <= 0:
            return None
        return asyncio.get_running_loop().create_task(self._loop(), name="offset-log")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.write_changes()
            except Exception:
                log.exception("writing consumer offsets to the replicated log failed; will retry")

    def changes(self) -> dict[Key, int]:
        table = self.offsets.offsets
        return {k: v for k, v in table.items() if self._written.get(k) != v}

    async def write_changes(self) -> int:
        """Append the offsets changed since the last record (all of them after becoming the writer)."""
        writer = bool(self.is_writer())
        if writer and not self._was_writer:
            self._written = {}  # a new writer: its first record carries the whole table
        self._was_writer = writer
        if not writer:
            return 0
        changed = self.changes()
        if not changed:
            return 0
        body = json.dumps({"o": [[g, t, q, o] for (g, t, q), o in sorted(changed.items())]},
                          separators=(",", ":")).encode()
        (res,) = await self.store.put([StoredMessage(topic=CONSUMER_OFFSETS_TOPIC, queue_id=0, body=body)])
        if not res.stored:  # not known to be replicated: written again next interval
            log.debug("consumer offsets not replicated now (%s); next interval retries", res.reason or res.status)
            return 0
        self._written.update(changed)
        self.records_written += 1
        return len(changed)

    def on_dispatch(self, msg: StoredMessage) -> None:
        if msg.topic != CONSUMER_OFFSETS_TOPIC:
            return
        try:
            items = json.loads(msg.body)["o"]
        except (ValueError, KeyError, TypeError):
            log.warning("bad consumer-offset record at queue offset %d; skipped", msg.queue_offset)
            return
        writer = bool(self.is_writer())
        offsets, states = self.offsets, self.pop.states
        for g, t, q, o in items:
            key = (str(g), str(t), int(q))
            o = int(o)
            if writer:
                cur = offsets.get(*key)
                if cur is not None and o <= cur:
                    continue  # this writer's own record, or older than what it has
                st = states.get(key)
                if st is not None and st.committed < o:
                    del states[key]  # POP state built from an older offset: rebuild it from this one
            offsets.commit(*key, o)
            self.offsets_applied += 1
