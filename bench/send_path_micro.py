"""The broker's CPU per remoting send with no socket, no client and no other process (issue 20).

    .venv/bin/python bench/send_path_micro.py [--messages 20000] [--depth 64] [--batch 1|32] [--profile FILE]

A broker runs in this process (ASYNC_FLUSH, a scratch store); SEND_MESSAGE_V2 frames as Apache's Go
client v2 writes them (or SEND_BATCH_MESSAGE frames of ``--batch`` messages) are fed to its remoting
front door (``_FrameProtocol.data_received``) ``--depth`` messages per read, through a transport that
only counts the answer frames written, and the next read is fed once every answer of the last one
arrived: what the broker does per send minus the kernel's socket work and the client.  The CPU time of
this process (``time.process_time``) over the timed messages, divided by them, is the figure; it
sits below ``bench/datapath_bench.py``'s broker figure by the socket reads and writes and the
event loop's select, which this leaves out.  ``--profile FILE`` writes cProfile stats of the timed
part.  ``ROCKETSCOPE_PURE_PYTHON=1`` selects the pure-Python send path (broker/speedups.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class CountingTransport(asyncio.WriteTransport):
    """A transport whose writes are counted as answer frames (each write holds whole frames)."""

    def __init__(self, on_frames: Any) -> None:
        super().__init__()
        self.on_frames = on_frames
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: Any) -> None:
        mv, pos, n = memoryview(data), 0, 0
        while pos < len(mv):
            pos += 4 + int.from_bytes(mv[pos:pos + 4], "big")
            n += 1
        self.on_frames(n, bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def frames(topic: str, count: int, batch: int, first_opaque: int) -> bytes:
    from rocketscope.broker.remoting.codec import (
        BatchEntry,
        RemotingCommand,
        encode,
        encode_batch,
        properties_to_string,
    )
    from rocketscope.broker.sends import new_uniq_key

    out = []
    for i in range(count):
        props = {"UNIQ_KEY": new_uniq_key(), "WAIT": "true"}
        ext = {"a": "bench_group", "b": topic, "c": "TBW102", "d": "4", "e": str(i % 8), "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": properties_to_string(props), "j": "0",
               "k": "false", "l": "0", "m": "false", "n": "bench"}
        if batch > 1:
            ext["m"] = "true"
            body = encode_batch([BatchEntry(b"x" * 1024, 0, {"UNIQ_KEY": new_uniq_key(), "WAIT": "true"})
                                 for _ in range(batch)])
            ext["i"] = ""
            code = 320
        else:
            body, code = b"x" * 1024, 310
        out.append(encode(RemotingCommand(code=code, ext_fields=ext, body=body, opaque=first_opaque + i,
                                          language="GO", version=317)))
    return b"".join(out)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from rocketscope.broker.broker import Broker
    from rocketscope.broker.broker_config import load_broker_config
    from rocketscope.broker.remoting.server import _FrameProtocol

    root = Path(tempfile.mkdtemp(prefix="dp-micro-"))
    conf = {"brokerName": "bench", "namesrvAddr": "", "grpcServerPort": "0", "listenPort": "0",
            "storePathRootDir": str(root), "mappedFileSizeCommitLog": str(256 << 20),
            "mappedFileSizeConsumeQueue": str(300000 * 20), "traceOn": "false", "flushDiskType": "ASYNC_FLUSH"}
    b = Broker(load_broker_config(conf))
    await b.start()
    try:
        topic = "MICRO"
        b.topics.create_if_absent(topic, 8)
        server = b.remoting.server  # type: ignore[attr-defined]
        per_read = max(1, args.depth // args.batch)
        state = {"answers": 0, "bad": 0}
        done: list[asyncio.Future[None]] = []

        def on_frames(n: int, data: bytes) -> None:
            state["answers"] += n
            if b'"code":0,' not in data[:64]:
                state["bad"] += 1
            if done and state["answers"] >= state["want"] and not done[-1].done():
                done[-1].set_result(None)

        proto = _FrameProtocol(server)
        proto.connection_made(CountingTransport(on_frames))
        loop = asyncio.get_running_loop()

        def build(reads: int, opaque0: int) -> list[bytes]:  # built before the clock starts
            return [frames(topic, per_read, args.batch, opaque0 + r * per_read) for r in range(reads)]

        async def drive(chunks: list[bytes]) -> None:
            for chunk in chunks:
                state["want"] = state["answers"] + per_read
                done.append(loop.create_future())
                proto.data_received(chunk)
                await asyncio.wait_for(done[-1], 30)

        await drive(build(max(1, args.warmup // (per_read * args.batch)), 1))
        reads = max(1, args.messages // (per_read * args.batch))
        timed = build(reads, 1_000_000)
        prof = None
        if args.profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        cpu0, t0 = time.process_time(), time.perf_counter()
        await drive(timed)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        if prof is not None:
            prof.disable()
            prof.dump_stats(args.profile)
        n = reads * per_read * args.batch
        return {"codec": _impl(), "messages": n, "batch": args.batch, "depth": args.depth,
                "cpu_us_per_msg": cpu / n * 1e6, "wall_us_per_msg": wall / n * 1e6, "bad_answers": state["bad"],
                "loadavg": os.getloadavg()}
    finally:
        await b.stop()


def _impl() -> str:
    from rocketscope.broker import speedups

    return speedups.IMPLEMENTATION


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--profile", default="")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    sys.exit(main())
