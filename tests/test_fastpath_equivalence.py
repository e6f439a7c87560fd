"""The compiled send path (broker/fastpath.c) gives what the pure-Python one gives, byte for byte (issue 20).

Every function of the compiled module stands in for a Python function on its common case and hands
everything else back (None) to that function.  Each test here runs the public entry point twice on
the same input, once with the compiled module selected and once without it (the modules' ``_C``
set to None, what ``ROCKETSCOPE_PURE_PYTHON=1`` does at import), and compares the outcomes: the
value, or the exception's type, text and code/opaque.  Inputs are generated (hypothesis): request
frames in the forms Apache's Go and Java clients write and in unusual JSON forms, frames with bytes
flipped, cut or inserted, send headers with plain and odd numbers, batch bodies whole and damaged,
properties with separators anywhere, answers with control characters, quotes, non-ASCII text and
lone surrogates.  Other tests check the compiled path really takes the common forms (so these
comparisons are not between two runs of the Python code).  No process is started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from compiled_support import compiled_off
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from store_support import close_store
from transport_support import first_records_written

from rocketscope.broker import speedups
from rocketscope.broker.remoting import broker_handlers, codec, server
from rocketscope.broker.remoting.codec import BatchEntry, RemotingCommand, RequestCode
from rocketscope.broker.store import commitlog, flush, index, message_store, record
from rocketscope.broker.store.message_store import MessageStore, StoreConfig
from rocketscope.broker.store.multi_dispatch import MULTI_DISPATCH, MULTI_QUEUE_OFFSET
from rocketscope.broker.store.record import StoredMessage

C = speedups.compiled
needs_c = pytest.mark.skipif(C is None, reason=f"{speedups.PURE_ENV} is set: the compiled module is not loaded")
# flush: test_store.py runs both
MODULES = (codec, broker_handlers, server, record, commitlog, index, message_store, flush)


def pure_python() -> contextlib.AbstractContextManager[None]:
    return compiled_off(MODULES)


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """What ``fn`` gives: ("ok", value) or ("raised", type, text, the error's code or opaque)."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # every failure the Python code raises must be raised the same way
        return ("raised", type(exc), str(exc), getattr(exc, "code", None), getattr(exc, "opaque", None))


def both(fn: Callable[..., Any], *args: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    compiled = outcome(fn, *args)
    with pure_python():
        python = outcome(fn, *args)
    return compiled, python


def test_the_compiled_module_is_built_unless_the_pure_path_is_asked_for() -> None:
    """setup.py builds it with optional=False; only the environment variable may leave it out."""
    if os.environ.get(speedups.PURE_ENV, "") not in ("", "0"):
        assert (C, speedups.IMPLEMENTATION) == (None, "python")
    else:
        assert C is not None and speedups.IMPLEMENTATION == "c"


# ------------------------------------------------------------------ request frames
text = st.text(max_size=12)
ascii_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
GO_SEND = {"a": "bench_group", "b": "TopicA", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1764288000123",
           "h": "0", "i": "UNIQ_KEY\x017F0000010001B4AA\x02WAIT\x01true\x02", "j": "0", "k": "false", "l": "0",
           "m": "false", "n": "broker-a"}


def frame_of(header: dict[str, Any], body: bytes, *, separators: tuple[str, str] = (",", ":"),
             ensure_ascii: bool = False) -> bytes:
    raw = json.dumps(header, separators=separators, ensure_ascii=ensure_ascii).encode("utf-8")
    return struct.pack(">i", len(raw)) + raw + body


@st.composite
def headers(draw: st.DrawFn) -> dict[str, Any]:
    """JSON headers as clients write them (Go: its own key order, remark "", language GO), and odder ones."""
    h: dict[str, Any] = {"code": draw(st.sampled_from([10, 310, 320, 34, 105]) | int32)}
    optional: dict[str, Any] = {
        "language": draw(st.sampled_from(["GO", "JAVA", "CPP"]) | text | st.integers(-2, 20) | st.none()),
        "version": draw(st.sampled_from([317, 479]) | int32 | st.integers() | st.none()),
        "opaque": draw(int32 | st.integers(-(1 << 40), 1 << 40) | st.booleans()),
        "flag": draw(st.sampled_from([0, 1, 2]) | int32),
        "remark": draw(st.none() | text | st.integers()),
        "extFields": draw(st.none() | st.just(GO_SEND) | st.dictionaries(text, text, max_size=5)
                          | st.dictionaries(ascii_text, st.integers() | st.booleans() | st.none(), max_size=3)),
        "serializeTypeCurrentRPC": draw(st.sampled_from(["JSON", 0])),
        "unknownKey": draw(st.integers()),
    }
    keep = draw(st.lists(st.sampled_from(sorted(optional)), unique=True))
    for k in draw(st.permutations(keep)):
        h[k] = optional[k]
    if draw(st.booleans()):
        h.pop("code")
    return h


@needs_c
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers(), st.binary(max_size=64), st.sampled_from([(",", ":"), (", ", ": ")]), st.booleans())
def test_request_frames_decode_the_same(header: dict[str, Any], body: bytes, separators: tuple[str, str],
                                        ensure_ascii: bool) -> None:
    frame = frame_of(header, body, separators=separators, ensure_ascii=ensure_ascii)
    compiled, python = both(codec.decode, frame)
    assert compiled == python
    with memoryview(bytearray(frame)) as view:  # as the server passes it: a view of its read buffer
        assert outcome(codec.decode, view) == python
    if _common(header, ensure_ascii):  # the compiled decoder took it: this was not the Python decoder against itself
        assert C is not None and C.decode_json_frame(frame) is not None


def _common(h: dict[str, Any], ensure_ascii: bool) -> bool:
    """The header forms the compiled decoder is meant to take (broker/fastpath.c's grammar; with ensure_ascii a
    character beyond the BMP is written as a surrogate pair, which it leaves to json)."""
    def i32(v: Any) -> bool:
        return type(v) is int and -(1 << 31) <= v < 1 << 31

    ext = h.get("extFields")
    return ("code" in h and "unknownKey" not in h and all(i32(h[k]) for k in ("code", "opaque", "flag", "version")
                                                          if k in h)
            and type(h.get("language", "")) is str and (h.get("remark") is None or type(h["remark"]) is str)
            and (ext is None or all(type(v) is str for v in ext.values()))
            and not (ensure_ascii and any(ord(ch) > 0xFFFF for x in _strings(h) for ch in x)))


def _strings(h: dict[str, Any]) -> list[str]:
    ext = h.get("extFields") or {}
    return [x for x in (*ext, *ext.values(), h.get("remark"), h.get("language")) if isinstance(x, str)]


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_frames_give_the_same_value_or_the_same_error(data: st.DataObject) -> None:
    frame = bytearray(frame_of({"code": 310, "extFields": GO_SEND, "flag": 0, "language": "GO",
                                "opaque": 77, "remark": "", "version": 317}, b"x" * 16))
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(frame) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            frame[pos] = data.draw(st.sampled_from(b'{}[]":,\\-.0e\x00\x01\x7f\x80\xc3\xff ') | st.integers(0, 255))
        elif action == "cut":
            del frame[pos:]
            if not frame:
                break
        else:
            frame[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
    compiled, python = both(codec.decode, bytes(frame))
    assert compiled == python


@needs_c
@pytest.mark.parametrize("header", [
    '{"code":310,"extFields":{"a":"\\u00e9\\n\\"\\\\\\/\\u0001"},"opaque":1}',
    '{"code":310,"extFields":{"a":"\\ud83d\\ude00"},"opaque":1}',  # a surrogate pair: json's own path
    '{"code":310,"extFields":{"a":"\\ud83d"},"opaque":1}',  # a lone surrogate
    '{"code":310,"extFields":{"a":"x\ty"},"opaque":1}',  # a raw control character: refused by json
    '{"code":310,"code":311,"opaque":1,"opaque":2}', '{"code":310,"extFields":{"a":"1","a":"2"}}',
    '{"code":01}', '{"code":-0}', '{"code":1.0}', '{"code":1e3}', '{"code":2147483648}', '{"code":-2147483649}',
    '{"code":123456789012345678901}', '{"code":true}', '{"code":null}', '{"code":"310"}', '{ "code" : 310 }',
    ' {"code":310}', '{"code":310} ', '{"code":310}}', '{"code":310,}', '{"code":310,"extFields":[]}',
    '{"code":310,"extFields":{}}', '{"code":310,"extFields":null,"remark":null}', '{"code":310,"language":null}',
    '{"code":310,"language":9}', '{"code":310,"remark":5}', '{"code":310,"extFields":{"a":1}}',
    '{"code":310,"extFields":{"a":null,"b":"c"}}', '{"code":310,"extFields":{"a":{"b":"c"}}}',
    '{"\\u0063ode":310}', '{"code":310,"serializeTypeCurrentRPC":null}', '{}', '{"code":310,"x":1}',
    '{"code":310,"remark":"\xff"}', '{"code":310,"extFields":{"\xc3\xa9":"\xe2\x82"}}'])
def test_unusual_json_headers_decode_the_same(header: str) -> None:
    raw = header.encode("latin-1") if "\xff" in header or "\xc3" in header else header.encode("utf-8")
    frame = struct.pack(">i", len(raw)) + raw + b"body"
    compiled, python = both(codec.decode, frame)
    assert compiled == python


@needs_c
def test_the_compiled_decoder_takes_what_the_clients_send() -> None:
    go = {"code": 310, "language": "GO", "version": 317, "opaque": 7, "flag": 0, "remark": "", "extFields": GO_SEND}
    java = {"code": 310, "extFields": GO_SEND, "flag": 0, "language": "JAVA", "opaque": 9,
            "serializeTypeCurrentRPC": "JSON", "version": 479}
    for header in (go, java):
        frame = frame_of(header, b"x" * 1024)
        got = C.decode_json_frame(frame)  # type: ignore[union-attr]
        assert got is not None
        assert RemotingCommand(*got) == codec.decode_python(frame)


# ------------------------------------------------------------------ answer frames
awkward = st.text(alphabet=st.sampled_from('ab"\\/\x00\x01\x1f\x7f\n\t\r\b\féあ😀\u2028'), max_size=10)


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.none() | st.dictionaries(awkward | text, awkward | text, max_size=6), st.none() | awkward | text,
       st.integers(-(1 << 40), 1 << 40), st.sampled_from([0, 1, 3]), st.sampled_from(["JAVA", "GO"]) | awkward,
       int32, st.binary(max_size=40), st.sampled_from([0, 1]))
def test_answer_frames_encode_the_same(ext: dict[str, str] | None, remark: str | None, opaque: int, flag: int,
                                       language: str, code: int, body: bytes, stype: int) -> None:
    cmd = RemotingCommand(code=code, ext_fields=ext, body=body, remark=remark, opaque=opaque, flag=flag,
                          language=language, serialize_type=stype)
    compiled, python = both(codec.encode, cmd)
    assert compiled == python
    if stype == codec.JSON:  # the compiled encoder took it: these comparisons are not Python against itself
        assert C is not None and C.encode_json_frame(code, ext, remark, opaque, flag, language, cmd.version,
                                                     body) == python[1]


@needs_c
@pytest.mark.parametrize("cmd", [
    RemotingCommand(code=0, ext_fields={"k": "\ud800"}),  # a lone surrogate: UnicodeEncodeError from both
    RemotingCommand(code=0, remark="\udfff"),
    RemotingCommand(code=0, ext_fields={"k": 5, "n": None, 3: "x"}),  # type: ignore[dict-item]
    RemotingCommand(code=True, flag=False),  # bools: json writes true/false
    RemotingCommand(code=1 << 70),
    RemotingCommand(code=0, body=bytearray(b"ab")),  # type: ignore[arg-type]
    RemotingCommand(code=0, language=None),  # type: ignore[arg-type]
])
def test_unusual_answers_encode_the_same(cmd: RemotingCommand) -> None:
    compiled, python = both(codec.encode, cmd)
    assert compiled == python


# ------------------------------------------------------------------ send header fields
odd_number = st.sampled_from(["", "0", "7", "-3", "007", "-0", "+5", " 5", "5 ", "1_000", "٣", "12x", "true",
                              "TRUE", "tRuE", "false", "9" * 18, "9" * 19, "-" + "9" * 18, "-", "0x10"])
field_value = st.none() | odd_number | text


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.sampled_from([RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE]),
       st.sampled_from(["short", "long", "mixed"]),
       st.fixed_dictionaries({name: field_value for name in broker_handlers.V2_NAMES.values()}))
