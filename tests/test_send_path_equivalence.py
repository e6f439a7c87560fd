"""The send path's fast forms give what the general forms they replace give (issue 20, session 12).

Each fast form is checked against the general code it stands in for, on generated input:
the JSON header codec against the ``json`` module, a frame decoded from a view of the read
buffer against the same frame as bytes, the send header's field reader against ``Header``
(values, and the remark naming the field when one is missing or not a number), the in-place
step folding of throttled replication events against the copy-and-filter it replaced, and
the generated UNIQ_KEY against the shape of ``uuid4().hex.upper()``.  No process is started.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketscope.broker.ha import event_log
from rocketscope.broker.remoting import codec
from rocketscope.broker.remoting.broker_handlers import V2_NAMES, _send_fields
from rocketscope.broker.remoting.codec import (
    FrameError,
    Header,
    HeaderError,
    RemotingCommand,
    RequestCode,
    decode,
    encode,
)
from rocketscope.broker.sends import new_uniq_key

text = st.text(max_size=20)  # any code point, controls and surrogate-free unicode included


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(text, text, max_size=8), st.integers(-(1 << 31), (1 << 31) - 1), st.none() | text)
def test_header_json_is_what_json_dumps_writes_and_reads(ext: dict[str, str], opaque: int, remark: str | None
                                                         ) -> None:
    cmd = RemotingCommand(code=310, ext_fields=ext, opaque=opaque, remark=remark)
    raw = codec._json_header(cmd)
    obj: dict[str, Any] = {"code": 310, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque}
    if remark is not None:
        obj["remark"] = remark
    obj |= {"serializeTypeCurrentRPC": "JSON", "version": cmd.version}
    assert raw == json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert codec._loads(raw.decode("utf-8")) == json.loads(raw)


@pytest.mark.parametrize("header", [
    ' {"code":1}', '{"code":1} ', '\ufeff{"code":1}', '{"code":1}{"code":2}', '{"code":1,}', '{"code":}', "{}",
    '{"code":1,"extFields":{"a":"\\u00e9"}}', "[1]", "", "{", '{"a":1}x}'])
def test_header_parse_accepts_and_refuses_what_json_loads_does(header: str) -> None:
    try:
        expected = json.loads(header)
    except json.JSONDecodeError:
        with pytest.raises(json.JSONDecodeError):
            codec._loads(header)
        return
    assert codec._loads(header) == expected


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(text, text, max_size=6), st.binary(max_size=300), st.sampled_from([0, 1]))
def test_a_frame_decoded_from_a_view_equals_the_frame_decoded_from_bytes(ext: dict[str, str], body: bytes,
                                                                          stype: int) -> None:
    ext = {k: v for k, v in ext.items() if k and v}  # the binary header drops empty names and values
    frame = encode(RemotingCommand(code=310, ext_fields=ext or None, body=body, opaque=9, serialize_type=stype))[4:]
    buf = bytearray(b"xx" + frame + b"yy")
    with memoryview(buf) as view:
        from_view = decode(view[2:2 + len(frame)])
    assert from_view == decode(frame)
    buf.extend(b"more")  # no view of the buffer is left behind: it can still be resized


def _reference(cmd: RemotingCommand) -> tuple[Any, ...]:
    """The fields as the general ``Header`` reads them (the code _send_fields replaced)."""
    h = Header(cmd)
    if cmd.code != RequestCode.SEND_MESSAGE and "b" in cmd.fields:
        h.ext = {V2_NAMES.get(k, k): v for k, v in cmd.fields.items()}
    return (h.str("producerGroup"), h.str("topic"), h.int("queueId"), h.int("sysFlag"), h.int("bornTimestamp"),
            h.int("flag"), h.int("reconsumeTimes", default=0),
            h.bool("batch") or cmd.code == RequestCode.SEND_BATCH_MESSAGE, h.str("properties", default=""))


field_value = st.none() | st.sampled_from(["", "0", "7", "-3", "12x", "true", "TRUE", "false", " 5"]) | text


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE]),
       st.booleans(), st.fixed_dictionaries({name: field_value for name in V2_NAMES.values()}))
def test_send_fields_read_what_header_reads(code: int, short: bool, values: dict[str, str | None]) -> None:
    long_to_short = {v: k for k, v in V2_NAMES.items()}
    ext = {(long_to_short[k] if short else k): v for k, v in values.items() if v is not None}
    cmd = RemotingCommand(code=code, ext_fields=ext)
    try:
        expected: Any = _reference(cmd)
    except HeaderError as exc:
        expected = exc
    if isinstance(expected, HeaderError):
        with pytest.raises(HeaderError) as got:
            _send_fields(cmd)
        assert (str(got.value), got.value.code) == (str(expected), expected.code)
    else:
        assert _send_fields(cmd) == expected


def _reference_folded(deferred: dict[str, Any] | None, before_offset: int, max_steps: int) -> list[tuple[int, int]]:
    """The step folding before this change: copy every step, filter, keep the newest ``max_steps``."""
    if deferred is None:
        return []
    steps = [*deferred["_steps"], (int(deferred.get("offset", -1)), int(deferred["_at"]))]
    return [step for step in steps if step[0] < before_offset][-max_steps:]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 200), st.integers(0, 1000)), min_size=1, max_size=40),
       st.integers(1, 8))
def test_folding_steps_in_place_keeps_the_steps_the_copy_kept(offsets: list[tuple[int, int]], max_steps: int,
                                                               ) -> None:
    orig = event_log.MAX_STEPS
    event_log.MAX_STEPS = max_steps
    try:
        mine: dict[str, Any] | None = None
        ref: dict[str, Any] | None = None
        for offset, at in offsets:  # offsets may go back (a truncation): the filtering path
            got = event_log._folded(mine, offset)
            want = _reference_folded(ref, offset, max_steps)
            assert list(got) == want
            mine = {"offset": offset, "_at": at, "_steps": got}
            ref = {"offset": offset, "_at": at, "_steps": want}
    finally:
        event_log.MAX_STEPS = orig


def test_generated_uniq_keys_are_32_hex_digits_and_distinct() -> None:
    keys = [new_uniq_key() for _ in range(20_000)]
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) for k in keys)
    assert len(set(keys)) == len(keys)


def test_a_bad_header_still_names_the_problem() -> None:
    frame = encode(RemotingCommand(code=310, ext_fields={"b": "T"}))[4:]
    bad = frame.replace(b'"code":310', b'"code":"x"')
    with pytest.raises(FrameError, match="code is not an integer"):
        decode(bad)
    with pytest.raises(FrameError, match="header is not JSON"):
        decode(frame[:-3] + b"}}}")


def test_a_group_indexed_in_one_call_is_found_by_id_and_key_across_index_files(tmp_path: Any) -> None:
    """The store writes a dispatched group's index keys in one call (``IndexService.put_entries``); with
    index files of 7 entries a group of 12 messages (two keys or more each) rolls over several files
    mid-group, and every message must still be found by its id, by each of its keys, and under "*"."""
    import asyncio

    from rocketscope.broker.store.message_store import MessageStore, StoreConfig
    from rocketscope.broker.store.record import StoredMessage

    async def run() -> None:
        store = MessageStore(StoreConfig(root=tmp_path, index_slot_num=5, index_num=7))
        await store.start()
        try:
            sent = [StoredMessage(topic="T", queue_id=i % 2, body=b"x" * i,
                                  properties={"UNIQ_KEY": f"ID{i}", **({"KEYS": f"k{i} shared"} if i % 3 else {})})
                    for i in range(12)]
            results = await store.put(sent)
            assert all(r.message is not None for r in results)
            assert len(store.index.files) > 2  # the group rolled over several files
            for i in range(12):
                assert [m.body for m in store.lookup("T", f"ID{i}")] == [b"x" * i]
                assert [m.body for m in store.lookup(None, f"ID{i}")] == [b"x" * i]
                if i % 3:
                    assert [m.body for m in store.lookup("T", f"k{i}")] == [b"x" * i]
            assert sorted(m.body for m in store.lookup("T", "shared")) == sorted(b"x" * i for i in range(12) if i % 3)
        finally:
            await store.shutdown()

    asyncio.run(run())
