"""Compressed message bodies over remoting (issue 19, session 11): sysFlag COMPRESSED with the
compression type bits of rocketmq-common 5.3.3 (LZ4 1, ZSTD 2, ZLIB 3; broker/remoting/compression.py).

Ground truth: the bodies sent. The raw-frame tests (seconds) compress bodies as Apache's
compressors write them (an LZ4 frame, a zstd stream without content size, a zlib stream) and
read them back through a remoting PULL and the official Python gRPC SimpleConsumer; bad bodies
are refused naming the type and store nothing. The long test has Apache's own Java producer
(peers/java/src/RemotingCompressTool.java) send bodies over its compression threshold with each
``compressType`` and its push consumer read them back; the gRPC consumer reads the same bodies.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import lz4.frame
import pytest
import zstandard
from cluster import LocalCluster, cluster_with_namesrv, wait_until
from conftest import failed_call
from rmq import drain, simple_consumer
from test_remoting_java_secure import java_classes

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode, decode_messages, properties_to_string

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "peers"))
import reference_cluster as ref  # peers/ is not a package

pytestmark = pytest.mark.e2e
COMPRESSED = 0x1
TYPES = {"LZ4": 1, "ZSTD": 2, "ZLIB": 3}
SIZE = 20_000  # over the Java producer's compressMsgBodyOverHowmuch (4096)


def compress(kind: str, body: bytes) -> bytes:
    """As Apache's Lz4Compressor / ZstdCompressor / ZlibCompressor write them (the streams they use)."""
    if kind == "LZ4":
        return lz4.frame.compress(body)
    if kind == "ZSTD":
        return zstandard.ZstdCompressor(level=5, write_content_size=False).compress(body)
    return zlib.compress(body, 5)


