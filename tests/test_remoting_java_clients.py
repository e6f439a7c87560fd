"""Every kind of Apache's Java remoting client against RocketScope in one JVM (issue 19, point 2).

``peers/java/src/RemotingClientsTool.java`` (rocketmq-client 5.3.3, unchanged) runs side by side: sync,
async, oneway and batch sends with message trace on; a push consumer (concurrently) and a lite pull
consumer of them; an orderly push consumer of 3 keys' messages sent to their queues; a transactional
producer whose "check" message is committed only by the broker's check-back (CHECK_TRANSACTION_STATE) and
whose "rollback" one must never arrive; a delay-level message; a consumer that fails "retry-ok" once and
"to-dlq" always (maxReconsumeTimes 1), and a push consumer of the group's DLQ; then mqadmin 5.3.3
(MQAdminStartup in the same JVM) clusterList, topicList, topicRoute, updateTopic, consumerProgress,
queryMsgById and queryMsgTraceById. One JVM start pays for all of it (its time: docs/REMOTING.md).

Ground truth is what the tool sent and counted, and what this test configured: the broker's
``messageDelayLevel`` (level 2 = 3 s, the retry levels 1 s), its transaction check timing. RocketScope's
own trace lookup must show the Java client's Pub and Sub records. ``test_same_on_apache`` (long) runs the
same tool against Apache RocketMQ 5.3.3 and compares the outcomes.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from peers_support import ReferenceCluster
from peers_support import rc as ref
from test_remoting_java_secure import java_classes

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SOURCE = Path(__file__).resolve().parent.parent / "peers" / "java" / "src" / "RemotingClientsTool.java"
DELAY_LEVEL = 2
DELAY_S = 3  # level 2 of the broker's messageDelayLevel below
# the client's rebalance every 1 s (default 20 s): a consumer reads its %RETRY% topic and the DLQ consumer
# its topic only from the rebalance after their routes appear (both are created after the clients start)
REBALANCE_1S = "-Drocketmq.client.rebalance.waitInterval=1000"
LEVELS = "1s 3s " + " ".join(["1s"] * 16)  # level 3 + reconsumeTimes, the retries' levels: 1 s


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("java-clients"), lambda: failed_call(request)) as c:
        c.start_broker("broker-a", traceTopicEnable="true", messageDelayLevel=LEVELS,
                       transactionTimeOut=1000, transactionCheckInterval=1000)
        yield c


def run_clients(namesrv: str, home: Path, prefix: str, timeout_s: int = 90) -> list[dict[str, Any]]:
    """One run of the tool (it exits 1 when a consumer did not get what it should; the events say which)."""
    res = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *ref.JDK17_OPENS,
                          f"-Duser.home={home}", "-Drocketmq.log.level=WARN", REBALANCE_1S,
                          "-Drmq.logback.configurationFile=rmq.tools.logback.xml", "-cp",
                          f"{java_classes(SOURCE)}:{ref.LIB}/*", "RemotingClientsTool", namesrv, prefix,
                          str(DELAY_LEVEL), str(timeout_s), "mqadmin"],
                         capture_output=True, text=True, timeout=timeout_s * 2 + 60, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, ROCKETMQ_HOME=str(home)))
    events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    marks = [(e["s"], e.get("what", e.get("cmd", e.get("kind", ""))), e["t"]) for e in events
             if e["s"] in ("wait", "mqadmin", "summary") or (e["s"] == "send" and e["kind"] == "transaction")]
    print("RemotingClientsTool timeline (ms since its start):", marks)
    assert events and events[-1].get("s") == "summary", f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return events


def outcome(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the clients saw, in a form that does not depend on ids, queues or timing."""
    def of(s: str) -> list[dict[str, Any]]:
        return [e for e in events if e["s"] == s]

    sends = of("send")
    orderly: dict[str, list[int]] = {}
    for e in of("orderly"):
        _, key, seq = e["body"].split("-")
        orderly.setdefault(key, []).append(int(seq))
    retry = sorted((e["body"], e["reconsumeTimes"], e["result"]) for e in of("retry"))
    return {
        "send_status": sorted({(e["kind"], e.get("status", "-")) for e in sends}),
        "push": sorted(e["body"] for e in of("push")),
        "litepull": sorted(e["body"] for e in of("litepull")),
        "orderly": orderly,
        "tx_local": sorted((e["body"], e["local"]) for e in sends if e["kind"] == "transaction"),
        "tx_consumed": sorted(e["body"] for e in of("txconsume")),
        "tx_checked": sorted({e["body"] for e in of("txcheck")}),
        "delay": [e["body"] for e in of("delayconsume")],
        "retry": sorted(set(retry)),
        "dlq": sorted((e["body"], e["reconsumeTimes"]) for e in of("dlq")),
        "waits": {e["what"]: e["ok"] for e in of("wait")},
    }