@example(RequestCode.SEND_MESSAGE_V2, "short", {"producerGroup": "g", "topic": "T", "queueId": "1", "sysFlag": "0",
                                               "bornTimestamp": "1", "flag": "0", "reconsumeTimes": None,
                                               "batch": "TRUE", "properties": None})
def test_send_headers_read_the_same(code: int, names: str, values: dict[str, str | None]) -> None:
    long_to_short = {v: k for k, v in broker_handlers.V2_NAMES.items()}
    ext = {}
    for i, (k, v) in enumerate(values.items()):
        if v is not None:
            short = names == "short" or (names == "mixed" and i % 2 == 0)
            ext[long_to_short[k] if short else k] = v
    cmd = RemotingCommand(code=code, ext_fields=ext)
    compiled, python = both(broker_handlers._send_fields, cmd)
    assert compiled == python


@needs_c
def test_the_compiled_reader_takes_a_go_send_header() -> None:
    got = C.send_fields(GO_SEND, RequestCode.SEND_MESSAGE_V2)  # type: ignore[union-attr]
    assert got is not None
    assert got == broker_handlers._send_fields_python(RemotingCommand(code=310, ext_fields=GO_SEND))


# ------------------------------------------------------------------ properties
props_text = st.text(alphabet=st.sampled_from("ab\x01\x02é😀 "), max_size=30)


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.none() | props_text | text)
@example("\x01\x02\x01a\x02a\x01\x02a\x01b\x01c\x02\x02")
def test_properties_parse_the_same(raw: str | None) -> None:
    compiled, python = both(codec.string_to_properties, raw)
    assert compiled == python
    if raw:
        assert C is not None and C.parse_properties(raw) == python[1]


