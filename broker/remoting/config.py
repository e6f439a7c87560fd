"""Configuration keys of the remoting front door, shared by the name server and the broker."""

from __future__ import annotations

from rocketscope.config import Key, port, positive

from .codec import DEFAULT_MAX_FRAME

REMOTING_KEYS: list[Key] = [
    Key("enableRemoting", bool, True, "serve RocketMQ's classic TCP protocol (remoting) beside gRPC; see REMOTING.md"),
    Key("remotingListenPort", int, 0, "port of the remoting server; 0 shares listenPort with gRPC (the first "
        "bytes, and in TLS the ClientHello's ALPN, tell the protocols apart); TLS follows tls.server.mode", check=port),
    Key("serverChannelMaxIdleTimeSeconds", int, 120, "seconds after which an idle remoting connection, or one "
        "stalled inside a frame, is closed", check=positive),
    Key("remotingFrameMaxLength", int, DEFAULT_MAX_FRAME, "largest remoting frame accepted, bytes (RocketMQ's "
        "com.rocketmq.remoting.frameMaxLength)", check=positive),
]


def _delay_levels_problem(value: str) -> str | None:
    try:
        parse_delay_levels(value)
    except ValueError as exc:
        return str(exc)
    return None


def parse_delay_levels(text: str) -> list[int]:
    """RocketMQ's ``messageDelayLevel`` ("1s 5s ... 2h") -> milliseconds per level (level 1 first)."""
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    out = []
    for item in text.split():
        unit = units.get(item[-1:])
        if unit is None or not item[:-1].isdigit():
            raise ValueError(f"delay level {item!r} is not <number><s|m|h|d>")
        out.append(int(item[:-1]) * unit)
    if not out:
        raise ValueError("no delay levels")
    return out


BROKER_REMOTING_KEYS: list[Key] = [
    Key("messageDelayLevel", str, "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        "delay of each level a remoting producer's DELAY property or a CONSUMER_SEND_MSG_BACK names",
        check=_delay_levels_problem),
    Key("defaultMessageRequestMode", str, "PULL", "what QUERY_ASSIGNMENT tells a remoting push consumer with "
        "clientRebalance false for a topic@group no `mqadmin setConsumeMode` set: PULL or POP (Apache's key; "
        "broker/remoting/pop_handlers.py)", choices=("PULL", "POP")),
    Key("defaultPopShareQueueNum", int, -1, "popShareQueueNum of that default POP mode: a consumer pops its own "
        "share and the next N consumers'; <= 0: every queue (Apache's key; broker/remoting/assignment.py)"),
    Key("serverLoadBalancerEnable", bool, True, "QUERY_ASSIGNMENT shares a topic's queues among the group's "
        "consumers; false: every consumer gets every queue (Apache's key)"),
]
