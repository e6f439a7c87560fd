"""The answers of a run of single sends written by one compiled call (broker/fastpath.c ``send_answers``, issue 20).

``RemotingBroker.send_group`` hands a run of plain stored single sends to ``send_answers``, which writes every
answer frame in one buffer; anything else (a failed put, a message the timer or a transaction wrapped, a ROCKETMQ
binary request) makes it return None and each answer is built in Python (``_answer_send`` then ``encode``), the
reference.  Ground truth here is that reference on the same requests and put results, byte for byte, including
awkward text (quotes, control characters, non-ASCII) in the transaction id, the region and the properties; and,
through a broker's front door fed one read, that every non-oneway send is answered exactly once, in order, with
the same bytes on the compiled and the pure-Python path.  No process is started (about 3 s).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transport_support import RecordingTransport, first_records_written

from rocketscope.broker import speedups
from rocketscope.broker.remoting import broker_handlers, codec, server
from rocketscope.broker.remoting.broker_handlers import RemotingBroker, _PreparedSend
from rocketscope.broker.remoting.codec import FLAG_ONEWAY, RemotingCommand
from rocketscope.broker.store.message_store import PutResult, PutStatus
from rocketscope.broker.store.record import StoredMessage
from rocketscope.broker.trace_hooks import NoTrace

C = speedups.compiled
needs_c = pytest.mark.skipif(C is None, reason=f"{speedups.PURE_ENV} is set: the compiled module is not loaded")
PREFIX = codec.offset_msg_id("10.1.2.3:10911", 0)[:-16]


def _front(region: str, trace_on: bool) -> RemotingBroker:
    """The parts of a RemotingBroker that ``_answer_send`` reads, with no broker behind them."""
    front = RemotingBroker.__new__(RemotingBroker)
    front.b = SimpleNamespace(trace_hooks=NoTrace(),  # type: ignore[assignment]
                              settings=SimpleNamespace(regionId=region, traceOn=trace_on))
    front._msg_id_prefix = PREFIX
    return front


def _reference(front: RemotingBroker, cmds: list[RemotingCommand], results: list[PutResult],
               prepared: list[_PreparedSend]) -> bytes:
    """What the Python path writes for these sends: each answer built by ``_answer_send`` and encoded alone."""
    out = []
    for cmd, res, p in zip(cmds, results, prepared, strict=True):
        if not cmd.flag & FLAG_ONEWAY:
            out.append(codec.encode_python(cmd.response(*front._answer_send(p, [res], "cid", 0))))
    return b"".join(out)


text = st.text(st.characters(codec="utf-8"), max_size=40)  # every code point but surrogates
row = st.tuples(st.integers(-(1 << 31), (1 << 31) - 1), st.sampled_from([0, FLAG_ONEWAY]),
                st.integers(0, 1 << 40), st.integers(0, 1 << 40), st.integers(0, 15),
                st.one_of(st.none(), text), st.one_of(st.none(), text))


def _run(rows: list[tuple[Any, ...]]) -> tuple[list[RemotingCommand], list[PutResult], list[_PreparedSend]]:
    cfg = SimpleNamespace(name="T", read_queue_nums=16, write_queue_nums=16)
    cmds, results, prepared = [], [], []
    for opaque, flag, phy, qoff, queue_id, uniq, tx in rows:
        props = {"WAIT": "true"}
        if uniq is not None:
            props["UNIQ_KEY"] = uniq
        if tx is not None:
            props["TRANSACTION_ID"] = tx
        msg = StoredMessage(topic="T", queue_id=queue_id, body=b"b", properties=props, queue_offset=qoff,
                            physical_offset=phy)
        cmds.append(RemotingCommand(code=310, opaque=opaque, flag=flag, language="GO", version=317))
        results.append(PutResult(PutStatus.PUT_OK, msg))
        prepared.append(_PreparedSend(cfg, queue_id, [msg], []))
    return cmds, results, prepared


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(row, min_size=1, max_size=20), text, st.booleans())
def test_a_run_of_plain_sends_is_answered_as_the_python_path_answers_it(rows: list[tuple[Any, ...]], region: str,
                                                                        trace_on: bool) -> None:
    assert C is not None
    front = _front(region, trace_on)
    cmds, results, prepared = _run(rows)
    got = C.send_answers(cmds, results, prepared, PREFIX, region, "true" if trace_on else "false", PutStatus.PUT_OK)
    assert got == _reference(front, cmds, results, prepared)


@needs_c
@settings(max_examples=100, deadline=None)
@given(st.lists(row, min_size=1, max_size=20), text, st.booleans())
def test_answers_from_the_stored_messages_are_those_from_their_results(rows: list[tuple[Any, ...]], region: str,
                                                                       trace_on: bool) -> None:
    """A run ``Broker.put_plain_run`` stored hands ``send_answers`` the messages (``ok`` None), not PutResults: the
    same frames as the Python path's for PUT_OK results of those messages."""
    assert C is not None
    front = _front(region, trace_on)
    cmds, results, prepared = _run(rows)
    msgs = [r.message for r in results]
    got = C.send_answers(cmds, msgs, prepared, PREFIX, region, "true" if trace_on else "false", None)
    assert got == _reference(front, cmds, results, prepared)


