"""One message's whole life: joins, retries, missing halves, duplicates, order, replication, DLQ."""

from __future__ import annotations

import dataclasses
import json
import random

from hypothesis import given
from hypothesis import strategies as st

from rocketscope.ha_events import COMMIT_ADVANCED, REPLICA_ACK, ROLE_CHANGE, TRUNCATION, HaEvent
from rocketscope.trace.codec import (
    CONSUME_FAILED,
    MSG_TYPE_TRANS_HALF,
    EndTransactionRecord,
    PubRecord,
    RecallRecord,
    SubAfterRecord,
    SubBeforeRecord,
)
from rocketscope.trace.ids import make_offset_msg_id
from rocketscope.trace.timeline import StoreInfo, build_timeline

MID = "AC1415116D1418B4AAC217FE1B4E0000"
T0 = 1_700_000_000_000
P = 4096  # the message's physical offset
OFFSET_ID = make_offset_msg_id("10.0.0.1", 10911, P)


def pub(ts: int = T0, success: bool = True, topic: str = "orders", msg_id: str = MID, cost: int = 5,
        offset_id: str = OFFSET_ID) -> PubRecord:
    return PubRecord(ts, "R", "PID-orders", topic, msg_id, "TagA", "order-1", "10.0.0.1:10911", 100, cost, 0,
                     offset_id if success else "", success)


def before(req: str, group: str, ts: int, retry: int = 0) -> SubBeforeRecord:
    return SubBeforeRecord(ts, "R", group, req, MID, retry, "order-1")


def after(req: str, group: str, ts: int, ok: bool = True, cost: int = 3) -> SubAfterRecord:
    return SubAfterRecord(req, MID, cost, ok, "order-1", 0 if ok else CONSUME_FAILED, ts, group)


def ha(type_: str, ts: int, offset: int = -1, replica: str = "", group: str = "broker-a", **kw) -> HaEvent:
    return HaEvent(type=type_, cluster="c", group=group, node="a-0", ts=ts, address="10.0.0.1:10911",
                   replica=replica, offset=offset, **kw)


STORE = StoreInfo(topic="orders", queue_id=2, queue_offset=17, physical_offset=P, store_timestamp=T0 + 2,
                  store_host="10.0.0.1:10911", broker_group="broker-a")

HA_EVENTS = [
    ha(REPLICA_ACK, T0 - 50, P + 500, "a-1"),  # before the message existed: an earlier use of the offset
    ha(REPLICA_ACK, T0 + 3, P, "a-1"),  # holds everything below P: not this message yet
    ha(REPLICA_ACK, T0 + 4, P + 200, "a-1"),  # first ack past P
    ha(REPLICA_ACK, T0 + 9, P + 900, "a-1"),
    ha(REPLICA_ACK, T0 + 7, P + 200, "a-2"),
    ha(COMMIT_ADVANCED, T0 + 5, P),
    ha(COMMIT_ADVANCED, T0 + 8, P + 200),
    ha(REPLICA_ACK, T0 + 4, P + 200, "b-1", group="broker-b"),  # another group's offsets mean nothing here
    ha(ROLE_CHANGE, T0 + 1, role="master"),
]

RECORDS = [
    pub(),
    before("REQ-A1", "CID-billing", T0 + 20, retry=0),
    after("REQ-A1", "CID-billing", T0 + 30, ok=False),
    before("REQ-A2", "CID-billing", T0 + 10_020, retry=1),
    after("REQ-A2", "CID-billing", T0 + 10_025),
    before("REQ-B1", "CID-audit", T0 + 40),  # no SubAfter: still running, or the consumer died
]


