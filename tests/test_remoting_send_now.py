"""A read of plain single sends answered inside the read's callback (``RemotingServer.answer_now`` with
``RemotingBroker.send_group_now``, issue 20).

The path stores and answers a read without a task, and must be invisible in everything but its cost: the same
answer bytes, the same stored messages, the same metrics, the same refusals as the task path (``send_group``
in a task) on the same reads.  Ground truth is that task path, run on a second broker with the new path off;
the behaviour checked on its own is the point of it: a read it takes is answered before ``data_received``
returns, with no task left in flight, and a read it must not take (a store that waits for an fsync, a delayed
or half message, a topic not yet checked, a client that stopped reading) goes to the task path having stored
nothing.  No process is started.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_remoting_send_answers import _frames, _plain_read, _pure_python, _read, _serve
from transport_support import RecordingTransport

from rocketscope.broker import speedups
from rocketscope.broker.remoting import codec
from rocketscope.broker.remoting.codec import FLAG_ONEWAY, RemotingCommand

IMPLS = ["c", "python"]


def _both(root: Path, reads: list[bytes], impl: str, conf: dict[str, str] | None = None, after_read: Any = None
          ) -> tuple[tuple[bytes, dict[str, Any]], tuple[bytes, dict[str, Any]]]:
    """(answers, seen) of the same reads with the path on and off."""
    if impl == "c" and speedups.compiled is None:
        pytest.skip(f"{speedups.PURE_ENV} is set: the compiled module is not loaded")
    out = []
    for now in (True, False):
        seen: dict[str, Any] = {}
        with _pure_python() if impl == "python" else contextlib.nullcontext():
            got = asyncio.run(_serve(root / f"{impl}-{now}", reads, seen=seen, now=now, conf=conf,
                                     after_read=after_read))
        out.append((got, seen))
    return out[0], out[1]


def _without_drawn_ids(answers: list[RemotingCommand]) -> list[RemotingCommand]:
    """The answers with the transaction ids the broker draws at random for half messages taken out."""
    for a in answers:
        if a.fields.get("transactionId", "").isalnum() and len(a.fields["transactionId"]) == 32:
            a.fields.pop("transactionId")
    return answers


@pytest.mark.parametrize("impl", IMPLS)
def test_reads_of_plain_sends_are_answered_before_the_callback_returns_as_the_task_path_answers(
        tmp_path: Path, impl: str) -> None:
    """The first read of a topic goes to the task path (its name is checked there); every later plain read is
    answered inside ``data_received`` with no task in flight; a read holding a delayed and a half message is not.
    Answers and stored messages equal the task path's.  The pure-Python frame reader reads no send's fields
    ahead (``RemotingCommand.send``), so without the compiled module every read takes the task path."""
    reads = [_plain_read(3), _plain_read(10, oneway=(3,)), _plain_read(1), _read(), _plain_read(5, oneway=(0,))]
    (now_out, now_seen), (task_out, task_seen) = _both(tmp_path, reads, impl)
    assert _without_drawn_ids(_frames(now_out)) == _without_drawn_ids(_frames(task_out))
    assert now_seen["read"] == task_seen["read"]
    at_once = now_seen["at_once"]
    if impl == "python":
        assert all(out == b"" and inflight for out, inflight in at_once)
        return
    assert [bool(out) for out, _ in at_once] == [False, True, True, False, True]
    assert [inflight for _, inflight in at_once] == [True, False, False, True, False]
    assert [a.opaque for a in _frames(at_once[1][0])] == [500 + i for i in range(10) if i != 3]
    assert [a.opaque for a in _frames(at_once[4][0])] == [500 + i for i in range(1, 5)]
    # the task path answers nothing inside the callback
    assert all(out == b"" and inflight for out, inflight in task_seen["at_once"])


@pytest.mark.parametrize("impl", IMPLS)
def test_a_store_that_waits_for_its_fsync_takes_the_task_path(tmp_path: Path, impl: str) -> None:
    reads = [_plain_read(3), _plain_read(6)]
    (now_out, now_seen), (task_out, task_seen) = _both(tmp_path, reads, impl, {"flushDiskType": "SYNC_FLUSH"})
    assert [out for out, _ in now_seen["at_once"]] == [b"", b""]
    assert _frames(now_out) == _frames(task_out)
    assert now_seen["read"] == task_seen["read"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reads=st.lists(st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.binary(max_size=300),
                                         st.sampled_from(["", "k1", "k1 k2"])), min_size=1, max_size=12),
                      min_size=1, max_size=5))
def test_any_reads_of_sends_give_the_task_paths_answers_and_messages(tmp_path_factory: pytest.TempPathFactory,
                                                                     reads: list[list[tuple[int, bool, bytes, str]]]
                                                                     ) -> None:
    """Reads of single sends with queue ids in and out of range (4 queues: 4 and 5 are refused), oneway or not,
    bodies of 0-300 bytes, keys or none: answers (codes, remarks, msgIds, offsets) and messages read back equal
    the task path's."""
    opaque = 0
    data = []
    for read in reads:
        frames = []
        for queue_id, oneway, body, keys in read:
            opaque += 1
            props = {"UNIQ_KEY": f"H{opaque}"} | ({"KEYS": keys} if keys else {})
            frames.append(codec.encode(RemotingCommand(
                code=310, ext_fields={"a": "pg", "b": "ANS", "e": str(queue_id), "f": "0", "g": "5", "h": "0",
                                      "j": "0", "i": codec.properties_to_string(props)},
                body=body, opaque=opaque, flag=FLAG_ONEWAY if oneway else 0, language="GO")))
        data.append(b"".join(frames))
    (now_out, now_seen), (task_out, task_seen) = _both(tmp_path_factory.mktemp("h"), [_plain_read(1), *data], "c"
                                                       if speedups.compiled is not None else "python")
    assert _frames(now_out) == _frames(task_out)
    assert now_seen["read"] == task_seen["read"]