@needs_c
@pytest.mark.parametrize("odd", ["failed put", "wrapped topic", "binary request", "no message", "negative offset",
                                 "non-str transaction id"])
def test_a_run_with_any_other_answer_is_left_to_python(odd: str) -> None:
    """One send of the run that is not a plain stored one: None (then every answer is _answer_send's)."""
    assert C is not None
    cmds, results, prepared = _run([(i + 1, 0, 100 * i, i, i % 4, f"U{i}", None) for i in range(5)])
    victim = results[3]
    assert victim.message is not None
    if odd == "failed put":
        victim.status = PutStatus.FLUSH_DISK_TIMEOUT
    elif odd == "wrapped topic":
        victim.message.topic = "rmq_sys_wheel_timer"
    elif odd == "binary request":
        cmds[3].serialize_type = codec.ROCKETMQ
    elif odd == "no message":
        victim.message = None
    elif odd == "negative offset":
        victim.message.physical_offset = -1
    else:
        victim.message.properties["TRANSACTION_ID"] = 5  # type: ignore[assignment]
    assert C.send_answers(cmds, results, prepared, PREFIX, "r", "false", PutStatus.PUT_OK) is None
    cmds, results, prepared = _run([(i + 1, 0, 100 * i, i, i % 4, f"U{i}", None) for i in range(5)])
    assert C.send_answers(cmds, results, prepared, PREFIX, "r", "false", PutStatus.PUT_OK) is not None


# ------------------------------------------------------------------ through a broker's front door
@contextlib.contextmanager
def _pure_python() -> Iterator[None]:
    saved = broker_handlers._C, codec._C, server._C
    broker_handlers._C = codec._C = server._C = None
    try:
        yield
    finally:
        broker_handlers._C, codec._C, server._C = saved


def _read() -> bytes:
    """One read: 12 V2 sends, of which #4 and #9 are oneway, #6 asks for a delay level and #8 is a transaction half."""
    frames = []
    for i in range(12):
        props = {"UNIQ_KEY": f"UQ{i:030d}", "TAGS": "t"}
        if i == 6:
            props["DELAY"] = "2"
        if i == 8:
            props["TRAN_MSG"] = "true"
        ext = {"a": "pg", "b": "ANS", "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0", "g": "1700000000000",
               "h": "0", "i": codec.properties_to_string(props), "j": "0", "k": "false", "l": "0", "m": "false"}
        frames.append(codec.encode(RemotingCommand(code=310, ext_fields=ext, body=b"m%d" % i, opaque=i + 1,
                                                   flag=FLAG_ONEWAY if i in (4, 9) else 0, language="GO")))
    return b"".join(frames)