# ------------------------------------------------------------------ batch bodies
entries = st.lists(st.builds(BatchEntry, st.binary(max_size=30), int32,
                             st.dictionaries(st.text("ab\x01é", min_size=1, max_size=4),
                                             st.text("xy\x02", min_size=1, max_size=4), max_size=3)), max_size=5)


def python_batch(body: bytes) -> list[tuple[bytes, int, dict[str, str]]]:
    return [(e.body, e.flag, e.properties) for e in codec.decode_batch(body)]


@needs_c
@settings(max_examples=200, deadline=None)
@given(entries, st.data())
def test_batch_bodies_decode_the_same_whole_and_damaged(batch: list[BatchEntry], data: st.DataObject) -> None:
    body = bytearray(codec.encode_batch(batch))
    compiled, python = both(codec.batch_entries, bytes(body))
    assert compiled == python == ("ok", python_batch(bytes(body)))
    assert C is not None and C.decode_batch(bytes(body)) == python[1]
    if body:
        for _ in range(data.draw(st.integers(1, 3))):
            pos = data.draw(st.integers(0, max(0, len(body) - 1)))
            if data.draw(st.booleans()):
                body[pos:pos + 1] = bytes([data.draw(st.integers(0, 255))])
            else:
                del body[pos:]
        compiled, python = both(codec.batch_entries, bytes(body))
        assert compiled == python