def test_a_client_that_stopped_reading_is_answered_by_the_task_path(tmp_path: Path) -> None:
    """With the connection's write buffer above its high-water mark the read goes to a task (which waits in
    ``drain``), not answered at once."""
    from rocketscope.broker.broker import Broker
    from rocketscope.broker.broker_config import load_broker_config
    from rocketscope.broker.remoting.server import _FrameProtocol

    async def run() -> tuple[bytes, bool]:
        b = Broker(load_broker_config({"brokerName": "p", "namesrvAddr": "", "grpcServerPort": "0",
                                       "listenPort": "0", "storePathRootDir": str(tmp_path), "traceOn": "false"}))
        await b.start()
        try:
            b.topics.create_if_absent("ANS", 4)
            transport = RecordingTransport()
            proto = _FrameProtocol(b.remoting.server)  # type: ignore[attr-defined]
            proto.connection_made(transport)
            proto.data_received(_plain_read(2))
            for _ in range(400):
                await asyncio.sleep(0.005)
                if not proto.inflight:
                    break
            proto.pause_writing()
            before = len(transport.out)
            proto.data_received(_plain_read(4))
            answered, inflight = bytes(transport.out[before:]), bool(proto.inflight)
            proto.resume_writing()
            return answered, inflight
        finally:
            await b.stop()

    answered, inflight = asyncio.run(run())
    assert answered == b"" and inflight


@pytest.mark.skipif(speedups.compiled is None, reason=f"{speedups.PURE_ENV} is set: the compiled module is not "
                    "loaded, and without it no read is answered inside the callback")