async def _serve(root: Path, reads: list[bytes], plain_runs: bool = True, seen: dict[str, Any] | None = None,
                 now: bool = True, conf: dict[str, str] | None = None, after_read: Any = None) -> bytes:
    """The answers a broker writes for ``reads`` on one connection; ``plain_runs`` False takes every run through
    ``put_messages`` (the path before ``Broker.put_plain_run``); ``now`` False turns off the answers made inside
    the read's callback (``RemotingServer.answer_now``: every group in a task, the path before it); ``conf``:
    more broker settings.  ``seen`` gets the store's ``put`` calls holding a message of topic ANS, the messages of
    queue ANS/0-3 read back, and per read the answer bytes written before ``data_received`` returned and whether
    a task was left in flight then (``tasks``: how many of what is in flight are tasks).  ``after_read(broker)``
    runs right after each read is handed over."""
    from rocketscope.broker.broker import Broker
    from rocketscope.broker.broker_config import load_broker_config
    from rocketscope.broker.remoting.server import _FrameProtocol

    b = Broker(load_broker_config({"brokerName": "ans", "namesrvAddr": "", "grpcServerPort": "0", "listenPort": "0",
                                   "storePathRootDir": str(root), "traceOn": "false", **(conf or {})}))
    await b.start()
    puts = 0
    store_put = b.store.put

    async def counted_put(messages: Any, *args: Any, **kw: Any) -> Any:
        nonlocal puts
        messages = list(messages)
        puts += any(m.topic == "ANS" for m in messages)  # the sends' puts, not the broker's own records
        return await store_put(messages, *args, **kw)

    b.store.put = counted_put  # type: ignore[method-assign]
    if not plain_runs:
        b.put_plain_run = lambda stored: False  # type: ignore[method-assign]
    if not now:
        b.remoting.server.group_handlers_now = {}  # type: ignore[attr-defined]
    at_once: list[tuple[bytes, bool]] = []
    tasks: list[int] = []
    try:
        await first_records_written(b)
        b.topics.create_if_absent("ANS", 4)
        transport = RecordingTransport()
        proto = _FrameProtocol(b.remoting.server)  # type: ignore[attr-defined]
        proto.connection_made(transport)
        for data in reads:
            before = len(transport.out)
            proto.data_received(data)
            at_once.append((bytes(transport.out[before:]), bool(proto.inflight)))
            tasks.append(sum(isinstance(f, asyncio.Task) for f in proto.inflight))
            if after_read is not None:
                after_read(b)
            for _ in range(400):
                await asyncio.sleep(0.005)
                if not proto.inflight:
                    break
            assert not proto.inflight
        await asyncio.sleep(0)  # the answers' write (Connection.flush) is one call_soon away
        if seen is not None:
            seen["puts"] = puts
            seen["at_once"] = at_once
            seen["tasks"] = tasks
            seen["read"] = [(m.queue_id, m.queue_offset, m.physical_offset, m.body, m.properties)
                            for q in range(4) for m in b.store.get("ANS", q, 0, 100).messages]
        return bytes(transport.out)
    finally:
        await b.stop()


def _frames(data: bytes) -> list[RemotingCommand]:
    out = []
    while data:
        n = int.from_bytes(data[:4], "big")
        out.append(codec.decode_python(data[4:4 + n]))
        data = data[4 + n:]
    return out


@needs_c
def test_a_read_of_sends_is_answered_once_each_in_order_the_same_on_both_paths(tmp_path: Path) -> None:
    """A plain run (compiled answers), then a run holding a delayed and a half message (Python answers): every
    non-oneway opaque answered once, in request order, SUCCESS, the same bytes as the pure-Python path's (the msgIds
    are commit-log offsets: both brokers start from an empty store; the half's transaction id is drawn at random)."""
    plain = b"".join(codec.encode(RemotingCommand(
        code=310, ext_fields={"a": "pg", "b": "ANS", "e": str(i % 4), "f": "0", "g": "5", "h": "0", "j": "0",
                              "i": codec.properties_to_string({"UNIQ_KEY": f"P{i}", "TRANSACTION_ID": 'x"\\\n'})},
        body=b"p", opaque=100 + i, language="GO")) for i in range(8))
    got = {}
    for impl in ("c", "python"):
        with _pure_python() if impl == "python" else contextlib.nullcontext():
            got[impl] = asyncio.run(_serve(tmp_path / impl, [plain, _read()]))
    answers, python = _frames(got["c"]), _frames(got["python"])
    for a in (answers[-3], python[-3]):  # the half's: the transaction id the broker draws for it (TransactionService)
        assert a.opaque == 9 and len(a.fields.pop("transactionId")) == 32
    assert answers == python
    assert [a.opaque for a in answers] == [100 + i for i in range(8)] + [i + 1 for i in range(12) if i not in (4, 9)]
    assert {a.code for a in answers} == {codec.ResponseCode.SUCCESS}
    assert {a.fields["transactionId"] for a in answers[:8]} == {'x"\\\n'}
    assert len({a.fields["msgId"] for a in answers}) == len(answers)


