"""The store's dispatch listeners (``MessageStore.add_topic_listener`` / ``add_queue_listener``) against the
messages written.

Ground truth: which messages went to which topic and queue, counted here from the messages put.  A topic
listener must see every record of its topic once, in write order, with its body, and nothing else; a queue
listener must hear of every queue that got entries (LMQ queues included) once per dispatched batch, and of no
queue that got none.  Both with the compiled dispatch loop and with the pure-Python one (``_C`` None).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_store_dispatch_batch import LMQS, config, messages

from rocketscope.broker.store import message_store
from rocketscope.broker.store.message_store import MessageStore, PutStatus
from rocketscope.broker.store.multi_dispatch import MULTI_DISPATCH
from rocketscope.broker.store.record import StoredMessage


@pytest.fixture(params=["compiled", "python"])
def dispatch_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setattr(message_store, "_C", None)
    elif message_store._C is None:
        # only when asked for: a missing compiled module is an ImportError in broker/speedups.py, not a None
        pytest.skip("ROCKETSCOPE_PURE_PYTHON is set: the compiled module is not loaded")
    return str(request.param)


def test_listeners_hear_exactly_their_records_and_queues(tmp_path: Path, dispatch_path: str) -> None:
    msgs = messages()
    per_put = 13
    puts = [msgs[i:i + per_put] for i in range(0, len(msgs), per_put)]

    async def go() -> None:
        store = MessageStore(config(tmp_path))
        await store.start()
        seen_t1: list[tuple[str, bytes, int]] = []
        batches: list[list[tuple[str, int]]] = []
        store.add_topic_listener("T1", lambda m: seen_t1.append((m.msg_id, m.body, m.queue_id)))
        store.add_queue_listener(lambda qs: batches.append(list(qs)))
        for chunk in puts:
            res = await store.put(chunk)
            assert all(r.status is PutStatus.PUT_OK for r in res)
        assert seen_t1 == [(m.properties["UNIQ_KEY"], m.body, m.queue_id) for m in msgs if m.topic == "T1"]
        # every queue a put wrote to (its own and its LMQ queues) is told once per batch, no other
        want: list[set[tuple[str, int]]] = []
        for chunk in puts:
            qs = {(m.topic, m.queue_id) for m in chunk}
            for m in chunk:
                qs.update((q, 0) for q in m.properties.get(MULTI_DISPATCH, "").split(",") if q)
            want.append(qs)
        assert [sorted(b) for b in batches] == [sorted(w) for w in want]
        assert all(len(b) == len(set(b)) for b in batches)
        assert any((lmq, 0) in b for b in batches for lmq in LMQS)
        await store.shutdown()

    asyncio.run(go())


def test_a_failing_listener_does_not_stop_the_store_or_the_others(tmp_path: Path, dispatch_path: str) -> None:
    async def go() -> None:
        store = MessageStore(config(tmp_path))
        await store.start()
        told: list[str] = []
        grown: list[tuple[str, int]] = []

        def boom(_: object) -> None:
            raise RuntimeError("listener bug")

        store.add_topic_listener("A", boom)
        store.add_topic_listener("A", lambda m: told.append(m.msg_id))
        store.add_queue_listener(boom)
        store.add_queue_listener(grown.extend)
        batch = [StoredMessage(topic=t, queue_id=1, body=b"x", properties={"UNIQ_KEY": f"{t}{i}"})
                 for i, t in enumerate(["A", "B", "A"])]
        res = await store.put(batch)
        assert [r.status for r in res] == [PutStatus.PUT_OK] * 3
        assert told == ["A0", "A2"]
        assert sorted(grown) == [("A", 1), ("B", 1)]
        assert store.max_offset("A", 1) == 2 and store.max_offset("B", 1) == 1
        assert store.dispatched == store.commit_log.max_offset
        await store.shutdown()

    asyncio.run(go())


def test_topic_listener_is_told_records_read_back_at_recovery(tmp_path: Path, dispatch_path: str) -> None:
    """A store reopened without its consume queues rebuilds them from the log: a topic listener registered
    before ``start`` sees its topic's records again (what the journals' replay relies on), the others none."""
    msgs = messages()

    async def write() -> None:
        store = MessageStore(config(tmp_path))
        await store.start()
        res = await store.put(msgs)
        assert all(r.status is PutStatus.PUT_OK for r in res)
        await store.shutdown()

    async def reopen() -> list[str]:
        import shutil
        shutil.rmtree(tmp_path / "consumequeue")
        (tmp_path / "checkpoint").unlink()
        store = MessageStore(config(tmp_path))
        got: list[str] = []
        store.add_topic_listener("T0", lambda m: got.append(m.msg_id))
        await store.start()
        await store.shutdown()
        return got

    asyncio.run(write())
    assert asyncio.run(reopen()) == [m.properties["UNIQ_KEY"] for m in msgs if m.topic == "T0"]
