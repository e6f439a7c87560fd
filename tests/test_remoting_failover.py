"""A remoting client across a controller-mode and a DLedger failover (issue 19, point 3).

Apache's remoting producer and push consumer, unchanged (peers/java/src/RemotingFailoverTool.java,
rocketmq-client 5.3.3), send at a steady pace to a three-broker group (controller mode, or one
DLedger group) while the test kills the master (brokerId 0) with kill -9. Routes come from
RocketScope's name server over remoting; the controller (or the DLedger election) makes a new
master, which registers as brokerId 0, and the clients (route poll 1 s) move to it. While the group
has no master its route is read-only, and Apache's producer finds no writable queue ("No route info
of this topic"), as against Apache's name server, which drops the dead master's address and whose
producer skips a broker name without brokerId 0 (MQClientInstance.topicRouteData2TopicPublishInfo).

Ground truth: the keys the producer was told were stored (SEND_OK) must all be consumed; the
sends that fail are those Apache's own retry policy cannot save (retryTimesWhenSendFailed = 2,
three attempts, all to the one broker name the route has, whose master is gone until the route
names the new one), so failures are allowed only inside the window from the kill to the route's
new master plus one route poll and one send timeout; none before the kill, none after.

Long (about 60 s each: a controller or none, three brokers and a JVM):
``.venv/bin/pytest -q tests/test_remoting_failover.py``
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import LocalCluster, cluster_with_namesrv, ha_status, start_dledger_group, stop_together, wait_until
from conftest import failed_call
from test_e2e_controller import BROKER_TIMING, start_controllers
from test_remoting_java_secure import java_classes

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "peers"))
import reference_cluster as ref  # peers/ is not a package

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long]
SOURCE = Path(__file__).resolve().parent.parent / "peers" / "java" / "src" / "RemotingFailoverTool.java"
TOPIC, GROUP = "RemotingFailoverT", "broker-c"
COUNT, INTERVAL_MS = 200, 75  # 15 s of sends; the kill comes after KILL_AFTER acknowledged ones
KILL_AFTER = 40
ROUTE_POLL_S = 1.0  # the tool's pollNameServerInterval
SEND_TIMEOUT_S = 3.0  # the producer's sendMsgTimeout (default): a send in flight to the killed master


class ToolRun:
    """The Java tool as a child process; its JSON events with the monotonic time each arrived."""

    def __init__(self, cluster: LocalCluster, *args: str) -> None:
        cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *ref.JDK17_OPENS,
               f"-Duser.home={cluster.root}", "-Drocketmq.log.level=WARN", "-cp",
               f"{java_classes(SOURCE)}:{ref.LIB}/*", "RemotingFailoverTool", *args]
        with open(cluster.root / "java.err", "w") as err:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, stdin=subprocess.DEVNULL)
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self.lock:
                    self.events.append((time.monotonic(), json.loads(line)))

    def of(self, kind: str) -> list[tuple[float, dict[str, Any]]]:
        with self.lock:
            return [(t, e) for t, e in self.events if e["event"] == kind]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.reader.join(10)


def master_addr(namesrv: str) -> str | None:
    """brokerId 0 of broker-c in the name server's cluster info, asked over remoting as the clients ask."""
    with RemotingClient(namesrv) as ns:
        info = json.loads(ns.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).body)
    return info["brokerAddrTable"].get(GROUP, {}).get("brokerAddrs", {}).get("0")


@pytest.fixture(params=["controller", "dledger"])
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    java_classes(SOURCE)  # compile (or skip) before any process starts
    with cluster_with_namesrv(tmp_path_factory.mktemp(f"remoting-failover-{request.param}"),
                              lambda: failed_call(request)) as c:
        if request.param == "dledger":
            start_dledger_group(c, GROUP, flushDiskType="SYNC_FLUSH")
            yield c
            return
        # one controller: the brokers' failover is under test, not the controllers' own
        controllers, ports = start_controllers(c.root, n=1)
        try:
            addrs = ";".join(f"127.0.0.1:{p}" for p in ports)
            for i in range(3):
                c.start_broker(f"c{i}", brokerName=GROUP, enableControllerMode="true", controllerAddr=addrs,
                               allAckInSyncStateSet="true", minInSyncReplicas=1, flushDiskType="SYNC_FLUSH",
                               **BROKER_TIMING)
            yield c
            if failed_call(request):
                print("\n".join(p.log()[-5000:] for p in controllers))
        finally:
            stop_together(controllers)


def wait_replicated(c: LocalCluster, addr: str) -> None:
    """Controller mode: every broker in the master's SyncStateSet. DLedger: all three members in the group's view."""
    node = next(n for n in c.brokers.values() if n.admin_addr == addr)
    status = ha_status(node.admin_addr)
    if "syncStateSet" in status:
        wait_until(lambda: len(ha_status(node.admin_addr)["syncStateSet"]) == 3, timeout=60,
                   what="all three brokers in the SyncStateSet")
    else:
        with RemotingClient(c.namesrv_addr) as ns:
            wait_until(lambda: len(json.loads(ns.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).body)
                                   ["brokerAddrTable"][GROUP]["brokerAddrs"]) == 3, timeout=60,
                       what="three members of the DLedger group registered")


@pytest.mark.timeout(300)
def test_java_remoting_clients_keep_working_across_a_failover(cluster: LocalCluster) -> None:
    c = cluster
    nodes = list(c.brokers.values())
    by_addr = {n.admin_addr: n for n in nodes}
    first = wait_until(lambda: master_addr(c.namesrv_addr), timeout=60, what="a master (brokerId 0) in the route")
    c.admin("updateTopic", "-b", first, "-t", TOPIC, "-r", "4", "-w", "4")
    wait_replicated(c, first)
    run = ToolRun(c, c.namesrv_addr, TOPIC, "FailoverP", "FailoverC", str(COUNT), str(INTERVAL_MS), "60")
    try:
        wait_until(lambda: len(run.of("sent")) >= KILL_AFTER, timeout=120, what=f"{KILL_AFTER} sends acknowledged")
        assert not run.of("failed"), run.of("failed")  # nothing fails before the fault
        by_addr[first].proc.kill9()
        killed = time.monotonic()
        second = wait_until(lambda: (m := master_addr(c.namesrv_addr)) not in (None, first) and m, timeout=60,
                            interval=0.02, what="a new master (brokerId 0) in the name server's route")
        routed = time.monotonic()
        wait_until(lambda: run.of("summary"), timeout=180, what="the tool's summary")
    finally:
        run.close()
    (_, summary), = run.of("summary")
    (_, started), = run.of("started")
    failed = run.of("failed")
    window = routed - killed + ROUTE_POLL_S + SEND_TIMEOUT_S
    print(f"{c.root.name} over remoting: {summary}; new master {second} in the route "
          f"{routed - killed:.2f} s after kill -9; failed sends {[e['i'] for _, e in failed]} "
          f"(errors: {sorted({e['error'][:80] for _, e in failed})})")
    assert started["retryTimesWhenSendFailed"] == 2  # the official default the tolerance is derived from
    assert summary["sent"] == COUNT and summary["acked"] + summary["failed"] == COUNT
    late = [(round(t - killed, 2), e) for t, e in failed if t - killed > window]
    assert not late, f"sends failed later than {window:.1f} s after the kill: {late}"
    assert summary["failed"] <= window * 1000 / INTERVAL_MS + 1, summary
    assert summary["missing"] == 0, f"acknowledged messages never consumed: {summary}"
    after = [e for t, e in run.of("sent") if t > killed + window]
    assert after, "no send was acknowledged after the failover"
    assert by_addr[second].proc.alive