def test_a_batch_record_with_properties_that_are_not_utf8_is_refused_the_same() -> None:
    body = bytearray(codec.encode_batch([BatchEntry(b"x", 0, {"a": "b"})]))
    body[-2] = 0xFF
    compiled, python = both(codec.batch_entries, bytes(body))
    assert compiled == python and python[0] == "raised"


# ------------------------------------------------------------------ commit-log record heads
@needs_c
@settings(max_examples=150, deadline=None)
@given(st.text(max_size=20), st.binary(max_size=50),
       st.dictionaries(text | awkward, text | awkward, max_size=6), st.text(max_size=8), st.text(max_size=8))
def test_records_encode_the_same(topic: str, body: bytes, props: dict[str, str], born: str, store: str) -> None:
    def encoded() -> tuple[bytes, int]:
        msg = StoredMessage(topic=topic, queue_id=3, body=body, properties=dict(props), born_host=born,
                            store_host=store, queue_offset=5, physical_offset=99)
        return record.encode(msg), msg.size

    compiled, python = both(encoded)
    assert compiled == python


@needs_c
@pytest.mark.parametrize("props", [
    {"a": "\ud800"}, {"k" * 20000: "v" * 12767}, {"k" * 20000: "v" * 12766}, {"a": 5}, {1: "b"}, {}])
