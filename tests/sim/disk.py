"""A simulated disk under a real directory: what was not fsynced may be lost, or torn, in a crash.

The DLedger family (tests/sim/dledger.py) runs DLedger's real files (a ``MessageStore`` and
its ``DLedgerLog``) in a temporary directory.  While a run is on, ``os.fsync``,
``os.fdatasync`` and ``os.replace`` are wrapped (``intercept``): an fsync of a file under a
disk's root records the file's bytes as durable, a replace moves the durable image of the
source to the target (the rename itself is taken as atomic and durable, as a journaling file
system orders it after the renamed file's fsync; directory fsyncs are not modelled).
``crash`` then puts the directory back as a power cut could leave it, per file:

- ``keep``: every write reached the platters (a process crash: the page cache survives);
- ``lose``: each file as of its last fsync (a file never fsynced is gone);
- ``torn``: a random prefix of what was written since (``new[:k] + old[k:]``); a file
  written by replace (``hardstate``, ``hardstate.commit``, ``checkpoint``, ``index.v2``) is
  whole old or whole new.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RENAMED = ("hardstate", "hardstate.commit", "checkpoint", "index.v2")
MODES = ("keep", "lose", "torn")

_disks: list[SimDisk] = []
_real = {"fsync": os.fsync, "fdatasync": os.fdatasync, "replace": os.replace}


def _disk_of(path: str) -> SimDisk | None:
    for d in _disks:
        if path.startswith(d.prefix):
            return d
    return None


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _fsync(fd: int) -> None:
    _real["fsync"](fd)
    disk = _disk_of(_fd_path(fd))
    if disk is not None:
        disk.fsynced(_fd_path(fd))


def _fdatasync(fd: int) -> None:
    _real["fdatasync"](fd)
    disk = _disk_of(_fd_path(fd))
    if disk is not None:
        disk.fsynced(_fd_path(fd))


def _replace(src: Any, dst: Any, **kwargs: Any) -> None:
    _real["replace"](src, dst, **kwargs)
    s, d = os.path.abspath(os.fspath(src)), os.path.abspath(os.fspath(dst))
    disk = _disk_of(d)
    if disk is not None:
        disk.renamed(s, d)


@contextlib.contextmanager
def intercept(disks: list[SimDisk]) -> Iterator[None]:
    """Route fsync/fdatasync/replace of files under these disks' roots through them (one run at a time)."""
    _disks[:] = disks
    os.fsync, os.fdatasync, os.replace = _fsync, _fdatasync, _replace  # type: ignore[assignment]
    try:
        yield
    finally:
        os.fsync, os.fdatasync, os.replace = _real["fsync"], _real["fdatasync"], _real["replace"]  # type: ignore[assignment]
        _disks.clear()


class SimDisk:
    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root = Path(root).resolve()
        self.prefix = str(self.root) + os.sep
        self.rng = rng
        self.image: dict[str, bytes] = {}  # absolute path -> bytes as of its last fsync
        self.fsyncs = 0

    def fsynced(self, path: str) -> None:
        with open(path, "rb") as fh:
            self.image[path] = fh.read()
        self.fsyncs += 1

    def renamed(self, src: str, dst: str) -> None:
        data = self.image.pop(src, None)
        if data is None:
            self.image.pop(dst, None)  # a rename of unsynced bytes: the target's content is not durable
        else:
            self.image[dst] = data

    def _files(self) -> list[str]:
        out: list[str] = []
        for dirpath, _, names in os.walk(self.root):
            out.extend(os.path.join(dirpath, n) for n in names)
        return sorted(out)

    def crash(self, mode: str) -> int:
        """Apply a power cut to the (closed) files; returns how many files differ from what was written."""
        if mode == "keep":
            return 0
        changed = 0
        rng = self.rng
        files = self._files()
        for path in files:
            with open(path, "rb") as fh:
                new = fh.read()
            old = self.image.get(path)
            if old == new:
                continue
            name = os.path.basename(path)
            if old is None:  # never fsynced
                if mode == "lose" or name in RENAMED or rng.random() < 0.5:
                    os.unlink(path)
                else:
                    with open(path, "wb") as fh:
                        fh.write(new[:rng.randint(0, len(new))])
                changed += 1
                continue
            if mode == "lose" or (name in RENAMED and rng.random() < 0.5):
                content = old
            elif name in RENAMED:
                continue  # the new version survived whole
            else:
                k = rng.randint(0, len(new))
                content = new[:k] + old[k:]
                if len(old) > len(new) and rng.random() < 0.5:
                    content = content[:len(new)]  # the truncation reached the disk
            with open(path, "wb") as fh:
                fh.write(content)
            changed += 1
        present = set(files)
        for path, data in sorted(self.image.items()):  # removed since its fsync (a truncated segment)
            if path not in present and mode == "lose":
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as fh:
                    fh.write(data)
                changed += 1
        return changed
