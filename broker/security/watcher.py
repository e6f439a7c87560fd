"""Reload a file when it changes: an asyncio task polling its stat.

Why polling and not inotify: it works the same on every platform and filesystem
(including bind mounts and Kubernetes ConfigMaps, which swap a symlink), costs one
``stat`` a second, and needs no dependency.  The change signature is (mtime_ns, size,
inode) of the resolved path, so an editor that writes in place and a tool that renames a
new file over the old one are both seen.  The callback runs in a worker thread (it reads
and parses the file) and its failures are logged, never raised: a bad edit must not stop
the watcher, and the callback itself keeps the previous good state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)  # follows symlinks: a swapped ConfigMap link changes the inode
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class FileWatcher:
    def __init__(self, path: str | Path, on_change: Callable[[], object], interval_s: float = 1.0) -> None:
        self.path = Path(path)
        self.on_change = on_change
        self.interval_s = interval_s
        self._stamp = file_stamp(self.path)
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0

    async def check_now(self) -> bool:
        """Run the callback if the file changed since the last check; True if it did."""
        stamp = file_stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        if stamp is None:
            log.error("watched file %s disappeared; keeping what was loaded from it", self.path)
            return False
        try:
            await asyncio.to_thread(self.on_change)
            self.reloads += 1
        except Exception:
            log.exception("reloading %s failed", self.path)
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.check_now()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"watch {self.path.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
