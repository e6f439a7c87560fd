"""A write transport that keeps what is written: drives a remoting ``Connection`` in-process, no socket."""

from __future__ import annotations

import asyncio
from typing import Any


class RecordingTransport(asyncio.WriteTransport):
    """Collects every byte written (``out``); reports a fixed peer address, as a connected socket would."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: Any) -> None:
        self.out += data

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def first_records_written(broker: Any, timeout_s: float = 5.0) -> None:
    """Wait until an in-process broker appended its first HA event record (a few ms after ``start``).

    Tests that compare two brokers fed the same reads compare commit-log offsets (the answers' msgIds, the
    messages read back); that record lands between the reads' records wherever the loop gets to it, so a read
    answered inside its callback and the same read answered from a task could sit at different offsets."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    log = broker.store.commit_log
    while not any(m.topic == "RMQ_SYS_HA_EVENTS" for m in log.iter_messages(0, log.max_offset)):
        if loop.time() > deadline:
            raise AssertionError(f"the broker wrote no HA event record within {timeout_s} s of its start")
        await asyncio.sleep(0.005)
