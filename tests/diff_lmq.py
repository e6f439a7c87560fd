"""LMQ reads over remoting, run on Apache RocketMQ and on RocketScope (tests/test_diff_priority.py with
``enableLmq`` on, Apache 5.5.0; tests/test_diff_grpc.py with it off, Apache 5.3.3); tests/test_remoting_lmq.py
checks RocketScope alone in `make test`.

Raw remoting frames to the broker's port (RocketScope's RemotingClient), as Apache's example LMQProducer and
LMQPullConsumer send them: a SEND_MESSAGE_V2 of the parent topic naming LMQ queues in INNER_MULTI_DISPATCH, then
PULL_MESSAGE of queue 0 of each LMQ name, the offset queries, a consumer offset committed and read back.  The
ground truth is what the scenario sends (which queues each body names, in order).
"""

from __future__ import annotations

import time
from typing import Any

import diff_support as d
from cluster import wait_until

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode, decode_messages, properties_to_string

SENT = 5  # message i names alpha, and beta too when i is even
BAD_NAMES = ("%LMQ%a/b", "%LMQ%a b")
NOT_EXIST = "topic[<lmq>] not exist, apply first please!"


def _send(b: RemotingClient, topic: str, body: bytes, lmqs: list[str]) -> int:
    props = {"UNIQ_KEY": body.hex(), "INNER_MULTI_DISPATCH": ",".join(lmqs)}
    header = {"a": "LmqDiffProducer", "b": topic, "c": "TBW102", "d": "1", "e": "0", "f": "0",
              "g": str(int(time.time() * 1000)), "h": "0", "i": properties_to_string(props), "m": "false"}
    return b.invoke(RequestCode.SEND_MESSAGE_V2, header, body).code


def _pull(b: RemotingClient, group: str, topic: str, offset: int, queue_id: int = 0) -> Any:
    return b.invoke(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
        "subVersion": "0", "expressionType": "TAG"})


def _max_offset(b: RemotingClient, topic: str) -> int:
    r = b.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})
    return int(r.fields.get("offset", -1)) if r.code == ResponseCode.SUCCESS else -1


def _lmq_offset(props: dict[str, str], lmq: str) -> int | None:
    queues = props.get("INNER_MULTI_DISPATCH", "").split(",")
    offsets = props.get("INNER_MULTI_QUEUE_OFFSET", "").split(",")
    return int(offsets[queues.index(lmq)]) if lmq in queues and len(offsets) == len(queues) else None


