"""A put waiting for the SyncStateSet when its master is demoted is answered, not cancelled (issue 15).

Found by the chaos harness (controller schedule, session 11): 12 acknowledged delayed messages
were never delivered.  The demoted master cancelled the futures of the puts still waiting for
their replicas; a cancelled future raises CancelledError in the task awaiting it, and that task
was the timer's loop, putting due messages: it ended silently (its ``except Exception`` does not
catch a cancellation), so when the node was promoted again it never took over the timer.

The manager is built without its constructor (which dials the controllers) and given the few
attributes ``wait_replicated`` reads; the broker is a namespace with the settings it reads.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from rocketscope.broker.controller.replicas import ReplicasManager
from rocketscope.broker.store.message_store import PutStatus


def manager(my_id: int, sync_state_set: tuple[int, ...]) -> ReplicasManager:
    rm = ReplicasManager.__new__(ReplicasManager)
    settings = SimpleNamespace(minInSyncReplicas=1, inSyncReplicas=1, allAckInSyncStateSet=True, slaveTimeout=30_000,
                               readUnCommitted=False)
    rm.broker = SimpleNamespace(settings=settings, is_master=True, replication_master=SimpleNamespace(slaves={}))
    rm.my_id = rm.master_id = my_id
    rm.sync_state_set = sync_state_set
    rm._waiters = []
    return rm


def test_a_put_waiting_for_replicas_gets_an_answer_when_the_master_is_demoted() -> None:
    async def scenario() -> tuple[PutStatus | str, bool]:
        rm = manager(1, (1, 2))
        waiting = asyncio.create_task(rm.wait_replicated(4096))  # member 2 has acked nothing: it waits
        while not rm._waiters:
            await asyncio.sleep(0)
        rm.master_id = 2  # what _become_slave records before it fails the waiters
        rm._fail_waiters()
        try:
            return await asyncio.wait_for(waiting, 5), waiting.cancelled()
        except asyncio.CancelledError:
            return "CancelledError raised in the waiting task", True

    status, cancelled = asyncio.run(scenario())
    assert not cancelled and status == PutStatus.SERVICE_NOT_AVAILABLE, status