def test_unusual_record_properties_encode_or_fail_the_same(props: dict[Any, Any]) -> None:
    def prepared() -> tuple[bytes, int]:
        msg = StoredMessage(topic="T", queue_id=0, body=b"b", properties=dict(props))
        return record.prepare(msg), msg.size

    compiled, python = both(prepared)
    assert compiled == python


# ------------------------------------------------------------------ commit-log appends and index entries
def _appended(msgs: list[StoredMessage], segment: int) -> tuple[Any, ...]:
    """What CommitLog.append_batch leaves: every segment file's bytes, the offsets given, or the error."""
    copies = [StoredMessage(topic=m.topic, queue_id=m.queue_id, body=m.body, properties=dict(m.properties),
                            flag=m.flag, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host="h:1",
                            store_timestamp=m.store_timestamp, store_host="s:2", queue_offset=m.queue_offset)
              for m in msgs]
    with tempfile.TemporaryDirectory() as d:
        log = commitlog.CommitLog(Path(d), segment)
        try:
            heads = [record.prepare(m) for m in copies]
            got = outcome(log.append_batch, copies, heads)
            files = tuple((p.name, p.read_bytes()) for p in sorted(Path(d).iterdir()))
        finally:
            log.close()
    return got, files, [m.physical_offset for m in copies]


big = st.integers(-(1 << 65), 1 << 65)


@needs_c
@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(StoredMessage, topic=st.sampled_from(["T", "Tópico"]), queue_id=int32 | big,
                          body=st.binary(max_size=300), properties=st.dictionaries(ascii_text, text, max_size=2),
                          flag=int32, sys_flag=st.integers(0, 12), born_timestamp=st.integers(0, 1 << 45) | big,
                          store_timestamp=st.integers(0, 1 << 45), queue_offset=st.integers(0, 1000)),
                max_size=12), st.sampled_from([600, 1024, 4096]))
def test_record_batches_land_the_same_across_segment_rolls(msgs: list[StoredMessage], segment: int) -> None:
    msgs = [m for m in msgs if len(m.body) + 200 < segment]  # a record fits a segment (append_batch's caller checks)
    compiled, python = both(_appended, msgs, segment)
    assert compiled == python


def _indexed(entries: list[tuple[Any, Any, Any]], slots: int, count: int) -> tuple[Any, ...]:
    with tempfile.TemporaryDirectory() as d:
        f = index.IndexFile(Path(d) / "idx", slots, count)
        try:
            got = outcome(f.put_entries, list(entries))
            state = (f.count, f.slots_used, f.begin_ts, f.end_ts, f.begin_phy, f.end_phy, bytes(f.mm))
        finally:
            f.close()
    return got, state


