"""A long poll that began at the writer hands nothing out once that node is demoted (issue 15).

Found by the chaos harness in controller mode (docs/CHAOS.md, seed 21): a ReceiveMessage long
poll that reached the master before an isolation was still waiting when the node came back as
a slave; when the slave copied a new message from the new master, the poll woke and handed it
out from the old writer's POP state, which knew nothing of the new writer's hand-outs and acks.
A message the group had already acknowledged at the new master went out again as attempt 1.

Here the node's role is a flag the test flips (what the broker's ``is_master`` becomes), with a
real store: the ground truth is the message the test put after the demotion.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import grpc
import pytest
from cluster import wait_until
from rmq import drain_ids, message, producer, simple_consumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from test_e2e_controller import TOPIC as CTL_TOPIC
from test_e2e_controller import ControllerGroup
from test_e2e_controller import group as group  # the controller-mode fixture

from rocketscope.broker.groups import GroupManager
from rocketscope.broker.offsets import OffsetManager
from rocketscope.broker.pop import PopService
from rocketscope.broker.store.message_store import MessageStore, StoreConfig
from rocketscope.broker.store.record import StoredMessage
from rocketscope.broker.topics import TopicManager

TOPIC, GROUP = "TopicDemoted", "GroupDemoted"


def make_service(root: Path) -> tuple[PopService, MessageStore, dict[str, bool]]:
    store = MessageStore(StoreConfig(root=root / "store"))
    topics = TopicManager(root / "topics.json", 1)
    topics.create_if_absent(TOPIC, 1)
    pop = PopService(store, OffsetManager(root / "offsets.json"), GroupManager(root / "groups.json"), topics,
                     "broker-t")
    role = {"writer": True}
    pop.writable = pop.hands_out = lambda: role["writer"]
    return pop, store, role


def put(store: MessageStore, body: bytes) -> None:
    async def go() -> None:
        (res,) = await store.put([StoredMessage(topic=TOPIC, queue_id=0, body=body)])
        assert res.message is not None, res
    asyncio.get_running_loop().create_task(go())


def test_a_poll_begun_at_the_writer_hands_nothing_out_after_a_demotion(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], list[str], float]:
        pop, store, role = make_service(tmp_path)
        store.recover()
        await store.start()
        try:
            # control: while the writer, a poll is woken by a new message and hands it out
            loop = asyncio.get_running_loop()
            waiting = loop.create_task(pop.receive(GROUP, TOPIC, [0], 8, 30_000, None, 5.0))
            await asyncio.sleep(0.05)
            put(store, b"first")
            first = [d.message.body.decode() for d in await asyncio.wait_for(waiting, 5)]
            # the node is demoted while a poll waits; then a message arrives (a slave copying its new master)
            waiting = loop.create_task(pop.receive(GROUP, TOPIC, [0], 8, 30_000, None, 20.0))
            await asyncio.sleep(0.05)
            role["writer"] = False
            started = loop.time()
            put(store, b"second")
            second = [d.message.body.decode() for d in await asyncio.wait_for(waiting, 30)]
            return first, second, loop.time() - started
        finally:
            await store.shutdown()

    first, second, answered_after = asyncio.run(scenario())
    assert first == ["first"], "the writer's long poll must deliver a message put while it waits"
    assert second == [], f"a demoted node handed out {second} from the old writer's POP state"
    # it answers (empty) when woken instead of holding the client for the rest of its 20 s poll
    assert answered_after < 10, f"the demoted node held the poll {answered_after:.1f} s of its 20 s"


# ------------------------------------------------------------------ over real processes
GROUP_CTL = "GroupDemotedCtl"
SENT_CTL = 10


def long_poll(endpoint: str, group: str, topic: str, poll_s: int, out: list[str]) -> None:
    """One ReceiveMessage straight to ``endpoint`` (no client failover): the IDs it hands out go to ``out``."""
    req = svc.ReceiveMessageRequest(batch_size=32, auto_renew=False)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.message_queue.id = 0
    req.message_queue.broker.name = "broker-c"
    req.invisible_duration.FromSeconds(60)
    req.long_polling_timeout.FromSeconds(poll_s)
    req.filter_expression.type = pb.TAG
    req.filter_expression.expression = "*"
    with grpc.insecure_channel(endpoint) as ch:
        stream = svc_grpc.MessagingServiceStub(ch).ReceiveMessage(
            req, metadata=(("x-mq-client-id", "demotion-test"),), timeout=poll_s + 20)
        for resp in stream:
            if resp.HasField("message"):
                out.append(resp.message.system_properties.message_id)


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_a_demoted_controller_mode_master_hands_out_nothing_acked_at_the_new_master(group: ControllerGroup) -> None:
    """Controller mode: a receive waiting at the master when it is isolated and comes back as a slave.

    The master is cut off from the controllers (they elect another), then healed, so it comes
    back as a slave and copies the new master's log.  Meanwhile the test's own poll waits at it
    (20 s, started before the cut: the controllers need their 1.5 s heartbeat timeout to act).
    The messages sent after the change are consumed and acknowledged at the new master by the
    official client; the old master's poll must hand none of them out again.
    """
    g = group
    old = g.master()
    assert old is not None
    polled: list[str] = []
    poller = threading.Thread(target=long_poll, args=(g.nodes[old].endpoint, GROUP_CTL, CTL_TOPIC, 20, polled),
                              daemon=True)
    with simple_consumer(g.endpoint, GROUP_CTL, CTL_TOPIC, await_s=1) as consumer:
        poller.start()
        g.isolate(old, True)
        new = g.wait_master(exclude=old, what="a master other than the isolated one")
        g.isolate(old, False)
        wait_until(lambda: g.status(old)["role"] == "SLAVE", timeout=30, what=f"c{old} back as a slave")
        with producer(g.endpoint, CTL_TOPIC) as p:
            sent = {p.send(message(CTL_TOPIC, f"after-{i}".encode())).message_id for i in range(SENT_CTL)}
        got = drain_ids(consumer, sent, timeout=60, quiet=1.0, invisible_s=60)
    poller.join(timeout=45)
    assert not poller.is_alive(), "the poll at the demoted master never answered"
    counts = Counter(m.message_id for m in got)
    assert set(counts) >= sent, f"the new master c{new} delivered {len(set(counts) & sent)} of {SENT_CTL}"
    again = [mid for mid in polled if mid in sent]
    assert not again, (f"the demoted master c{old} handed out {len(again)} of the {SENT_CTL} messages "
                       f"the group consumed at c{new}: {again}")
