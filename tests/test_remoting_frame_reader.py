"""A read's frames decoded by the compiled loop give what the Python loop gives (issue 20, session 25).

``RemotingServer.frames`` hands a read to ``fastpath.decode_frames``, which splits and decodes its whole frames
and, for a send request, reads the send's header fields and properties with the frame (``RemotingCommand.send``);
``_send_fields`` and ``_prepare_send`` then take them from there instead of reading the extFields dict again.  The
reference is the same code with the compiled module switched off (the modules' ``_C`` set to None, what
``ROCKETSCOPE_PURE_PYTHON=1`` does at import): the Python frame loop, ``decode_python``, ``_send_fields_python``
and ``string_to_properties``.  Generated reads (hypothesis) hold SEND_MESSAGE (V1 names), SEND_MESSAGE_V2 (short,
long and mixed names) and SEND_BATCH_MESSAGE requests with plain, odd and missing fields, properties with
separators anywhere and non-ASCII text, answers, oneway requests, other codes, binary and unusual JSON headers,
frames cut short and lengths to refuse; each is compared on what the loop returns (bytes consumed, the grouped
commands, the commands routed one by one, the in-flight stop, or the error), the fields and properties the send
path reads from each grouped command, and — through a broker's front door — the answer bytes and the stored
records.  No process is started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from compiled_support import compiled_off
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transport_support import RecordingTransport, first_records_written

from rocketscope.broker import speedups
from rocketscope.broker.remoting import broker_handlers, codec, server
from rocketscope.broker.remoting.broker_handlers import V2_NAMES, _header_properties, _send_fields
from rocketscope.broker.remoting.codec import RemotingCommand

C = speedups.compiled
needs_c = pytest.mark.skipif(C is None, reason=f"{speedups.PURE_ENV} is set: the compiled module is not loaded")
SWITCHED = (codec, broker_handlers, server)
LONG_TO_SHORT = {v: k for k, v in V2_NAMES.items()}


def pure_python() -> contextlib.AbstractContextManager[None]:
    return compiled_off(SWITCHED)


# ------------------------------------------------------------------ generated reads
prop_text = st.text(alphabet=st.sampled_from("ab_K\x01\x02 é😀\u2028"), max_size=14)
number = st.sampled_from(["0", "3", "-1", "007", "", " 5", "+5", "1e3", "٣", "9" * 19, "true", "x"])
plain_number = st.integers(-5, 1 << 40).map(str)


@st.composite
def properties(draw: st.DrawFn, with_key: bool) -> str:
    """The header's properties text: a dict written by properties_to_string, raw text with separators anywhere,
    or both joined (a UNIQ_KEY first when ``with_key``: a broker draws one at random otherwise)."""
    parts = []
    if with_key:
        parts.append(codec.properties_to_string({"UNIQ_KEY": f"U{draw(st.integers(0, 10**9))}"}))
    kind = draw(st.sampled_from(["dict", "raw", "none"]))
    if kind == "dict":
        parts.append(codec.properties_to_string(draw(st.dictionaries(
            st.sampled_from(["TAGS", "KEYS", "WAIT", "é", "DELAY", "TRAN_MSG"]) | prop_text.filter(bool),
            prop_text.filter(bool), max_size=4))))
    elif kind == "raw":
        parts.append(draw(prop_text))
    return "".join(parts)


@st.composite
def send_frame(draw: st.DrawFn, *, with_key: bool = False, topics: tuple[str, ...] = ("FR",)) -> bytes:
    code = draw(st.sampled_from([10, 310, 310, 310, 320]))
    names = draw(st.sampled_from(["short", "long", "mixed"])) if code != 10 else "long"
    values: dict[str, str | None] = {
        "producerGroup": draw(st.sampled_from(["pg", "gé"])), "topic": draw(st.sampled_from(topics)),
        "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": draw(st.sampled_from(["0", "1", "3", "-1"])),
        "sysFlag": "0", "bornTimestamp": draw(plain_number), "flag": draw(plain_number),
        "properties": draw(properties(with_key)), "reconsumeTimes": draw(st.sampled_from(["0", "2", ""])),
        "unitMode": "false", "maxReconsumeTimes": "16", "batch": draw(st.sampled_from(["false", "false", "true"])),
        "brokerName": "b",
    }
    # mostly plain sends (the compiled reader's case), else one field missing, odd or refused (Python's, named)
    odd = draw(st.sampled_from([None, None, None, "producerGroup", "topic", "queueId", "sysFlag", "bornTimestamp",
                                "flag", "properties", "reconsumeTimes", "batch"]))
    if odd is not None and not (with_key and odd == "properties"):
        values[odd] = draw(st.none() | number | (st.just("bad topic") if odd == "topic" else prop_text))
    ext: dict[str, str] = {}
    for i, (k, v) in enumerate(values.items()):
        if v is not None:
            short = names == "short" or (names == "mixed" and i % 2 == 0)
            ext[LONG_TO_SHORT[k] if short else k] = v
    if draw(st.booleans()):
        ext[draw(st.sampled_from(["zz", "é", "extra"]))] = draw(prop_text)
    header = {"code": code, "extFields": ext, "flag": draw(st.sampled_from([0, 0, 2, 1, 3])),
              "language": draw(st.sampled_from(["GO", "JAVA"])), "opaque": draw(st.integers(-(1 << 31), (1 << 31) - 1)),
              "remark": draw(st.sampled_from(["", None])), "version": 317}
    if code == 320 or values["batch"] in ("true", "TRUE"):
        body = codec.encode_batch([codec.BatchEntry(b"b%d" % i, 0, {"UNIQ_KEY": f"B{i}"}) for i in range(2)])
    else:
        body = draw(st.binary(max_size=12))
    return _frame(header, body, draw(st.booleans()))


def _frame(header: dict[str, Any], body: bytes, spaced: bool = False) -> bytes:
    raw = json.dumps(header, separators=(", ", ": ") if spaced else (",", ":"), ensure_ascii=False).encode()
    head = struct.pack(">i", len(raw)) + raw
    return struct.pack(">i", len(head) + len(body)) + head + body


@st.composite
def other_frame(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["heartbeat", "answer", "unknown key", "binary", "no ext"]))
    if kind == "binary":  # a ROCKETMQ (binary) header: decode_python's
        return codec.encode(RemotingCommand(code=34, ext_fields={"k": "v"}, opaque=5, serialize_type=codec.ROCKETMQ))
    header: dict[str, Any] = {"code": 34 if kind != "answer" else 0, "opaque": draw(st.integers(0, 99)),
                              "flag": 1 if kind == "answer" else 0, "language": "GO", "version": 317}
    if kind == "unknown key":
        header["code"], header["x"] = 310, 1
    if kind != "no ext":
        header["extFields"] = {"a": "pg", "b": "FR"}
    return _frame(header, b"")


@st.composite
def reads(draw: st.DrawFn) -> bytes:
    data = b"".join(draw(st.lists(send_frame() | other_frame(), min_size=1, max_size=10)))
    tail = draw(st.sampled_from(["whole", "cut", "bad length", "huge length"]))
    if tail == "cut":
        data = data[:draw(st.integers(0, len(data)))]
    elif tail == "bad length":
        data += struct.pack(">i", draw(st.integers(-(1 << 31), 3))) + b"xxxx"
    elif tail == "huge length":
        data += struct.pack(">i", 1 << 30) + b"x"
    return data


# ------------------------------------------------------------------ the loop, compared
def _outcome(fn: Any, *args: Any) -> tuple[Any, ...]:
    try:
        return ("ok", fn(*args))
    except Exception as exc:
        return ("raised", type(exc), str(exc), getattr(exc, "code", None), getattr(exc, "opaque", None))


async def _loop_outcome(data: bytes, limit: int, buffered: bool) -> tuple[Any, ...]:
    """What ``RemotingServer.frames`` does with ``data``: its result with each grouped send's fields and
    properties as the send path reads them, and the commands it routed one by one (each of which, when a request,
    counts in flight as its task would), or the error it raised."""
    srv = server.RemotingServer("t", {}, group_handlers=dict.fromkeys((10, 310, 320), None), max_frame=1 << 20)
    proto = server._FrameProtocol(srv)
    proto.connection_made(RecordingTransport())
    started: list[RemotingCommand] = []

    def start(cmd: RemotingCommand, conn: Any, track: Any, grouped: Any, loop: Any) -> None:
        started.append(cmd)
        if not cmd.is_response:
            proto.inflight.add(object())  # type: ignore[arg-type]

    srv._start = start  # type: ignore[method-assign]
    try:
        got = srv.frames(bytearray(data) if buffered else data, proto, limit)
    except Exception as exc:
        return ("raised", type(exc), str(exc), getattr(exc, "opaque", None))
    finally:
        assert proto.watchdog is not None
        proto.watchdog.cancel()
    pos, grouped, full = got
    reads = {code: [(cmd, _outcome(_send_fields, cmd), _outcome(_props, cmd)) for cmd in cmds]
             for code, cmds in grouped.items()}
    return ("ok", pos, reads, full, started)


def _props(cmd: RemotingCommand) -> tuple[dict[str, str], dict[str, str]]:
    """The properties the send path takes for ``cmd`` (twice: the second call must not get the first's dict)."""
    text = _send_fields(cmd)[8]
    first = _header_properties(cmd, text)
    first["UNIQ_KEY"] = "changed by the send path"
    return first, _header_properties(cmd, text)


def _both(data: bytes, limit: int, buffered: bool) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    compiled = asyncio.run(_loop_outcome(data, limit, buffered))
    with pure_python():
        python = asyncio.run(_loop_outcome(data, limit, buffered))
    return compiled, python


@needs_c
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reads(), st.sampled_from([1, 2, 3, 1000]), st.booleans())
def test_a_read_splits_decodes_and_reads_its_sends_as_the_python_loop_does(data: bytes, limit: int,
                                                                           buffered: bool) -> None:
    compiled, python = _both(data, limit, buffered)
    assert compiled == python


