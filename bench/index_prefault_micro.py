"""Does pre-faulting a fresh index file pay? (issue 20, session 22, docs/BENCHMARKS.md "DLedger followers' dispatch")

    .venv/bin/python bench/index_prefault_micro.py [--messages 60000] [--rounds 3]

Why: session 21's follower profiles put the self time of ``fastpath.index_put`` in ``wr_u32`` / ``rd_i32``, the
loads and stores into the mmapped index file, and named the first touches of a fresh file's pages (every bench run
starts a fresh store) as a suspect.  This takes the broker out: one fresh ``IndexFile`` with the store's default
geometry (``StoreConfig.index_slot_num`` / ``index_num``), two keys per message (``*#UNIQ_KEY`` and
``topic#UNIQ_KEY``, as a dispatch writes them), ``put_entries`` in calls of 112 keys (56 messages, a follower's
Ready at ~2,300 msg/s), CPU of this process (``process_time``) per message and its minor page faults, for:

* ``fresh``: the file as the store creates it today;
* ``slots-touched``: the slot table written once per page before the timed part (what a pre-fault of the slots at
  creation would do);
* ``populate``: the whole file mapped with ``MAP_POPULATE``;
* ``checkpointed``: a fresh file, flushed (``IndexFile.flush``: header + ``msync``) every 41 calls, as the store's
  checkpoint does every ``checkpoint_interval_s`` (1 s, ~41 Readys at that rate): the msync cleans every dirty page,
  and the next store into each one faults again.
"""

from __future__ import annotations

import argparse
import mmap
import resource
import shutil
import tempfile
import time
from pathlib import Path

from rocketscope.broker.store import index as ix
from rocketscope.broker.store.message_store import StoreConfig

MODES = ("fresh", "slots-touched", "populate", "checkpointed")
KEYS_PER_CALL = 112
CALLS_PER_CHECKPOINT = 41  # ~2,300 msg/s in calls of 56 messages: the store's checkpoint every 1 s


def make_entries(messages: int) -> list[tuple[str, int, int]]:
    """Two index keys per message, unique keys in the shape of a message id, offsets ~300 bytes apart."""
    out: list[tuple[str, int, int]] = []
    for i in range(messages):
        uniq = f"7F0000010001{i:020X}"
        out.append((f"*#{uniq}", i * 300, 1_700_000_000_000 + i))
        out.append((f"BenchTopic#{uniq}", i * 300, 1_700_000_000_000 + i))
    return out


def open_file(path: Path, mode: str, slots: int, entries: int) -> ix.IndexFile:
    """An IndexFile as the store opens it, pre-faulted as ``mode`` says."""
    plain = mmap.mmap
    if mode == "populate":
        def populated(fd: int, size: int) -> mmap.mmap:
            return plain(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
        ix.mmap.mmap = populated  # type: ignore[misc,assignment]
    try:
        f = ix.IndexFile(path, slots, entries)
    finally:
        ix.mmap.mmap = plain  # type: ignore[misc]
    if mode == "slots-touched":
        for off in range(ix.HEADER_SIZE, ix.HEADER_SIZE + slots * ix.SLOT_SIZE, mmap.PAGESIZE):
            f.mm[off] = 0
    return f


def one_run(mode: str, entries: list[tuple[str, int, int]], messages: int) -> tuple[float, int]:
    """CPU µs per message and minor faults of indexing ``entries`` into a fresh file."""
    tmp = Path(tempfile.mkdtemp(prefix="index-prefault-"))
    cfg = StoreConfig(root=tmp)
    try:
        f = open_file(tmp / "00000000000000001", mode, cfg.index_slot_num, cfg.index_num)
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
        for n, i in enumerate(range(0, len(entries), KEYS_PER_CALL)):
            f.put_entries(entries[i:i + KEYS_PER_CALL])
            if mode == "checkpointed" and n % CALLS_PER_CHECKPOINT == CALLS_PER_CHECKPOINT - 1:
                f.dirty = True
                f.flush()
        t1, r1 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
        f.close()
    finally:
        shutil.rmtree(tmp)
    return (t1 - t0) * 1e6 / messages, r1.ru_minflt - r0.ru_minflt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=60000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    entries = make_entries(args.messages)
    for rnd in range(args.rounds):
        for mode in MODES:  # alternated within each round: the VM's speed drifts
            us, faults = one_run(mode, entries, args.messages)
            print(f"r{rnd + 1} {mode:14s} {us:6.3f} CPU µs/msg (2 keys)  minor faults {faults}")


if __name__ == "__main__":
    main()
