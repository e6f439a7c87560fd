"""Replication events survive a restart through the spool, and the writer batches its appends
(broker/ha/event_log.py; the contract: docs/STORAGE.md "Replication events").

The ground truth is the list of events the test records: after a restart every undelivered one is
delivered once, in order, and after a delivery the spool holds only what was recorded since (the
spool's handle is kept open across appends, so the file it writes must be the one that replaced
the old spool, not the unlinked old one).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rocketscope.broker.ha import event_log
from rocketscope.broker.ha.event_log import HaEventLog
from rocketscope.ha_events import LEADER_ELECTED, HaEvent


class Topic:
    """The writer's append: refuses while ``up`` is False, else keeps each delivered batch."""

    def __init__(self) -> None:
        self.up = False
        self.batches: list[list[HaEvent]] = []

    async def append(self, events: list[HaEvent]) -> bool:
        if not self.up:
            return False
        self.batches.append(list(events))
        return True

    def terms(self) -> list[int]:
        return [e.term for batch in self.batches for e in batch]


def new_log(topic: Topic, spool: Path) -> HaEventLog:
    return HaEventLog("c", "g", "n0", "127.0.0.1:1", topic.append, writable=lambda: True, spool=spool)


def spooled_terms(spool: Path) -> list[int]:
    return [HaEvent.from_json(line).term for line in spool.read_text().splitlines()]


async def wait_for(cond, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_undelivered_events_are_resent_after_a_restart_and_the_spool_follows_deliveries(tmp_path: Path) -> None:
    spool = tmp_path / "ha_events.spool"

    async def first_run() -> None:
        topic = Topic()  # the topic refuses: nothing is delivered
        log = new_log(topic, spool)
        log.start()
        for term in range(1, 6):
            log.emit(LEADER_ELECTED, term=term, leader="n0")
        await asyncio.sleep(0.05)
        assert topic.batches == []
        assert spooled_terms(spool) == [1, 2, 3, 4, 5]
        if log._task:  # a crash: no stop(), the spool is all that is left
            log._task.cancel()

    async def second_run() -> None:
        topic = Topic()
        topic.up = True
        log = new_log(topic, spool)
        log.start()
        await wait_for(lambda: topic.terms() == [1, 2, 3, 4, 5])
        # delivered: the spool was replaced by an empty one; what is recorded now goes to the new file
        await wait_for(lambda: spooled_terms(spool) == [])
        topic.up = False
        log.emit(LEADER_ELECTED, term=6, leader="n0")
        log.emit(LEADER_ELECTED, term=7, leader="n0")
        assert spooled_terms(spool) == [6, 7]
        topic.up = True
        await wait_for(lambda: topic.terms() == [1, 2, 3, 4, 5, 6, 7], timeout=3.0)
        await wait_for(lambda: spooled_terms(spool) == [])
        await log.stop()
        assert topic.terms() == [1, 2, 3, 4, 5, 6, 7]  # each once

    asyncio.run(first_run())
    asyncio.run(second_run())


def test_the_writer_appends_a_burst_of_events_in_few_batches(tmp_path: Path) -> None:
    """Events recorded over several loop iterations within one linger reach the topic together: on a DLedger
    leader every append is a Raft proposal of its own.  Every event arrives, in order, within the linger."""

    async def run() -> None:
        topic = Topic()
        topic.up = True
        log = new_log(topic, tmp_path / "ha_events.spool")
        log.start()
        log.emit(LEADER_ELECTED, term=1, leader="n0")  # the first after a quiet spell goes at once
        await wait_for(lambda: topic.terms() == [1])
        started = time.monotonic()
        for term in range(2, 22):  # 20 events, one per loop iteration
            log.emit(LEADER_ELECTED, term=term, leader="n0")
            await asyncio.sleep(0)
        await wait_for(lambda: topic.terms() == list(range(1, 22)))
        took = time.monotonic() - started
        await log.stop()
        assert len(topic.batches) <= 3, [len(b) for b in topic.batches]  # 1 + at most two lingers, not 21
        assert took < event_log.WRITE_LINGER_S + 1.0

    asyncio.run(run())


def test_stop_right_after_an_event_delivers_it_and_returns(tmp_path: Path) -> None:
    """An event recorded just before ``stop`` wakes the delivery task as it is cancelled; ``stop`` must still
    end it (Python 3.11's ``wait_for`` then swallows the cancellation), deliver the event and empty the spool."""
    spool = tmp_path / "ha_events.spool"

    async def run() -> None:
        topic = Topic()
        topic.up = True
        log = new_log(topic, spool)
        log.start()
        await asyncio.sleep(0.01)
        log.emit(LEADER_ELECTED, term=1, leader="n0")
        await asyncio.sleep(0.3)  # delivered; the task waits for its next wake-up
        log.emit(LEADER_ELECTED, term=2, leader="n0")
        started = time.monotonic()
        # in this task, so stop() runs before the woken delivery task does; a watchdog, as stop() itself swallows
        # a cancellation while it waits for the delivery task
        watchdog = asyncio.get_running_loop().call_later(3.0, asyncio.current_task().cancel)  # type: ignore[union-attr]
        await log.stop()  # waited for ever before the fix
        watchdog.cancel()
        assert time.monotonic() - started < 1.5
        assert topic.terms() == [1, 2]
        assert spooled_terms(spool) == []

    asyncio.run(run())
