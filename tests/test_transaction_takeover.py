"""A writer that takes over does not commit a transaction its predecessor already committed (issue 15).

Found by the chaos harness (DLedger, the preferred leader returning under load, session 14:
`tx_duplicates` t-735 in both SimpleConsumer groups): leadership moved twice in two seconds.  The
first leader checked the half back and stored the producer's COMMIT (message and op record, one
entry); the next leader held that entry but had not confirmed it yet (a new Raft leader confirms
its predecessors' tail only when an entry of its own term commits), so it saw neither the op record
nor the committed message, took the producer's answer to a second check-back for a first one, and
stored the message again: one committed transaction, delivered twice.

Here a real store whose visibility bound is moved by hand as DLedger moves it; the predecessor's
entry is written below the new writer's takeover point and confirmed only later.  The ground truth
is the number of copies of the message in its real topic.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_transaction_uncommitted import TOPIC, Host

from rocketscope.broker import transaction
from rocketscope.broker.errors import ErrorKind
from rocketscope.broker.store.message_store import MessageStore, StoreConfig, StoreHooks
from rocketscope.broker.store.record import StoredMessage
from rocketscope.broker.transaction import HALF_TOPIC, Resolution, TransactionError, TransactionService


async def dledger_like_store(root: Path) -> MessageStore:
    """A store in DLedger's visibility mode: nothing is confirmed until the test says so."""
    store = MessageStore(StoreConfig(root=root / "store"), StoreHooks(confirm_offset=0))
    store.recover()
    await store.start()
    return store


async def half_pending(store: MessageStore, tx: TransactionService) -> tuple[str, str]:
    """A half message stored and confirmed, pending at ``tx``: (transaction ID, message ID)."""
    half = StoredMessage(topic=TOPIC, queue_id=0, body=b"order-1")
    tx_id = tx.wrap(half, "client-1")
    (res,) = await store.put([half])
    assert res.message is not None
    store.advance_confirm_offset(store.commit_log.max_offset)
    tx.accepted(res.message)
    return tx_id, res.message.msg_id


async def predecessors_commit(store: MessageStore, tx: TransactionService, tx_id: str) -> None:
    """What the previous writer stored for the producer's first COMMIT: the message and its op record in one
    write, now in this node's log but above its confirm offset."""
    half = tx.pending[tx_id]
    stored = store.message_at(HALF_TOPIC, 0, half.offset)
    assert stored is not None
    results = await store.put([tx._unwrap(stored), tx._op(half.offset, "COMMIT_MESSAGE")])
    assert all(r.message is not None for r in results)


async def taken_over(store: MessageStore, root: Path) -> tuple[TransactionService, str, str]:
    """A half pending at a writer that has just taken over; its predecessor's COMMIT of it is in this node's
    log above the confirm offset: (the service, transaction ID, message ID)."""
    tx = TransactionService(Host(store, root))  # type: ignore[arg-type]
    tx.recover()
    tx_id, msg_id = await half_pending(store, tx)
    await predecessors_commit(store, tx, tx_id)
    tx.recover()  # this node takes over as writer: the predecessor's entry is in its log, unconfirmed
    return tx, tx_id, msg_id


def copies_in_topic(store: MessageStore) -> list[bytes]:
    return [m.body for m in store.get(TOPIC, 0, 0, 16).messages]


def test_a_commit_the_predecessor_stored_is_not_stored_again_once_confirmed(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[bytes], BaseException | str]:
        store = await dledger_like_store(tmp_path)
        try:
            tx, tx_id, msg_id = await taken_over(store, tmp_path)
            assert tx_id in tx.pending, "the op record is not visible yet: the half still looks pending"

            # the producer's answer to the second check-back arrives; the takeover's first entry commits a moment
            # later, confirming the predecessor's tail
            answer = asyncio.create_task(tx.end(tx_id, msg_id, Resolution.COMMIT, from_check=True))
            await asyncio.sleep(0.3)
            store.advance_confirm_offset(store.commit_log.max_offset)
            try:
                outcome: BaseException | str = await answer
            except TransactionError as exc:
                outcome = exc
            store.advance_confirm_offset(store.commit_log.max_offset)
            return copies_in_topic(store), outcome
        finally:
            await store.shutdown()

    copies, outcome = asyncio.run(scenario())
    assert copies == [b"order-1"], f"a committed transaction stored {len(copies)} times: {copies}"
    assert isinstance(outcome, TransactionError) and outcome.kind is ErrorKind.INVALID_TRANSACTION_ID, outcome


def test_an_answer_before_the_takeover_is_confirmed_leaves_the_half_pending(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """When the new writer cannot confirm its predecessors' log in time, the answer is refused and the half is
    checked back later; nothing is stored meanwhile."""
    monkeypatch.setattr(transaction, "CATCH_UP_WAIT_S", 0.2)

    async def scenario() -> tuple[list[bytes], TransactionError, bool, list[bytes]]:
        store = await dledger_like_store(tmp_path)
        try:
            tx, tx_id, msg_id = await taken_over(store, tmp_path)
            with pytest.raises(TransactionError) as refused:
                await tx.end(tx_id, msg_id, Resolution.COMMIT, from_check=True)
            before = copies_in_topic(store)
            store.advance_confirm_offset(store.commit_log.max_offset)
            tx.refresh()
            return before, refused.value, tx_id in tx.pending, copies_in_topic(store)
        finally:
            await store.shutdown()

    before, refused, still_pending, after = asyncio.run(scenario())
    assert refused.kind is ErrorKind.INTERNAL and "has not yet confirmed" in str(refused), refused
    assert before == [], before
    assert not still_pending, "once confirmed, the predecessor's op record resolves the half"
    assert after == [b"order-1"], after
