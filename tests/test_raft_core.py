"""Unit tests of the Raft core's individual rules, on a tiny synchronous in-memory cluster.

The cluster delivers every message at once (unless a link is cut) and follows the Ready
contract with an fsync that is instant: persist, send (early messages first), apply, advance.
"""

from __future__ import annotations

import pytest

from rocketscope.broker.raft import (
    Entry,
    EntryKind,
    EventKind,
    HardState,
    LeaderTransferring,
    MemoryStorage,
    Message,
    MsgType,
    NotLeader,
    RaftConfig,
    RaftConfigError,
    RaftEvent,
    RaftNode,
    RaftSafetyError,
    Ready,
    Role,
)
from rocketscope.broker.raft.config import FAULT_COMMIT_OLD_TERM, FAULT_COUNT_UNSYNCED


class Cluster:
    def __init__(self, n: int = 3, logs: dict[str, list[tuple[int, int]]] | None = None,
                 terms: dict[str, int] | None = None, **cfg: object) -> None:
        self.ids = tuple(f"n{i}" for i in range(n))
        self.cfg = cfg
        self.storage: dict[str, MemoryStorage] = {}
        self.nodes: dict[str, RaftNode] = {}
        self.events: dict[str, list[RaftEvent]] = {i: [] for i in self.ids}
        self.applied: dict[str, list[Entry]] = {i: [] for i in self.ids}
        self.blocked: set[tuple[str, str]] = set()
        self.inbox: list[Message] = []
        self.sent: list[Message] = []
        for k, nid in enumerate(self.ids):
            ents = [Entry(i, t, EntryKind.NORMAL, f"{i}".encode()) for i, t in (logs or {}).get(nid, [])]
            st = MemoryStorage(ents, HardState(term=(terms or {}).get(nid, 0)))
            self.storage[nid] = st
            self.nodes[nid] = RaftNode(self.config(nid), st, st.hard_state, rng_seed=k)

    def config(self, nid: str) -> RaftConfig:
        return RaftConfig(node_id=nid, peers=self.ids, **self.cfg)  # type: ignore[arg-type]

    def restart(self, nid: str) -> None:
        st = self.storage[nid]
        self.nodes[nid] = RaftNode(self.config(nid), st, st.hard_state, rng_seed=99)
        self.applied[nid] = []

    def drain(self, nid: str) -> None:
        node = self.nodes[nid]
        while node.has_ready():
            rd = node.ready()
            self.storage[nid].save(rd.hard_state, rd.entries)
            for m in rd.early_messages + rd.messages:
                self.sent.append(m)
                if (m.frm, m.to) not in self.blocked:
                    self.inbox.append(m)
            self.applied[nid].extend(rd.committed_entries)
            self.events[nid].extend(rd.events)
            node.advance(rd)

    def deliver(self, rounds: int = 200) -> None:
        for _ in range(rounds):
            for nid in self.ids:
                self.drain(nid)
            if not self.inbox:
                return
            msgs, self.inbox = self.inbox, []
            for m in msgs:
                if (m.frm, m.to) not in self.blocked:
                    self.nodes[m.to].step(m)
        raise AssertionError("messages still flowing after many rounds")

    def tick(self, n: int = 1, only: tuple[str, ...] | None = None) -> None:
        for _ in range(n):
            for nid in only or self.ids:
                self.nodes[nid].tick()
            self.deliver()

    def elect(self, nid: str) -> RaftNode:
        self.nodes[nid].campaign()
        self.deliver()
        assert self.nodes[nid].role is Role.LEADER
        return self.nodes[nid]

    def isolate(self, nid: str) -> None:
        for other in self.ids:
            if other != nid:
                self.blocked |= {(nid, other), (other, nid)}

    def heal(self) -> None:
        self.blocked = set()

    def leaders(self) -> list[str]:
        return [i for i, n in self.nodes.items() if n.role is Role.LEADER]

    def kinds(self, nid: str) -> list[EventKind]:
        return [e.kind for e in self.events[nid]]

    def log(self, nid: str) -> list[tuple[int, int]]:
        return [(e.index, e.term) for e in self.storage[nid].all_entries()]


