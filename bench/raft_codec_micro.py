"""CPU per Raft peer frame and per follower record: the compiled codec (broker/raftpath.c) against its
reference (the protobuf runtime, record.decode), in one process, alternated A/B rounds.

    nice -n 15 .venv/bin/python bench/raft_codec_micro.py [--rounds 5] [--records 13]

The frames are what a DLedger group sends under single sends (docs/BENCHMARKS.md, session 19: ~13 records
of 1 KiB per entry): the leader's append (one entry of ``--records`` records) to one follower, and the
follower's answer.  The per-message figure divides by ``--records``.  CPU time (``time.process_time``), so
the machine's other load changes little; the figures of one round are back to back.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from rocketscope.broker.dledger import raft_codec as rc
from rocketscope.broker.protocol import dledger_pb2
from rocketscope.broker.raft import Entry, EntryKind, Message, MsgType
from rocketscope.broker.store import record


def _per_call_us(fn: Callable[[], object], n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", type=int, default=13)
    ap.add_argument("--n", type=int, default=5000)
    args = ap.parse_args()
    if rc.IMPLEMENTATION != "c":
        raise SystemExit("ROCKETSCOPE_PURE_PYTHON is set: nothing compiled to compare")
    from rocketscope.broker import raftpath

    props = {"KEYS": "k", "TAGS": "t", "UNIQ_KEY": "u" * 32}
    msgs = [record.StoredMessage("bench-topic", i % 8, b"x" * 1024, dict(props), born_host="127.0.0.1:5000",
                                 store_host="127.0.0.1:10911", queue_offset=i, physical_offset=i * 1200)
            for i in range(args.records)]
    data = b"".join(record.encode(m) for m in msgs)
    append = Message(MsgType.APP, "n0", "n1", 5, 5, 1000, [Entry(1001, 5, EntryKind.NORMAL, data)], 999)
    answer = Message(MsgType.APP_RESP, "n1", "n0", 5, index=1001)
    head = dledger_pb2.RaftBatch(group="g", sender="n0", sender_grpc_addr="127.0.0.1:8081",
                                 sender_admin_addr="127.0.0.1:9000").SerializeToString()
    frame = raftpath.encode_frame(head, [append], 64, 1 << 22)[0][4:]
    answer_frame = raftpath.encode_frame(head, [answer], 64, 1 << 22)[0][4:]
    cases: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "leader: encode the append frame": (lambda: raftpath.encode_frame(head, [append], 64, 1 << 22),
                                            lambda: rc.py_encode_frame(head, [append], 64, 1 << 22)),
        "follower: decode the append frame": (lambda: raftpath.decode_batch(frame), lambda: rc.py_decode_batch(frame)),
        "follower: decode the entry's records": (lambda: raftpath.decode_records(data),
                                                 lambda: rc.py_decode_records(data)),
        "follower: encode its answer": (lambda: raftpath.encode_frame(head, [answer], 64, 1 << 22),
                                        lambda: rc.py_encode_frame(head, [answer], 64, 1 << 22)),
        "leader: decode the answer": (lambda: raftpath.decode_batch(answer_frame),
                                      lambda: rc.py_decode_batch(answer_frame)),
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for name, (c_fn, py_fn) in cases.items():
            results[name].append((_per_call_us(py_fn, args.n), _per_call_us(c_fn, args.n)))
    print(f"{args.records} records of 1 KiB per entry; µs per call, median of {args.rounds} alternated rounds")
    print(f"| step | reference µs | compiled µs | saved per message (/{args.records}) µs |")
    print("|---|---:|---:|---:|")
    for name, pairs in results.items():
        py = sorted(p for p, _ in pairs)[len(pairs) // 2]
        c = sorted(c for _, c in pairs)[len(pairs) // 2]
        print(f"| {name} | {py:.2f} | {c:.2f} | {(py - c) / args.records:.2f} |")


if __name__ == "__main__":
    main()
