"""broker/priority.py's rules, each as Apache RocketMQ 5.5.0 showed or its broker does (docs/COMPATIBILITY.md
P1-P10); the end-to-end checks are tests/test_diff_priority.py (long, both servers) and
tests/test_diff_grpc.py::test_priority_as_recorded_from_apache_55 (make test)."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketscope.broker.convert import to_grpc, to_stored
from rocketscope.broker.priority import PRIORITY_PROPERTY, place, pop_order, type_from_properties


def test_a_priority_message_goes_to_its_queue_or_the_last() -> None:
    # observed on 5.5.0 with 4 queues: priority 0 in queue 0, priority 100 in queue 3
    for priority, queue in ((0, 0), (2, 2), (3, 3), (100, 3)):
        props = {PRIORITY_PROPERTY: str(priority)}
        assert place(props, 4, queue_id=1) == queue
        assert props[PRIORITY_PROPERTY] == str(priority)


def test_a_priority_on_another_type_is_dropped_and_the_queue_kept() -> None:
    # a message group, a delay or a transaction makes the type (Apache's parseFromMessageProperty order)
    for extra, kind in (({"__SHARDINGKEY": "g"}, "FIFO"), ({"TIMER_DELIVER_MS": "1"}, "DELAY"),
                        ({"TRAN_MSG": "true"}, "TRANSACTION")):
        props = {PRIORITY_PROPERTY: "3", **extra}
        assert type_from_properties(props) == kind
        assert place(props, 4, queue_id=1) == 1
        assert PRIORITY_PROPERTY not in props


def test_without_a_usable_priority_nothing_moves() -> None:
    for props in ({}, {PRIORITY_PROPERTY: "x"}, {PRIORITY_PROPERTY: "-1"}):
        assert place(dict(props), 4, queue_id=2) == 2
    assert type_from_properties({"__LITE_TOPIC": "lt"}) == "LITE"
    assert type_from_properties({PRIORITY_PROPERTY: "1", "__LITE_TOPIC": "lt"}) == "PRIORITY"


def test_pop_reads_the_most_urgent_queue_first() -> None:
    assert pop_order([0, 1, 2, 3], highest_first=True) == [3, 2, 1, 0]
    assert pop_order([2, 0, 3, 1], highest_first=False) == [0, 1, 2, 3]


def test_the_priority_and_lite_topic_survive_the_store() -> None:
    m = pb.Message(topic=pb.Resource(name="T"), body=b"x")
    m.system_properties.message_id = "ID"
    m.system_properties.message_type = pb.PRIORITY
    m.system_properties.priority = 0  # 0 is a priority: proto3 presence, not a default
    stored = to_stored(m, 0, "127.0.0.1")
    assert stored.properties[PRIORITY_PROPERTY] == "0"
    back = to_grpc(stored, "T").system_properties
    assert back.HasField("priority") and back.priority == 0 and back.message_type == pb.PRIORITY
    m.ClearField("system_properties")
    m.system_properties.lite_topic = "lt1"
    assert to_grpc(to_stored(m, 0, "h"), "T").system_properties.lite_topic == "lt1"
    assert not to_grpc(to_stored(m, 0, "h"), "T").system_properties.HasField("priority")
