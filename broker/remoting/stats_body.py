"""ConsumeStats bodies as Apache RocketMQ's remoting answers carry them (GET_CONSUME_STATS, statsAll)."""

from __future__ import annotations

import json
from typing import Any


def consume_stats_json(broker_name: str, rows: list[Any], tps: float = 0.0) -> bytes:
    """ConsumeStats in fastjson's form: ``{"consumeTps":..,"offsetTable":{{mq}:{offsets},..}}``."""
    entries = []
    for r in rows:
        mq = json.dumps({"brokerName": broker_name, "queueId": r.queue_id, "topic": r.topic}, separators=(",", ":"),
                        sort_keys=True)
        off = json.dumps({"brokerOffset": r.broker_offset, "consumerOffset": r.consumer_offset,
                          "lastTimestamp": r.last_timestamp, "pullOffset": r.consumer_offset},
                         separators=(",", ":"), sort_keys=True)
        entries.append(f"{mq}:{off}")
    return ('{"consumeTps":' + repr(float(tps)) + ',"offsetTable":{' + ",".join(entries) + "}}").encode()
