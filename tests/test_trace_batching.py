"""Cutting records into trace messages: partition, keys, limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketscope.trace.batching import (
    MAX_BODY_BYTES,
    MAX_KEYS_BYTES,
    PROPERTIES_LIMIT,
    build_batches,
    keys_size,
    record_keys,
    record_topic,
)
from rocketscope.trace.codec import (
    PubRecord,
    RecallRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceEncodeError,
    decode,
    encode_record,
)


def pub(msg_id: str, topic: str = "T", keys: str = "", tags: str = "") -> PubRecord:
    return PubRecord(1, "R", "G", topic, msg_id, tags, keys, "h:1", 1, 1, 0, "", True)


def test_limits_match_rocketmq() -> None:
    assert MAX_BODY_BYTES == 128_000
    assert PROPERTIES_LIMIT == 32_767 and MAX_KEYS_BYTES == 22_767


def test_record_keys_are_msg_id_then_business_keys_deduplicated() -> None:
    assert record_keys(pub("M1", keys="a b  a M1 c")) == ["M1", "a", "b", "c"]
    assert record_keys(RecallRecord(1, "R", "G", "T", "M2", True)) == ["M2"]
    assert record_keys(pub("", keys="")) == []


def test_record_topic_is_empty_for_sub_records() -> None:
    assert record_topic(pub("M", topic="orders")) == "orders"
    assert record_topic(SubBeforeRecord(1, "R", "G", "Q", "M", 0, "")) == ""


def test_groups_by_topic_and_merges_keys() -> None:
    plan = build_batches([pub("M1", "A", "k"), pub("M2", "B", "k"), pub("M3", "A", "k x")])
    by_topic = {b.topic: b for b in plan.batches}
    assert set(by_topic) == {"A", "B"}
    assert by_topic["A"].keys == ["M1", "k", "M3", "x"]
    assert by_topic["A"].keys_text == "M1 k M3 x"
    assert decode(by_topic["A"].body) == [pub("M1", "A", "k"), pub("M3", "A", "k x")]
    assert plan.oversize == []


def test_sub_records_take_the_topic_given_with_them() -> None:
    before = SubBeforeRecord(1, "R", "C", "Q", "M1", 0, "")
    after = SubAfterRecord("Q", "M1", 1, True, "", 0, 2, "C")
    plan = build_batches([("orders", before), ("orders", after), pub("M1", "orders")])
    assert [b.topic for b in plan.batches] == ["orders"]
    assert plan.batches[0].records == [before, after, pub("M1", "orders")]


def test_a_new_message_starts_when_the_body_would_not_fit() -> None:
    records = [pub(f"M{i}", tags="x" * 50) for i in range(10)]
    size = len(encode_record(records[0]).encode())
    plan = build_batches(records, max_body_bytes=size * 3)
    assert [len(b.records) for b in plan.batches] == [3, 3, 3, 1]


def test_a_new_message_starts_when_the_keys_would_not_fit() -> None:
    records = [pub(f"M{i}", keys=f"business-{i}") for i in range(4)]
    budget = keys_size(record_keys(records[0])) * 2 + 1  # two records' keys joined by a space
    plan = build_batches(records, max_keys_bytes=budget)
    assert [len(b.records) for b in plan.batches] == [2, 2]
    assert all(b.keys_bytes <= budget for b in plan.batches)


def test_shared_business_keys_cost_nothing_the_second_time() -> None:
    records = [pub(f"M{i}", keys="shared-key") for i in range(3)]
    one = keys_size(["M0", "shared-key"])
    plan = build_batches(records, max_keys_bytes=one + 2 * 3)  # room for " M1" and " M2" only
    assert len(plan.batches) == 1 and plan.batches[0].keys == ["M0", "shared-key", "M1", "M2"]


def test_keys_are_measured_in_utf8_bytes() -> None:
    record = pub("M", keys="é" * 10)  # 10 characters, 20 bytes
    assert keys_size(record_keys(record)) == 1 + 1 + 20
    plan = build_batches([record], max_keys_bytes=21)
    assert plan.batches == [] and plan.oversize == [record]


def test_a_record_too_large_alone_is_returned_apart() -> None:
    big = pub("BIG", tags="t" * 2000)
    plan = build_batches([pub("A"), big, pub("B")], max_body_bytes=1000)
    assert plan.oversize == [big]
    assert [r.msg_id for b in plan.batches for r in b.records] == ["A", "B"]


def test_unencodable_record_raises_before_anything_is_built() -> None:
    with pytest.raises(TraceEncodeError):
        build_batches([pub("A"), pub("B\x01")])


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        build_batches([], max_body_bytes=0)


# -- properties ---------------------------------------------------------------------------

ids = st.text("ABCDEF0123456789", min_size=1, max_size=8)
business = st.lists(st.text("abcxyzé-", min_size=1, max_size=12), max_size=5).map(" ".join)
topics = st.sampled_from(["A", "B", "C", ""])
records = st.one_of(
    st.builds(pub, ids, topics, business, st.text("xyz", max_size=200)),
    st.builds(RecallRecord, st.just(1), st.just("R"), st.just("G"), topics, ids, st.booleans()),
    st.tuples(topics, st.builds(SubBeforeRecord, st.just(1), st.just("R"), st.just("C"), ids, ids,
                                st.integers(0, 16), business)),
)


@settings(max_examples=200)
@given(st.lists(records, max_size=40), st.integers(150, 3000), st.integers(10, 200))
def test_batching_properties(items: list, max_body: int, max_keys: int) -> None:
    plan = build_batches(items, max_body_bytes=max_body, max_keys_bytes=max_keys)
    pairs = [item if isinstance(item, tuple) else (record_topic(item), item) for item in items]

    # Every record appears in exactly one batch, or is oversize; order within a topic is kept.
    placed = [id(r) for b in plan.batches for r in b.records] + [id(r) for r in plan.oversize]
    assert sorted(placed) == sorted(id(r) for _, r in pairs)
    for topic in {t for t, _ in pairs}:
        expected = [id(r) for t, r in pairs if t == topic and not any(r is o for o in plan.oversize)]
        assert [id(r) for b in plan.batches if b.topic == topic for r in b.records] == expected

    for batch in plan.batches:
        assert batch.records
        assert all(t == batch.topic for t, r in pairs if any(r is x for x in batch.records))
        # Limits hold, measured the way the broker measures (UTF-8 bytes).
        assert len(batch.body.encode("utf-8")) == batch.body_bytes <= max_body
        assert keys_size(batch.keys) == len(batch.keys_text.encode("utf-8")) == batch.keys_bytes <= max_keys
        # Every msgId and business key is a key, once.
        assert len(batch.keys) == len(set(batch.keys))
        for record in batch.records:
            assert set(record_keys(record)) <= set(batch.keys)
            assert record.msg_id in batch.keys
        assert set(batch.keys) == {k for r in batch.records for k in record_keys(r)}
        assert decode(batch.body) == batch.records

    # Oversize only when it could not fit even alone.
    for record in plan.oversize:
        alone = len(encode_record(record).encode("utf-8")) > max_body or keys_size(record_keys(record)) > max_keys
        assert alone
