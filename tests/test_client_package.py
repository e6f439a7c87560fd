"""Server processes load the client's protobuf without the client (rocketscope/client_package.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
from rocketscope.client_package import defer_client_init
assert defer_client_init()
assert not defer_client_init()  # registered once
import rocketscope.broker.broker
from rocketscope.broker.protocol import common_pb2  # noqa: F401
loaded = sorted(m for m in sys.modules if m.startswith("rocketmq"))
assert "rocketmq.grpc_protocol" in loaded and "rocketmq.v5.client" not in loaded, loaded
from rocketmq import Producer, TransactionResolution
import rocketmq
assert "rocketmq.v5.client" in sys.modules and rocketmq.Producer is Producer
assert rocketmq.TransactionResolution is TransactionResolution
try:
    rocketmq.NoSuchThing
except AttributeError:
    print("ok")
"""


@pytest.mark.e2e  # a fresh interpreter: this one imported the client long ago
def test_a_server_loads_the_protobuf_alone_and_the_client_package_still_works_when_asked() -> None:
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr
