"""A DLedger leader resumed after a pause does not count its successor's messages as a lease (issue 15).

Found by the chaos harness (DLedger, pause of the leader, load 12, session 14: `tx_duplicates` t-354 in
ChaosSimpleA, an acknowledged message handed out again): the paused leader n0 was replaced by n2, which
handed the message out and had it acknowledged; resumed, n0 stepped down at the first batch from n2, but
it counted that batch as "heard from a peer" and its published role still said leader (the driver
publishes a role change after the Ready that carries it), so for that moment its lease held and it
answered a pending receive from its stale POP state.

Here the real DLedger member (broker/dledger/node.py) in the seeded simulator (tests/sim, calm network),
its peer batches delivered through ``on_batch`` as the gRPC transport does.  Ground truth: the successor's
term, higher than the resumed leader's.
"""

from __future__ import annotations

from typing import Any

from sim.scenario import Simulation

from rocketscope.broker.dledger.raft_codec import Batch


class Calm(Simulation):
    """A dledger-profile simulation without random faults, whose members read peer messages as batches."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed, profile="dledger")
        self.p_crash = self.p_pause = self.p_partition = self.p_transfer = self.p_moment = self.p_tick_skip = 0.0
        self.p_sync_now = 1.0
        self.net.drop_p = self.net.dup_p = self.net.delay_p = 0.0
        self.net.reorder = False

    def deliver(self) -> None:
        for m in self.net.due(self.now):
            node = self.nodes[m.to]
            if node.paused_until > self.now:
                self.net.requeue(m, node.paused_until)
            elif node.up:
                batch(node, m)


def batch(node: Any, m: Any) -> None:
    node.member.on_batch(Batch("", m.frm, "", "", [m], []))


def three_node_seed() -> int:
    for seed in range(200):
        probe = Calm(seed)
        probe.close()  # its members' directory, made when it was built
        if len(probe.ids) == 3:
            return seed
    raise AssertionError("no seed below 200 gives three members")


def test_a_resumed_leader_holds_no_lease_on_its_successors_batch() -> None:
    sim = Calm(three_node_seed())
    try:
        def leader() -> Any:
            return next((n for n in sim.nodes.values() if n.member.is_leader and n.member.lease_valid()), None)

        for _ in range(500):
            sim.tick(faults=False)
            if leader() is not None:
                break
        old = leader()
        assert old is not None, "no leader with a lease in 500 ticks"
        old_term = old.member.term

        old.paused_until = 10**9  # SIGSTOP: it reads nothing and its clock does not fire
        for _ in range(500):
            sim.tick(faults=False)
            if any(n is not old and n.member.is_leader for n in sim.nodes.values()):
                break
        successor = next(n for n in sim.nodes.values() if n is not old and n.member.is_leader)
        assert successor.member.term > old_term

        old.paused_until = 0  # SIGCONT: the first thing it reads is its successor's batch
        waiting = [m for m in sim.net.due(10**9) if m.to == old.id and m.frm == successor.id]
        for m in waiting:  # in the order sent (its pre-vote request does not change a term; an append does)
            batch(old, m)
            if old.member.node.term > old_term:
                break
        assert old.member.node.term > old_term, "no message of the successor's term reached the resumed leader"
        assert not old.member.lease_valid(), (
            f"{old.id} (published role {old.member.role}, term {old.member.term}) holds a lease after reading "
            f"its successor's term-{m.term} {m.type.name} batch")
    finally:
        sim.close()