def body_of(kind: str, i: int, size: int = SIZE) -> bytes:
    """RemotingCompressTool.body: ``TYPE-i|`` repeated to ``size`` bytes."""
    unit = f"{kind}-{i}|"
    return (unit * (size // len(unit) + 1))[:size].encode()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("remoting-compression"), lambda: failed_call(request)) as c:
        c.start_broker("broker-a")
        yield c


def send(c: RemotingClient, topic: str, body: bytes, sys_flag: int, key: str) -> tuple[int, str]:
    got = c.invoke(RequestCode.SEND_MESSAGE, {
        "producerGroup": "CompressP", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "1",
        "queueId": "0", "sysFlag": str(sys_flag), "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
        "properties": properties_to_string({"KEYS": key, "UNIQ_KEY": key})}, body)
    return got.code, got.remark or ""


def pull_all(c: RemotingClient, topic: str, count: int) -> list[tuple[str, bytes, int]]:
    """The first ``count`` messages of queue 0 (waiting for the store's dispatch), over a remoting PULL."""
    def pulled() -> list[tuple[str, bytes, int]] | None:
        got = c.invoke(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "CompressPull", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
            "expressionType": "TAG"})
        if got.code != ResponseCode.SUCCESS:
            raise AssertionError(f"pull: {got.code} {got.remark} {got.fields}")
        msgs = [(m.properties["KEYS"], m.body, m.sys_flag) for m in decode_messages(got.body)]
        return msgs if len(msgs) >= count else None

    return wait_until(pulled, timeout=20, what=f"{count} messages pulled from {topic}")  # type: ignore[no-any-return]


def test_compressed_bodies_are_stored_plain_for_remoting_and_grpc_readers(cluster: LocalCluster) -> None:
    topic = "CompressRawT"
    cluster.admin("updateTopic", "-t", topic, "-r", "1", "-w", "1")
    node = cluster.brokers["broker-a"]
    sent = {}
    with RemotingClient(node.admin_addr) as b:
        for kind, ctype in [*TYPES.items(), ("ZLIB-4x", 0)]:  # type 0: a 4.x client's zlib
            body = body_of(kind, 0)
            code, remark = send(b, topic, compress(kind.split("-")[0], body), COMPRESSED | ctype << 8, kind)
            assert code == ResponseCode.SUCCESS, (kind, remark)
            sent[kind] = body
        pulled = pull_all(b, topic, len(sent))
    assert {k: v for k, v, _ in pulled} == sent
    assert all(flag & (COMPRESSED | 0x700) == 0 for _, _, flag in pulled)  # stored plain, flagged plain
    with simple_consumer(node.endpoint, "CompressGrpc", topic, await_s=1) as consumer:
        got = drain(consumer, len(sent), timeout=30)
    assert {next(iter(m.keys)): m.body for m in got} == sent


def test_bad_compressed_bodies_are_refused_naming_the_type(cluster: LocalCluster) -> None:
    topic = "CompressBadT"
    cluster.admin("updateTopic", "-t", topic, "-r", "1", "-w", "1")
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(5 << 20))  # 5 MiB of zeros, ~170 B
    cases = [
        (b"not an lz4 frame", COMPRESSED | 1 << 8, "LZ4-compressed"),
        (compress("ZSTD", b"x" * 9000)[:-4], COMPRESSED | 2 << 8, "ZSTD-compressed"),
        (b"\x78\x9c garbage", COMPRESSED | 3 << 8, "ZLIB-compressed"),
        (compress("LZ4", b"y" * 5000), COMPRESSED | 5 << 8, "compression type 5 is unknown"),
        (bomb, COMPRESSED | 2 << 8, "inflates past maxMessageSize"),
    ]
    with RemotingClient(cluster.brokers["broker-a"].admin_addr) as b:
        for i, (data, flag, named) in enumerate(cases):
            code, remark = send(b, topic, data, flag, f"bad-{i}")
            assert code == ResponseCode.MESSAGE_ILLEGAL and named in remark, (i, code, remark)
        assert send(b, topic, compress("ZLIB", b"fine"), COMPRESSED | 3 << 8, "good")[0] == ResponseCode.SUCCESS
        assert [(k, v) for k, v, _ in pull_all(b, topic, 1)] == [("good", b"fine")]  # nothing else stored


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(600)
def test_apache_java_producer_compress_types(cluster: LocalCluster) -> None:
    """Run: .venv/bin/pytest -q tests/test_remoting_compression.py -k java (long: three JVM runs; `make peers`)."""
    source = Path(__file__).resolve().parent.parent / "peers" / "java" / "src" / "RemotingCompressTool.java"
    classes = java_classes(source)
    topic, count = "CompressJavaT", 3
    cluster.admin("updateTopic", "-t", topic, "-r", "2", "-w", "2")
    expected = {}
    for kind in TYPES:
        res = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *ref.JDK17_OPENS,
                              f"-Duser.home={cluster.root}", "-Drocketmq.log.level=WARN", "-cp",
                              f"{classes}:{ref.LIB}/*", "RemotingCompressTool", cluster.namesrv_addr, topic,
                              f"Compress{kind}", kind, str(count), str(SIZE), "90"],
                             capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, f"{kind}: {res.stdout[-2000:]}\n{res.stderr[-3000:]}"
        events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
        started = events[0]
        assert (started["compressType"], started["compressOver"]) == (kind, 4096), started
        assert started["compressor"].upper().startswith(kind), started  # Lz4Compressor, ZstdCompressor, ...
        bodies = {f"{kind}-key-{i}": body_of(kind, i) for i in range(count)}
        expected.update(bodies)
        consumed = {e["key"]: (e["sha256"], e["len"]) for e in events if e["event"] == "consumed"}
        # the group reads the whole topic: this type's bodies and the earlier types' ones
        assert {k: consumed[k] for k in bodies} == {k: (hashlib.sha256(v).hexdigest(), SIZE) for k, v in
                                                    bodies.items()}
    with simple_consumer(cluster.brokers["broker-a"].endpoint, "CompressJavaGrpc", topic, await_s=1) as consumer:
        got = drain(consumer, len(expected), timeout=60)
    assert {next(iter(m.keys)): m.body for m in got} == expected