# ---------------------------------------------------------------------- elections
def test_a_single_leader_is_elected_by_ticking_and_everyone_knows_it() -> None:
    c = Cluster(3)
    c.tick(30)
    assert len(c.leaders()) == 1
    leader = c.leaders()[0]
    assert all(n.leader_id == leader for n in c.nodes.values())
    term = c.nodes[leader].term
    assert next(e for e in c.events[leader] if e.kind is EventKind.ELECTION_WON).term == term
    assert RaftEvent(EventKind.LEADER_ELECTED, term, leader=leader) in c.events[leader]


def test_election_timeouts_are_randomized_but_deterministic_for_a_seed() -> None:
    def timeouts(seed: int) -> list[int]:
        st = MemoryStorage()
        node = RaftNode(RaftConfig("n0", ("n0", "n1", "n2")), st, st.hard_state, rng_seed=seed)
        out = []
        for _ in range(8):
            ticks = 0
            while node.role is Role.FOLLOWER:
                node.tick()
                ticks += 1
            out.append(ticks)
            node.step(Message(MsgType.HEARTBEAT, "n1", "n0", node.term + 1))  # back to follower
            while node.has_ready():
                node.advance(node.ready())
        return out

    a, b = timeouts(7), timeouts(7)
    assert a == b
    assert all(6 <= t <= 12 for t in a)
    assert len(set(a)) > 1 or a != timeouts(8)


def test_vote_is_granted_once_per_term_and_persisted_in_the_same_ready() -> None:
    st = MemoryStorage()
    node = RaftNode(RaftConfig("n0", ("n0", "n1", "n2"), pre_vote=False), st, st.hard_state, rng_seed=1)
    node.step(Message(MsgType.VOTE, "n1", "n0", 5, log_term=0, index=0))
    rd = node.ready()
    assert rd.hard_state == HardState(5, "n1", 0) and rd.must_sync
    assert [(m.type, m.to, m.reject) for m in rd.messages] == [(MsgType.VOTE_RESP, "n1", False)]
    node.advance(rd)
    node.step(Message(MsgType.VOTE, "n2", "n0", 5, log_term=0, index=0))
    rd = node.ready()
    assert [(m.type, m.to, m.reject) for m in rd.messages] == [(MsgType.VOTE_RESP, "n2", True)]
    node.advance(rd)
    # A restart from the persisted hard state keeps the vote.
    st.save(HardState(5, "n1", 0), [])
    again = RaftNode(RaftConfig("n0", ("n0", "n1", "n2"), pre_vote=False), st, st.hard_state, rng_seed=2)
    again.step(Message(MsgType.VOTE, "n2", "n0", 5, log_term=0, index=0))
    assert again.ready().messages[0].reject


def out(node: RaftNode) -> list[Message]:
    """Messages of the node's next Ready (advanced at once: these tests need no storage)."""
    rd = node.ready()
    node.advance(rd)
    return rd.messages


def test_vote_is_refused_to_a_candidate_with_a_less_up_to_date_log() -> None:
    st = MemoryStorage([Entry(1, 1, EntryKind.NORMAL, b"a"), Entry(2, 2, EntryKind.NORMAL, b"b")], HardState(2))
    node = RaftNode(RaftConfig("n0", ("n0", "n1", "n2"), pre_vote=False), st, st.hard_state, rng_seed=1)
    node.step(Message(MsgType.VOTE, "n1", "n0", 3, log_term=1, index=5))  # longer log, older last term
    assert out(node)[0].reject
    node.step(Message(MsgType.VOTE, "n1", "n0", 3, log_term=2, index=1))  # same last term, shorter log
    assert out(node)[0].reject
    node.step(Message(MsgType.VOTE, "n2", "n0", 3, log_term=2, index=2))  # same last entry: granted
    assert not out(node)[0].reject


def test_pre_vote_is_answered_without_changing_term_or_vote() -> None:
    st = MemoryStorage([], HardState(4))
    node = RaftNode(RaftConfig("n0", ("n0", "n1", "n2")), st, st.hard_state, rng_seed=1)
    node.step(Message(MsgType.PRE_VOTE, "n1", "n0", 5, log_term=0, index=0))
    rd = node.ready()
    assert rd.hard_state is None
    assert [(m.type, m.term, m.reject) for m in rd.messages] == [(MsgType.PRE_VOTE_RESP, 5, False)]
    node.advance(rd)
    assert node.term == 4 and node.vote is None
    node.step(Message(MsgType.PRE_VOTE, "n2", "n0", 5, log_term=0, index=0))
    assert not out(node)[0].reject  # pre-votes are not exclusive