@needs_c
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["T#a", "*#ID1", "T#é", "T#\ud800"]) | text,
                          st.integers(0, 1 << 40) | big, st.integers(0, 1 << 42) | big), max_size=20),
       st.integers(1, 7), st.integers(2, 25))
def test_index_entries_land_the_same(entries: list[tuple[Any, Any, Any]], slots: int, count: int) -> None:
    compiled, python = both(_indexed, entries, slots, count)
    assert compiled == python


@needs_c
def test_the_compiled_loops_take_plain_records_and_index_keys() -> None:
    """encode_run lays out every plain record and index_put writes every plain key (not handing them back)."""
    assert C is not None
    msgs = [StoredMessage(topic="T", queue_id=i, body=b"x" * i, properties={"UNIQ_KEY": f"ID{i}"}, born_host="h",
                          store_host="s", born_timestamp=1, store_timestamp=2) for i in range(5)]
    heads = [record.prepare(m) for m in msgs]
    buf = bytearray(sum(m.size for m in msgs))
    assert C.encode_run(buf, 0, msgs, heads, 0, 1 << 20, 100, record.crc32) == (5, len(buf), 100 + len(buf),
                                                                                  (1 << 20) - len(buf))
    assert [record.decode(buf, sum(m.size for m in msgs[:i])).body for i in range(5)] == [m.body for m in msgs]
    mm = bytearray(40 + 4 * 3 + 20 * 10)
    assert C.index_put(mm, [("T#a", 5, 3000), ("T#b", 9, 1000)], 1, 3, 52, 1000, 0, 0, record.crc32)[:2] == (2, 3)


# ------------------------------------------------------------------ the store's dispatch of a batch
def _dispatched(specs: list[tuple[Any, ...]], cut: int) -> tuple[Any, ...]:
    """What MessageStore._dispatch_many leaves for these records, dispatched ``cut`` at a time: every consume
    queue's entries, the queue offsets, the index's entries and header fields, ``dispatched``, or the error."""
    msgs = [StoredMessage(topic=topic, queue_id=qid, body=b"", properties=dict(props), queue_offset=qoff,
                          physical_offset=(i + 1) * 100, size=size, store_timestamp=ts)
            for i, (topic, qid, qoff, size, ts, props) in enumerate(specs)]
    with tempfile.TemporaryDirectory() as d:
        store = MessageStore(StoreConfig(root=Path(d), cq_entries_per_segment=8, index_slot_num=7, index_num=300))
        got = []
        try:
            for i in range(0, len(msgs), cut):
                got.append(outcome(store._dispatch_many, msgs[i:i + cut]))
            queues = {k: (cq.min_offset, cq.max_offset, cq.get(0, 1000)) for k, cq in sorted(store.cqs.items())}
            idx = [(f.count, f.slots_used, f.begin_ts, f.end_ts, f.begin_phy, f.end_phy, bytes(f.mm))
                   for f in store.index.files]
        finally:
            close_store(store)
    return got, queues, dict(store.queue_next), store.dispatched, idx



lmq_props = st.fixed_dictionaries({MULTI_DISPATCH: st.just("%LMQ%$T$a,%LMQ%$T$b"),
                                   MULTI_QUEUE_OFFSET: st.sampled_from(["0,0", "1,3", "2", "x,1", "5,5"])})
odd_props = st.dictionaries(st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS"]), st.integers(0, 3) | st.none(), max_size=2)
dispatch_props = st.dictionaries(st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "X"]),
                                 st.sampled_from(["", "ID1", "k1 k2", " k1  k2 ", "é", "t", "a#b"]) | text,
                                 max_size=4) | lmq_props | odd_props


@needs_c
@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["T", "Tópico", "%RETRY%G"]), st.integers(0, 2) | big,
                          st.integers(0, 6) | st.sampled_from([-1, 40, 1 << 63]), st.integers(0, 5000) | big,
                          st.integers(1_700_000_000_000, 1_700_000_100_000) | st.just(0), dispatch_props),
                max_size=20), st.integers(1, 9))
