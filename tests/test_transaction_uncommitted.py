"""A commit whose write was not committed leaves the transaction pending, so it is not lost (issue 15).

Found by the chaos harness (DLedger, one-way cut of the leader, seed 8, session 13): the leader
stored a check-back's COMMIT while it was being cut off; its Raft entry never reached a majority
and was truncated when the node rejoined.  DLedger answers such a put with the message still in
the result and the status IN_SYNC_REPLICAS_NOT_ENOUGH; the transaction service looked only at the
message, took the commit for stored, and remembered the message ID as committed.  When the node
led again and the half was checked back a second time, it answered "already committed; writing its
op record only": the committed message was never stored in its topic (lost in all three groups).

Here a real store, and a writer that behaves as that DLedger leader did (the entry answered
uncommitted and not kept); the ground truth is the message the test looks for in its real topic.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rocketscope.broker.errors import ErrorKind
from rocketscope.broker.store.message_store import MessageStore, PutResult, PutStatus, StoreConfig
from rocketscope.broker.store.record import StoredMessage
from rocketscope.broker.topics import TopicManager
from rocketscope.broker.transaction import Resolution, TransactionError, TransactionService

TOPIC = "TopicTxUncommitted"


class Host:
    """What TransactionService uses of a broker, for a writer that leads throughout."""

    def __init__(self, store: MessageStore, root: Path) -> None:
        self.store = store
        self.topics = TopicManager(root / "topics.json", 1)
        self.topics.create_if_absent(TOPIC, 1)
        self.clients: Any = None
        self.settings: Any = None
        self.trace_hooks = self
        self.is_master = True
        self.committed: list[StoredMessage] = []

    def writer_lease_held(self) -> bool:
        return True

    def on_transaction_committed(self, msg: StoredMessage) -> None:
        self.committed.append(msg)

    def on_transaction_resolved(self, topic: str, committed: bool, latency_s: float) -> None:
        pass

    def on_transaction_end(self, *args: Any, **kwargs: Any) -> None:
        pass


async def uncommitted(messages: list[StoredMessage]) -> list[PutResult]:
    """A DLedger leader losing its majority: the results carry the messages, nothing is kept."""
    return [PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, message=m, reason="not committed at a majority")
            for m in messages]


def test_a_commit_not_committed_is_answered_as_failed_and_the_next_one_stores_the_message(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[bytes], int]:
        store = MessageStore(StoreConfig(root=tmp_path / "store"))
        store.recover()
        await store.start()
        try:
            host = Host(store, tmp_path)
            tx = TransactionService(host)  # type: ignore[arg-type]
            tx.recover()
            half = StoredMessage(topic=TOPIC, queue_id=0, body=b"order-1")
            tx_id = tx.wrap(half, "client-1")
            (res,) = await store.put([half])
            assert res.message is not None
            tx.accepted(res.message)
            msg_id = res.message.msg_id

            store.replicated_writer = uncommitted
            with pytest.raises(TransactionError) as failed:
                await tx.end(tx_id, msg_id, Resolution.COMMIT, from_check=True)
            assert failed.value.kind is ErrorKind.INTERNAL and "IN_SYNC_REPLICAS_NOT_ENOUGH" in str(failed.value)
            assert tx_id in tx.pending, "the unresolved half must stay pending, to be checked back again"

            store.replicated_writer = None  # the node leads again with a working majority
            tx.recover()  # as on every role change
            assert await tx.end(tx_id, msg_id, Resolution.COMMIT, from_check=True) == "COMMIT_MESSAGE"
            got = store.get(TOPIC, 0, 0, 16)
            return [m.body for m in got.messages], len(host.committed)
        finally:
            await store.shutdown()

    bodies, committed = asyncio.run(scenario())
    assert bodies == [b"order-1"], f"the committed message is not in its topic: {bodies}"
    assert committed == 1