def test_pre_vote_never_raises_the_term_of_an_isolated_node() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    term = leader.term
    c.isolate("n2")
    c.tick(100)
    assert c.nodes["n2"].term == term  # failed pre-votes do not bump the term
    assert c.nodes["n2"].role is not Role.LEADER
    assert EventKind.ELECTION_LOST in c.kinds("n2") or c.nodes["n2"].role is Role.PRE_CANDIDATE
    c.heal()
    c.tick(20)
    assert c.leaders() == ["n0"] and c.nodes["n0"].term == term  # the healthy leader was not deposed


def test_without_pre_vote_a_returning_node_with_a_higher_term_forces_a_new_election() -> None:
    c = Cluster(3, pre_vote=False, check_quorum=False)
    c.elect("n0")
    term = c.nodes["n0"].term
    c.isolate("n2")
    c.tick(40)
    assert c.nodes["n2"].term > term + 1  # the disruption pre-vote exists to prevent
    c.heal()
    c.tick(40)
    assert len(c.leaders()) == 1 and c.nodes[c.leaders()[0]].term > term


def test_follower_in_leader_lease_ignores_a_higher_term_vote() -> None:
    c = Cluster(3)
    c.elect("n0")
    term = c.nodes["n0"].term
    c.nodes["n1"].step(Message(MsgType.VOTE, "n2", "n1", term + 5, log_term=9, index=99))
    assert c.nodes["n1"].term == term
    c.nodes["n1"].step(Message(MsgType.VOTE, "n2", "n1", term + 5, log_term=9, index=99, force=True))
    assert c.nodes["n1"].term == term + 5  # a leadership transfer bypasses the lease


def test_check_quorum_makes_a_partitioned_leader_step_down_and_refuse_proposals() -> None:
    c = Cluster(3)
    c.elect("n0")
    c.isolate("n0")
    c.tick(2 * 6, only=("n0",))
    assert c.nodes["n0"].role is Role.FOLLOWER
    assert any(e.kind is EventKind.ROLE_CHANGE and "check quorum" in e.reason for e in c.events["n0"])
    with pytest.raises(NotLeader):
        c.nodes["n0"].propose(b"x")


def test_propose_on_a_follower_names_the_leader() -> None:
    c = Cluster(3)
    c.elect("n1")
    with pytest.raises(NotLeader) as info:
        c.nodes["n0"].propose(b"x")
    assert info.value.leader_id == "n1"


# ---------------------------------------------------------------------- replication and commit
def test_proposals_commit_at_a_majority_and_apply_everywhere_in_order() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    c.isolate("n2")
    idx = [leader.propose(f"m{i}".encode()) for i in range(5)]
    c.deliver()
    assert leader.commit_index == idx[-1]  # n0 + n1 are a majority
    assert [e.data for e in c.applied["n1"] if e.kind is EntryKind.NORMAL] == [f"m{i}".encode() for i in range(5)]
    assert [e.index for e in c.applied["n2"]] == [1]  # only the no-op it got before the cut
    c.heal()
    c.tick(4)
    assert c.log("n2") == c.log("n0")
    assert [e.index for e in c.applied["n2"]] == list(range(1, idx[-1] + 1))
    acks = [e for e in c.events["n0"] if e.kind is EventKind.REPLICA_ACK and e.peer == "n2"]
    assert acks and acks[-1].index == idx[-1]
    commits = [e for e in c.events["n0"] if e.kind is EventKind.COMMIT_ADVANCED]
    assert commits[-1].index == idx[-1]


def _leader_writes_unsynced(c: Cluster, data: bytes) -> tuple[RaftNode, Ready, int]:
    """The leader's Ready with a new entry, written but not advanced (its fsync still running)."""
    leader = c.nodes["n0"]
    index = leader.propose(data)
    rd = leader.ready()
    c.storage["n0"].save(rd.hard_state, rd.entries)
    return leader, rd, index


