"""What SQL92 filtering costs per message, against tag filtering, in the same run (issue 21).

    .venv/bin/python bench/filter_bench.py [--messages 4000] [--rounds 3] [--eval-messages 20000]

Two measurements, each side by side in one run so the ratios hold on a loaded machine:

1. evaluator: CPU time of this process (time.process_time) per message to decide a filter over
   stored messages with 6 properties (broker/filter): no filter, a tag set, a one-comparison SQL92
   expression, and a compound one; plus the parse cost of each expression.
2. broker: one broker (enablePropertyFilter=true), a topic of ``--messages`` messages (4 queues, tags
   TA/TB/TC/TD, properties n and color); each filter reads the whole topic with gRPC PullMessage and
   the broker's CPU seconds (/proc/<pid>/stat) are divided by the messages scanned.  The filters
   select the same messages two ways (``TAGS`` in SQL92 against the tag set) so the difference is
   the filter's cost alone; a tag filter lets the store skip non-matching entries by tag hash
   without reading the commit log, a SQL92 filter reads every message.

The order of the filters rotates each round; medians over the rounds are reported.  JSON into
bench/results/filter.json, with the load average at start and end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import common  # noqa: E402  (puts tests/ on the path)
import grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as svc  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc  # noqa: E402

from rocketscope.broker.filter import accepts, compile_filter  # noqa: E402
from rocketscope.broker.store.record import StoredMessage  # noqa: E402

MD = (("x-mq-client-id", "filter-bench"), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))
QUEUES = 4
TAGS = ("TA", "TB", "TC", "TD")
# (name, expression type, expression): pairs select the same messages
FILTERS = [
    ("none", "TAG", "*"),
    ("tag: TA || TB", "TAG", "TA || TB"),
    ("sql: TAGS IN ('TA','TB')", "SQL92", "TAGS IN ('TA', 'TB')"),
    ("sql: n > 1000", "SQL92", "n > 1000"),
    ("sql: compound", "SQL92", "(n BETWEEN 100 AND 3000 AND color = 'red') OR TAGS IN ('TC', 'TD')"),
    # nothing matches: what is left is the cost of deciding, without delivering
    ("tag: TZ (no match)", "TAG", "TZ"),
    ("sql: TAGS = 'TZ' (no match)", "SQL92", "TAGS = 'TZ'"),
    ("sql: compound (no match)", "SQL92", "(n BETWEEN 100 AND 3000 AND color = 'green') OR TAGS IN ('TY', 'TZ')"),
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def props_of(i: int) -> dict[str, str]:
    return {"n": str(i), "color": "red" if i % 3 else "blue", "TAGS": TAGS[i % 4], "KEYS": f"k{i}",
            "UNIQ_KEY": uuid.uuid4().hex.upper(), "region": "eu"}


def evaluator(n: int, rounds: int) -> dict[str, Any]:
    msgs = [StoredMessage("T", i % QUEUES, b"x", props_of(i)) for i in range(n)]
    per_msg: dict[str, list[float]] = {name: [] for name, _, _ in FILTERS}
    parse_us: dict[str, float] = {}
    for name, kind, text in FILTERS:
        compile_filter.cache_clear()
        t0 = time.process_time()
        for _ in range(200):
            compile_filter.cache_clear()
            compile_filter(kind, text, True)
        parse_us[name] = (time.process_time() - t0) / 200 * 1e6
    matched: dict[str, int] = {}
    for r in range(rounds):
        order = FILTERS[r % len(FILTERS):] + FILTERS[:r % len(FILTERS)]
        for name, kind, text in order:
            f = compile_filter(kind, text, True)
            t0 = time.process_time()
            matched[name] = sum(1 for m in msgs if accepts(f, m))
            per_msg[name].append((time.process_time() - t0) / n * 1e6)
    return {name: {"cpu_us_per_message": round(statistics.median(v), 3), "matched": matched[name],
                   "parse_us": round(parse_us[name], 1)} for name, v in per_msg.items()}


def fill(endpoint: str, topic: str, n: int) -> None:
    with grpc.insecure_channel(endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        progress = common.Progress("filter-bench")
        for start in range(0, n, 100):
            req = svc.SendMessageRequest()
            for i in range(start, min(n, start + 100)):
                p = props_of(i)
                m = req.messages.add(topic=pb.Resource(name=topic), body=b"x" * 100)
                m.system_properties.message_id = p.pop("UNIQ_KEY")
                m.system_properties.message_type = pb.NORMAL
                m.system_properties.tag = p.pop("TAGS")
                m.system_properties.keys.append(p.pop("KEYS"))
                m.user_properties.update(p)
            resp = stub.SendMessage(req, metadata=MD, timeout=30)
            assert resp.status.code == pb.OK, resp.status
            if (start // 100) % 10 == 9:
                progress(f"{min(n, start + 100)}/{n} messages sent")


def pull_all(endpoint: str, topic: str, kind: str, text: str) -> int:
    got = 0
    with grpc.insecure_channel(endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        for q in range(QUEUES):
            offset = 0
            while True:
                req = svc.PullMessageRequest(group=pb.Resource(name="FilterBench"), offset=offset, batch_size=256)
                req.message_queue.topic.name = topic
                req.message_queue.id = q
                req.filter_expression.type = pb.SQL if kind == "SQL92" else pb.TAG
                req.filter_expression.expression = text
                req.long_polling_timeout.FromMilliseconds(0)
                nxt = offset
                for resp in stub.PullMessage(req, metadata=MD, timeout=30):
                    which = resp.WhichOneof("content")
                    if which == "message":
                        got += 1
                    elif which == "next_offset":
                        nxt = resp.next_offset
                    elif which == "status" and resp.status.code not in (pb.OK, pb.MESSAGE_NOT_FOUND):
                        raise RuntimeError(f"{text}: {resp.status}")
                if nxt <= offset:
                    break
                offset = nxt
    return got


def broker(n: int, rounds: int) -> dict[str, Any]:
    with common.rocketscope_broker("rs-filter-bench-", enablePropertyFilter=True, defaultTopicQueueNums=QUEUES) as (
            c, node):
        topic = f"FilterBench{uuid.uuid4().hex[:6]}"
        c.admin("updateTopic", "-b", node.admin_addr, "-t", topic, "-r", str(QUEUES), "-w", str(QUEUES))
        log(f"sending {n} messages")
        fill(node.endpoint, topic, n)
        pid = node.proc.popen.pid
        per_msg: dict[str, list[float]] = {name: [] for name, _, _ in FILTERS}
        matched: dict[str, int] = {}
        pull_all(node.endpoint, topic, "TAG", "*")  # warm the page cache and the broker's code paths
        for r in range(rounds):
            log(f"round {r + 1}/{rounds}, load {os.getloadavg()[0]:.1f}")
            order = FILTERS[r % len(FILTERS):] + FILTERS[:r % len(FILTERS)]
            for name, kind, text in order:
                t0 = common.proc_cpu_s(pid)
                matched[name] = pull_all(node.endpoint, topic, kind, text)
                per_msg[name].append((common.proc_cpu_s(pid) - t0) / n * 1e6)
        return {name: {"broker_cpu_us_per_message_scanned": round(statistics.median(v), 1), "matched": matched[name],
                       "rounds_us": [round(x, 1) for x in v]} for name, v in per_msg.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=4000, help="messages in the broker's topic")
    ap.add_argument("--eval-messages", type=int, default=20000, help="messages in the evaluator measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(common.RESULTS / "filter.json"))
    args = ap.parse_args()
    log(f"evaluator: {args.eval_messages} messages x {len(FILTERS)} filters x {args.rounds} rounds")
    ev = evaluator(args.eval_messages, args.rounds)
    print(common.table(["filter", "matched", "CPU us/msg", "parse us"],
                       [(k, v["matched"], v["cpu_us_per_message"], v["parse_us"]) for k, v in ev.items()]))
    br = broker(args.messages, args.rounds)
    print(common.table(["filter", "matched", "broker CPU us/msg scanned"],
                       [(k, v["matched"], v["broker_cpu_us_per_message_scanned"]) for k, v in br.items()]))
    out = common.write_json({"evaluator": ev, "broker_pull": br, "messages": args.messages,
                             "eval_messages": args.eval_messages, "rounds": args.rounds}, Path(args.out))
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