def test_whole_life() -> None:
    tl = build_timeline(MID, RECORDS, HA_EVENTS, STORE)
    assert (tl.msg_id, tl.topic, tl.tags, tl.keys) == (MID, "orders", "TagA", "order-1")
    assert tl.producer is not None and tl.producer.status == "success"
    assert (tl.producer.begin, tl.producer.end, tl.producer.group) == (T0, T0 + 5, "PID-orders")
    assert tl.store is not None and tl.store.source == "store" and tl.store.queue_offset == 17

    rep = tl.replication
    assert rep is not None and rep.broker_group == "broker-a"
    assert [(a.replica, a.timestamp, a.offset, a.latency_ms) for a in rep.replicas] == [
        ("a-1", T0 + 4, P + 200, 2),
        ("a-2", T0 + 7, P + 200, 5),
    ]
    assert (rep.commit_timestamp, rep.commit_offset, rep.commit_latency_ms) == (T0 + 8, P + 200, 6)
    assert rep.pending_replicas == () and rep.truncations == ()

    groups = {g.group: g for g in tl.groups}
    billing = groups["CID-billing"]
    assert billing.status == "consumed"
    assert [(d.request_id, d.retry_times, d.status, d.begin, d.end, d.cost_time) for d in billing.deliveries] == [
        ("REQ-A1", 0, "failed", T0 + 20, T0 + 30, 3),
        ("REQ-A2", 1, "success", T0 + 10_020, T0 + 10_025, 3),
    ]
    assert billing.deliveries[0].context_code == CONSUME_FAILED
    audit = groups["CID-audit"]
    assert audit.status == "unknown"
    [d] = audit.deliveries
    assert (d.status, d.end, d.cost_time, d.context_code) == ("unknown", None, None, None)
    assert tl.warnings == () and tl.ignored_records == 0


def test_records_of_other_messages_are_dropped() -> None:
    other = "AC1415116D1418B4AAC217FE1B4E9999"  # shares the index hash slot, not the id
    tl = build_timeline(MID, [*RECORDS, pub(msg_id=other), SubBeforeRecord(1, "R", "X", "REQ-X", other, 0, "")],
                        HA_EVENTS, STORE)
    assert tl.ignored_records == 2
    assert dataclasses.replace(tl, ignored_records=0) == build_timeline(MID, RECORDS, HA_EVENTS, STORE)


def test_duplicates_and_order_do_not_change_the_answer() -> None:
    expected = build_timeline(MID, RECORDS, HA_EVENTS, STORE)
    shuffled = RECORDS * 3
    random.Random(7).shuffle(shuffled)
    tl = build_timeline(MID, shuffled, list(reversed(HA_EVENTS)), STORE)
    assert tl.warnings == ("12 duplicate trace records ignored",)
    assert tl.to_dict() | {"warnings": []} == expected.to_dict() | {"warnings": []}


def test_sub_after_without_timestamp_ends_at_begin_plus_cost() -> None:
    tl = build_timeline(MID, [before("Q", "C", T0 + 10), SubAfterRecord("Q", MID, 7, True, "", 0)])
    [d] = tl.groups[0].deliveries
    assert (d.begin, d.end, d.status) == (T0 + 10, T0 + 17, "success")


def test_sub_after_without_sub_before_uses_its_own_group() -> None:
    tl = build_timeline(MID, [after("Q", "CID-late", T0 + 50)])
    [g] = tl.groups
    assert g.group == "CID-late" and g.deliveries[0].begin is None and g.deliveries[0].end == T0 + 50


def test_blank_group_becomes_unknown_group() -> None:
    tl = build_timeline(MID, [SubAfterRecord("Q", MID, 1, True, "", 0)])
    assert tl.groups[0].group == "%UNKNOWN_GROUP%"


def test_conflicting_copies_of_one_delivery_keep_the_earliest() -> None:
    # Client-side and broker-side trace both wrote this delivery, with slightly different clocks.
    tl = build_timeline(MID, [before("Q", "C", T0 + 12), before("Q", "C", T0 + 10),
                              after("Q", "C", T0 + 20), SubAfterRecord("Q", MID, 9, True, "", 0)])
    [d] = tl.groups[0].deliveries
    assert (d.begin, d.end) == (T0 + 10, T0 + 20)
    assert tl.warnings == ("2 deliveries traced more than once with different values; the earliest kept",)


def test_failed_sends_and_retried_sends() -> None:
    tl = build_timeline(MID, [pub(T0 + 100, success=True), pub(T0, success=False, cost=3000)])
    assert [s.status for s in tl.sends] == ["failed", "success"]
    assert tl.producer is not None and tl.producer.begin == T0 + 100


def test_message_stored_twice_is_reported() -> None:
    second = make_offset_msg_id("10.0.0.2", 10911, 77)
    tl = build_timeline(MID, [pub(T0), pub(T0 + 3000, offset_id=second)])
    assert any("stored 2 times" in w for w in tl.warnings)


