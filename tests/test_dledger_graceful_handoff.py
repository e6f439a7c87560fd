"""A DLedger leader stopped gracefully hands leadership over before it goes (issue 15).

Found by the chaos harness (session 13, restart kind, quiet machine): after a SIGTERM of the leader
no send succeeded for 1.35-1.45 s, three times a kill -9's 0.5 s: the stopping leader kept leading
(and heartbeating) while it stopped its services, and the followers elected a new leader only an
election timeout after its last heartbeat, through a pre-vote round.  Now the stopping leader first
transfers leadership to its most caught-up follower, which campaigns at once (Raft's TimeoutNow: no
pre-vote, no timeout waited out).  Ground truth: the leader the test stops, and what the members log:
the old leader names the member it hands over to, that member becomes the leader, and it never went
through a pre-vote round to get there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster import LocalCluster, cluster_with_namesrv, ha_status, start_dledger_group, wait_until
from conftest import failed_call

pytestmark = pytest.mark.e2e
PRE_VOTE = "'role': 'PRE_CANDIDATE'"


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("handoff"), lambda: failed_call(request)) as c:
        yield c


def leader_of(c: LocalCluster, names: list[str]) -> tuple[str, str] | None:
    """(broker name, Raft id) of the member that reports it leads, among the running ``names``."""
    for name in names:
        node = c.brokers[name]
        if not node.proc.alive:
            continue
        try:
            st = ha_status(node.admin_addr)
        except AssertionError:
            continue
        if st.get("role") == "LEADER":
            return name, st["selfId"]
    return None


def test_a_stopping_leader_hands_leadership_to_a_follower_without_an_election_timeout(cluster: LocalCluster) -> None:
    c = cluster
    nodes = start_dledger_group(c, "broker-h")
    names = [n.name for n in nodes]
    old_name, old_id = wait_until(lambda: leader_of(c, names), timeout=60, what="a leader")
    wait_until(lambda: all(ha_status(n.admin_addr).get("leader") == old_id for n in nodes), timeout=60,
               what="every member following the leader")
    pre_votes_before = {n.name: n.proc.log().count(PRE_VOTE) for n in nodes}

    c.brokers[old_name].proc.stop()  # SIGTERM, and wait for the process to end

    others = [n for n in names if n != old_name]
    new_name, new_id = wait_until(lambda: leader_of(c, others), timeout=60, what="a new leader")
    assert f"handing leadership to {new_id}" in c.brokers[old_name].proc.log(), \
        "the stopping leader did not hand leadership over"
    assert c.brokers[new_name].proc.log().count(PRE_VOTE) == pre_votes_before[new_name], \
        f"{new_name} went through a pre-vote round: it took leadership by an election timeout, not a hand-over"
