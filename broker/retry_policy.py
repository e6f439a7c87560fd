"""A consumer group's retry policy (RocketMQ 5's ``groupRetryPolicy``) and the back-off it puts in Settings.

Apache RocketMQ 5.3.3 keeps the policy in the subscription group's config (``mqadmin updateSubGroup -p
'<json>'``) and its proxy answers a consumer's Settings with it: ``{"type": "EXPONENTIAL",
"exponentialRetryPolicy": {"initial": ms, "max": ms, "multiplier": m}}`` becomes an exponential back-off,
``{"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [ms, ...]}}`` a customized one, and a group
without a policy gets the customized levels 1 s ... 2 h (observed on the reference cluster,
tests/test_diff_push_nack.py). The official clients apply it: the PushConsumer nacks with the back-off of
the attempt, a FIFO PushConsumer waits it locally. RocketScope stores the policy in the same JSON shape.
"""

from __future__ import annotations

import json
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

# Apache's default customized levels (the delay levels from 1 s on), in seconds
DEFAULT_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
# mqadmin's own example of an exponential policy (updateSubGroup -h), used for fields the JSON leaves out
EXPONENTIAL_DEFAULTS = {"initial": 5000, "max": 7_200_000, "multiplier": 2}
MAX_MS = 86_400_000 * 7


def parse_group_retry_policy(text: str) -> dict[str, Any]:
    """The policy of ``text`` (mqadmin's -p JSON) in a normal form; ValueError naming the bad field."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"groupRetryPolicy: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError("groupRetryPolicy: a JSON object expected")
    kind = str(raw.get("type", "CUSTOMIZED")).upper()
    if kind == "EXPONENTIAL":
        given = raw.get("exponentialRetryPolicy") or {}
        if not isinstance(given, dict):
            raise ValueError("groupRetryPolicy.exponentialRetryPolicy: a JSON object expected")
        exp = {k: given.get(k, v) for k, v in EXPONENTIAL_DEFAULTS.items()}
        for k in ("initial", "max"):
            if not isinstance(exp[k], int) or isinstance(exp[k], bool) or not 0 < exp[k] <= MAX_MS:
                raise ValueError(f"groupRetryPolicy.exponentialRetryPolicy.{k}: {exp[k]!r} is not 1..{MAX_MS} ms")
        if exp["max"] < exp["initial"]:
            raise ValueError(f"groupRetryPolicy.exponentialRetryPolicy.max: {exp['max']} is below initial "
                             f"{exp['initial']}")
        mult = exp["multiplier"]
        if not isinstance(mult, int | float) or isinstance(mult, bool) or not 1 <= mult <= 100:
            raise ValueError(f"groupRetryPolicy.exponentialRetryPolicy.multiplier: {mult!r} is not 1..100")
        return {"type": "EXPONENTIAL", "exponentialRetryPolicy": exp}
    if kind == "CUSTOMIZED":
        given = raw.get("customizedRetryPolicy") or {}
        nxt = given.get("next", [s * 1000 for s in DEFAULT_BACKOFF_S]) if isinstance(given, dict) else None
        if not isinstance(nxt, list) or not nxt or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_MS for v in nxt):
            raise ValueError(f"groupRetryPolicy.customizedRetryPolicy.next: {nxt!r} is not a non-empty list of "
                             f"1..{MAX_MS} ms")
        return {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": nxt}}
    raise ValueError(f"groupRetryPolicy.type: {raw.get('type')!r} is not CUSTOMIZED or EXPONENTIAL")


def fill_backoff(out: pb.RetryPolicy, policy: dict[str, Any] | None, max_attempts: int) -> None:
    """Write the Settings back-off of a group whose policy is ``policy`` (None: Apache's default levels)."""
    out.max_attempts = max_attempts
    if policy and policy.get("type") == "EXPONENTIAL":
        exp = policy["exponentialRetryPolicy"]
        out.exponential_backoff.initial.FromMilliseconds(int(exp["initial"]))
        out.exponential_backoff.max.FromMilliseconds(int(exp["max"]))
        out.exponential_backoff.multiplier = float(exp["multiplier"])
        return
    if policy:
        for ms in policy["customizedRetryPolicy"]["next"]:
            out.customized_backoff.next.add().FromMilliseconds(int(ms))
        return
    for seconds in DEFAULT_BACKOFF_S:
        out.customized_backoff.next.add().FromSeconds(seconds)
