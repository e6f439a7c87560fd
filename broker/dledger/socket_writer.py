"""A writer thread for one plain-TCP peer link: the ``send`` syscalls leave the event loop's thread.

On one host (the benchmarks, tests, a dev cluster) a TCP ``send`` on loopback also runs the
receiver's TCP processing inside the syscall, so the leader's sends to its followers cost its
event loop ~20 % (py-spy, session 17) -- work grpc.aio's C-core threads used to do off the loop.
The loop hands finished frames to this thread (a deque under a condition) and carries on; the
thread writes them with the GIL released.  Frames without entries (responses, heartbeats, votes) are
sent at once from the loop when nothing is pending: they are small, and a hand-off to a thread that
must first win the GIL back would add latency to every follower's answer.  TLS links keep writing from the loop (an
``SSLObject`` belongs to its transport).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
from collections import deque
from collections.abc import Callable


class SocketWriter:
    """Writes queued byte strings to a dup of ``fd`` (non-blocking, shared with asyncio's reader) in a thread."""

    def __init__(self, fd: int, name: str, on_room: Callable[[], None], high_water: int) -> None:
        """``on_room`` is called from the thread (use ``call_soon_threadsafe``) when the backlog fell below
        ``high_water`` after having been above it."""
        self.sock = socket.socket(fileno=os.dup(fd))
        self.on_room = on_room
        self.high_water = high_water
        self.pending = 0  # bytes handed over and not yet written
        self.error: OSError | None = None
        self._frames: deque[bytes] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._blocked = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def backed_up(self) -> bool:
        return self.pending > self.high_water

    def write(self, data: bytes, direct: bool = False) -> None:
        """Queue ``data`` for the thread; ``direct``: send it from the caller's thread first when nothing is
        pending (no hand-off latency for small control messages), the thread taking only what did not fit."""
        with self._cv:
            if direct and not self.pending:
                try:
                    n = self.sock.send(data)
                except BlockingIOError:
                    n = 0
                except OSError as exc:  # the link's reader sees the connection end too
                    self.error = exc
                    return
                if n == len(data):
                    return
                data = data[n:]
            self._frames.append(data)
            self.pending += len(data)
            if self.pending > self.high_water:
                self._blocked = True
            self._cv.notify()

    def close(self) -> None:
        """Stop without waiting: the thread drops what is unwritten and closes its dup of the socket."""
        with self._cv:
            self._closed = True
            self._cv.notify()

    def _run(self) -> None:
        try:
            self._write_until_closed()
        finally:
            with contextlib.suppress(OSError):
                self.sock.close()

    def _write_until_closed(self) -> None:
        poller = select.poll()
        poller.register(self.sock, select.POLLOUT)
        cv, frames = self._cv, self._frames
        while True:
            with cv:
                while not frames and not self._closed:
                    cv.wait()
                if self._closed:
                    return
                data = frames[0] if len(frames) == 1 else b"".join(frames)
                frames.clear()
            view = memoryview(data)
            try:
                while view:
                    try:
                        n = self.sock.send(view)
                    except BlockingIOError:
                        poller.poll(100)
                        if self._closed:
                            return
                        continue
                    view = view[n:]
            except OSError as exc:  # the link's reader sees the connection end too and reconnects
                self.error = exc
                return
            with cv:
                self.pending -= len(data)
                wake = self._blocked and self.pending <= self.high_water
                if wake:
                    self._blocked = False
            if wake:
                self.on_room()
