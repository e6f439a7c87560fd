"""Delayed messages written fast over the remoting protocol (pipelined SEND_MESSAGE_V2), for tests and bench.

The official Python client sends about 3,000 messages a second; the timer tests and
bench/timer_bench.py need tens of thousands to a million pending messages.  Each message
carries RocketMQ 5's ``TIMER_DELIVER_MS`` property (the same one Apache RocketMQ's broker
reads), so the same loader fills RocketScope and the Apache reference broker.  ``window``
requests are in flight on one connection at a time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RemotingCommand, encode, properties_to_string

SEND_MESSAGE_V2 = 310


def send_delayed(addr: str, topic: str, n: int, deliver_ms: Callable[[int], int], window: int = 128,
                 body: Callable[[int], bytes] = lambda i: f"timer-{i}".encode(), group: str = "timer-load",
                 key_prefix: str = "") -> dict[str, object]:
    """Send ``n`` delayed messages to the broker at ``addr`` (its remoting port); ``deliver_ms(i)`` is message i's time.

    Returns {"sent", "failed", "seconds", "rate", "errors" (first few remarks), "ids" (UNIQ_KEY of each sent
    message by index, only when ``key_prefix`` is given)}.
    """
    sent = failed = 0
    errors: list[str] = []
    ids: dict[int, str] = {}
    started = time.monotonic()
    with RemotingClient(addr, timeout_s=60) as c:
        inflight: dict[int, int] = {}  # opaque -> message index
        i = 0
        while i < n or inflight:
            frames = []
            while i < n and len(inflight) < window:
                uniq = f"{key_prefix}{i}" if key_prefix else uuid.uuid4().hex.upper()
                props = {"UNIQ_KEY": uniq, "TIMER_DELIVER_MS": str(deliver_ms(i)), "WAIT": "true"}
                if key_prefix:
                    props["KEYS"] = uniq
                    ids[i] = uniq
                req = c.request(SEND_MESSAGE_V2, {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(i % 4),
                                                  "f": "0", "g": str(int(time.time() * 1000)), "h": "0",
                                                  "i": properties_to_string(props), "j": "0", "m": "false"},
                                body(i))
                inflight[req.opaque] = i
                frames.append(encode(req))
                i += 1
            if frames:
                c.send_raw(b"".join(frames))
            resp: RemotingCommand = c.read_frame()
            if not resp.is_response or resp.opaque not in inflight:
                continue
            idx = inflight.pop(resp.opaque)
            if resp.code == 0:
                sent += 1
            else:
                failed += 1
                ids.pop(idx, None)
                if len(errors) < 5:
                    errors.append(f"{resp.code}: {resp.remark}")
    secs = time.monotonic() - started
    return {"sent": sent, "failed": failed, "seconds": round(secs, 3), "rate": round(sent / max(secs, 1e-9), 1),
            "errors": errors, "ids": ids}
