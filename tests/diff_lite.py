"""Lite-mode scenarios run on Apache RocketMQ 5.5.0 and on RocketScope (tests/test_diff_priority.py compares them;
tests/test_lite.py runs them on RocketScope alone against the answers recorded here from Apache).

Two kinds of client: Apache's own mqadmin 5.5.0 (unchanged) for the subscription-group admin codes, and a
*raw* lite push consumer (``RawLiteClient``: its own client id, a Telemetry stream whose server commands are
kept, SyncLiteSubscription with an OffsetOption) for what the official Python client cannot show: it neither
sends an OffsetOption nor reads NotifyUnsubscribeLite.  The ground truth is what each scenario sends.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diff_support as d
import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "peers"))
import reference_cluster as rc

VERSION = "5.5.0"


def mqadmin(namesrv: str, home: Path, *args: str) -> str:
    """Apache's mqadmin 5.5.0, unchanged, against any name server; its whole output (it exits 0 even when a
    command fails, printing the exception).  A run that hit the Java client's 3 s timeout while its JVM warmed up
    is run again (three runs at most), as tests/test_admin_ops.py does."""
    return rc.run_mqadmin(rc.lib_of(VERSION), namesrv, home, *args)[1]


def refusal(out: str) -> tuple[int, str] | str:
    """(code, text) of the broker's refusal in mqadmin's output (``CODE: 1  DESC: <remark>``), without the Java
    stack frame Apache's remoting appends to an exception's text; the output's end when there is none."""
    m = re.search(r"CODE: (\d+)\s+DESC: (.*)", out)
    if m is None:
        return out[-300:]
    return int(m.group(1)), re.split(r", org\.apache\.|\nFor more information", m.group(2))[0].strip()


def consumer_config(out: str) -> dict[str, str]:
    """``mqadmin getConsumerConfig``'s ``field = value`` lines (one broker)."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^(\w+)[ \t]+=[ \t]*(.*)$", out, re.M)}


def java_map(text: str) -> dict[str, str]:
    """A java.util.Map's toString ``{k=v, k2=v2}``."""
    inner = text.strip().removeprefix("{").removesuffix("}")
    return dict(item.split("=", 1) for item in inner.split(", ") if "=" in item)


def scenario_update_sub_group(side: d.Side, namesrv: str, home: Path, full: bool = True) -> dict[str, Any]:
    """Apache's mqadmin updateSubGroup with lite attributes, read back with getConsumerConfig; attributes Apache
    refuses.  ``full``: also the refusals of a value and of deleting an absent key, and an update naming no
    attribute (the quick run in `make test` leaves them out: each mqadmin is a JVM start)."""
    group, topic = side.unique("GID_diff_subgroup"), side.unique("DiffLiteSG")
    out: dict[str, Any] = {}
    created = mqadmin(namesrv, home, "updateSubGroup", "-c", "DefaultCluster", "-g", group, "-r", "3",
                      "--attributes", f"+lite.bind.topic={topic},+lite.sub.model=Exclusive")
    out["create"] = "success" if re.search(r"create subscription group to \S+ success", created) else created[-300:]
    out["bad_key"] = refusal(mqadmin(namesrv, home, "updateSubGroup", "-c", "DefaultCluster", "-g", group,
                                     "--attributes", "+foo=1"))
    if full:
        out["bad_value"] = refusal(mqadmin(namesrv, home, "updateSubGroup", "-c", "DefaultCluster", "-g", group,
                                           "--attributes", "+lite.sub.model=Single"))
        out["delete_absent"] = refusal(mqadmin(namesrv, home, "updateSubGroup", "-c", "DefaultCluster", "-g",
                                               group, "--attributes", "-lite.sub.client.quota"))
        mqadmin(namesrv, home, "updateSubGroup", "-c", "DefaultCluster", "-g", group, "-r", "5")
    conf = consumer_config(mqadmin(namesrv, home, "getConsumerConfig", "-g", group))
    out["read_back"] = {"retryMaxTimes": conf.get("retryMaxTimes"),
                        "attributes": {k: d.relative(v, topic=topic)
                                       for k, v in java_map(conf.get("attributes", "{}")).items()}}
    out["_names"] = (group, topic)  # not compared: for a caller that goes on with the group
    return out


