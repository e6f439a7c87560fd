"""A SYNC_MASTER's waiting puts (broker/ha/master.py ``when_replicated``, ``wait_replicated``): each answered once,
True as soon as ``inSyncReplicas`` copies hold everything below its offset, False once ``slaveTimeout`` passed.

The rule is SYNC_MASTER's as before the waiters became callbacks on one list and one timer: ground truth here is
that rule evaluated directly (``copies(offset) >= needed`` over the slaves' acks) after every step of random
histories of puts, acks, disconnections and clock advances, and the deadline measured on the loop's clock.  The
master runs on a namespace with the settings and store it reads; no socket.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketscope.broker.ha.master import ReplicationMaster, SlaveState
from rocketscope.broker.store.message_store import PutStatus


def master(in_sync: int, timeout_ms: int = 3000) -> ReplicationMaster:
    broker = SimpleNamespace(settings=SimpleNamespace(inSyncReplicas=in_sync, slaveTimeout=timeout_ms),
                             ha_events=SimpleNamespace(emit=lambda *a, **k: None))
    return ReplicationMaster(broker)  # type: ignore[arg-type]


step = st.one_of(
    st.tuples(st.just("put"), st.integers(1, 50)),           # a put ending this far past the last one
    st.tuples(st.just("put_back"), st.integers(1, 50)),      # one ending below the last (registered out of order)
    st.tuples(st.just("ack"), st.integers(0, 2), st.integers(0, 60)),  # slave i reports this far past its ack
    st.tuples(st.just("drop"), st.integers(0, 2)),           # slave i disconnects
)


@settings(max_examples=200, deadline=None)
@given(in_sync=st.integers(1, 4), steps=st.lists(step, max_size=40))
def test_every_put_is_answered_once_when_its_copies_are_in(in_sync: int, steps: list[tuple]) -> None:
    async def run() -> None:
        rm = master(in_sync, timeout_ms=60_000)
        slaves = [SlaveState(i + 2, f"s{i}", 0) for i in range(3)]
        for s in slaves:
            rm.slaves[s.broker_id] = s
        answers: dict[int, list[bool]] = {}
        offsets: dict[int, int] = {}
        ever_held: dict[int, bool] = {}
        end = 0
        for n, st_ in enumerate(steps):
            kind = st_[0]
            if kind in ("put", "put_back"):
                end += st_[1]
                offset = end if kind == "put" else max(1, end - st_[1])
                offsets[n] = offset
                answers[n] = []
                rm.when_replicated(offset, answers[n].append)
            elif kind == "ack":
                s = slaves[st_[1]]
                if s.connected:
                    rm.acked(s, s.ack_offset + st_[2])
            else:
                slaves[st_[1]].connected = False
                rm.resolve_waiters()
            for k, got in answers.items():  # the rule, evaluated directly (a disconnection cannot take a True back)
                ever_held[k] = ever_held.get(k, False) or rm.copies(offsets[k]) >= in_sync
                assert got == ([True] if ever_held[k] else []), (k, got, ever_held[k])
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_put_nobody_copies_is_answered_false_at_its_deadline_and_only_then() -> None:
    async def run() -> tuple[list[bool], float, list[bool]]:
        rm = master(2, timeout_ms=200)
        loop = asyncio.get_running_loop()
        got: list[bool] = []
        later: list[bool] = []
        t0 = loop.time()
        rm.when_replicated(100, got.append)
        await asyncio.sleep(0.05)
        rm.when_replicated(200, later.append)  # its own deadline, 50 ms after the first's
        while not got:
            await asyncio.sleep(0.005)
        waited = loop.time() - t0
        assert later == []
        s = SlaveState(2, "s", 0)
        rm.slaves[2] = s
        rm.acked(s, 200)  # the second is copied before its deadline: True, and never False after
        await asyncio.sleep(0.3)
        return got, waited, later

    got, waited, later = asyncio.run(run())
    assert got == [False] and 0.2 <= waited < 1.0
    assert later == [True]


def test_wait_replicated_says_put_ok_or_flush_slave_timeout() -> None:
    async def run() -> tuple[PutStatus, PutStatus, PutStatus]:
        rm = master(2, timeout_ms=100)
        s = SlaveState(2, "s", 0)
        rm.slaves[2] = s
        waiting = asyncio.ensure_future(rm.wait_replicated(50))
        await asyncio.sleep(0)
        rm.acked(s, 50)
        ok = await waiting
        late = await rm.wait_replicated(51)  # nobody reports: the timeout
        at_once = await rm.wait_replicated(50)  # already copied
        return ok, late, at_once

    assert asyncio.run(run()) == (PutStatus.PUT_OK, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.PUT_OK)


def test_a_cancelled_wait_leaves_the_others_answered() -> None:
    async def run() -> PutStatus:
        rm = master(2, timeout_ms=5000)
        s = SlaveState(2, "s", 0)
        rm.slaves[2] = s
        first = asyncio.ensure_future(rm.wait_replicated(10))
        second = asyncio.ensure_future(rm.wait_replicated(20))
        await asyncio.sleep(0)
        first.cancel()
        rm.acked(s, 20)
        return await second

    assert asyncio.run(run()) == PutStatus.PUT_OK