def test_a_leader_sends_its_appends_before_its_fsync_and_votes_and_acks_wait() -> None:
    c = Cluster(3, pre_vote=False)
    c.elect("n0")
    _, rd, index = _leader_writes_unsynced(c, b"x")
    assert rd.must_sync and [e.index for e in rd.entries] == [index]
    early = [(m.type, m.to, [e.index for e in m.entries]) for m in rd.early_messages]
    assert early == [(MsgType.APP, "n1", [index]), (MsgType.APP, "n2", [index])]
    assert not rd.messages
    # a follower's acknowledgement promises its fsync: it never leaves early
    c.nodes["n1"].step(rd.early_messages[0])
    ack = c.nodes["n1"].ready()
    assert ack.must_sync and not ack.early_messages
    assert [(m.type, m.index) for m in ack.messages] == [(MsgType.APP_RESP, index)]
    # a Ready that changes the term (a candidate's) sends nothing early either
    c.nodes["n2"].campaign()
    vote = c.nodes["n2"].ready()
    assert vote.must_sync and vote.hard_state is not None and not vote.early_messages
    assert {m.type for m in vote.messages} == {MsgType.VOTE}


@pytest.mark.parametrize(("faults", "commits_early"), [(frozenset(), False),
                                                       (frozenset({FAULT_COUNT_UNSYNCED}), True)])
def test_a_leader_counts_its_own_entry_toward_the_commit_only_once_it_is_synced(
        faults: frozenset[str], commits_early: bool) -> None:
    c = Cluster(3, testing_faults=faults)
    c.elect("n0")
    leader, rd, index = _leader_writes_unsynced(c, b"x")
    c.nodes["n1"].step(rd.early_messages[0])
    c.drain("n1")  # n1 writes, syncs, acknowledges
    ack, c.inbox = c.inbox, []
    leader.step(ack[0])
    # leader (unsynced) + n1 is no quorum of durable copies: a crash of n0 now could lose the entry
    assert (leader.commit_index == index) is commits_early
    leader.advance(rd)  # the fsync completed
    assert leader.commit_index == index
    assert leader.progress()["n0"][0] == index


def test_an_entry_the_followers_synced_commits_without_the_leader_and_survives_its_crash() -> None:
    c = Cluster(3)
    c.elect("n0")
    leader, rd, index = _leader_writes_unsynced(c, b"kept")
    for m in rd.early_messages:
        c.nodes[m.to].step(m)
    c.drain("n1")
    c.drain("n2")
    acks, c.inbox = c.inbox, []
    for m in acks:
        leader.step(m)
    assert leader.commit_index == index  # n1 + n2: a quorum of durable copies
    # n0 crashes before its fsync: the entry is gone from its disk
    lost = MemoryStorage([e for e in c.storage["n0"].all_entries() if e.index < index], c.storage["n0"].hard_state)
    c.storage["n0"] = lost
    c.restart("n0")
    assert c.nodes["n0"].log.last_index() == index - 1
    c.tick(40)
    new = c.leaders()
    assert len(new) == 1 and new[0] != "n0"
    assert all(c.storage[n].entry(index).data == b"kept" for n in c.ids)
    assert all(any(e.index == index and e.data == b"kept" for e in c.applied[n]) for n in ("n1", "n2"))


def test_leader_commits_only_entries_of_its_own_term_by_counting_replicas() -> None:
    # n0 and n1 hold entry 2 of term 2; n0 becomes leader of term 3 (its no-op is entry 3).
    logs = {"n0": [(1, 1), (2, 2)], "n1": [(1, 1), (2, 2)], "n2": [(1, 1)]}
    for faults, expect in ((frozenset(), 0), (frozenset({FAULT_COMMIT_OLD_TERM}), 2)):
        c = Cluster(3, logs=logs, terms={"n0": 2, "n1": 2, "n2": 2}, pre_vote=False, testing_faults=faults)
        leader = c.nodes["n0"]
        leader.campaign()
        for _ in range(2):  # votes out, votes back
            c.drain("n0")
            c.drain("n1")
            c.drain("n2")
            msgs, c.inbox = c.inbox, []
            for m in msgs:
                c.nodes[m.to].step(m)
        assert leader.role is Role.LEADER and leader.term == 3
        c.drain("n0")
        c.inbox.clear()  # the appends carrying the no-op are still in flight
        # n1 acknowledges index 2 only.
        leader.step(Message(MsgType.APP_RESP, "n1", "n0", 3, index=2))
        assert leader.commit_index == expect
        leader.step(Message(MsgType.APP_RESP, "n1", "n0", 3, index=3))
        assert leader.commit_index == 3  # the no-op of term 3 commits, and entry 2 with it


