"""The official Python client's callbacks need a current event loop in the caller's thread (tests/rmq.py config).

The client opens its telemetry stream inside a route query's done-callback; when the answer arrives before the
callback is added, the callback runs in the caller's thread and grpc.aio asks that thread for its event loop.
asyncio.run() leaves the thread without one, which once failed tests/test_trace_instrument.py in CI with "failed to
fetch topic:TopicNack route". These tests show the condition and that config() removes it.
"""

from __future__ import annotations

import asyncio

import pytest
from cluster import wait_until
from grpc._cython import cygrpc
from rmq import config
from rocketmq.v5.client.connection.rpc_client import RpcClient


def test_after_asyncio_run_grpc_aio_finds_no_loop_in_this_thread() -> None:
    """The failure itself: what grpc.aio does when a stream is opened in this thread after asyncio.run()."""
    asyncio.run(asyncio.sleep(0))
    with pytest.raises(RuntimeError, match="no current event loop"):
        cygrpc.get_working_loop()


def test_config_gives_this_thread_the_clients_io_loop_after_asyncio_run() -> None:
    asyncio.run(asyncio.sleep(0))
    config("127.0.0.1:1")
    loop = cygrpc.get_working_loop()
    assert loop is RpcClient.get_channel_io_loop()
    wait_until(loop.is_running, 10, what="the client's I/O thread runs the loop a stream is bound to")
    asyncio.run(asyncio.sleep(0))  # and asyncio.run still works in this thread afterwards
