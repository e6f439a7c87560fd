"""Remoting front door, end to end: a real name server and broker, Apache's Go client v2, raw frames.

Ground truth is what the tests themselves sent (bodies they numbered, offsets they read
before), compared with what Apache's Go client and the official gRPC client receive.
The broker runs with every delay level at 1 s, so a redelivery takes a second, not 10.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import LocalCluster, wait_until
from go_clients import rmqgo, run_go, summary
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rmq import drain, message, producer, simple_consumer

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import (
    JSON,
    ROCKETMQ,
    BatchEntry,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_messages,
    encode,
    encode_batch,
    properties_to_string,
)

pytestmark = pytest.mark.e2e
IDLE_S = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    rmqgo()  # build (or skip) before any process starts
    c = LocalCluster(tmp_path_factory.mktemp("remoting"))
    try:
        c.start_namesrv(conf=lambda i: {"serverChannelMaxIdleTimeSeconds": IDLE_S})
        c.start_broker("broker-a", serverChannelMaxIdleTimeSeconds=IDLE_S, messageDelayLevel=" ".join(["1s"] * 18))
        yield c
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.stop()


@pytest.fixture(autouse=True)
def _logs_on_failure(request: pytest.FixtureRequest, cluster: LocalCluster) -> Iterator[None]:
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(cluster.logs())


def topic(c: LocalCluster, name: str, queues: int = 4) -> str:
    c.admin("updateTopic", "-t", name, "-r", str(queues), "-w", str(queues))
    with RemotingClient(c.namesrv_addr.split(";")[0]) as ns:
        wait_until(lambda: ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": name}).code == 0,
                   what=f"route of {name}")
    return name


def broker_addr(c: LocalCluster) -> str:
    return c.brokers["broker-a"].admin_addr


def max_offsets(c: LocalCluster, name: str, queues: int = 4) -> list[int]:
    with RemotingClient(broker_addr(c)) as b:
        return [int(b.invoke(RequestCode.GET_MAX_OFFSET, {"topic": name, "queueId": str(q)}).fields["offset"])
                for q in range(queues)]


# ------------------------------------------------------------------ name server
@pytest.mark.parametrize("stype", [JSON, ROCKETMQ])
def test_name_server_answers_routes_cluster_and_topics(cluster: LocalCluster, stype: int) -> None:
    name = topic(cluster, f"RouteT{stype}", queues=3)
    with RemotingClient(cluster.namesrv_addr) as ns:
        resp = ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": name}, serialize_type=stype)
        assert resp.code == ResponseCode.SUCCESS and resp.serialize_type == stype
        route = json.loads(resp.body)
        assert b" " not in resp.body  # compact: the Go client's route parser is whitespace-sensitive
        assert route["queueDatas"] == [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 3, "topicSysFlag": 0,
                                        "writeQueueNums": 3}]
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": broker_addr(cluster)}
        info = json.loads(ns.invoke(RequestCode.GET_BROKER_CLUSTER_INFO, serialize_type=stype).body)
        assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": broker_addr(cluster)}
        topics = json.loads(ns.invoke(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, serialize_type=stype).body)
        assert name in topics["topicList"]
        miss = ns.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"}, serialize_type=stype)
        assert miss.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in (miss.remark or "")
    # the same port still serves gRPC: the admin CLI (gRPC) lists the broker through it
    assert any(b["brokerName"] == "broker-a" for b in cluster.admin_json("clusterList"))


# -------------------------------------------------------------------- bad input
def _closed(sock: socket.socket, within: float) -> bool:
    """True when the server closes the connection within ``within`` s (reads whatever it sent first)."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("which", ["namesrv", "broker"])
