"""Which server ports this process holds established TCP connections to, read from /proc.

Why: the official Python client pins all its traffic to one access point (it sorts a route's
addresses into one gRPC target and gRPC's pick_first keeps the first that connects), so a
fault on that node is felt differently from the same fault on another node.  The chaos
nemesis records the node the clients actually hold connections to, observed here rather
than derived from the client's internals.  Linux only (as the harness's processes are).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

ESTABLISHED = "01"


def _own_socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed between listdir and readlink
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def connections_to(ports: set[int]) -> Counter[int]:
    """How many established connections this process has to each of ``ports`` (any local address)."""
    mine = _own_socket_inodes()
    counts: Counter[int] = Counter()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            cols = line.split()
            if len(cols) < 10 or cols[3] != ESTABLISHED or cols[9] not in mine:
                continue
            port = int(cols[2].rsplit(":", 1)[1], 16)
            if port in ports:
                counts[port] += 1
    return counts
