"""A DLedger leader's encoding of a proposal, in-process: CPU µs per message of ``plan_entries`` (issue 20, session 25).

    .venv/bin/python bench/dledger_plan_micro.py [--messages 60000] [--groups 1,6,32] [--rounds 3]

Why: under single sends the leader plans one proposal per group of sends read together (about 6 messages a
group at ~7,000 msg/s, docs/BENCHMARKS.md "DLedger leader under single sends (session 25)").  This times
``plan_entries`` alone on a store with no Raft and no disk writes, groups of each size in ``--groups`` of 1 KiB
messages to 8 queues with a UNIQ_KEY and a tag each, "loop" (``MessageStore.prepare`` per message, the pure
path's and the reference) and "compiled" (``MessageStore.prepare_run``) alternated in each round.  The figure
includes building the messages (the same on both sides); the best of ``--rounds`` and every round are printed.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from pathlib import Path

from rocketscope.broker.dledger.node import plan_entries
from rocketscope.broker.store import message_store
from rocketscope.broker.store.message_store import MessageStore, StoreConfig
from rocketscope.broker.store.record import StoredMessage

COMPILED = message_store._C


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(compiled: bool, group: int, messages: int) -> float:
    """CPU µs per message of planning ``messages`` messages in groups of ``group``."""
    message_store._C = COMPILED if compiled else None
    try:
        with tempfile.TemporaryDirectory() as d:
            store = MessageStore(StoreConfig(root=Path(d)))
            cursor = 0
            t0 = cpu_s()
            for i in range(messages // group):
                msgs = [StoredMessage(topic="BenchTopic", queue_id=(i * group + k) % 8, body=b"x" * 1024,
                                      born_host="127.0.0.1:5000", born_timestamp=1_700_000_000_000,
                                      properties={"UNIQ_KEY": f"ID{i}-{k}", "TAGS": "t", "WAIT": "true"})
                        for k in range(group)]
                cursor = plan_entries(store, msgs, cursor, 1 << 20).cursor
            spent = cpu_s() - t0
            store.commit_log.close()
    finally:
        message_store._C = COMPILED
    return 1e6 * spent / (messages // group * group)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=60000)
    ap.add_argument("--groups", default="1,6,32")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if COMPILED is None:
        raise SystemExit("the compiled module is not loaded (ROCKETSCOPE_PURE_PYTHON=1?): nothing to compare")
    for group in (int(g) for g in args.groups.split(",")):
        got: dict[str, list[float]] = {"loop": [], "compiled": []}
        for _ in range(args.rounds):
            got["loop"].append(run(False, group, args.messages))
            got["compiled"].append(run(True, group, args.messages))
        print(f"group {group:3d}: " + "  ".join(
            f"{k} {min(v):.2f} ({', '.join(f'{x:.2f}' for x in v)})" for k, v in got.items()) + " CPU µs/msg")


if __name__ == "__main__":
    main()