def test_store_batches_dispatch_the_same(specs: list[tuple[Any, ...]], cut: int) -> None:
    """Queue offsets that repeat, jump or start past 0, keys with empty items, LMQ offsets whole and malformed,
    values of other types and numbers out of range: the same queues, offsets, index and errors either way.
    (Store timestamps stay numbers: index_put's own test covers the index with other values.)"""
    compiled, python = both(_dispatched, specs, cut)
    assert compiled == python


@needs_c
def test_the_compiled_dispatch_takes_plain_records() -> None:
    """dispatch_run dispatches every plain record (with tags, keys and ids) and hands back one with LMQ offsets."""
    assert C is not None
    with tempfile.TemporaryDirectory() as d:
        store = MessageStore(StoreConfig(root=Path(d)))
        msgs = [StoredMessage(topic="T", queue_id=i % 2, body=b"", queue_offset=i // 2, physical_offset=i * 10,
                              size=10, store_timestamp=5, properties={"UNIQ_KEY": f"ID{i}", "KEYS": "a b", "TAGS": "t"})
                for i in range(6)]
        msgs.append(StoredMessage(topic="T", queue_id=0, body=b"", queue_offset=3, physical_offset=60, size=10,
                                  properties={MULTI_QUEUE_OFFSET: "0", MULTI_DISPATCH: "%LMQ%$T$a"}))
        runs: dict[Any, Any] = {}
        keys: list[Any] = []
        assert C.dispatch_run(msgs, 0, runs, store._run, message_store._tag_hash, keys) == 6
        assert [(k, r.first, r.end, len(r.packed)) for k, r in runs.items()] == [(("T", 0), 0, 3, 60),
                                                                                 (("T", 1), 0, 3, 60)]
        assert keys[:4] == [("*#ID0", 0, 5), ("T#a", 0, 5), ("T#b", 0, 5), ("T#ID0", 0, 5)]
        close_store(store)


# ------------------------------------------------------------------ the whole send path of a broker
class _Transport(asyncio.WriteTransport):
    """Collects what the broker writes to one connection."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: Any) -> None:
        self.out += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _requests() -> list[bytes]:
    """Reads as a producer's connection delivers them: pipelined V2 sends, a V1 send, a batch, bad headers."""
    def send(code: int, opaque: int, ext: dict[str, str], body: bytes) -> bytes:
        return codec.encode(RemotingCommand(code=code, ext_fields=ext, body=body, opaque=opaque, language="GO",
                                            version=317))

    def v2(n: int, **over: str) -> dict[str, str]:
        props = codec.properties_to_string({"UNIQ_KEY": f"ID{n:030d}", "KEYS": f"k{n} shared", "TAGS": "t"})
        ext = {"a": "pg", "b": "EQ", "c": "TBW102", "d": "4", "e": str(n % 4), "f": "0",
               "g": str(1_700_000_000_000 + n), "h": "0", "i": props, "j": "0", "k": "false", "l": "0", "m": "false",
               "n": "b"}
        return ext | over

    batch = codec.encode_batch([BatchEntry(b"batch-%d" % i, i, {"UNIQ_KEY": f"B{i:031d}", "WAIT": "true"})
                                for i in range(5)])
    first = b"".join(send(310, i + 1, v2(i), b"body-%d" % i) for i in range(20))  # opaque 0: the bad frame's
    second = b"".join([
        send(310, 100, v2(100, e="x"), b"bad queue id"), send(310, 101, {k: v for k, v in v2(101).items() if k != "a"},
                                                              b"no group"),
        send(10, 102, {"producerGroup": "pg", "topic": "EQ", "queueId": "1", "sysFlag": "0", "bornTimestamp": "5",
                       "flag": "3", "properties": "UNIQ_KEY\x01V1ID\x02"}, b"v1"),
        send(320, 103, v2(103, m="true", i=""), batch), send(310, 104, v2(104, b="EQ\u00e9"), b"no such topic")])
    bad_json = b'{"code":310,"opaque":105,"extFields":{"a":}'
    return [first, second, struct.pack(">ii", len(bad_json) + 4, len(bad_json)) + bad_json]


