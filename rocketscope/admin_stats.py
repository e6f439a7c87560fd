"""The broker counters ``rocketscope admin statsAll`` prints: the ones Apache's mqadmin statsAll reads.

Why: statsAll used to compute its figures from the store's queues, so it disagreed with mqadmin
statsAll on the same broker. Both now ask each master the same remoting requests mqadmin sends
(broker/remoting/admin_handlers.py, admin_ops_handlers.py): QUERY_TOPIC_CONSUME_BY_WHO (300) for
the groups of a topic, VIEW_BROKER_STATS_DATA (315) for ``TOPIC_PUT_NUMS <topic>`` and
``GROUP_GET_NUMS <topic>@<group>`` (broker/broker_stats.py) and GET_CONSUME_STATS (208) for the
accumulation. Over remoting only, so the command reads an Apache cluster the same way (its name
server over remoting, rocketscope/admin_client.py). These calls are blocking; the CLI
runs them in a thread. When the admin tool has an account, frames are signed as RocketMQ's
remoting ACL expects (broker/security/remoting_acl.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rocketscope.broker.remoting.codec import ResponseCode, parse_json_body
from rocketscope.broker.security.remoting_acl import ACCESS_KEY, SIGNATURE, sign

from . import remoting_client as rc

GET_CONSUME_STATS = 208
QUERY_TOPIC_CONSUME_BY_WHO = 300
VIEW_BROKER_STATS_DATA = 315
TOPIC_PUT_NUMS, GROUP_GET_NUMS = "TOPIC_PUT_NUMS", "GROUP_GET_NUMS"


@dataclass
class Counter:
    """One counter's minute TPS and mqadmin's "24 hour" sum (0 when the broker never counted it)."""

    tps: float = 0.0
    day: int = 0


def day_sum(data: dict[str, Any]) -> int:
    """mqadmin's compute24HourSum: the day's sum, else the hour's, else the minute's (first non-zero)."""
    for window in ("statsDay", "statsHour", "statsMinute"):
        total = int((data.get(window) or {}).get("sum") or 0)
        if total:
            return total
    return 0


class BrokerCounters:
    """Remoting calls to the masters for one statsAll run; ``access_key``/``secret_key`` sign them."""

    def __init__(self, timeout_s: float, access_key: str = "", secret_key: str = "") -> None:
        self.conns = rc.Connections(timeout_s)
        self.access_key, self.secret_key = access_key, secret_key

    def close(self) -> None:
        self.conns.close()

    def _invoke(self, addr: str, code: int, ext: dict[str, str]) -> Any:
        if self.access_key:
            ext = dict(ext, **{ACCESS_KEY: self.access_key})
            ext[SIGNATURE] = sign(ext, b"", self.secret_key)
        return self.conns.invoke(addr, code, ext)

    def groups(self, addr: str, topic: str) -> set[str]:
        """Groups that consume ``topic`` on this broker (online, or with offsets), as mqadmin asks."""
        resp = self._invoke(addr, QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
        if resp.code != ResponseCode.SUCCESS:
            raise rc.RemotingCallError("QUERY_TOPIC_CONSUME_BY_WHO", addr, resp.code, resp.remark)
        body = parse_json_body(resp.body or b"{}", "GroupList")
        return {str(g) for g in (body.get("groupList") or [])}

    def counter(self, addr: str, name: str, key: str) -> Counter:
        """VIEW_BROKER_STATS_DATA; a counter the broker never touched (its SYSTEM_ERROR) counts 0, as mqadmin."""
        resp = self._invoke(addr, VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})
        if resp.code != ResponseCode.SUCCESS:
            return Counter()
        data = parse_json_body(resp.body or b"{}", "BrokerStatsData")
        return Counter(float((data.get("statsMinute") or {}).get("tps") or 0.0), day_sum(data))

    def accumulation(self, addr: str, group: str, topic: str) -> int:
        """mqadmin's computeTotalDiff of GET_CONSUME_STATS: broker offset - consumer offset over the topic's queues
        on this broker; 0 when the broker refuses (mqadmin swallows that error too)."""
        resp = self._invoke(addr, GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
        if resp.code != ResponseCode.SUCCESS:
            return 0
        return sum(b - c for b, c in queue_offsets(resp.body or b""))


# an offsetTable value: the innermost objects of ConsumeStats (fastjson writes its MessageQueue keys as objects,
# so the body is not standard JSON and is read object by object)
_INNER = re.compile(rb"\{[^{}]*\}")


def queue_offsets(body: bytes) -> list[tuple[int, int]]:
    """(brokerOffset, consumerOffset) of every queue of a ConsumeStats body."""
    out = []
    for m in _INNER.finditer(body):
        try:
            obj = json.loads(m.group())
        except ValueError:
            continue
        if isinstance(obj, dict) and "brokerOffset" in obj and "consumerOffset" in obj:
            out.append((int(obj["brokerOffset"]), int(obj["consumerOffset"])))
    return out