def test_bad_frames_get_a_named_answer_or_a_closed_connection(cluster: LocalCluster, which: str) -> None:
    addr = cluster.namesrv_addr if which == "namesrv" else broker_addr(cluster)
    with RemotingClient(addr) as c:
        unknown = c.invoke(9999)
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "9999" in (unknown.remark or "")
        missing = c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC if which == "namesrv" else RequestCode.GET_MAX_OFFSET,
                           {"queueId": "0"})
        assert missing.code == ResponseCode.SYSTEM_ERROR and "<topic>" in (missing.remark or "")
        assert c.invoke(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER if which == "namesrv"
                        else RequestCode.GET_MIN_OFFSET, {"topic": "x", "queueId": "0"}).code == 0  # still usable
    with RemotingClient(addr) as c:  # a header that is not JSON: answered, then closed
        c.send_raw(struct.pack(">ii", 4 + 9, 9) + b"not json!")
        resp = c.read_frame()
        assert resp.code == ResponseCode.SYSTEM_ERROR and "header is not JSON" in (resp.remark or "")
        assert _closed(c.sock, 10)
    with RemotingClient(addr) as c:  # oversize: answered, then closed, without reading the announced bytes
        c.send_raw(struct.pack(">i", 0x01FFFFFF) + b"\x00" * 64)
        resp = c.read_frame()
        assert "exceeds the maximum frame size" in (resp.remark or "")
        assert _closed(c.sock, 10)
    with RemotingClient(addr) as c:  # a length that lies (more than is sent): closed once the frame stalls
        c.send_raw(struct.pack(">i", 1000) + b"\x00\x00\x00\x02{}")
        started = time.monotonic()
        assert _closed(c.sock, IDLE_S + 15)
        assert time.monotonic() - started >= IDLE_S - 0.5
    with RemotingClient(addr) as c:  # the server is fine afterwards
        assert c.invoke(9998).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_a_malformed_send_writes_nothing(cluster: LocalCluster) -> None:
    name = topic(cluster, "BadSendT")
    before = max_offsets(cluster, name)
    good = encode_batch([BatchEntry(b"one", 0, {"UNIQ_KEY": "A1"}), BatchEntry(b"two", 0, {"UNIQ_KEY": "A2"})])
    torn = good[:-3]  # the second record's properties are cut
    header = {"a": "g", "b": name, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0", "m": "true"}
    with RemotingClient(broker_addr(cluster)) as b:
        resp = b.invoke(RequestCode.SEND_BATCH_MESSAGE, header, torn)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "batch body" in (resp.remark or "")
        no_group = dict(header)
        del no_group["a"]
        resp = b.invoke(RequestCode.SEND_BATCH_MESSAGE, no_group, good)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "<producerGroup>" in (resp.remark or "")
        resp = b.invoke(RequestCode.SEND_MESSAGE_V2, {**header, "m": "false", "f": "1"}, b"not zlib")
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "inflate" in (resp.remark or "")
    assert max_offsets(cluster, name) == before
    with RemotingClient(broker_addr(cluster)) as b:
        ok = b.invoke(RequestCode.SEND_BATCH_MESSAGE, header, good)
        assert ok.code == 0 and len(ok.fields["msgId"].split(",")) == 2
    assert sum(max_offsets(cluster, name)) == sum(before) + 2



def test_a_half_message_waits_for_its_commit_and_a_delayed_one_for_its_time(cluster: LocalCluster) -> None:
    """Raw SEND_MESSAGE_V2 frames: a half message (TRAN_MSG) reaches its topic only when END_TRANSACTION
    commits it, a message with TIMER_DELAY_MS only at its time (ground truth: the topic's max offset and
    the clock; the send path carries both as the broker's SendKind, broker/sends.py)."""
    name = topic(cluster, "HalfDelayT", queues=1)
    before = max_offsets(cluster, name, 1)[0]
    header = {"a": "g", "b": name, "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": str(int(time.time() * 1000)),
              "h": "0", "m": "false"}
    with RemotingClient(broker_addr(cluster)) as b:
        half = b.invoke(RequestCode.SEND_MESSAGE_V2, {**header, "i": properties_to_string(
            {"UNIQ_KEY": "HALF1", "TRAN_MSG": "true", "PGROUP": "g"})}, b"half")
        assert half.code == 0 and half.fields.get("transactionId"), (half.code, half.remark)
        due = time.time() + 5
        delayed = b.invoke(RequestCode.SEND_MESSAGE_V2, {**header, "i": properties_to_string(
            {"UNIQ_KEY": "LATER1", "TIMER_DELAY_MS": "5000"})}, b"later")
        assert delayed.code == 0, (delayed.code, delayed.remark)
        assert max_offsets(cluster, name, 1)[0] == before  # neither is in the topic yet
        end = b.invoke(RequestCode.END_TRANSACTION, {
            "producerGroup": "g", "commitOrRollback": "8", "transactionId": half.fields["transactionId"],
            "msgId": "HALF1", "fromTransactionCheck": "false", "tranStateTableOffset": "0",
            "commitLogOffset": "0"})
        assert end.code == 0, (end.code, end.remark)
    wait_until(lambda: max_offsets(cluster, name, 1)[0] >= before + 1, timeout=10, what="the committed half")
    assert max_offsets(cluster, name, 1)[0] == before + 1 or time.time() >= due
    wait_until(lambda: max_offsets(cluster, name, 1)[0] == before + 2, timeout=30, what="the delayed message")
    assert time.time() >= due - 1.0  # the timer delivers in its slot (timerPrecisionMs, 1 s by default)
    with RemotingClient(broker_addr(cluster)) as b:
        resp = b.invoke(RequestCode.PULL_MESSAGE, {"consumerGroup": "HalfDelayG", "topic": name, "queueId": "0",
                                                   "queueOffset": str(before), "maxMsgNums": "8", "sysFlag": "4",
                                                   "commitOffset": "0", "suspendTimeoutMillis": "0",
                                                   "subscription": "*", "subVersion": "0", "expressionType": "TAG"})
    assert resp.code == 0, (resp.code, resp.remark)
    assert [m.body for m in decode_messages(resp.body)] == [b"half", b"later"]


frames = st.one_of(
    st.binary(min_size=1, max_size=64).map(lambda b: struct.pack(">i", len(b)) + b),
    st.tuples(st.integers(0, 40), st.binary(max_size=64)).map(
        lambda t: struct.pack(">ii", 4 + t[0] + len(t[1]), (1 << 24) | t[0]) + t[1][:t[0]] + t[1]),
    st.builds(lambda code, ext: encode(RemotingCommand(code=code, ext_fields=ext)),
        st.sampled_from([10, 11, 12, 14, 15, 29, 30, 31, 33, 34, 35, 36, 37, 38, 41, 42, 310, 320, 361]),
        st.dictionaries(st.sampled_from(["a", "b", "e", "topic", "queueId", "consumerGroup", "offset", "f", "m",
                                         "queueOffset", "maxMsgNums", "sysFlag", "group", "key", "maxNum"]),
                        st.sampled_from(["", "-1", "0", "1", "x", "FuzzT", "99999999999999999999", "true"]),
                        max_size=8)),
)


def _fuzz_one(cluster: LocalCluster, frame: bytes) -> None:
    """One frame: an answer or a close (a frame cut short waits out the IDLE_S idle close), then the
    broker still answers a fresh connection."""
    with RemotingClient(broker_addr(cluster), timeout_s=IDLE_S + 15) as c:
        c.send_raw(frame)
        try:
            resp = c.read_frame()
            assert resp.is_response
        except ConnectionError:
            pass  # closed: a frame RocketMQ would also drop
        except TimeoutError:
            raise AssertionError(f"no answer and no close for {frame[:80]!r}") from None
    with RemotingClient(broker_addr(cluster)) as c:
        assert c.invoke(9998).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=frames)