# Apache RocketMQ 5.5.0's answers (observed with tests/test_diff_priority.py test_update_sub_group; the codes and
# texts also follow from its AdminBrokerProcessor and AttributeUtil, read from the jars)
APACHE_55_SUB_GROUP: dict[str, Any] = {
    "create": "success",
    "bad_key": (1, "java.lang.RuntimeException: unsupported key: foo"),
    "bad_value": (1, "java.lang.RuntimeException: value is not in set: [Shared, Exclusive]"),
    "delete_absent": (1, "java.lang.RuntimeException: attempt to delete a nonexistent key: lite.sub.client.quota"),
    "read_back": {"retryMaxTimes": "5",  # the update naming no attribute kept them
                  "attributes": {"lite.bind.topic": "{topic}", "lite.sub.model": "Exclusive"}},
}


class RawLiteClient:
    """A LITE_PUSH_CONSUMER spoken raw: its Settings on a Telemetry stream kept open (the server's commands on it are
    collected), a Heartbeat, then SyncLiteSubscription and ReceiveMessage calls under its own client id."""

    def __init__(self, side: d.Side, group: str, topic: str, cid: str) -> None:
        self.side, self.group, self.topic, self.cid = side, group, topic, cid
        self.md = (("x-mq-client-id", cid), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))
        self.commands: list[svc.TelemetryCommand] = []
        self._done = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> RawLiteClient:
        self._channel = grpc.insecure_channel(self.side.endpoint)
        self.stub = svc_grpc.MessagingServiceStub(self._channel)
        settings = d.consumer_settings(self.side, self.group, self.topic, client_type=pb.LITE_PUSH_CONSUMER)
        answered = threading.Event()

        def requests() -> Iterator[svc.TelemetryCommand]:
            yield settings
            self._done.wait(300)

        self._stream = self.stub.Telemetry(requests(), metadata=self.md, timeout=300)

        def read() -> None:
            try:
                for cmd in self._stream:
                    with self._lock:
                        self.commands.append(cmd)
                    answered.set()
            except grpc.RpcError:
                pass

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not answered.wait(30):
            raise AssertionError(f"{self.side.name}: no answer to the Settings of {self.cid}")
        self.stub.Heartbeat(svc.HeartbeatRequest(group=pb.Resource(name=self.group),
                                                 client_type=pb.LITE_PUSH_CONSUMER), metadata=self.md, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._stream.cancel()
        self._reader.join(10)
        self._channel.close()

    def sync(self, action: str, lites: list[str], offset: pb.OffsetOption | None = None) -> tuple[str, str]:
        req = svc.SyncLiteSubscriptionRequest(action=pb.LiteSubscriptionAction.Value(action),
                                              topic=pb.Resource(name=self.topic), group=pb.Resource(name=self.group),
                                              lite_topic_set=lites)
        if offset is not None:
            req.offset_option.CopyFrom(offset)
        return d.status(self.stub.SyncLiteSubscription(req, metadata=self.md, timeout=30))

    def unsubscribed(self) -> list[str]:
        """The lite topics of the NotifyUnsubscribeLite commands this client's stream received."""
        with self._lock:
            return [c.notify_unsubscribe_lite_command.lite_topic for c in self.commands
                    if c.WhichOneof("command") == "notify_unsubscribe_lite_command"]

    def receive(self, want: int, wait_s: float) -> list[tuple[str, str]]:
        """(body, lite topic) of what ReceiveMessage hands this client until ``want`` came or ``wait_s`` passed."""
        queue = d.assigned_queue(self.side, self.topic, self.group)
        got: list[tuple[str, str]] = []
        deadline = time.monotonic() + wait_s
        while len(got) < want and time.monotonic() < deadline:
            req = d.receive_req(self.topic, self.group, await_ms=int(min(5, max(deadline - time.monotonic(), 1))
                                                                     * 1000), batch=32, queue_id=queue)
            for r in self.stub.ReceiveMessage(req, metadata=self.md, timeout=30):
                if r.WhichOneof("content") == "message":
                    got.append((r.message.body.decode(), r.message.system_properties.lite_topic))
                    self.ack(r.message)
        return sorted(got)

    def ack(self, m: pb.Message) -> None:
        self.stub.AckMessage(svc.AckMessageRequest(
            group=pb.Resource(name=self.group), topic=pb.Resource(name=self.topic),
            entries=[svc.AckMessageEntry(message_id=m.system_properties.message_id,
                                         receipt_handle=m.system_properties.receipt_handle)]),
            metadata=self.md, timeout=30)


def send_lite(side: d.Side, topic: str, lite: str, body: str) -> str:
    m = d.raw_message(topic, body=body.encode(), mtype=pb.LITE)
    m.system_properties.lite_topic = lite
    return d.send_status(side, m)[0]


def scenario_exclusive(side: d.Side, create_lite_topic: Any, bind_group: Any, quiet_s: float = 6) -> dict[str, Any]:
    """A group with ``lite.sub.model=Exclusive``: client x1 subscribes to lite topic ``a``, then x2 does; what
    each stream is told and which of them a message of ``a`` reaches.  ``bind_group(group, topic, attrs)``;
    ``quiet_s``: how long "nothing arrives" is watched (Apache's proxy long-polls at least 5 s)."""
    topic, group = side.unique("DiffLiteX"), side.unique("GID_diff_litex")
    create_lite_topic(topic)
    bind_group(group, topic, "+lite.sub.model=Exclusive")
    out: dict[str, Any] = {}
    with RawLiteClient(side, group, topic, side.unique("x1-")) as x1, \
            RawLiteClient(side, group, topic, side.unique("x2-")) as x2:
        out["x1_sync"] = x1.sync("PARTIAL_ADD", ["a"])[0]
        out["x2_sync"] = x2.sync("PARTIAL_ADD", ["a"])[0]
        deadline = time.monotonic() + 15
        while not x1.unsubscribed() and time.monotonic() < deadline:
            time.sleep(0.1)
        out["x1_told"], out["x2_told"] = x1.unsubscribed(), x2.unsubscribed()
        out["sent"] = [send_lite(side, topic, lite, f"E{i}") for i, lite in enumerate("ab")]
        out["x2_received"] = x2.receive(1, 20)
        out["x1_received"] = x1.receive(1, quiet_s)  # a has left x1: nothing (b it never had)
    return out


APACHE_55_EXCLUSIVE: dict[str, Any] = {
    "x1_sync": "OK", "x2_sync": "OK", "x1_told": ["a"], "x2_told": [], "sent": ["OK", "OK"],
    "x2_received": [("E0", "a")], "x1_received": [],
}


def scenario_quota_and_offsets(side: d.Side, create_lite_topic: Any, bind_group: Any, quiet_s: float = 6
                               ) -> dict[str, Any]:
    """The group's ``lite.sub.client.quota`` 2 against the request's set (Apache's proxy: refused past the quota
    plus 300), and where a PARTIAL_ADD's OffsetOption starts the group on a backlog of messages of ``a``: MAX (past
    the 4 sent), then OFFSET 2 (the third on, and one more sent after it)."""
    topic, group = side.unique("DiffLiteQ"), side.unique("GID_diff_liteq")
    create_lite_topic(topic)
    bind_group(group, topic, "+lite.sub.client.quota=2")
    out: dict[str, Any] = {}
    with RawLiteClient(side, group, topic, side.unique("q1-")) as q:
        out["set_302"] = q.sync("COMPLETE_ADD", [f"t{i}" for i in range(302)])[0]
        over = q.sync("COMPLETE_ADD", [f"t{i}" for i in range(303)])
        out["set_303"] = (over[0], over[1].split(" (")[0])  # Apache's text; ours adds why in parentheses
        out["sent"] = [send_lite(side, topic, "a", f"B{i}") for i in range(4)]
        out["max"] = q.sync("PARTIAL_ADD", ["a"], pb.OffsetOption(policy=pb.OffsetOption.MAX))[0]
        out["after_max"] = q.receive(1, quiet_s)
        out["offset_2"] = q.sync("PARTIAL_ADD", ["a"], pb.OffsetOption(offset=2))[0]
        # Apache dispatches an event to a client's lite queue when a message arrives (or at its subscription):
        # a new message makes its next receive read the queue, from the offset the option set
        out["sent_after"] = send_lite(side, topic, "a", "B4")
        out["after_offset_2"] = q.receive(3, 20)
    return out


APACHE_55_QUOTA_OFFSETS: dict[str, Any] = {
    "set_302": "OK", "set_303": ("LITE_SUBSCRIPTION_QUOTA_EXCEEDED", "lite subscription quota exceeded: 2"),
    "sent": ["OK"] * 4, "max": "OK", "after_max": [], "offset_2": "OK", "sent_after": "OK",
    "after_offset_2": [("B2", "a"), ("B3", "a"), ("B4", "a")],
}


TTL_CONF = {"minLiteTTl": "0", "liteTtlCheckInterval": "1000"}  # both sides' broker keys for the expiry scenario


def scenario_expiry(side: d.Side, create_topic: Any, bind_group: Any) -> dict[str, Any]:
    """A LITE topic with ``lite.topic.expiration`` 1 (minute) on a broker with TTL_CONF: client ``old`` subscribes
    to lite topics a and b and takes a's one message; b gets a message every 5 s, a none, for 75 s.  Then a new
    message of each: what ``old`` receives and is told, and what a new client of the group reads from a's first
    message on.  ``create_topic(topic)`` makes the topic with the attribute."""
    topic, group = side.unique("DiffLiteTtl"), side.unique("GID_diff_litettl")
    create_topic(topic)
    bind_group(group, topic)
    out: dict[str, Any] = {}
    with RawLiteClient(side, group, topic, side.unique("ttl-old-")) as old:
        out["subscribe"] = old.sync("PARTIAL_ADD", ["a", "b"])[0]
        out["a0"] = send_lite(side, topic, "a", "A0")
        out["old_first"] = old.receive(1, 20)
        started = time.monotonic()
        kept = 0
        while time.monotonic() - started < 75:  # past the minute and a few scans
            kept += send_lite(side, topic, "b", f"B{kept}") == "OK"
            time.sleep(5)
        out["after"] = [send_lite(side, topic, "a", "A1"), send_lite(side, topic, "b", "BL")]
        got = old.receive(kept + 2, 20)
        out["old_got_a1"] = ("A1", "a") in got
        out["old_got_b"] = sorted({body for body, lite in got if lite == "b"}) == sorted(
            [f"B{i}" for i in range(kept)] + ["BL"])
        out["old_told"] = old.unsubscribed()
        with RawLiteClient(side, group, topic, side.unique("ttl-new-")) as new:
            out["new_subscribe"] = new.sync("PARTIAL_ADD", ["a"], pb.OffsetOption(policy=pb.OffsetOption.MIN))[0]
            out["new_from_first"] = new.receive(2, 10)
    return out


# observed on Apache 5.5.0 (tests/test_diff_priority.py test_lite_topic_expiry): a is gone, silently, with its A0;
# b, busy all along, stays
APACHE_55_EXPIRY: dict[str, Any] = {
    "subscribe": "OK", "a0": "OK", "old_first": [("A0", "a")], "after": ["OK", "OK"], "old_got_a1": False,
    "old_got_b": True, "old_told": [], "new_subscribe": "OK", "new_from_first": [("A1", "a")],
}


def scenario_lite_order(side: d.Side, create_lite_topic: Any, bind_group: Any) -> dict[str, Any]:
    """How a lite queue is popped: 3 messages of lite topic a; a receive of one (not acked), another receive while
    it is invisible (10 s), then a receive after its invisible time ended: which bodies, with which attempts."""
    topic, group = side.unique("DiffLiteO"), side.unique("GID_diff_liteo")
    create_lite_topic(topic)
    bind_group(group, topic)
    out: dict[str, Any] = {}
    with RawLiteClient(side, group, topic, side.unique("o1-")) as c:
        out["sync"] = c.sync("PARTIAL_ADD", ["a"])[0]
        out["sent"] = [send_lite(side, topic, "a", f"O{i}") for i in range(3)]
        queue = d.assigned_queue(side, topic, group)

        def receive(batch: int, wait_ms: int, ack: bool) -> list[tuple[str, int]]:
            req = d.receive_req(topic, group, invisible_ms=10_000, await_ms=wait_ms, batch=batch, queue_id=queue)
            got = [r.message for r in c.stub.ReceiveMessage(req, metadata=c.md, timeout=40)
                   if r.WhichOneof("content") == "message"]
            if ack:
                for m in got:
                    c.ack(m)
            return [(m.body.decode(), m.system_properties.delivery_attempt) for m in got]

        out["first"] = receive(1, 5_000, ack=False)
        out["while_invisible"] = receive(1, 5_000, ack=False)
        deadline = time.monotonic() + 30
        after: list[tuple[str, int]] = []
        while len(after) < 3 and time.monotonic() < deadline:
            after += receive(32, 5_000, ack=True)
        out["after_invisible"] = after
    return out


# observed on Apache 5.5.0 (tests/test_diff_priority.py test_lite_order): a lite queue is popped in order
APACHE_55_ORDER: dict[str, Any] = {
    "sync": "OK", "sent": ["OK"] * 3, "first": [("O0", 1)], "while_invisible": [],
    "after_invisible": [("O0", 1), ("O1", 1), ("O2", 1)],
}
