"""What a loopback TCP send costs the sender's kernel when it wakes a sleeping reader (issue 20, for scale).

    python3 bench/loopback_pingpong.py [SIZE]   # default 8192 bytes

Two processes on 127.0.0.1: the parent sends SIZE bytes and waits for a 1-byte answer, the child reads
them and answers, 20,000 times, so every send finds the reader asleep.  Prints the parent's system and
user CPU per round trip (``getrusage``) and the round trip's wall time.  docs/BENCHMARKS.md (session 16)
compares the broker's kernel CPU per message with it.
"""

from __future__ import annotations

import os
import resource
import socket
import sys
import time

N = 20000


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    if os.fork() == 0:
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(size)
        for _ in range(N):
            got = 0
            while got < size:
                got += c.recv_into(memoryview(buf)[got:])
            c.sendall(b"k")
        os._exit(0)
    s, _ = srv.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = b"x" * size
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(N):
        s.sendall(data)
        s.recv(1)
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    os.wait()
    print(f"{size} B: sender system {(r1.ru_stime - r0.ru_stime) / N * 1e6:.1f} µs, user "
          f"{(r1.ru_utime - r0.ru_utime) / N * 1e6:.1f} µs per send and answer, round trip {wall / N * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
