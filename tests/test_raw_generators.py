"""remotingraw and natsraw, the raw load generators of bench/datapath_bench.py ("go remoting raw" and "go nats
raw" rows), send what they claim and count what they are answered.

The raw rows compare the servers with load generators that cost a few µs per message (Apache's Go client costs
40-50): a generator that counted a refused send as done, sent a message twice or fewer times than it reports,
or stored bodies unlike the Go client's would make those ratios lie.  Ground truth here is independent of the
generators: the messages a RocketScope broker stored (``topicStatus``) and what Apache's Go client consumes
from it; the messages a real nats-server's JetStream stream holds (its stream info, read with nats-py).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import LocalCluster
from go_clients import rmqgo, run_go

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
from common import NatsCluster, jetstream_ready, nats_jetstream  # noqa: E402

pytestmark = pytest.mark.e2e
BODY = 1024


def generator(name: str, *args: str) -> dict[str, object]:
    """Run ``name`` (built beside rmqgo); its summary line, or its error line when it ended with one."""
    exe = str(Path(rmqgo()).with_name(name))
    res = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    ends = [x for x in lines if x.get("event") in ("summary", "error")]
    assert ends, f"{name} printed no summary (exit {res.returncode}): {res.stderr[-2000:]}"
    return ends[-1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("raw"))
    try:
        c.start_namesrv()
        c.start_broker("raw", autoCreateTopicEnable="false")
        yield c
    finally:
        c.stop()


def stored(c: LocalCluster, topic: str) -> int:
    return sum(q["maxOffset"] - q["minOffset"] for q in c.admin_json("topicStatus", "-t", topic))


def test_remotingraw_sends_are_stored_once_each_as_the_go_client_would_send_them(cluster: LocalCluster) -> None:
    """300 sends reported done are 300 stored messages, each consumed once by Apache's Go client with its own
    msgId (the UNIQ_KEY the generator wrote) and a 1 KiB body; the warm-up's sends are stored too."""
    node = cluster.brokers["raw"]
    cluster.admin("updateTopic", "-t", "RawRemoting", "-r", "4", "-w", "4", "-b", node.admin_addr)
    out = generator("remotingraw", "-ns", cluster.namesrv_addr, "-topic", "RawRemoting", "-n", "300",
                    "-warmup", "20", "-depth", "16", "-size", str(BODY))
    assert (out["event"], out["sent"], out["failed"]) == ("summary", 300, 0), out
    assert stored(cluster, "RawRemoting") == 320
    got = run_go("consume", "-ns", cluster.namesrv_addr, "-topic", "RawRemoting", "-group", "RawReaders",
                 "-n", "320", "-timeout", "90", timeout=150)
    received = [e for e in got if e["event"] == "received"]
    assert len(received) == 320
    assert len({e["msgId"] for e in received}) == 320  # a UNIQ_KEY per send, none repeated
    assert {e["body"] for e in received} == {"x" * BODY}


def test_remotingraw_counts_a_refused_send_as_failed(cluster: LocalCluster) -> None:
    """A topic whose queues are read-only (perm 4) is in the route, and the broker refuses every send to it
    (NO_PERMISSION): all 40 failed, none reported sent, nothing stored."""
    node = cluster.brokers["raw"]
    cluster.admin("updateTopic", "-t", "RawReadOnly", "-r", "2", "-w", "2", "-p", "4", "-b", node.admin_addr)
    out = generator("remotingraw", "-ns", cluster.namesrv_addr, "-topic", "RawReadOnly", "-n", "40", "-depth", "4")
    assert (out["event"], out["sent"], out["failed"]) == ("summary", 0, 40), out
    assert "code 16" in str(out.get("last_error"))  # NO_PERMISSION
    assert stored(cluster, "RawReadOnly") == 0


def test_remotingraw_without_a_route_says_so(cluster: LocalCluster) -> None:
    out = generator("remotingraw", "-ns", cluster.namesrv_addr, "-topic", "NoSuchRawTopic", "-n", "5")
    assert out["event"] == "error" and "NoSuchRawTopic" in str(out["error"]), out


@pytest.fixture(scope="module")
def jetstream() -> Iterator[NatsCluster]:
    with nats_jetstream(1) as ns:
        yield ns


def stream_messages(url: str, subject: str, create: bool = False) -> int:
    """The messages of the stream on ``subject`` (created first with ``create``), from nats-py."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    async def run() -> int:
        nc = await nats.connect(url)
        try:
            js = await jetstream_ready(nc)
            name = subject.replace(".", "_").upper()
            if create:
                await js.add_stream(StreamConfig(name=name, subjects=[subject], storage=StorageType.FILE))
            return int((await js.stream_info(name)).state.messages)
        finally:
            await nc.close()

    return asyncio.run(run())


def test_natsraw_publishes_are_acknowledged_and_stored_once_each(jetstream: NatsCluster) -> None:
    url = jetstream.urls[0]
    assert stream_messages(url, "raw.ok", create=True) == 0
    out = generator("natsraw", "-url", url, "-subject", "raw.ok", "-n", "300", "-warmup", "20", "-depth", "16")
    assert (out["event"], out["sent"], out["failed"]) == ("summary", 300, 0), out
    assert stream_messages(url, "raw.ok") == 320


def test_natsraw_counts_a_publish_no_stream_takes_as_failed(jetstream: NatsCluster) -> None:
    """No stream takes the subject: the server answers each publish 503 (no responders), so all fail at once
    (no wait for the timeout)."""
    out = generator("natsraw", "-url", jetstream.urls[0], "-subject", "raw.nowhere", "-n", "30", "-depth", "4",
                    "-timeout", "60s")
    assert (out["event"], out["sent"], out["failed"]) == ("summary", 0, 30), out
    assert "503" in str(out.get("last_error"))
    assert float(out["seconds"]) < 30  # answered, not timed out (the timeout is 60 s)
