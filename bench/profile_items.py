"""A DLedger leader's py-spy profile cut into exclusive items, with µs per message (issue 20, session 25).

    .venv/bin/python bench/profile_items.py DIR/rs-dledger-go-remoting.txt=LEADER_US [more.txt=US ...]

Why: ``bench/datapath_bench.py --profile DIR`` writes py-spy's collapsed stacks (``--native``) and the leader's CPU
µs per message; the summary it prints ranks functions, which overlap.  This gives each busy stack (waits dropped
as bench/common.py ``summarise_profile`` does; the fsync thread blocked in ``fdatasync`` kept, as busy) to the
first item below whose pattern it contains, so the items add up to 100 %, and turns an item's share of the samples
that are not ``fdatasync`` into µs per message (py-spy samples taken for CPU).  One markdown row per item, one
column per profile: "share of busy samples % / µs per message".  docs/BENCHMARKS.md "DLedger leader under single
sends (session 25)" shows its output.
"""

from __future__ import annotations

import sys
from pathlib import Path

from common import _WAIT_MARKERS

ITEMS: list[tuple[str, list[str]]] = [
    ("fdatasync (fsync thread, blocked: not CPU)", ["fdatasync"]),
    ("garbage collector", ["gc_collect"]),
    ("HA events (emit, record, spool, their proposals)", ["HaEventLog", "_append_ha_events", "DLedgerNode._emit"]),
    ("records encoded (plan_entries / prepare_run)", ["plan_entries", "MessageStore.prepare_run"]),
    ("dispatch of committed records (dispatch_confirmed)", ["dispatch_confirmed"]),
    ("proposal: propose/submit/wait (DLedgerNode.propose rest)", ["DLedgerNode.propose"]),
    ("remoting front door: answers written (Connection.flush, send)", ["Connection.flush"]),
    ("remoting front door: read, decode, group, handler (rest)",
     ["_FrameProtocol", "RemotingServer.", "RemotingBroker.", "Broker.put_messages"]),
    ("peer links out (PeerLink._flush, encode_frame, send)", ["PeerLink._flush", "SocketWriter"]),
    ("peer port in (frames, on_batch, step)", ["peer_frames/port.py", "peer_port.py"]),
    ("Raft driver: ready, write (pwrite), sync hand-off, finish", ["RaftDriver", "ThreadSyncer", "raft/core.py"]),
    ("checkpoint / consume-queue flush (worker thread)", ["concurrent/futures/thread.py"]),
    ("socket reads (recv of client and peer bytes)", ["sock_recv"]),
    ("event loop itself (select, handles, other)", [""]),
]
FSYNC = ITEMS[0][0]


def items(path: Path) -> tuple[dict[str, int], int]:
    """Samples per item and the busy total of one collapsed-stack file."""
    out = {name: 0 for name, _ in ITEMS}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        last = stack.split(";")[-4:]
        if any(m in f for f in last for m in _WAIT_MARKERS) and not any("fdatasync" in f for f in last):
            continue
        total += n
        for name, patterns in ITEMS:
            if any(p in stack for p in patterns):
                out[name] += n
                break
    return out, total


def main() -> None:
    cols: list[tuple[dict[str, int], int, float]] = []
    for arg in sys.argv[1:]:
        path, _, leader_us = arg.rpartition("=")
        counts, total = items(Path(path))
        cols.append((counts, total, float(leader_us)))
    if not cols:
        raise SystemExit(__doc__)
    for name, _ in ITEMS:
        cells = []
        for counts, total, us in cols:
            share = 100 * counts[name] / max(total, 1)
            cpu = max(total - counts[FSYNC], 1)
            cells.append(f"{share:.1f} % / " + ("-" if name == FSYNC else f"{us * counts[name] / cpu:.1f}"))
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| busy samples | " + " | ".join(str(total) for _, total, _ in cols) + " |")


if __name__ == "__main__":
    main()
