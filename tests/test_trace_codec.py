"""The trace text codec: RocketMQ's own samples, every compatibility rule, round trips, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketscope.trace.codec import (
    MSG_TYPE_DELAY,
    MSG_TYPE_NORMAL,
    MSG_TYPE_TRANS_COMMIT,
    TX_COMMIT,
    EndTransactionRecord,
    PubRecord,
    RecallRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceDecodeError,
    TraceEncodeError,
    decode,
    encode,
    encode_record,
    record_from_dict,
    record_to_dict,
)


def body(*records: list[str], terminate: bool = True) -> str:
    """A body from field lists, as a Java encoder writes it."""
    text = "\x02".join("\x01".join(fields) for fields in records)
    return text + ("\x02" if terminate else "")


# The Pub record of Apache RocketMQ's TraceDataEncoderTest (its trace module's encoder test).
JAVA_PUB = (
    "Pub\x011700000000123\x01DefaultRegion\x01PID-test\x01topic-test\x01AC1415116D1418B4AAC217FE1B4E0000"
    "\x01Tags\x01Keys\x01127.0.0.1:10911\x0126\x01245\x010\x010A9A002600002A9F0000000000002329\x01true\x02"
)
MID = "AC1415116D1418B4AAC217FE1B4E0000"


class TestRocketMQSamples:
    def test_java_pub_sample_decodes_field_by_field(self) -> None:
        [record] = decode(JAVA_PUB)
        assert record == PubRecord(
            timestamp=1700000000123, region_id="DefaultRegion", group="PID-test", topic="topic-test",
            msg_id=MID, tags="Tags", keys="Keys", store_host="127.0.0.1:10911", body_length=26,
            cost_time=245, msg_type=MSG_TYPE_NORMAL, offset_msg_id="0A9A002600002A9F0000000000002329",
            success=True,
        )

    def test_java_pub_sample_is_reencoded_byte_for_byte(self) -> None:
        assert encode(decode(JAVA_PUB)) == JAVA_PUB

    def test_consume_context_with_two_messages_shares_request_id(self) -> None:
        # What ConsumeMessageTraceHookImpl writes for one consume call of two messages.
        text = body(
            ["SubBefore", "1700000000200", "DefaultRegion", "CID-test", "REQ1", "MSG1", "0", "k1"],
            ["SubBefore", "1700000000200", "DefaultRegion", "CID-test", "REQ1", "MSG2", "2", "k2"],
            ["SubAfter", "REQ1", "MSG1", "5", "true", "k1", "0", "1700000000210", "CID-test"],
            ["SubAfter", "REQ1", "MSG2", "5", "false", "k2", "4", "1700000000210", "CID-test"],
        )
        records = decode(text)
        assert [type(r).__name__ for r in records] == ["SubBeforeRecord"] * 2 + ["SubAfterRecord"] * 2
        assert {r.request_id for r in records} == {"REQ1"}
        assert records[1] == SubBeforeRecord(1700000000200, "DefaultRegion", "CID-test", "REQ1", "MSG2", 2, "k2")
        assert records[3] == SubAfterRecord("REQ1", "MSG2", 5, False, "k2", 4, 1700000000210, "CID-test")
        assert encode(records) == text

    def test_end_transaction_and_recall(self) -> None:
        text = body(
            ["EndTransaction", "1700000000300", "DefaultRegion", "PID-tx", "topic-tx", MID, "TagA", "key1",
             "10.0.0.1:10911", "2", "TX-1", "COMMIT_MESSAGE", "false"],
            ["Recall", "1700000000400", "DefaultRegion", "PID-test", "topic-delay", MID, "true"],
        )
        tx, recall = decode(text)
        assert tx == EndTransactionRecord(1700000000300, "DefaultRegion", "PID-tx", "topic-tx", MID, "TagA", "key1",
                                          "10.0.0.1:10911", MSG_TYPE_TRANS_COMMIT, "TX-1", TX_COMMIT, False)
        assert recall == RecallRecord(1700000000400, "DefaultRegion", "PID-test", "topic-delay", MID, True)
        assert encode([tx, recall]) == text


PUB_12 = ["Pub", "1", "R", "G", "T", MID, "tag", "key", "1.2.3.4:10911", "10", "3", "3"]


class TestOlderAndNewerFieldCounts:
    def test_pub_12_fields_oldest_format_means_success(self) -> None:
        [r] = decode(body(PUB_12))
        assert r.success is True and r.offset_msg_id == "" and r.msg_type == MSG_TYPE_DELAY

    def test_pub_13_fields_has_success_without_offset_msg_id(self) -> None:
        [r] = decode(body([*PUB_12, "false"]))
        assert r.success is False and r.offset_msg_id == ""

    def test_pub_15_fields_carries_client_host(self) -> None:
        [r] = decode(body([*PUB_12, "OFFSETID", "true", "192.168.0.9"]))
        assert (r.offset_msg_id, r.success, r.client_host) == ("OFFSETID", True, "192.168.0.9")

    def test_pub_client_host_round_trips_as_a_15th_field(self) -> None:
        record = decode(body([*PUB_12, "OFFSETID", "true", "192.168.0.9"]))[0]
        assert encode_record(record).count("\x01") == 14

    def test_pub_with_too_few_fields_names_what_is_missing(self) -> None:
        with pytest.raises(TraceDecodeError, match=r"Pub record #0: has 10 fields.*cost_time"):
            decode(body(PUB_12[:10]))

    def test_sub_before_with_empty_keys_is_one_field_short_after_java_split(self) -> None:
        [r] = decode("SubBefore\x011\x01R\x01G\x01REQ\x01" + MID + "\x010\x01\x02")
        assert r.keys == "" and r.retry_times == 0

    def test_sub_before_ninth_field_client_host_is_ignored(self) -> None:
        [r] = decode(body(["SubBefore", "1", "R", "G", "REQ", MID, "1", "k", "10.0.0.5"]))
        assert r == SubBeforeRecord(1, "R", "G", "REQ", MID, 1, "k")

    def test_sub_after_six_fields_has_no_context_code(self) -> None:
        [r] = decode(body(["SubAfter", "REQ", MID, "7", "true", "k"]))
        assert (r.context_code, r.timestamp, r.group) == (0, 0, "")

    def test_sub_after_six_fields_with_empty_keys_trimmed_to_five(self) -> None:
        [r] = decode("SubAfter\x01REQ\x01" + MID + "\x017\x01false\x01\x02")
        assert r.keys == "" and r.success is False

    def test_sub_after_cloud_variant_ends_with_a_stray_separator(self) -> None:
        [r] = decode("SubAfter\x01REQ\x01" + MID + "\x017\x01true\x01k\x014\x01\x02")
        assert (r.context_code, r.timestamp, r.group) == (4, 0, "")

    def test_sub_after_eight_fields_keeps_timestamp_when_group_is_empty(self) -> None:
        [r] = decode("SubAfter\x01REQ\x01" + MID + "\x017\x01true\x01k\x010\x01123\x01\x02")
        assert (r.timestamp, r.group) == (123, "")

    def test_sub_after_nine_fields(self) -> None:
        [r] = decode(body(["SubAfter", "REQ", MID, "7", "true", "k", "1", "123", "CID"]))
        assert r == SubAfterRecord("REQ", MID, 7, True, "k", 1, 123, "CID")

    def test_end_transaction_with_client_host_at_index_10(self) -> None:
        fields = ["EndTransaction", "1", "R", "G", "T", MID, "tag", "key", "h:1", "2", "10.0.0.7", "TX",
                  "ROLLBACK_MESSAGE", "true"]
        [r] = decode(body(fields))
        assert (r.transaction_id, r.transaction_state, r.from_check) == ("TX", "ROLLBACK_MESSAGE", True)

    def test_literal_null_tags_and_keys_mean_empty(self) -> None:
        pub = decode(body(["Pub", "1", "R", "G", "T", MID, "null", "null", "h:1", "1", "1", "0", "O", "true"]))[0]
        before = decode(body(["SubBefore", "1", "R", "G", "REQ", MID, "0", "null"]))[0]
        after = decode(body(["SubAfter", "REQ", MID, "1", "true", "null", "0", "1", "G"]))[0]
        assert (pub.tags, pub.keys, before.keys, after.keys) == ("", "", "", "")

    def test_java_boolean_parsing_is_case_insensitive_and_empty_is_false(self) -> None:
        [r] = decode(body(["Recall", "1", "R", "G", "T", MID, "TRUE"]))
        assert r.success is True
        [r] = decode(body(["Pub", "1", "R", "G", "T", MID, "", "", "h", "1", "1", "0", "O", "null"]))
        assert r.success is False


class TestEnvelope:
    def test_empty_body_has_no_records(self) -> None:
        assert decode("") == [] and decode(b"") == []

    def test_empty_records_between_separators_are_skipped(self) -> None:
        assert decode("\x02\x02" + JAVA_PUB + "\x02") == decode(JAVA_PUB)

    def test_last_record_without_terminator_is_accepted(self) -> None:
        assert decode(JAVA_PUB[:-1]) == decode(JAVA_PUB)

    def test_bytes_are_read_as_utf8(self) -> None:
        text = body(["Recall", "1", "R", "组", "主题", MID, "true"])
        assert decode(text.encode("utf-8"))[0].topic == "主题"

    def test_invalid_utf8_is_a_decode_error(self) -> None:
        with pytest.raises(TraceDecodeError, match="not UTF-8"):
            decode(b"Pub\x01\xff\xfe")


class TestGarbage:
    def test_unknown_type_is_named(self) -> None:
        with pytest.raises(TraceDecodeError, match=r"field 0 \(type\) is 'hello world'"):
            decode("hello world")

    def test_unknown_type_can_be_skipped_like_java_does(self) -> None:
        assert decode("Future\x01x\x02" + JAVA_PUB, skip_unknown=True) == decode(JAVA_PUB)

    def test_bad_integer_names_record_type_and_field(self) -> None:
        fields = ["Pub", "1", "R", "G", "T", MID, "tag", "key", "h:1", "twenty", "1", "0", "O", "true"]
        with pytest.raises(TraceDecodeError, match=r"Pub record #0: field 9 \(body_length\) must be an integer"):
            decode(body(fields))

    def test_python_only_integer_spellings_are_rejected(self) -> None:
        for value in ("1_000", " 12", "١٢", "0x10"):
            with pytest.raises(TraceDecodeError, match="retry_times"):
                decode(body(["SubBefore", "1", "R", "G", "REQ", MID, value, "k"]))

    def test_out_of_range_integer(self) -> None:
        with pytest.raises(TraceDecodeError, match=r"cost_time.*out of range"):
            decode(body(["SubAfter", "REQ", MID, str(2**31), "true", "k"]))

    def test_bad_message_type_ordinal(self) -> None:
        fields = ["Pub", "1", "R", "G", "T", MID, "tag", "key", "h:1", "1", "1", "5", "O", "true"]
        with pytest.raises(TraceDecodeError, match=r"msg_type.*0\.\.4"):
            decode(body(fields))

    def test_bad_boolean(self) -> None:
        with pytest.raises(TraceDecodeError, match=r"Recall record #1: field 6 \(success\)"):
            decode(JAVA_PUB + body(["Recall", "1", "R", "G", "T", MID, "maybe"]))


class TestEncoderRefusesWhatCannotRoundTrip:
    def test_separator_characters_are_refused_with_the_field_name(self) -> None:
        for bad in ("a\x01b", "a\x02"):
            with pytest.raises(TraceEncodeError, match=r"Recall field 'group' contains the separator"):
                encode_record(RecallRecord(1, "R", bad, "T", MID, True))

    def test_lone_surrogate_is_refused(self) -> None:
        with pytest.raises(TraceEncodeError, match="surrogate"):
            encode_record(RecallRecord(1, "R", "G", "\ud800", MID, True))

    def test_wrong_types_and_ranges_are_refused(self) -> None:
        with pytest.raises(TraceEncodeError, match="'success' must be a bool"):
            encode_record(RecallRecord(1, "R", "G", "T", MID, 1))  # type: ignore[arg-type]
        with pytest.raises(TraceEncodeError, match="'retry_times' must be an int"):
            encode_record(SubBeforeRecord(1, "R", "G", "REQ", MID, True, ""))  # type: ignore[arg-type]
        with pytest.raises(TraceEncodeError, match="signed 32-bit"):
            encode_record(SubAfterRecord("REQ", MID, 2**31, True, "", 0))
        with pytest.raises(TraceEncodeError, match="message type ordinal"):
            encode_record(EndTransactionRecord(1, "R", "G", "T", MID, "", "", "h", 9, "TX", TX_COMMIT, False))

    def test_not_a_record(self) -> None:
        with pytest.raises(TraceEncodeError, match="not a trace record"):
            encode_record("Pub")  # type: ignore[arg-type]


# -- property-based round trips -----------------------------------------------------------

# Any text without the two separators or lone surrogates (both refused by the encoder).
free_text = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)), max_size=30)
# "null" in tags/keys decodes as "" (Java writes a null value that way): it cannot round-trip.
tag_text = free_text.filter(lambda s: s != "null")
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
msg_types = st.integers(0, 4)

records = st.one_of(
    st.builds(PubRecord, i64, free_text, free_text, free_text, free_text, tag_text, tag_text, free_text,
              i32, i32, msg_types, free_text, st.booleans(), free_text),
    st.builds(SubBeforeRecord, i64, free_text, free_text, free_text, free_text, i32, tag_text),
    st.builds(SubAfterRecord, free_text, free_text, i32, st.booleans(), tag_text, i32, i64, free_text),
    st.builds(EndTransactionRecord, i64, free_text, free_text, free_text, free_text, tag_text, tag_text,
              free_text, msg_types, free_text, free_text, st.booleans()),
    st.builds(RecallRecord, i64, free_text, free_text, free_text, free_text, st.booleans()),
)


@given(st.lists(records, max_size=8))
def test_round_trip_any_records(batch: list) -> None:
    # The type name in field 0 is never empty, so no record is dropped as an "empty record".
    assert decode(encode(batch)) == batch


@given(st.lists(records, max_size=4))
def test_round_trip_through_utf8_bytes(batch: list) -> None:
    assert decode(encode(batch).encode("utf-8")) == batch


@given(records)
def test_dict_form_round_trips(record) -> None:
    assert record_from_dict(record_to_dict(record)) == record


def test_dict_form_rejects_wrong_shapes() -> None:
    with pytest.raises(ValueError, match="unknown type"):
        record_from_dict({"type": "Nope"})
    with pytest.raises(ValueError, match="missing field 'msg_id'"):
        record_from_dict({"type": "Recall", "timestamp": 1, "region_id": "", "group": "", "topic": "",
                          "success": True})
    with pytest.raises(ValueError, match="'timestamp' must be an int"):
        record_from_dict({"type": "Recall", "timestamp": "1", "region_id": "", "group": "", "topic": "",
                          "msg_id": "", "success": True})


# -- fuzzing: nothing but a list or TraceDecodeError ----------------------------------------

near_fields = st.one_of(
    st.sampled_from(["Pub", "SubBefore", "SubAfter", "EndTransaction", "Recall", "", "null", "true", "false",
                     "0", "4", "5", "-1", "99999999999999999999", "+3"]),
    st.text(max_size=6),
    st.integers().map(str),
)
near_records = st.lists(near_fields, max_size=16).map("\x01".join)
near_bodies = st.lists(near_records, max_size=5).map("\x02".join)


def _decodes_or_refuses(data: str | bytes) -> None:
    try:
        result = decode(data)
    except TraceDecodeError:
        return
    assert isinstance(result, list)


@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data: bytes) -> None:
    _decodes_or_refuses(data)


@given(st.text(max_size=300))
def test_fuzz_random_text(data: str) -> None:
    _decodes_or_refuses(data)


@given(near_bodies)
def test_fuzz_almost_valid_bodies(data: str) -> None:
    _decodes_or_refuses(data)


@given(st.lists(records, min_size=1, max_size=3), st.data())
def test_fuzz_mutated_valid_bodies(batch: list, data: st.DataObject) -> None:
    text = encode(batch)
    position = data.draw(st.integers(0, len(text)))
    insert = data.draw(st.text(alphabet="\x01\x02ab1-", max_size=3))
    cut = data.draw(st.integers(0, 3))
    _decodes_or_refuses(text[:position] + insert + text[position + cut:])