def test_fuzzed_frames_never_crash_or_hang_the_broker(cluster: LocalCluster, frame: bytes) -> None:
    """15 frames of the generator (about 10 s; 60 took 39 s, frames cut short waiting out the idle close);
    the 60 are the long test below."""
    _fuzz_one(cluster, frame)


@pytest.mark.long
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=frames)
def test_fuzzed_frames_never_crash_or_hang_the_broker_full(cluster: LocalCluster, frame: bytes) -> None:
    """Long (about 40 s): 60 frames of the same generator.  Run:
    .venv/bin/pytest -q tests/test_remoting_e2e.py -m long -k fuzzed"""
    _fuzz_one(cluster, frame)


# ---------------------------------------------------------------- Go client v2
def test_go_client_produces_sync_and_batch_and_a_push_consumer_gets_everything(cluster: LocalCluster) -> None:
    name = topic(cluster, "GoT")
    ns = cluster.namesrv_addr
    single = run_go("produce", "-ns", ns, "-topic", name, "-n", "20", "-tag", "TagA")
    assert summary(single)["sent"] == 20, single
    batch = run_go("produce", "-ns", ns, "-topic", name, "-n", "20", "-batch", "10", "-tag", "TagA")
    assert summary(batch)["sent"] == 20, batch
    sent_offsets = {e["offsetMsgId"] for e in single if e["event"] == "sent"}
    assert len(sent_offsets) == 20  # offset msgIds are distinct and name this broker
    assert all(e["broker"] == "broker-a" for e in single + batch if e["event"] == "sent")
    assert sum(max_offsets(cluster, name)) == 40
    got = run_go("consume", "-ns", ns, "-topic", name, "-group", "GoGroup", "-n", "40", "-timeout", "90",
                 timeout=150)
    bodies = sorted(e["body"] for e in got if e["event"] == "received")
    assert sorted(set(bodies)) == sorted(f"go-{i}" for i in range(20)) and len(set(bodies)) == 20
    assert len(bodies) == 40  # 20 sync + 20 batched, "go-<i>" each
    assert {e["tags"] for e in got if e["event"] == "received"} == {"TagA"}
    # the group's offsets were committed over remoting: a second run of the group finds nothing new
    again = run_go("consume", "-ns", ns, "-topic", name, "-group", "GoGroup", "-n", "1", "-timeout", "8")
    assert summary(again)["received"] == 0, again