@needs_c
def test_the_compiled_loop_reads_the_fields_of_the_sends_clients_write() -> None:
    """Go's SEND_MESSAGE_V2 and Java's SEND_MESSAGE frames get their fields and properties with the frame (so the
    comparison above is not the Python loop against itself); a send with a field to name, an answer, a binary
    header and a bad length are left to Python where the Python loop would do them."""
    props = codec.properties_to_string({"UNIQ_KEY": "U1", "TAGS": "t", "é": "😀"})
    go = {"code": 310, "extFields": {"a": "pg", "b": "T", "e": "1", "f": "0", "g": "17", "h": "4", "i": props,
                                     "j": "0", "m": "false"}, "flag": 0, "language": "GO", "opaque": 1, "version": 317}
    java = {"code": 10, "extFields": {"producerGroup": "pg", "topic": "T", "queueId": "2", "sysFlag": "0",
                                      "bornTimestamp": "18", "flag": "0", "properties": props},
            "flag": 2, "language": "JAVA", "opaque": 2, "version": 479}
    bad = {**go, "opaque": 3, "extFields": {**go["extFields"], "e": "x1"}}  # type: ignore[dict-item]
    data = b"".join(_frame(h, b"body") for h in (go, java, bad))
    assert C is not None
    pos, cmds = C.decode_frames(data, 0, 1 << 20, RemotingCommand, {10: None, 310: None})
    assert pos == len(data) and [c.opaque for c in cmds] == [1, 2, 3]
    assert cmds[0].send == (("pg", "T", 1, 0, 17, 4, 0, False, props), {"UNIQ_KEY": "U1", "TAGS": "t", "é": "😀"})
    assert cmds[1].send == (("pg", "T", 2, 0, 18, 0, 0, False, props), {"UNIQ_KEY": "U1", "TAGS": "t", "é": "😀"})
    assert cmds[2].send is None and "queueId" in _outcome(_send_fields, cmds[2])[2]
    answer = _frame({"code": 0, "flag": 1, "opaque": 9}, b"")
    binary = codec.encode(RemotingCommand(code=310, opaque=5, serialize_type=codec.ROCKETMQ))
    for tail, stop in ((answer, len(data) + len(answer)), (binary, len(data)), (struct.pack(">i", 2), len(data))):
        pos, cmds = C.decode_frames(data + tail, 0, 1 << 20, RemotingCommand, {10: None, 310: None})
        assert pos == stop and len(cmds) == 3 + (tail is answer)
    # a code not grouped (here 310) ends the call after its frame: the caller routes it and checks its limit
    pos, cmds = C.decode_frames(data, 0, 1 << 20, RemotingCommand, {10: None})
    assert pos == len(_frame(go, b"body")) and len(cmds) == 1