P_BODIES = sorted([f"{k}-{i}" for k in ("sync", "async", "oneway", "batch") for i in range(3)])
EXPECTED = {
    "send_status": [("async", "SEND_OK"), ("batch", "SEND_OK"), ("delay", "SEND_OK"), ("oneway", "-"),
                    ("ordered", "SEND_OK"), ("retry", "SEND_OK"), ("sync", "SEND_OK"), ("transaction", "SEND_OK")],
    "push": P_BODIES,
    "litepull": P_BODIES,
    "orderly": {str(k): [0, 1, 2, 3] for k in range(3)},
    "tx_local": [("check", "UNKNOW"), ("commit", "COMMIT_MESSAGE"), ("rollback", "ROLLBACK_MESSAGE")],
    "tx_consumed": ["check", "commit"],
    "tx_checked": ["check"],
    "delay": ["delayed"],
    "retry": [("retry-ok", 0, "RECONSUME_LATER"), ("retry-ok", 1, "CONSUME_SUCCESS"),
              ("to-dlq", 0, "RECONSUME_LATER"), ("to-dlq", 1, "RECONSUME_LATER")],
    "dlq": [("to-dlq", 2)],  # reconsumeTimes + 1 on the DLQ copy, as on a retry copy (Apache's, run)
    "waits": dict.fromkeys(("push", "orderly", "txconsume", "delayconsume", "retry", "dlq", "litepull"), True),
}


def mqadmin_out(events: list[dict[str, Any]], cmd: str) -> str:
    return next(e["out"] for e in events if e["s"] == "mqadmin" and e["cmd"] == cmd)


def max_offset(addr: str, topic: str, queues: int) -> int:
    with RemotingClient(addr) as b:
        return sum(int(b.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}).fields["offset"])
                   for q in range(queues))


def test_every_java_client_kind_and_mqadmin_on_rocketscope(cluster: LocalCluster) -> None:
    events = run_clients(cluster.namesrv_addr, cluster.root, "J")
    got = outcome(events)
    assert got == EXPECTED, json.dumps(events[-40:], indent=None)
    # each orderly key's messages went to one queue and came in that queue's order
    for k in range(3):
        offsets = [(e["queueId"], e["queueOffset"]) for e in events
                   if e["s"] == "orderly" and e["body"].startswith(f"order-{k}-")]
        assert len({q for q, _ in offsets}) == 1 and offsets == sorted(offsets)
    # the delay this test configured (level 2 = 3 s; the timer's slots are 1 s, timerPrecisionMs)
    assert next(e["afterSendMs"] for e in events if e["s"] == "delayconsume") >= (DELAY_S - 1) * 1000
    # the rolled-back half message never reached its topic: the topic holds exactly the two committed ones
    broker = cluster.brokers["broker-a"].admin_addr
    assert max_offset(broker, "JT", 4) == 2
    # mqadmin 5.3.3 against RocketScope
    assert "broker-a" in mqadmin_out(events, "clusterList")
    assert "JP" in mqadmin_out(events, "topicList")
    assert '"readQueueNums":4' in mqadmin_out(events, "topicRoute")
    assert "success" in mqadmin_out(events, "updateTopic")
    assert "JP" in mqadmin_out(events, "consumerProgress")
    sync0 = next(e for e in events if e["s"] == "send" and e["body"] == "sync-0")
    assert sync0["key"] in mqadmin_out(events, "queryMsgById")
    assert "JPG" in mqadmin_out(events, "queryMsgTraceById")
    # RocketScope's own lookup shows the Java client's trace records (Pub by JPG, Sub by JCG)
    def traced() -> bool:
        out = cluster.admin("queryMsgTraceById", "-i", sync0["msgId"], check=False).stdout
        return all(w in out for w in ("Pub", "JPG", "Sub", "JCG"))

    wait_until(traced, timeout=30, what="the Java client's Pub and Sub records")


@pytest.mark.long
def test_same_on_apache(apache_rocketmq: ReferenceCluster, tmp_path: Path) -> None:
    """The same tool against Apache RocketMQ 5.3.3 (its default messageDelayLevel: level 2 is 5 s, a
    retry 10 s; its check-back after transactionTimeOut 3 s): the outcome is the same."""
    events = run_clients(apache_rocketmq.namesrv_addr, tmp_path, "A", timeout_s=150)
    got = outcome(events)
    # Apache's check-back may also ask about a half message whose commit or rollback it has not read from its
    # op queue yet, and a commit answered then is delivered again (seen under load averages of 25-40: all three
    # asked; "commit" consumed 3 times and "check" twice in one run): compared as sets, the duplicates noted in
    # docs/COMPATIBILITY.md R21; RocketScope's run above delivers each once and asks only about "check"
    tx = [e for e in events if e["s"] in ("txcheck", "txconsume")]
    assert "check" in got["tx_checked"] and set(got["tx_checked"]) <= {"check", "commit", "rollback"}, tx
    assert sorted(set(got["tx_consumed"])) == ["check", "commit"], tx
    got["tx_checked"], got["tx_consumed"] = ["check"], ["check", "commit"]
    assert got == EXPECTED, json.dumps(events[-40:], indent=None)
