"""The link proxy against an echo server on loopback: delay, one-way cut, full cut, heal."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest
from netproxy import LinkLoop, link_loop


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture()
def echo() -> Iterator[int]:
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def roundtrip(port: int, payload: bytes = b"ping", timeout: float = 3.0) -> tuple[bytes, float]:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        t = time.monotonic()
        s.sendall(payload)
        try:
            return s.recv(4096), time.monotonic() - t
        except (TimeoutError, ConnectionError):
            return b"", time.monotonic() - t


@pytest.fixture()
def ll() -> Iterator[LinkLoop]:
    with link_loop() as loop:
        yield loop


def test_delay_is_added_each_way(echo: int, ll: LinkLoop) -> None:
    p = ll.proxy(echo)
    assert roundtrip(p.port)[0] == b"ping"
    ll.set(p, delay=0.25)
    data, took = roundtrip(p.port)
    assert data == b"ping" and took >= 0.5  # 0.25 s up + 0.25 s down
    ll.heal(p)
    data, took = roundtrip(p.port)
    assert data == b"ping" and took < 0.25


def test_one_way_cuts_and_a_full_cut(echo: int, ll: LinkLoop) -> None:
    p = ll.proxy(echo)
    ll.set(p, block_up=True)
    assert roundtrip(p.port, timeout=0.8)[0] == b""  # the request never arrives
    ll.heal(p)
    assert roundtrip(p.port)[0] == b"ping"
    ll.set(p, block_down=True)
    assert roundtrip(p.port, timeout=0.8)[0] == b""  # the answer never comes back
    ll.heal(p)
    ll.set(p, refuse=True)
    assert roundtrip(p.port, timeout=0.8)[0] == b""
    ll.heal(p)
    assert roundtrip(p.port)[0] == b"ping"
