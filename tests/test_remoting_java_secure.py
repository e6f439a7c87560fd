"""Apache's Java remoting client (rocketmq-client 5.3.3) against a broker with TLS enforcing and aclEnable.

The driver is peers/java/src/RemotingSecureTool.java: DefaultMQProducer / DefaultMQPushConsumer
with Apache's ``AclClientRPCHook`` and ``-Dtls.enable=true`` (TlsSystemConfig), compiled here against
the release's lib/ (from `make peers`) into the peers cache, once per source version.  Ground truth:
what the Java client reports sent, refused and received, and the store's queue offsets read with
signed raw GET_MAX_OFFSET frames over TLS.  Each JVM costs 5-20 s on the 2-core machine, so the
module is ``long`` (run: ``.venv/bin/pytest -q tests/test_remoting_java_secure.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import BrokerNode, LocalCluster, wait_until
from peers_support import require_peers
from test_remoting_tls_e2e import QUEUES, client_ctx, start_namesrv, tls_conf, wait_registered

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode
from rocketscope.broker.security.certs import generate_dev_certs
from rocketscope.broker.security.remoting_acl import sign

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "peers"))
import reference_cluster as ref  # peers/ is not a package

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long]
SOURCE = Path(__file__).resolve().parent.parent / "peers" / "java" / "src" / "RemotingSecureTool.java"
ACL: dict[str, Any] = {
    "accounts": [
        {"accessKey": "javaProducer", "secretKey": "java-secret", "defaultTopicPerm": "PUB",
         "defaultGroupPerm": "PUB|SUB"},
        {"accessKey": "javaConsumer", "secretKey": "consumer-secret", "defaultTopicPerm": "SUB",
         "defaultGroupPerm": "SUB"},
        {"accessKey": "opsAdmin", "secretKey": "admin-secret", "admin": True},
    ],
}


def java_classes(source: Path) -> Path:
    """``source`` (a peers/java/src tool) compiled against rocketmq-5.3.3/lib, cached by the source's hash."""
    require_peers()
    digest = hashlib.sha1(source.read_bytes()).hexdigest()[:12]
    out = ref.CACHE / "classes" / f"{source.stem}-{digest}"
    if not (out / f"{source.stem}.class").exists():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["javac", "-nowarn", "-d", str(tmp), "-cp", f"{ref.LIB}/*", str(source)],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out


def tool_classes() -> Path:
    return java_classes(SOURCE)


def java_tool(root: Path, *args: str, tls: bool = True, timeout: float = 180.0) -> tuple[int, list[dict[str, Any]]]:
    props = ["-Dtls.enable=true"] if tls else []
    cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *ref.JDK17_OPENS, *props,
           f"-Duser.home={root}", "-Drocketmq.log.level=WARN", "-cp", f"{tool_classes()}:{ref.LIB}/*",
           "RemotingSecureTool", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    if res.returncode not in (0, 1) or (res.returncode == 1 and not events and "timed out" not in res.stderr):
        raise AssertionError(f"RemotingSecureTool {' '.join(args)} failed ({res.returncode}):\n{res.stderr[-4000:]}")
    return res.returncode, events


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str, BrokerNode, Path]]:
    tool_classes()  # compile (or skip) before any process starts
    root = tmp_path_factory.mktemp("remoting-java-secure")
    certs = root / "certs"
    generate_dev_certs(certs)
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(yaml.safe_dump(ACL))
    c = LocalCluster(root)
    ok = False
    try:
        ns = start_namesrv(c, "namesrv-tls", tls_conf(certs, "enforcing"))
        node = c.start_broker("broker-secure", namesrvAddr=ns, aclEnable="true", aclFile=acl_file,
                              autoCreateTopicEnable="false", **tls_conf(certs, "enforcing"),
                              innerClientAuthenticationCredentials='{"accessKey": "opsAdmin", '
                                                                   '"secretKey": "admin-secret"}')
        wait_registered(ns, certs, "broker-secure")
        with RemotingClient(node.admin_addr, tls=client_ctx(certs)) as b:
            create = {"topic": "JavaSecure", "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES), "perm": "6"}
            resp = b.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, signed(create, "opsAdmin", "admin-secret"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        with RemotingClient(ns, tls=client_ctx(certs)) as n:
            wait_until(lambda: n.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "JavaSecure"}).code == 0,
                       timeout=30, what="route of JavaSecure")
        yield c, ns, node, certs
        ok = True
    finally:
        if not ok:
            print(c.logs())
        c.stop()


def signed(fields: dict[str, str], ak: str, sk: str) -> dict[str, str]:
    out = dict(fields, AccessKey=ak)
    out["Signature"] = sign(out, b"", sk)
    return out


def stored(node: BrokerNode, certs: Path) -> int:
    with RemotingClient(node.admin_addr, tls=client_ctx(certs)) as b:
        total = 0
        for q in range(QUEUES):
            resp = b.invoke(RequestCode.GET_MAX_OFFSET,
                            signed({"topic": "JavaSecure", "queueId": str(q)}, "opsAdmin", "admin-secret"))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            total += int(resp.fields["offset"])
        return total


def test_java_client_over_tls_with_a_good_key_sends_and_consumes(
        secure: tuple[LocalCluster, str, BrokerNode, Path]) -> None:
    c, ns, node, certs = secure
    before = stored(node, certs)
    rc, sent = java_tool(c.root, "send", ns, "JavaSecure", "JavaSecureProducer", "5", "javaProducer", "java-secret")
    assert rc == 0 and [e["status"] for e in sent] == ["SEND_OK"] * 5, sent
    assert stored(node, certs) - before == 5
    rc, got = java_tool(c.root, "consume", ns, "JavaSecure", "JavaSecureReaders", str(before + 5), "90",
                        "javaConsumer", "consumer-secret")
    assert rc == 0, got[-3:]
    assert {e["msgId"] for e in sent} <= {e["msgId"] for e in got}


def test_java_client_with_a_wrong_secret_is_refused_with_the_cause(
        secure: tuple[LocalCluster, str, BrokerNode, Path]) -> None:
    c, ns, node, certs = secure
    before = stored(node, certs)
    rc, events = java_tool(c.root, "send", ns, "JavaSecure", "JavaBadKey", "2", "javaProducer", "not-the-secret")
    assert rc == 1
    assert [(e["event"], e["code"]) for e in events] == [("refused", ResponseCode.NO_PERMISSION)] * 2, events
    assert all("signature does not match for access key 'javaProducer'" in e["message"] for e in events), events
    assert not any("java-secret" in e["message"] or "not-the-secret" in e["message"] for e in events)
    assert stored(node, certs) == before


def test_java_client_without_tls_cannot_reach_an_enforcing_name_server(
        secure: tuple[LocalCluster, str, BrokerNode, Path]) -> None:
    c, ns, node, certs = secure
    before = stored(node, certs)
    res = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *ref.JDK17_OPENS,
                          f"-Duser.home={c.root}", "-Drocketmq.log.level=WARN", "-cp",
                          f"{tool_classes()}:{ref.LIB}/*", "RemotingSecureTool", "send", ns, "JavaSecure",
                          "JavaPlain", "1", "javaProducer", "java-secret"],
                         capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert res.returncode != 0 and "sent" not in res.stdout
    # the name server closed the plaintext connection: the route query itself fails
    assert f"send request to </{ns}> failed" in res.stderr, res.stderr[-2000:]
    assert stored(node, certs) == before
