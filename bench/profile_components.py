"""Where a broker's send-path CPU goes, by component, from py-spy's collapsed stacks (issue 20).

    .venv/bin/python bench/profile_components.py RESULTS.json [ROW ...]

RESULTS.json is what ``bench/datapath_bench.py --profile DIR`` wrote: each profiled row names its raw
stacks (``profile.file``) and the broker's CPU µs per message.  Busy samples only (a sample whose
innermost frames wait, as ``common.summarise_profile(drop_idle=True)`` decides, is dropped); each goes
to the component of the **deepest** of its frames that names one, the grouping of docs/BENCHMARKS.md
(session 15), with the compiled functions of broker/fastpath.c counted where their Python counterparts
are.  A component's µs is its share of the busy samples times the row's broker CPU per message; the share
of it whose innermost frame is a libc syscall wrapper (send, recv, pwrite64, ...) is printed beside it.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import _WAIT_MARKERS, _frame_name  # noqa: E402

Rule = Callable[[str, str], bool]  # (file, function) -> whether the frame names the component


def _in(files: tuple[str, ...], funcs: tuple[str, ...] | None = None) -> Rule:
    def rule(file: str, func: str) -> bool:
        return any(file.endswith(f) for f in files) and (funcs is None or func.split(".")[-1] in funcs)
    return rule


def _funcs(*names: str) -> Rule:
    return lambda file, func: func.split(".")[-1] in names


COMPONENTS: list[tuple[str, list[Rule]]] = [
    ("frame decode (JSON header; batch body)", [
        _in(("codec.py",), ("decode", "decode_python", "_decode_json", "_decode_binary", "decode_batch",
                            "batch_entries", "_loads", "_int_field", "_utf8")),
        _funcs("decode_json_frame", "decode_batch", "parse_header", "parse_string", "parse_ext")]),
    ("answer: SendResult header, encode, write", [
        _in(("codec.py",), ("encode", "encode_python", "_json_header", "_dumps", "response")),
        _in(("server.py",), ("send", "flush", "drain")),
        _in(("broker_handlers.py",), ("_answer_send",)),
        _in(("selector_events.py",), ("write",)),
        _funcs("encode_json_frame", "put_json_str")]),
    ("store: dispatch (consume queue, index keys, listeners)", [
        _in(("message_store.py",), ("dispatch_confirmed", "_dispatch_many", "_dispatch_each", "_open_cq",
                                    "_dispatch_lmq", "_run")),
        _in(("index.py", "consume_queue.py")), _funcs("_on_dispatch", "_wake_topic", "index_put", "_tag_hash")]),
    ("store: append (record encode, pwrite)", [
        _in(("commitlog.py", "record.py")), _in(("message_store.py",), ("append_batch", "append", "append_plain_run")),
        _in(("segments.py",), ("append", "roll", "remaining", "max_offset")),
        _funcs("encode_run", "record_head")]),
    ("time-driven: timer polling, checkpoints, flush", [
        _in(("timer.py", "timer_store.py", "flush.py", "checkpoint.py", "loop_lag.py", "offset_log.py",
             "pop_log.py")),
        _in(("message_store.py",), ("_checkpoint_loop", "_save_checkpoint", "_retention_loop")),
        _in(("segments.py",), ("sync",))]),
    ("put_messages, metrics, rest of the put", [
        _in(("broker.py",), ("put_messages", "put_plain_run")), _in(("message_store.py",), ("put", "_finish_put")),
        _in(("metrics.py", "broker_stats.py"))]),
    ("send handler: header fields, checks, StoredMessage", [
        _in(("broker_handlers.py",)), _in(("codec.py",), ("string_to_properties", "string_to_properties_python")),
        _in(("broker.py",), ("topic_for_send", "select_queue", "writable", "is_master")), _in(("sends.py",)),
        _in(("topics.py",)), _funcs("send_fields", "parse_properties")]),
    ("socket reads, frame split, group dispatch", [
        _in(("server.py",)), _in(("selector_events.py",), ("_read_ready", "_read_ready__data_received"))]),
]
OTHER = "event loop, asyncio, other"


def classify(frames: list[str]) -> str:
    for frame in reversed(frames):
        file, _, func = frame.rpartition(":")
        for name, rules in COMPONENTS:
            if any(rule(file, func) for rule in rules):
                return name
    return OTHER


SYSCALLS = ("send", "recv", "read", "write", "writev", "sendto", "recvfrom", "sendmsg", "recvmsg", "pwrite64",
            "pwrite", "pread64", "fdatasync", "fsync", "epoll_ctl", "getpid", "clock_gettime")
# what the innermost frame of a busy sample is in, whatever its component
KINDS = ("kernel call (libc syscall wrapper)", "compiled send path (broker/fastpath.c)",
         "other C (interpreter, json, struct, isal, ...)", "Python code")


def kind(frames: list[str]) -> str:
    inner = frames[-1] if frames else ""
    file, _, func = inner.rpartition(":")
    if file.startswith("libc") and func in SYSCALLS:
        return KINDS[0]
    if "fastpath" in file:
        return KINDS[1]
    if file.endswith(".py"):
        return KINDS[3]
    return KINDS[2]


def components(raw: Path, kinds: Counter[str] | None = None,
               in_syscalls: Counter[str] | None = None) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    busy = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if any(m in f for f in frames[-4:] for m in _WAIT_MARKERS):
            continue
        n = int(count)
        busy += n
        name = classify(frames)
        counts[name] += n
        k = kind(frames)
        if kinds is not None:
            kinds[k] += n
        if in_syscalls is not None and k == KINDS[0]:
            in_syscalls[name] += n
    return counts, busy


def main() -> None:
    doc = json.loads(Path(sys.argv[1]).read_text())
    rows = sys.argv[2:] or [k for k, r in doc["results"].items() if "profile" in r]
    out = {}
    for key in rows:
        r = doc["results"][key]
        kinds: Counter[str] = Counter()
        sys_c: Counter[str] = Counter()
        counts, busy = components(Path(r["profile"]["file"]), kinds, sys_c)
        us = r["cpu_us_per_msg"].get("broker") or r["server_cpu_us_per_msg"]
        out[key] = {"busy_samples": busy, "broker_us_per_msg": us,
                    "components": {name: {"pct": round(100 * counts[name] / busy, 1),
                                          "us": round(us * counts[name] / busy, 1),
                                          "us_in_syscalls": round(us * sys_c[name] / busy, 1)}
                                   for name in [n for n, _ in COMPONENTS] + [OTHER]},
                    "innermost_frame_pct": {k: round(100 * kinds[k] / busy, 1) for k in KINDS}}
        print(f"{key}: broker {us:.0f} µs/msg, {busy} busy samples")
        for name, v in out[key]["components"].items():
            print(f"  {v['us']:6.1f} µs {v['pct']:5.1f} %  {name} (in syscalls {v['us_in_syscalls']:.1f} µs)")
        for k, pct in out[key]["innermost_frame_pct"].items():
            print(f"  innermost frame {pct:5.1f} %  {k}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
