"""A new DLedger group keeps the first leader it elects (real processes, started one after another).

Why: a new follower's timer, on reading the writer's first timer claim, walked every slot of its
seven-day wheel (604 800 at 1 s precision) and stalled its event loop for 1-2 s. The leader heard
nothing from it for longer than its check-quorum window and stepped down 0.6 s after winning; with
the third member still starting there was no leader for about 2 s, and in CI tests created topics
on the deposed leader (their producers then found no writable queue).  Ground truth here is each
member's own log: its "leader of term" and "no longer leader" lines.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from cluster import LocalCluster, cluster_with_namesrv, ha_status, wait_until
from conftest import failed_call, free_port

pytestmark = pytest.mark.e2e

# Raft's check-quorum window in DLedger mode is one minimum election timeout (0.6 s by default); a
# leader that is going to be deposed for silence is deposed within it.  Watching four windows after
# every member has caught up leaves the group time to show a step-down it would have made.
WATCH_S = 2.4


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("first-leader"), lambda: failed_call(request)) as c:
        yield c


def leadership_lines(c: LocalCluster) -> list[str]:
    return [line for n in c.brokers.values() for line in n.proc.log().splitlines()
            if "dledger.node: dledger" in line and (": leader of term" in line or "no longer leader" in line)]


def test_a_new_group_keeps_its_first_leader(cluster: LocalCluster) -> None:
    c = cluster
    ports = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = [c.start_broker(f"broker-f-n{i}", brokerName="broker-f", enableDLegerCommitLog="true",
                            dLegerGroup="broker-f", dLegerPeers=peers, dLegerSelfId=f"n{i}") for i in range(3)]
    # every member, the last one started included, has caught up with the leader's log (and so has read
    # the writer's timer claim)
    wait_until(lambda: len({(s["commitIndex"], s["term"]) for s in map(ha_status, (n.admin_addr for n in nodes))}) == 1
               and any(ha_status(n.admin_addr)["role"] == "LEADER" for n in nodes), timeout=60,
               what="one leader and every member at the same commit index")
    time.sleep(WATCH_S)  # an observation window (see WATCH_S), not a wait for a condition
    lines = leadership_lines(c)
    assert not [line for line in lines if "no longer leader" in line], "\n".join(lines)
    assert len([line for line in lines if ": leader of term" in line]) == 1, "\n".join(lines)