def _plain_read(n: int, oneway: tuple[int, ...] = ()) -> bytes:
    return b"".join(codec.encode(RemotingCommand(
        code=310, ext_fields={"a": "pg", "b": "ANS", "e": str(i % 4), "f": "0", "g": str(1_700_000_000_000 + i),
                              "h": "0", "j": "0", "i": codec.properties_to_string({"UNIQ_KEY": f"PR{i}", "KEYS": "k"})},
        body=b"plain %d" % i, opaque=500 + i, flag=FLAG_ONEWAY if i in oneway else 0, language="GO"))
        for i in range(n))


@pytest.mark.parametrize("impl", ["c", "python"])
def test_a_read_of_plain_sends_is_stored_in_one_call_and_answered_as_put_answers_it(tmp_path: Path, impl: str) -> None:
    """A read of plain single sends never reaches the store's ``put`` (``Broker.put_plain_run``), and the broker's
    answers and the messages read back are those of the same reads stored through ``put_messages``; a read holding
    a delayed and a half message still goes through ``put``."""
    if impl == "c" and C is None:
        pytest.skip(f"{speedups.PURE_ENV} is set: the compiled module is not loaded")
    reads = [_plain_read(10, oneway=(3,)), _plain_read(1), _read()]
    got: dict[bool, tuple[bytes, dict[str, Any]]] = {}
    for plain_runs in (True, False):
        seen: dict[str, Any] = {}
        with _pure_python() if impl == "python" else contextlib.nullcontext():
            out = asyncio.run(_serve(tmp_path / f"{impl}-{plain_runs}", reads, plain_runs, seen))
        got[plain_runs] = out, seen
    (run_out, run_seen), (put_out, put_seen) = got[True], got[False]
    assert (run_seen["puts"], put_seen["puts"]) == (1, 3)
    answers, reference = _frames(run_out), _frames(put_out)
    for a in (answers[-3], reference[-3]):  # the half's transaction id is drawn at random
        assert a.opaque == 9 and len(a.fields.pop("transactionId")) == 32
    assert answers == reference
    assert [a.opaque for a in answers[:10]] == [500 + i for i in range(10) if i != 3] + [500]
    assert run_seen["read"] == put_seen["read"]
    assert len(run_seen["read"]) == 10 + 1 + 12 - 2  # the delayed and the half wait in their own topics


def test_an_ephemeral_listen_port_gives_an_ephemeral_ha_port(tmp_path: Path) -> None:
    """listenPort 0 with haListenPort 0 listens for replication on a port the kernel gives, and advertises that
    one; it used to be 0 + 1 = port 1 for every such broker, so two at once failed ("haListenPort ... in use")."""
    import socket

    from rocketscope.broker.broker import Broker
    from rocketscope.broker.broker_config import load_broker_config

    async def main() -> None:
        taken = socket.socket()  # port 1 held by someone else, as another test's broker held it
        with contextlib.suppress(OSError):
            taken.bind(("127.0.0.1", 1))
            taken.listen()
        brokers = [Broker(load_broker_config({"brokerName": f"eph{i}", "namesrvAddr": "", "grpcServerPort": "0",
                                              "listenPort": "0", "storePathRootDir": str(tmp_path / str(i))}))
                   for i in range(2)]
        try:
            for b in brokers:
                await b.start()
            ports = [b.ha_listener.port for b in brokers]
            assert 1 not in ports and ports[0] != ports[1]
            assert [b.ha_port for b in brokers] == ports
            assert [b.ha_addr.rpartition(":")[2] for b in brokers] == [str(p) for p in ports]
        finally:
            for b in brokers:
                await b.stop()
            taken.close()

    asyncio.run(main())