# ------------------------------------------------------------------ through a broker's front door
async def _serve(root: Path, reads: list[bytes]) -> tuple[bytes, list[Any]]:
    from rocketscope.broker.broker import Broker
    from rocketscope.broker.broker_config import load_broker_config

    b = Broker(load_broker_config({"brokerName": "fr", "namesrvAddr": "", "grpcServerPort": "0", "listenPort": "0",
                                   "storePathRootDir": str(root), "traceOn": "false"}))
    await b.start()
    try:
        await first_records_written(b)
        b.topics.create_if_absent("FR", 4)
        b.topics.create_if_absent("FR2", 2)
        transport = RecordingTransport()
        proto = server._FrameProtocol(b.remoting.server)  # type: ignore[attr-defined]
        proto.connection_made(transport)
        for data in reads:
            proto.data_received(data)
            for _ in range(400):
                if not proto.inflight:
                    break
                await asyncio.sleep(0.005)
            assert not proto.inflight
        await asyncio.sleep(0)  # the answers' write (Connection.flush) is one call_soon away
        stored = [(t, m.queue_id, m.queue_offset, m.physical_offset, m.flag, m.born_timestamp, m.reconsume_times,
                   m.body, m.properties) for t, n in (("FR", 4), ("FR2", 2)) for q in range(n)
                  for m in b.store.get(t, q, 0, 1000).messages]
        return bytes(transport.out), stored
    finally:
        await b.stop()


send_reads = st.lists(send_frame(with_key=True, topics=("FR", "FR2")), min_size=1, max_size=8).map(b"".join)


@needs_c
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_broker_answers_and_stores_generated_reads_the_same_on_both_paths(tmp_path_factory: Any,
                                                                           data: st.DataObject) -> None:
    """Same answer bytes (SUCCESS frames, and the error codes and remarks naming a bad field) and the same stored
    records, born time, flag and properties included; every send carries a UNIQ_KEY, else the broker draws one."""
    sends = data.draw(st.lists(send_reads, min_size=1, max_size=3))
    root = tmp_path_factory.mktemp("fr")
    compiled = asyncio.run(_serve(root / "c", sends))
    with pure_python():
        python = asyncio.run(_serve(root / "py", sends))
    assert compiled == python