def test_divergent_tail_is_truncated_and_reported() -> None:
    c = Cluster(3)
    c.elect("n0")
    c.nodes["n0"].propose(b"committed")
    c.deliver()
    c.isolate("n0")
    for i in range(3):
        c.nodes["n0"].propose(f"lost{i}".encode())  # only on the old leader
    c.deliver()
    stale_last = c.nodes["n0"].log.last_index()
    c.tick(20, only=("n1", "n2"))  # leases expire, one of them wins
    new = next(i for i in c.leaders() if i != "n0")  # n0 did not tick: it still thinks it leads
    c.nodes[new].propose(b"new")
    c.deliver()
    c.heal()
    c.tick(6)
    assert c.leaders() == [new]
    assert c.log("n0") == c.log(new)
    trunc = [e for e in c.events["n0"] if e.kind is EventKind.TRUNCATION]
    assert trunc and trunc[0].from_index == 3 and trunc[0].to_index == stale_last
    assert b"lost0" not in [e.data for e in c.storage["n0"].all_entries()]


def test_truncate_from_is_set_in_ready_when_stored_entries_are_replaced() -> None:
    st = MemoryStorage([Entry(1, 1, EntryKind.NORMAL, b"a"), Entry(2, 1, EntryKind.NORMAL, b"b")], HardState(1))
    node = RaftNode(RaftConfig("n0", ("n0", "n1", "n2")), st, st.hard_state, rng_seed=1)
    node.step(Message(MsgType.APP, "n1", "n0", 2, log_term=1, index=1,
                      entries=[Entry(2, 2, EntryKind.NORMAL, b"B"), Entry(3, 2, EntryKind.NORMAL, b"C")], commit=1))
    rd = node.ready()
    assert rd.truncate_from == 2 and [e.index for e in rd.entries] == [2, 3]
    assert any(e.kind is EventKind.TRUNCATION and (e.from_index, e.to_index) == (2, 2) for e in rd.events)


def test_a_tail_replaced_while_a_ready_is_outstanding_is_rewritten_from_the_change_only() -> None:
    st = MemoryStorage([], HardState(1))
    node = RaftNode(RaftConfig("n0", ("n0", "n1", "n2")), st, st.hard_state, rng_seed=1)
    e = [Entry(i, 1, EntryKind.NORMAL, b"v") for i in range(1, 5)]
    node.step(Message(MsgType.APP, "n1", "n0", 1, log_term=0, index=0, entries=e, commit=0))
    rd = node.ready()  # entries 1..4 handed out ...
    node.step(Message(MsgType.APP, "n2", "n0", 2, log_term=1, index=3,
                      entries=[Entry(4, 2, EntryKind.NORMAL, b"w")], commit=0))  # ... 4 replaced before advance
    st.save(rd.hard_state, rd.entries)
    node.advance(rd)
    rd = node.ready()
    assert [(x.index, x.term) for x in rd.entries] == [(4, 2)] and rd.truncate_from == 4


def test_committed_entries_are_never_truncated() -> None:
    ents = [Entry(1, 1, EntryKind.NORMAL, b"a"), Entry(2, 1, EntryKind.NORMAL, b"b")]
    st = MemoryStorage(ents, HardState(1, None, 2))
    node = RaftNode(RaftConfig("n0", ("n0", "n1", "n2")), st, st.hard_state, rng_seed=1)
    # A stale append below the commit index is answered with the commit index, log untouched.
    node.step(Message(MsgType.APP, "n1", "n0", 2, log_term=1, index=1,
                      entries=[Entry(2, 2, EntryKind.NORMAL, b"X")], commit=1))
    assert [(m.reject, m.index) for m in out(node)] == [(False, 2)]
    assert node.log.term(2) == 1
    with pytest.raises(RaftSafetyError):  # and the log itself refuses, as a last line of defence
        node.log.append([Entry(2, 2, EntryKind.NORMAL, b"X")])


