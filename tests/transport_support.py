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
