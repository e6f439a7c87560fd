"""Writes not known to be stored are never taken for stored: dead-letter moves, retry copies, recalls (issue 15).

The same defect as tests/test_transaction_uncommitted.py (found by the chaos harness, DLedger
one-way cut): a DLedger leader that loses its majority answers a put with the message still in
the result and the status IN_SYNC_REPLICAS_NOT_ENOUGH, and the entry may be truncated later.
Code that looked only at the message took such a write for stored: a ForwardMessageToDeadLetterQueue
answered OK and acked the message (lost if the entry went), a retry copy counted as made. Here a
real store and PopService, with the store's writer answering as that leader did for the system
topics only; the ground truth is where the message can be found afterwards.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rocketscope.broker.errors import ErrorKind
from rocketscope.broker.groups import GroupManager
from rocketscope.broker.offsets import OffsetManager
from rocketscope.broker.pop import PopError, PopService
from rocketscope.broker.store.message_store import MessageStore, PutResult, PutStatus, StoreConfig
from rocketscope.broker.store.record import StoredMessage
from rocketscope.broker.topics import TopicManager

TOPIC, GROUP = "TopicUncommitted", "GroupUncommitted"


def test_a_dead_letter_move_not_committed_is_refused_and_the_message_stays_in_flight(tmp_path: Path) -> None:
    async def scenario() -> tuple[str, int, list[bytes]]:
        store = MessageStore(StoreConfig(root=tmp_path / "store"))
        store.recover()
        await store.start()
        try:
            topics = TopicManager(tmp_path / "topics.json", 1)
            topics.create_if_absent(TOPIC, 1)
            pop = PopService(store, OffsetManager(tmp_path / "offsets.json"), GroupManager(tmp_path / "groups.json"),
                             topics, "broker-u")
            pop.writable = pop.hands_out = lambda: True
            (res,) = await store.put([StoredMessage(topic=TOPIC, queue_id=0, body=b"poison")])
            assert res.status is PutStatus.PUT_OK
            (d,) = await pop.receive(GROUP, TOPIC, [0], 1, 60_000, None, 2.0)

            async def system_topics_uncommitted(messages: list[StoredMessage]) -> list[PutResult]:
                return [PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, message=m, reason="not committed")
                        for m in messages]

            store.replicated_writer = system_topics_uncommitted
            with pytest.raises(PopError) as refused:
                await pop.forward_to_dlq(GROUP, d.handle)
            store.replicated_writer = None
            # still in flight: the same receipt is still good (an acked message's receipt is refused)
            pop.change_invisible(GROUP, d.handle, 1_000)
            dlq = [t.name for t in topics.all() if t.name.startswith("%DLQ%")]
            stored_in_dlq = [m.body for t in dlq for m in store.get(t, 0, 0, 16).messages]
            return str(refused.value), int(refused.value.kind is ErrorKind.INTERNAL), stored_in_dlq
        finally:
            await store.shutdown()

    reason, internal, in_dlq = asyncio.run(scenario())
    assert internal and "dead-letter" in reason, reason
    assert in_dlq == [], "nothing may be in the dead-letter queue: the write was not kept"
