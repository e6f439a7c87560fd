"""grpcraw, the raw gRPC load generator of bench/datapath_bench.py ("go gRPC" rows), counts what it claims.

The data-path benchmark divides each process's CPU by the sends grpcraw reports as done, and compares
RocketScope's broker with the bare grpc.aio floor of bench/grpc_floor.py: a generator that counted a
refused send as done, or sent fewer requests than it reported, would make both figures lie.  Ground
truth here is independent of grpcraw: the messages the broker stored (``topicStatus``), and a status
code the floor server never gives.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import LocalCluster, wait_until
from go_clients import rmqgo

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
from grpc_floor import SEND_METHOD, client_headers, request_bytes  # noqa: E402

pytestmark = pytest.mark.e2e
OK_CODE = 20000  # apache.rocketmq.v2.Code.OK, as the official clients check it


def grpcraw(addr: str, request: Path, n: int, *extra: str) -> dict[str, object]:
    exe = str(Path(rmqgo()).with_name("grpcraw"))
    headers = [a for h in client_headers("grpcraw-test") for a in ("-header", h)]
    res = subprocess.run([exe, "-addr", addr, "-method", SEND_METHOD, "-request", str(request), "-n", str(n),
                          "-depth", "8", *headers, *extra], capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert res.returncode == 0, res.stderr[-2000:]
    return next(x for x in lines if x.get("event") == "summary")


@pytest.fixture(scope="module")
def floor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("floor")
    port_file = root / "port"
    proc = subprocess.Popen([sys.executable, str(BENCH / "grpc_floor.py"), "serve", "--mode", "proto",
                             "--port-file", str(port_file)], stdout=subprocess.DEVNULL)
    try:
        wait_until(port_file.exists, timeout=30, what="the floor server's port")
        yield f"127.0.0.1:{port_file.read_text().strip()}"
    finally:
        proc.kill()
        proc.wait(10)


def test_every_send_to_the_broker_is_stored(tmp_path: Path) -> None:
    """300 sends reported done are 300 messages in the topic's queues."""
    c = LocalCluster(tmp_path)
    try:
        c.start_namesrv()
        node = c.start_broker("raw")
        c.admin("updateTopic", "-t", "RawSends", "-r", "4", "-w", "4", "-b", node.admin_addr)
        request = tmp_path / "request.bin"
        request.write_bytes(request_bytes("RawSends"))
        out = grpcraw(node.endpoint, request, 300)
        assert (out["sent"], out["failed"]) == (300, 0)
        stored = sum(q["maxOffset"] - q["minOffset"] for q in c.admin_json("topicStatus", "-t", "RawSends"))
        assert stored == 300
    finally:
        c.stop()


def test_a_refusal_counts_as_failed(tmp_path: Path) -> None:
    """Sends to a topic that does not exist are answered TOPIC_NOT_FOUND: all failed, none sent."""
    c = LocalCluster(tmp_path)
    try:
        c.start_namesrv()
        node = c.start_broker("raw", autoCreateTopicEnable="false")
        request = tmp_path / "request.bin"
        request.write_bytes(request_bytes("NoSuchTopic"))
        out = grpcraw(node.endpoint, request, 50)
        assert (out["sent"], out["failed"]) == (0, 50)
        assert "status code" in str(out.get("last_error"))
    finally:
        c.stop()


def test_the_floor_answers_ok_and_only_ok(floor: str, tmp_path: Path) -> None:
    """The floor server's answers pass the OK check; the same answers fail a check for another code, so the
    check reads the answer's status rather than passing everything."""
    request = tmp_path / "request.bin"
    request.write_bytes(request_bytes("Floor"))
    assert (grpcraw(floor, request, 200)["failed"]) == 0
    out = grpcraw(floor, request, 20, "-ok-code", str(OK_CODE + 1))
    assert (out["sent"], out["failed"]) == (0, 20)