def test_one_broker_core_go_to_grpc_and_grpc_to_go(cluster: LocalCluster) -> None:
    name = topic(cluster, "CrossT")
    endpoint = cluster.brokers["broker-a"].endpoint
    sent = run_go("produce", "-ns", cluster.namesrv_addr, "-topic", name, "-n", "10", "-tag", "FromGo")
    go_ids = {e["msgId"] for e in sent if e["event"] == "sent"}
    assert len(go_ids) == 10
    with simple_consumer(endpoint, "GrpcReader", name) as consumer:
        got = drain(consumer, 10, timeout=60)
    assert {m.message_id for m in got} == go_ids
    assert {m.body.decode() for m in got} == {f"go-{i}" for i in range(10)}
    assert {m.tag for m in got} == {"FromGo"}
    assert {tuple(m.keys) for m in got} == {(f"k{i}",) for i in range(10)}
    with producer(endpoint, name) as p:
        grpc_ids = {p.send(message(name, f"py-{i}".encode(), tag="FromPy", keys=[f"pk{i}"])).message_id
                    for i in range(10)}
    out = run_go("consume", "-ns", cluster.namesrv_addr, "-topic", name, "-group", "GoReader", "-n", "20",
                 "-timeout", "90", timeout=150)
    recv = [e for e in out if e["event"] == "received"]
    assert {e["msgId"] for e in recv} == go_ids | grpc_ids
    py = [e for e in recv if e["body"].startswith("py-")]
    assert {e["tags"] for e in py} == {"FromPy"} and {e["keys"] for e in py} == {f"pk{i}" for i in range(10)}


def test_a_failed_message_comes_back_through_the_retry_topic(cluster: LocalCluster) -> None:
    name = topic(cluster, "RetryT", queues=1)
    # the broker creates a group's retry topic at its first heartbeat, after the Go client's first rebalance
    # asked for its route; created now, the redelivery is not held up until the client's next rebalance (20 s)
    topic(cluster, "%RETRY%RetryGroup", queues=1)
    run_go("produce", "-ns", cluster.namesrv_addr, "-topic", name, "-n", "1")
    out = run_go("consume", "-ns", cluster.namesrv_addr, "-topic", name, "-group", "RetryGroup", "-n", "1",
                 "-fail-first", "1", "-timeout", "90", timeout=150)
    failed = [e for e in out if e["event"] == "retry_later"]
    redelivered = [e for e in out if e["event"] == "received"]
    assert len(failed) == 1 and failed[0]["reconsumeTimes"] == 0
    assert [(e["msgId"], e["body"], e["reconsumeTimes"]) for e in redelivered] == [
        (failed[0]["msgId"], "go-0", 1)]