async def _serve(root: Path) -> tuple[bytes, list[tuple[Any, ...]]]:
    from rocketscope.broker.broker import Broker
    from rocketscope.broker.broker_config import load_broker_config
    from rocketscope.broker.remoting.server import _FrameProtocol

    b = Broker(load_broker_config({"brokerName": "eq", "namesrvAddr": "", "grpcServerPort": "0", "listenPort": "0",
                                   "storePathRootDir": str(root), "traceOn": "false",
                                   "autoCreateTopicEnable": "false"}))
    await b.start()
    try:
        await first_records_written(b)
        b.topics.create_if_absent("EQ", 4)
        transport = _Transport()
        proto = _FrameProtocol(b.remoting.server)  # type: ignore[attr-defined]
        proto.connection_made(transport)
        for data in _requests():
            proto.data_received(data)
            for _ in range(200):  # until every task the read started is done and its answers are written
                await asyncio.sleep(0.005)
                if not proto.inflight:
                    break
        stored = [(m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.size, m.body, m.properties, m.flag,
                   m.sys_flag, m.born_timestamp, m.born_host, m.store_host, m.reconsume_times)
                  for m in b.store.commit_log.iter_messages(0, b.store.commit_log.max_offset) if m.topic == "EQ"]
        return bytes(transport.out), stored
    finally:
        await b.stop()


@needs_c
def test_a_broker_answers_and_stores_the_same_on_either_path(tmp_path: Path) -> None:
    """The same reads fed to a broker's remoting front door, once with each path: the same answer bytes (stored
    sends, a bad queue id and a missing group named, a V1 send, a batch, an unknown topic, a frame that is not
    JSON) and the same commit-log records (all but the store time).  The answers of one read's requests of
    different codes may leave in another order (a read's plain sends are answered inside its callback, on the
    compiled path only: docs/REMOTING.md), as remoting allows (an answer names its request by opaque), so the
    answer frames are compared in the order of their opaques, each frame's bytes whole; the bad frame's answer is
    the last on both paths."""
    got = {}
    for impl in ("c", "python"):
        with pure_python() if impl == "python" else contextlib.nullcontext():
            got[impl] = asyncio.run(_serve(tmp_path / impl))

    def frames(data: bytes) -> list[bytes]:
        out = []
        while data:
            n = int.from_bytes(data[:4], "big")
            out.append(data[:4 + n])
            data = data[4 + n:]
        return out

    (answers, stored), (py_answers, py_stored) = got["c"], got["python"]
    assert stored == py_stored
    c_frames, py_frames = frames(answers), frames(py_answers)
    assert c_frames[-1] == py_frames[-1]
    opaque = lambda f: codec.decode_python(f[4:]).opaque  # noqa: E731
    assert sorted(c_frames[:-1], key=opaque) == sorted(py_frames[:-1], key=opaque)
    replies = [codec.decode_python(f[4:]) for f in c_frames]
    by_opaque = {r.opaque: r for r in replies}
    assert [by_opaque[i].code for i in range(1, 21)] == [0] * 20 and len(stored) == 20 + 1 + 5
    assert by_opaque[100].code == codec.ResponseCode.SYSTEM_ERROR and "queueId" in (by_opaque[100].remark or "")
    assert "producerGroup" in (by_opaque[101].remark or "")
    assert (by_opaque[102].code, by_opaque[103].code) == (0, 0) and by_opaque[104].code != 0
    assert "bad frame" in (replies[-1].remark or "")


def test_every_module_using_the_compiled_path_is_switched_by_these_tests() -> None:
    """A module that starts using broker/fastpath.c must join MODULES, or its "python" runs here would be C."""
    root = Path(__file__).resolve().parent.parent / "broker"
    users = {str(p.relative_to(root.parent)) for p in root.rglob("*.py") if "speedups import compiled" in p.read_text()}
    assert users == {f"broker/{m.__name__.split('.', 2)[2].replace('.', '/')}.py" for m in MODULES}