def test_store_from_offset_msg_id_and_group_from_event_address() -> None:
    tl = build_timeline(MID, [pub()], HA_EVENTS)
    assert tl.store is not None
    assert (tl.store.source, tl.store.physical_offset, tl.store.broker_group) == ("offsetMsgId", P, "broker-a")
    assert tl.store.store_timestamp is None
    rep = tl.replication
    assert rep is not None and [a.replica for a in rep.replicas] == ["a-1", "a-2"]
    assert rep.replicas[0].latency_ms is None  # no store time known
    assert rep.commit_timestamp == T0 + 8


def test_no_store_and_no_successful_send_means_no_replication() -> None:
    tl = build_timeline(MID, [pub(success=False)], HA_EVENTS)
    assert tl.store is None and tl.replication is None


def test_replica_that_never_acked_past_the_message_is_pending() -> None:
    events = [*HA_EVENTS, ha(REPLICA_ACK, T0 + 6, P, "a-3")]
    tl = build_timeline(MID, RECORDS, events, STORE)
    assert tl.replication is not None and tl.replication.pending_replicas == ("a-3",)


def test_truncation_covering_the_message() -> None:
    events = [*HA_EVENTS,
              ha(TRUNCATION, T0 + 60, from_offset=P + 300, to_offset=P - 100),
              ha(TRUNCATION, T0 + 61, from_offset=P + 200, to_offset=P + 900)]  # after the message: harmless
    tl = build_timeline(MID, RECORDS, events, STORE)
    assert tl.replication is not None
    assert [(t.timestamp, t.from_offset) for t in tl.replication.truncations] == [(T0 + 60, P + 300)]


def test_dead_letter_from_store_metadata() -> None:
    store = {"topic": "orders", "physical_offset": P, "store_timestamp": T0 + 2, "store_host": "10.0.0.1:10911",
             "broker_group": "broker-a", "queue_id": 0, "queue_offset": 1,
             "dlq": [{"group": "CID-billing", "timestamp": T0 + 99_000}]}
    records = [before(f"R{i}", "CID-billing", T0 + 1000 * i, retry=i) for i in range(3)]
    records += [after(f"R{i}", "CID-billing", T0 + 1000 * i + 5, ok=False) for i in range(3)]
    tl = build_timeline(MID, records, (), store)
    [g] = tl.groups
    assert g.status == "dead_lettered"
    assert g.dlq is not None and (g.dlq.timestamp, g.dlq.dlq_topic, g.dlq.source) == (
        T0 + 99_000, "%DLQ%CID-billing", "store")
    assert [d.retry_times for d in g.deliveries] == [0, 1, 2]


def test_dead_letter_and_retries_from_broker_side_pub_records() -> None:
    records = [pub(), before("R0", "CID-x", T0 + 10), after("R0", "CID-x", T0 + 20, ok=False),
               pub(T0 + 10_000, topic="%RETRY%CID-x"), pub(T0 + 50_000, topic="%DLQ%CID-x")]
    tl = build_timeline(MID, records)
    assert [s.topic for s in tl.sends] == ["orders"]  # system-topic re-puts are not sends
    [g] = tl.groups
    assert g.status == "dead_lettered" and g.retries_scheduled == (T0 + 10_000,)
    assert g.dlq is not None and (g.dlq.timestamp, g.dlq.source) == (T0 + 50_000, "trace")


def test_failed_last_delivery_without_dlq_is_retrying() -> None:
    tl = build_timeline(MID, [before("R0", "C", T0), after("R0", "C", T0 + 1, ok=False)])
    assert tl.groups[0].status == "retrying"


def test_transactions_and_recall() -> None:
    half = PubRecord(T0, "R", "PID-tx", "orders", MID, "", "", "10.0.0.1:10911", 1, 2, MSG_TYPE_TRANS_HALF, "",
                     True)
    records = [
        half,
        EndTransactionRecord(T0 + 30_000, "R", "PID-tx", "orders", MID, "", "", "h", 2, "TX1", "COMMIT_MESSAGE",
                             True),
        EndTransactionRecord(T0 + 10, "R", "PID-tx", "orders", MID, "", "", "h", 2, "TX1", "UNKNOW", False),
        RecallRecord(T0 + 40_000, "R", "PID-tx", "orders", MID, False),
    ]
    tl = build_timeline(MID, records)
    assert tl.sends[0].msg_type_name == "Trans_Msg_Half"
    assert [(t.state, t.from_check) for t in tl.transactions] == [("UNKNOW", False), ("COMMIT_MESSAGE", True)]
    assert [(r.timestamp, r.status) for r in tl.recalls] == [(T0 + 40_000, "failed")]