# ----------------------------------------------------------- pull long polling
def test_pull_is_held_until_a_message_arrives(cluster: LocalCluster) -> None:
    name = topic(cluster, "HoldT", queues=1)
    with RemotingClient(broker_addr(cluster), timeout_s=30) as c:
        pull = {"consumerGroup": "HoldGroup", "topic": name, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
                "sysFlag": str(2 | 4), "commitOffset": "0", "suspendTimeoutMillis": "20000", "subscription": "*",
                "subVersion": "0", "expressionType": "TAG"}
        empty = c.invoke(RequestCode.PULL_MESSAGE, {**pull, "suspendTimeoutMillis": "1000"})
        assert empty.code == ResponseCode.PULL_NOT_FOUND
        assert {k: empty.fields[k] for k in ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId")} == {
            "nextBeginOffset": "0", "minOffset": "0", "maxOffset": "0", "suggestWhichBrokerId": "0"}
        delay = 1.5

        def send_later() -> None:
            time.sleep(delay)
            with RemotingClient(broker_addr(cluster)) as s:
                s.invoke(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": name, "c": "TBW102", "d": "4", "e": "0",
                                                       "f": "0", "g": "0", "h": "0",
                                                       "i": properties_to_string({"UNIQ_KEY": "HOLD1"})}, b"held")

        t = threading.Thread(target=send_later)
        started = time.monotonic()
        t.start()
        resp = c.invoke(RequestCode.PULL_MESSAGE, pull)
        waited = time.monotonic() - started
        t.join()
    assert resp.code == ResponseCode.SUCCESS and resp.remark == "FOUND"
    assert delay - 0.1 <= waited < 15  # answered when the message came, long before the 20 s suspension
    (msg,) = decode_messages(resp.body)
    assert (msg.body, msg.topic, msg.queue_offset, msg.properties["UNIQ_KEY"]) == (b"held", name, 0, "HOLD1")
    assert resp.fields["nextBeginOffset"] == "1"


def test_offsets_and_queries_over_remoting(cluster: LocalCluster) -> None:
    name = topic(cluster, "OffT", queues=1)
    with RemotingClient(broker_addr(cluster)) as c:
        ids = []
        for i in range(3):
            r = c.invoke(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": name, "c": "TBW102", "d": "4", "e": "0",
                                                       "f": "0", "g": str(int(time.time() * 1000)), "h": "0",
                                                       "i": properties_to_string({"UNIQ_KEY": f"Q{i}",
                                                                                  "KEYS": f"key{i}"})},
                         f"m{i}".encode())
            assert r.code == 0 and r.fields["queueOffset"] == str(i)
            ids.append(r.fields["msgId"])
        q = {"consumerGroup": "OffGroup", "topic": name, "queueId": "0"}
        assert c.invoke(RequestCode.QUERY_CONSUMER_OFFSET, q).fields["offset"] == "0"  # never trimmed: start at 0
        c.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "2"})
        wait_until(lambda: c.invoke(RequestCode.QUERY_CONSUMER_OFFSET, q).fields["offset"] == "2",
                   what="committed offset 2")
        assert c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": name, "queueId": "0"}).fields["offset"] == "3"
        assert c.invoke(RequestCode.GET_MIN_OFFSET, {"topic": name, "queueId": "0"}).fields["offset"] == "0"
        view = c.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(int(ids[1][-16:], 16))})
        assert [m.body for m in decode_messages(view.body)] == [b"m1"]
        found = c.invoke(RequestCode.QUERY_MESSAGE, {"topic": name, "key": "key2", "maxNum": "32",
                                                     "beginTimestamp": "0", "endTimestamp": str(1 << 60)})
        assert found.code == 0 and [m.body for m in decode_messages(found.body)] == [b"m2"]
        assert int(found.fields["indexLastUpdatePhyoffset"]) > 0
    # the offset committed over remoting is the group's offset for gRPC readers too: one core
    with simple_consumer(cluster.brokers["broker-a"].endpoint, "OffGroup", name) as consumer:
        got = drain(consumer, 1, timeout=30)
    assert [m.body for m in got] == [b"m2"]


def test_go_binary_is_built_from_tests_clients_go() -> None:
    assert Path(rmqgo()).is_file()
