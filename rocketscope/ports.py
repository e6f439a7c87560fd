"""Free loopback ports for local clusters (the demo, tests, benchmarks).

Asking the kernel for port 0 and closing the socket returns a port from the ephemeral range
(ip_local_port_range, 32768-60999 here), the same range outgoing connections draw from, and
the kernel may hand the same number out again at once: two servers of one test were given
one port that way.  So ports come from below the ephemeral range, are checked by binding,
and are never handed out twice by one process.  A broker also binds ``listenPort + 1`` (its HA
port, as RocketMQ's haListenPort), so a port is handed out only when the next one is free too,
and both are kept: a DLedger test once gave one broker listenPort 29622 and another node port
29623.
"""

from __future__ import annotations

import random
import socket
import threading

LOW, HIGH = 20_000, 32_000
_handed_out: set[int] = set()
_lock = threading.Lock()


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, outside the ephemeral range, new to this process."""
    with _lock:
        for _ in range(500):
            port = random.randint(LOW, HIGH)
            if not {port - 1, port, port + 1} & _handed_out and _bindable(port) and _bindable(port + 1):
                _handed_out.update((port, port + 1))
                return port
        while True:  # the range is crowded: fall back to the kernel's choice, still never twice
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Something accepts TCP connections on ``host:port`` right now."""
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0