def test_store_metadata_may_be_any_object_with_the_attributes() -> None:
    class BrokerStoredMessage:  # the shape of rocketscope.broker.store.record.StoredMessage
        topic = "orders"
        queue_id = 1
        queue_offset = 5
        physical_offset = P
        store_timestamp = T0 + 2
        store_host = "10.0.0.1:10911"

    tl = build_timeline(MID, [pub()], HA_EVENTS, BrokerStoredMessage())
    assert tl.store is not None and tl.store.broker_group == "broker-a"  # found by the store host address
    assert tl.replication is not None and tl.replication.replicas[0].latency_ms == 2


def test_to_dict_is_json_and_events_are_time_ordered() -> None:
    tl = build_timeline(MID, RECORDS, HA_EVENTS, STORE)
    data = json.loads(json.dumps(tl.to_dict()))
    assert data["producer"]["group"] == "PID-orders"
    assert data["groups"][0]["deliveries"][0]["status"] in {"success", "failed", "unknown"}
    kinds = [(e["kind"], e["begin"]) for e in data["events"]]
    assert kinds[:4] == [("send", T0), ("store", T0 + 2), ("replica_ack", T0 + 4), ("replica_ack", T0 + 7)]
    assert [e["begin"] for e in data["events"]] == sorted(e["begin"] for e in data["events"])


def test_no_records_at_all() -> None:
    tl = build_timeline(MID, [])
    assert tl.producer is None and tl.groups == () and tl.to_dict()["events"] == []


# -- property: the answer depends on the set of records, not their order or repetition ----

deliveries = st.lists(
    st.tuples(st.sampled_from(["G1", "G2", "G3"]), st.integers(0, 16), st.booleans(), st.booleans()),
    max_size=8,
)


@given(deliveries, st.randoms(use_true_random=False), st.integers(1, 3))
def test_order_and_repetition_invariance(spec, rnd, copies: int) -> None:
    records: list = [pub()]
    for i, (group, retry, has_after, ok) in enumerate(spec):
        records.append(before(f"REQ{i}", group, T0 + 100 * i + retry, retry))
        if has_after:
            records.append(after(f"REQ{i}", group, T0 + 100 * i + 50, ok))
    expected = build_timeline(MID, records, HA_EVENTS, STORE).to_dict()
    mixed = records * copies
    rnd.shuffle(mixed)
    events = list(HA_EVENTS)
    rnd.shuffle(events)
    got = build_timeline(MID, mixed, events, STORE).to_dict()
    assert got | {"warnings": []} == expected | {"warnings": []}
    total = sum(len(g["deliveries"]) for g in got["groups"])
    assert total == len(spec)
    for g in got["groups"]:
        begins = [d["begin"] for d in g["deliveries"]]
        assert begins == sorted(begins)


def test_a_throttled_event_times_the_message_by_the_step_that_covered_it() -> None:
    """The commit past P happened at T0 + 8 but was folded into an event written at T0 + 95 (one per
    interval): the timeline takes T0 + 8 from the event's steps, not the event's own time."""
    folded = [ha(REPLICA_ACK, T0 + 90, P + 900, "a-1", steps=((P, T0 + 3), (P + 200, T0 + 4))),
              ha(COMMIT_ADVANCED, T0 + 95, P + 900, steps=((P, T0 + 5), (P + 200, T0 + 8)))]
    rep = build_timeline(MID, RECORDS, folded, STORE).replication
    assert rep is not None
    assert [(a.replica, a.timestamp, a.latency_ms) for a in rep.replicas] == [("a-1", T0 + 4, 2)]
    assert (rep.commit_timestamp, rep.commit_offset, rep.commit_latency_ms) == (T0 + 8, P + 200, 6)
