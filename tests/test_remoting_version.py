"""A remoting client's ``version`` (an MQVersion.Version ordinal) shown by name, as Apache shows it.

Ground truth: the enum in Apache's rocketmq-common 5.3.3 jar (its declaration order is the ordinal
order: javap lists it), and what Apache RocketMQ 5.3.3's broker labels the connection gauge with for
the same heartbeat frame (version 479, what Apache's Java client 5.3.3 sends). Before session 14
RocketScope labelled it ``v479`` and `rocketscope admin consumerConnection` printed ``479``.

Long part (Apache's broker, minutes to start cold): ``.venv/bin/pytest -q tests/test_remoting_version.py -m long``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import LocalCluster, cluster_with_namesrv
from conftest import failed_call, free_port
from peers_support import require_peers
from telemetry_support import samples, scrape, wait_until

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode
from rocketscope.broker.remoting.mq_version import names, version_desc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "peers"))
import reference_cluster as ref  # peers/ is not a package

COMMON_JAR = ref.LIB / "rocketmq-common-5.3.3.jar"


def test_ordinals_are_named_as_mqversion_names_them() -> None:
    # values read from the 5.3.3 jar's enum (MQVersion.Version.values(), MQVersion.getVersionDesc)
    assert [version_desc(i) for i in (0, 1, 15, 16, 17, 409, 478, 479, 611)] == [
        "V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1", "V3_0_0_FINAL", "V3_0_1_SNAPSHOT", "V3_0_1", "V4_9_8",
        "V5_3_3_SNAPSHOT", "V5_3_3", "V5_9_9"]
    assert version_desc(612) == version_desc(100_000) == "HIGHER_VERSION"  # getVersionDesc past the end
    assert version_desc(-3) == "-3"  # no Apache client sends one: shown as it came
    assert len(names()) == 613


@pytest.mark.e2e
def test_the_table_is_apaches_enum() -> None:
    require_peers()
    res = subprocess.run(["javap", "-cp", str(COMMON_JAR), "org.apache.rocketmq.common.MQVersion$Version"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    declared = re.findall(r"public static final org\.apache\.rocketmq\.common\.MQVersion\$Version (\w+);",
                          res.stdout)
    assert list(names()) == declared


def heartbeat(group: str) -> dict[str, Any]:
    """One HEART_BEAT of a push consumer group, as Apache's Java client 5.3.3 frames it (language JAVA,
    version 479)."""
    return {"clientID": f"version-client@{group}", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "VersionT", "subString": "*", "expressionType": "TAG", "tagsSet": [],
                                 "codeSet": [], "subVersion": 1}]}]}


def version_labels(url: str, group: str) -> list[str]:
    return [labels.get("version", "") for name, labels, _ in samples(scrape(url))
            if name == "rocketmq_consumer_connections" and labels.get("consumer_group") == group]


@pytest.fixture()
def rocketscope(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-version"), lambda: failed_call(request)) as c:
        port = free_port()
        c.start_broker("broker-a", metricsExporterType="PROM", metricsPromExporterHost="127.0.0.1",
                       metricsPromExporterPort=port, autoCreateSubscriptionGroup="true")
        c.prom_url = f"http://127.0.0.1:{port}/metrics"  # type: ignore[attr-defined]
        yield c


@pytest.mark.e2e
@pytest.mark.long
@pytest.mark.timeout(900)
def test_same_version_label_and_connection_view_as_apache(rocketscope: LocalCluster, apache_rocketmq: Any) -> None:
    group = "VersionG"
    seen = {}
    targets = (("apache", apache_rocketmq.broker_addr, apache_rocketmq.metrics_url),
               ("rocketscope", rocketscope.brokers["broker-a"].admin_addr, rocketscope.prom_url))  # type: ignore
    for name, addr, url in targets:
        # the connection stays open while the gauge and the connection view are read: a client leaves with it
        with RemotingClient(addr, language="JAVA", version=479) as b:
            resp = b.invoke(RequestCode.HEART_BEAT, {}, json.dumps(heartbeat(group)).encode())
            assert resp.code == ResponseCode.SUCCESS, (name, resp.remark)
            seen[name] = wait_until(lambda u=url: version_labels(u, group), timeout=120,
                                    what=f"{name}'s consumer connection gauge of {group}")
            if name == "rocketscope":
                # `rocketscope admin consumerConnection` names it as mqadmin consumerConnection does
                out = rocketscope.admin_json("consumerConnection", "-g", group)
                assert [c["version"] for c in out] == ["V5_3_3"], out
    print(seen)
    assert seen["rocketscope"] == seen["apache"] == ["v5_3_3"]