def test_rejection_hint_skips_a_whole_divergent_term_per_round_trip() -> None:
    # n2's log: 30 entries of term 2 that nobody else has; the others have term-3 entries.
    logs = {
        "n0": [(1, 1)] + [(i, 3) for i in range(2, 40)],
        "n1": [(1, 1)] + [(i, 3) for i in range(2, 40)],
        "n2": [(1, 1)] + [(i, 2) for i in range(2, 32)],
    }
    c = Cluster(3, logs=logs, terms={"n0": 3, "n1": 3, "n2": 3})
    c.elect("n0")
    c.tick(3)
    assert c.log("n2") == c.log("n0")
    rejects = [m for m in c.sent if m.type is MsgType.APP_RESP and m.frm == "n2" and m.reject]
    assert 1 <= len(rejects) <= 2


def test_appends_are_batched_by_count_and_bytes_and_pipelined_within_the_window() -> None:
    c = Cluster(3, max_append_entries=10, max_append_bytes=10 * 1024, max_inflight=3)
    leader = c.elect("n0")
    c.sent.clear()
    c.isolate("n2")
    c.blocked.discard(("n0", "n2"))  # n2 receives but its answers are lost: the window fills up
    for _i in range(100):
        leader.propose(b"x" * 100)
    c.drain("n0")
    to_n2 = [m for m in c.sent if m.to == "n2" and m.type is MsgType.APP]
    assert len(to_n2) == 3  # the in-flight window
    assert all(len(m.entries) == 10 for m in to_n2)
    assert [m.entries[0].index for m in to_n2] == [2, 12, 22]  # optimistic next index (1 is the no-op)
    big = Cluster(3, max_append_entries=1000, max_append_bytes=1000)
    leader = big.elect("n0")
    big.sent.clear()
    for _i in range(20):
        leader.propose(b"y" * 200)
    big.deliver()
    apps = [m for m in big.sent if m.type is MsgType.APP and m.entries]
    assert apps and all(sum(len(e.data) + 48 for e in m.entries) <= 1000 or len(m.entries) == 1 for m in apps)
    assert big.log("n1") == big.log("n0")


def test_lost_appends_fall_back_to_probing_and_recover() -> None:
    c = Cluster(3, max_append_entries=2, max_inflight=2)
    leader = c.elect("n0")
    c.blocked.add(("n0", "n2"))
    for _i in range(10):
        leader.propose(b"z")
    c.deliver()
    c.heal()
    c.tick(6)
    assert c.log("n2") == c.log("n0")
    assert c.nodes["n0"].progress()["n2"][2] == "REPLICATE"


# ---------------------------------------------------------------------- leadership transfer
def test_leadership_transfer_catches_the_target_up_then_hands_over() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    c.blocked.add(("n0", "n2"))
    for _i in range(5):
        leader.propose(b"p")
    c.deliver()
    c.heal()
    term = leader.term
    leader.transfer_leadership("n2")
    with pytest.raises(LeaderTransferring):
        leader.propose(b"refused during transfer")
    c.deliver()
    c.tick(3)
    assert c.leaders() == ["n2"] and c.nodes["n2"].term == term + 1
    assert c.log("n2")[:7] == c.log("n0")[:7]
    assert EventKind.TRANSFER_STARTED in c.kinds("n0")


def test_leadership_transfer_to_an_unreachable_node_is_aborted_after_the_timeout() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    c.isolate("n2")
    leader.transfer_leadership("n2")
    c.tick(6, only=("n0",))
    assert leader.lead_transferee is None
    assert any(e.kind is EventKind.TRANSFER_ABORTED and e.reason == "timeout" for e in c.events["n0"])
    assert leader.role is Role.LEADER
    assert leader.propose(b"accepted again") > 0


def test_preferred_leader_takes_over_when_live_and_caught_up() -> None:
    c = Cluster(3, preferred_leader="n2", preferred_check_ticks=5)
    c.elect("n0")
    c.nodes["n0"].propose(b"a")
    c.deliver()
    c.tick(12)
    assert c.leaders() == ["n2"]
    c.tick(30)
    assert c.leaders() == ["n2"]  # and it stays there