def test_a_failure_inside_the_callback_is_answered_as_the_task_path_answers_it(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    """A store error raised while the read is handled inside the callback: every non-oneway send answered
    SYSTEM_ERROR naming it, as ``dispatch_group`` answers a group whose handler raised."""
    from rocketscope.broker.broker import Broker

    real = Broker.put_plain_run
    calls = {"n": 0}

    def failing(self: Broker, stored: list[Any]) -> bool:
        calls["n"] += 1
        if calls["n"] == 2:  # the second read: the first is the task path's (the topic's name checked there)
            raise OSError("disk gone")
        return real(self, stored)

    monkeypatch.setattr(Broker, "put_plain_run", failing)
    seen: dict[str, Any] = {}
    asyncio.run(_serve(tmp_path, [_plain_read(2), _plain_read(3, oneway=(1,))], seen=seen))
    out, inflight = seen["at_once"][1]
    answers = _frames(out)
    assert not inflight
    assert [a.opaque for a in answers] == [500, 502]
    assert {a.code for a in answers} == {codec.ResponseCode.SYSTEM_ERROR}
    assert all("disk gone" in (a.remark or "") for a in answers)


SYNC_MASTER = {"brokerRole": "SYNC_MASTER", "inSyncReplicas": "2", "slaveTimeout": "300"}


def _slave_copies_each_append(b: Any) -> None:
    """From the first read on, a slave that reports the master's whole log one loop iteration after each append:
    what the HA link does (``notify_appended`` pumps the new records, the slave reports its end), without it."""
    from rocketscope.broker.ha.master import SlaveState

    rm = b.replication_master
    if 2 in rm.slaves:
        return
    state = rm.slaves[2] = SlaveState(2, "127.0.0.1:1", 0)

    def report() -> None:
        end = b.store.commit_log.max_offset
        if end > state.ack_offset:
            rm.acked(state, end)

    rm.notify_appended = lambda: asyncio.get_running_loop().call_soon(report)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_sync_master_answers_a_read_once_its_slave_has_it_as_the_task_path_does(tmp_path: Path, impl: str) -> None:
    """SYNC_MASTER with a slave that copies each append: plain reads are stored at once and
    held by a future, not a task, until the slave's report; then answered SUCCESS as the task path answers them.
    A read holding a delayed and a half message goes to a task."""
    reads = [_plain_read(3), _plain_read(10, oneway=(3,)), _read(), _plain_read(5, oneway=(0,))]
    (now_out, now_seen), (task_out, task_seen) = _both(tmp_path, reads, impl, SYNC_MASTER, _slave_copies_each_append)
    answers = _without_drawn_ids(_frames(now_out))
    assert answers == _without_drawn_ids(_frames(task_out))
    assert {a.code for a in answers} == {codec.ResponseCode.SUCCESS}
    assert now_seen["read"] == task_seen["read"]
    assert [inflight for _, inflight in now_seen["at_once"]] == [True] * 4  # none answered before its copy
    assert task_seen["tasks"] == [1, 1, 1, 1]
    assert now_seen["tasks"] == ([1, 0, 1, 0] if impl == "c" else [1, 1, 1, 1])


@pytest.mark.parametrize("impl", IMPLS)
def test_a_sync_master_without_its_slave_answers_flush_slave_timeout_as_the_task_path_does(tmp_path: Path,
                                                                                          impl: str) -> None:
    """No slave: after slaveTimeout (300 ms here) every send is answered FLUSH_SLAVE_TIMEOUT, the same answers as
    the task path's, and the messages are stored on the master all the same."""
    reads = [_plain_read(3), _plain_read(6, oneway=(2,))]
    (now_out, now_seen), (task_out, task_seen) = _both(tmp_path, reads, impl, SYNC_MASTER)
    answers = _frames(now_out)
    assert answers == _frames(task_out)
    assert [a.opaque for a in answers] == [500, 501, 502, 500, 501, 503, 504, 505]
    assert {a.code for a in answers} == {codec.ResponseCode.FLUSH_SLAVE_TIMEOUT}
    assert now_seen["read"] == task_seen["read"] and len(now_seen["read"]) == 9


@pytest.mark.parametrize("impl", IMPLS)
def test_a_sync_master_waiting_for_no_slave_answers_without_a_task(tmp_path: Path, impl: str) -> None:
    """inSyncReplicas 1: the master's copy is enough, so the answer is made while the read is handled (the
    callback runs before the put returns) and nothing stays in flight."""
    reads = [_plain_read(3), _plain_read(4)]
    conf = SYNC_MASTER | {"inSyncReplicas": "1"}
    (now_out, now_seen), (task_out, _task_seen) = _both(tmp_path, reads, impl, conf)
    assert _frames(now_out) == _frames(task_out)
    if impl == "c":
        assert now_seen["at_once"][1][1] is False and now_seen["tasks"][1] == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_a_dledger_leader_answers_a_read_once_committed_as_the_task_path_does(tmp_path: Path, impl: str) -> None:
    """A one-member DLedger group: plain reads are proposed inside the read's callback and answered from the
    commit callback, no task; a read holding a delayed and a half message goes to a task. Answers and messages
    equal the task path's."""
    from conftest import free_port

    conf = {"enableDLegerCommitLog": "true", "dLegerGroup": "ans", "dLegerPeers": f"n0-127.0.0.1:{free_port()}",
            "dLegerSelfId": "n0"}
    reads = [_plain_read(3), _plain_read(10, oneway=(3,)), _read(), _plain_read(5, oneway=(0,))]
    (now_out, now_seen), (task_out, task_seen) = _both(tmp_path, reads, impl, conf)
    # a DLedger member's own HA event records (commits, throttled by time) land between the sends' records
    # wherever the clock puts them, so offsets are compared through what they point at: each answer's offset
    # msgId names the record holding that send (its queue and queue offset), on both paths; the delayed and the
    # half message's records are in the timer's and the transactions' topics
    answers, reference = _without_drawn_ids(_frames(now_out)), _without_drawn_ids(_frames(task_out))
    for got, seen in ((answers, now_seen), (reference, task_seen)):
        at = {phy: (q, qoff) for q, qoff, phy, _body, _props in seen["read"]}
        pointed = [(at.get(int(a.fields.pop("msgId")[-16:], 16)), (int(a.fields["queueId"]),
                                                                  int(a.fields["queueOffset"]))) for a in got]
        assert sum(where is None for where, _ in pointed) == 2
        assert all(where == named for where, named in pointed if where is not None)
    assert answers == reference
    assert {a.code for a in answers} == {codec.ResponseCode.SUCCESS}
    without_offsets = lambda rows: [(q, qoff, body, props) for q, qoff, _phy, body, props in rows]  # noqa: E731
    assert without_offsets(now_seen["read"]) == without_offsets(task_seen["read"])
    assert task_seen["tasks"] == [1, 1, 1, 1]
    assert now_seen["tasks"] == ([1, 0, 1, 0] if impl == "c" else [1, 1, 1, 1])