def scenario_lmq_reads(side: d.Side) -> dict[str, Any]:
    """Codes and records of reads of two LMQ queues (a plain ``%LMQ%`` name and a lite one with ``$``).  Keys
    starting with ``_`` are shown, not compared (test_diff_grpc.public): the malformed names' answers, a deviation
    (docs/COMPATIBILITY.md R29)."""
    parent = side.unique("LmqDiff")
    side.create_topic(parent, "NORMAL")
    alpha, beta = side.unique("%LMQ%alpha"), f"%LMQ%${parent}$beta"
    group = side.unique("LmqDiffReader")
    out: dict[str, Any] = {}
    with RemotingClient(side.broker_remoting) as b:
        wait_until(lambda: _send(b, parent, b"m0", [alpha, beta]) == ResponseCode.SUCCESS, timeout=60,
                   what=f"a send to {parent}")
        for i in range(1, SENT):
            assert _send(b, parent, f"m{i}".encode(), [alpha, beta] if i % 2 == 0 else [alpha]) == ResponseCode.SUCCESS
        for label, name in (("alpha", alpha), ("beta", beta)):
            # Apache's consume queues (LMQ ones too) are built by a thread that follows the commit log
            n = len(expected_records(label))
            wait_until(lambda name=name, n=n: _max_offset(b, name) == n, timeout=30, what=f"{n} entries in {name}")
            resp = _pull(b, group, name, 0)
            msgs = decode_messages(resp.body) if resp.code == ResponseCode.SUCCESS else []
            out[f"{label}_pull"] = (resp.code, resp.fields.get("nextBeginOffset"))
            # the record as stored (of the parent topic? its offset in the topic's queue) and its LMQ offset
            out[f"{label}_records"] = [(m.body.decode(), m.topic == parent, m.queue_offset,
                                        _lmq_offset(m.properties, name)) for m in msgs]
            for code_name, code in (("max", RequestCode.GET_MAX_OFFSET), ("min", RequestCode.GET_MIN_OFFSET)):
                r = b.invoke(code, {"topic": name, "queueId": "0"})
                out[f"{label}_{code_name}"] = (r.code, r.fields.get("offset"))
        r = b.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": alpha, "queueId": "0",
                                                          "commitOffset": "2"})
        out["update"] = r.code
        r = b.invoke(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": alpha, "queueId": "0"})
        out["query"] = (r.code, r.fields.get("offset"))
        r = _pull(b, group, alpha, 0, queue_id=1)
        out["queue1"] = (r.code, (r.remark or "").split(" consumer:")[0].replace(alpha, "<lmq>"))
        r = _pull(b, group, "%LMQ%never" + parent, 0)
        out["empty_lmq"] = (r.code, r.fields.get("nextBeginOffset"))
        out["_bad"] = {name: (r.code, r.remark) for name in BAD_NAMES for r in [_pull(b, group, name, 0)]}
    return out


def expected_records(label: str) -> list[tuple[str, int]]:
    """(body, offset in the LMQ queue) the scenario's sends put in ``label``'s queue: the ground truth."""
    bodies = [f"m{i}" for i in range(SENT) if label == "alpha" or i % 2 == 0]
    return [(body, n) for n, body in enumerate(bodies)]


# scenario_lmq_reads on Apache RocketMQ 5.5.0 with enableLmq and enableMultiDispatch (reference_cluster.py
# --version 5.5.0 --test-conf --broker-conf enableLmq=true --broker-conf enableMultiDispatch=true, session 24):
# the public part; its _bad was {'%LMQ%a/b': (19, 'NO_MESSAGE_IN_QUEUE'), '%LMQ%a b': (19, 'NO_MESSAGE_IN_QUEUE')}
# (no consume-queue directory made by those reads)
APACHE_55_LMQ: dict[str, Any] = {
    "alpha_pull": (0, "5"),
    "alpha_records": [("m0", True, 0, 0), ("m1", True, 1, 1), ("m2", True, 2, 2), ("m3", True, 3, 3),
                      ("m4", True, 4, 4)],
    "alpha_max": (0, "5"), "alpha_min": (0, "0"),
    "beta_pull": (0, "3"),
    "beta_records": [("m0", True, 0, 0), ("m2", True, 2, 1), ("m4", True, 4, 2)],
    "beta_max": (0, "3"), "beta_min": (0, "0"),
    "update": 0, "query": (0, "2"),
    "queue1": (29, "queueId[1] is illegal, topic:[<lmq>] topicConfig.readQueueNums:[1]"),
    "empty_lmq": (19, "0"),
}


def scenario_lmq_off(side: d.Side) -> dict[str, Any]:
    """Reads of LMQ names on a broker with ``enableLmq`` off (both sides' default): a record naming LMQ queues
    is stored in its topic only, and an LMQ name is a topic that does not exist."""
    parent = side.unique("LmqOff")
    side.create_topic(parent, "NORMAL")
    alpha, beta = side.unique("%LMQ%alpha"), f"%LMQ%${parent}$beta"
    group = side.unique("LmqOffReader")
    out: dict[str, Any] = {}
    with RemotingClient(side.broker_remoting) as b:
        wait_until(lambda: _send(b, parent, b"m0", [alpha, beta]) == ResponseCode.SUCCESS, timeout=60,
                   what=f"a send to {parent}")
        wait_until(lambda: _max_offset(b, parent) == 1, timeout=30, what=f"the record in {parent}")
        for label, name in (("alpha", alpha), ("beta", beta)):
            r = _pull(b, group, name, 0)
            remark = (r.remark or "").replace(name, "<lmq>")
            out[f"{label}_pull"] = (r.code, remark[:len(NOT_EXIST)])  # Apache appends a FAQ link
            r = b.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": name, "queueId": "0",
                                                              "commitOffset": "0"})
            out[f"{label}_update"] = r.code
            out[f"{label}_max"] = _max_offset(b, name)
        r = _pull(b, group, parent, 0)
        out["parent"] = [(m.body.decode(), m.properties.get("INNER_MULTI_QUEUE_OFFSET"))
                         for m in (decode_messages(r.body) if r.code == ResponseCode.SUCCESS else [])]
    return out


# scenario_lmq_off on Apache RocketMQ 5.3.3 with its defaults (reference_cluster.py --test-conf, session 24)
APACHE_533_LMQ_OFF: dict[str, Any] = {
    "alpha_pull": (17, NOT_EXIST), "alpha_update": 17, "alpha_max": 0,
    "beta_pull": (17, NOT_EXIST), "beta_update": 17, "beta_max": 0,
    "parent": [("m0", None)],
}