def test_preferred_leader_that_is_down_does_not_block_the_group() -> None:
    c = Cluster(3, preferred_leader="n2", preferred_check_ticks=5)
    c.isolate("n2")
    c.elect("n0")
    c.tick(30, only=("n0", "n1"))
    assert c.leaders() == ["n0"]
    assert c.nodes["n0"].propose(b"still works") > 0


# ---------------------------------------------------------------------- Ready contract, restart, config
def test_ready_must_be_advanced_before_the_next_one() -> None:
    c = Cluster(3, pre_vote=False)
    node = c.nodes["n0"]
    node.campaign()
    rd = node.ready()
    assert rd.must_sync and rd.soft_state is not None
    with pytest.raises(RuntimeError):
        node.ready()
    node.advance(rd)


def test_restart_keeps_term_vote_and_log_and_reapplies_from_applied() -> None:
    c = Cluster(3)
    leader = c.elect("n0")
    for _i in range(3):
        leader.propose(b"r")
    c.tick(3)
    term, commit = c.nodes["n1"].term, c.nodes["n1"].commit_index
    c.restart("n1")
    node = c.nodes["n1"]
    assert node.term == term and node.log.last_index() == c.nodes["n0"].log.last_index()
    rd = node.ready()
    assert [e.index for e in rd.committed_entries] == list(range(1, commit + 1))
    node.advance(rd)
    st = c.storage["n1"]
    resumed = RaftNode(c.config("n1"), st, st.hard_state, rng_seed=5, applied=commit)
    assert not resumed.ready().committed_entries


def test_config_errors_say_what_to_fix() -> None:
    with pytest.raises(RaftConfigError, match="must be one of peers"):
        RaftConfig("x", ("a", "b", "c"))
    with pytest.raises(RaftConfigError, match="election_ticks_min"):
        RaftConfig("a", ("a", "b", "c"), heartbeat_ticks=3, election_ticks_min=3)
    with pytest.raises(RaftConfigError, match="testing_faults"):
        RaftConfig("a", ("a", "b", "c"), testing_faults=frozenset({"nope"}))


def test_five_nodes_survive_two_failures() -> None:
    c = Cluster(5)
    leader = c.elect("n0")
    c.isolate("n3")
    c.isolate("n4")
    c.blocked -= {(a, b) for a in ("n0", "n1", "n2") for b in ("n0", "n1", "n2")}
    idx = leader.propose(b"five")
    c.deliver()
    assert leader.commit_index == idx


@pytest.mark.parametrize("eager", [True, False])
def test_a_lazy_commit_broadcast_sends_no_empty_appends_under_load_and_catches_up_at_the_next_tick(
        eager: bool) -> None:
    """With ``eager_commit_broadcast`` off (DLedger), a commit travels with the next append that carries
    entries instead of an empty append (and its answer) to every follower; followers still apply every
    entry, and the last commit reaches them at the leader's next tick.  Counted from the messages sent."""
    c = Cluster(3, eager_commit_broadcast=eager)
    leader = c.elect("n0")
    c.sent.clear()
    for i in range(20):  # one proposal per round trip: steady load, one entry per Ready
        leader.propose(f"m{i}".encode())
        c.deliver()
    empty = [m for m in c.sent if m.type is MsgType.APP and not m.entries]
    full = [m for m in c.sent if m.type is MsgType.APP and m.entries]
    assert len(full) == 40  # one append with the entry per follower per proposal, either way
    want = [f"m{i}".encode() for i in range(20)]
    if eager:
        assert len(empty) == 40  # and one empty append per follower per commit
        assert all([e.data for e in c.applied[f] if e.kind is EntryKind.NORMAL] == want for f in ("n1", "n2"))
        return
    assert not empty
    for f in ("n1", "n2"):  # every commit but the last arrived with the next entry
        assert [e.data for e in c.applied[f] if e.kind is EntryKind.NORMAL] == want[:-1]
    c.tick(1, only=("n0",))
    assert [m for m in c.sent if m.type is MsgType.APP and not m.entries]  # the tick sent the last commit
    for f in ("n1", "n2"):
        assert [e.data for e in c.applied[f] if e.kind is EntryKind.NORMAL] == want
