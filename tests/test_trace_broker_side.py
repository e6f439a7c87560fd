"""Unit tests for the broker-side tracer with an in-memory append."""

from __future__ import annotations

import asyncio

from rocketscope.broker.store.record import StoredMessage
from rocketscope.trace.broker_side import BrokerTracer
from rocketscope.trace.codec import PubRecord, SubAfterRecord, SubBeforeRecord, decode
from rocketscope.trace.ids import parse_offset_msg_id


def _msg(topic="orders", msg_id="MID1", **props) -> StoredMessage:
    p = {"UNIQ_KEY": msg_id, "TAGS": "TagA", "KEYS": "k1"}
    p.update(props)
    return StoredMessage(topic=topic, queue_id=0, body=b"hello", properties=p, physical_offset=4096,
                         born_timestamp=1700000000000)


def _run(tracer: BrokerTracer, calls) -> list[tuple[str, str, list[str]]]:
    out: list[tuple[str, str, list[str]]] = []

    async def append(topic, body, keys, tag=""):
        out.append((topic, body, keys))

    tracer._append = append

    async def main():
        await tracer.start()
        calls(tracer)
        await tracer.stop()

    asyncio.run(main())
    return out


def _records(out):
    return [r for _, body, _ in out for r in decode(body)]


def test_pub_sub_records_written():
    t = BrokerTracer(append=None, region_id="R1", store_host="127.0.0.1:10911", flush_interval_s=0.01)
    m = _msg()

    def calls(t):
        t.on_stored(m, client_id="c", client_traced=False, cost_ms=3, status="PUT_OK")
        t.on_delivered("G1", m, attempt=1, request_id="req1", client_id="c", client_traced=False)
        t.on_expired("G1", m, request_id="req1", cost_ms=1000)
        t.on_delivered("G1", m, attempt=2, request_id="req2", client_id="c", client_traced=False)
        t.on_acked("G1", lambda: m, request_id="req2", cost_ms=5, client_id="c", client_traced=False)

    out = _run(t, calls)
    assert all(topic == "RMQ_SYS_TRACE_TOPIC" for topic, _, _ in out)
    assert any("MID1" in keys for _, _, keys in out)
    recs = _records(out)
    pub = [r for r in recs if isinstance(r, PubRecord)]
    assert len(pub) == 1 and pub[0].success and pub[0].topic == "orders" and pub[0].msg_type == 0
    assert parse_offset_msg_id(pub[0].offset_msg_id) == ("127.0.0.1", 10911, 4096)
    before = [r for r in recs if isinstance(r, SubBeforeRecord)]
    assert [b.retry_times for b in before] == [0, 1]
    after = [r for r in recs if isinstance(r, SubAfterRecord)]
    assert [(a.success, a.context_code) for a in after] == [(False, 1), (True, 0)]
    assert t.written == 5 and t.dropped == 0


def test_real_topic_msg_type_and_client_traced_skipped():
    t = BrokerTracer(append=None, region_id="R1", store_host="127.0.0.1:10911")
    half = _msg(topic="RMQ_SYS_TRANS_HALF_TOPIC", REAL_TOPIC="orders", __MSGTYPE="TRANSACTION")

    def calls(t):
        t.on_stored(half, client_id="c", client_traced=False, cost_ms=1, status="PUT_OK")
        t.on_stored(_msg(msg_id="X"), client_id="c", client_traced=True, cost_ms=1, status="PUT_OK")
        t.on_dead_lettered("G1", _msg(), attempts=16)

    recs = _records(_run(t, calls))
    assert len(recs) == 2
    assert recs[0].topic == "orders" and recs[0].msg_type == 1
    assert recs[1].topic == "%DLQ%G1"


def test_ack_of_an_instrumented_client_reads_nothing_back():
    """The broker reads an acked message back only to write its SubAfter: not for an instrumented client."""
    t = BrokerTracer(append=None, region_id="R1", store_host="127.0.0.1:10911")
    m = _msg()
    loads: list[str] = []

    def load(name: str):
        return lambda: (loads.append(name), m)[1]

    def calls(t):
        t.on_delivered("G1", m, attempt=1, request_id="traced", client_id="c", client_traced=True)
        t.on_acked("G1", load("traced"), request_id="traced", cost_ms=5, client_id="c", client_traced=True)
        t.on_delivered("G1", m, attempt=1, request_id="plain", client_id="c", client_traced=False)
        t.on_acked("G1", load("plain"), request_id="plain", cost_ms=5, client_id="c", client_traced=False)

    recs = _records(_run(t, calls))
    assert loads == ["plain"]
    assert [type(r).__name__ for r in recs] == ["SubBeforeRecord", "SubAfterRecord"]


def test_timeline_and_table_from_broker_records():
    from rocketscope.trace.cli import render_table
    from rocketscope.trace.timeline import build_timeline

    t = BrokerTracer(append=None, region_id="R1", store_host="127.0.0.1:10911")
    m = _msg()

    def calls(t):
        t.on_stored(m, client_id="c", client_traced=False, cost_ms=3, status="PUT_OK")
        for g in ("G1", "G2"):
            t.on_delivered(g, m, attempt=1, request_id=g + "r1", client_id="c", client_traced=False)
        t.on_expired("G1", m, request_id="G1r1", cost_ms=1000)
        t.on_delivered("G1", m, attempt=2, request_id="G1r2", client_id="c", client_traced=False)
        for r, g in (("G1r2", "G1"), ("G2r1", "G2")):
            t.on_acked(g, lambda: m, request_id=r, cost_ms=5, client_id="c", client_traced=False)

    tl = build_timeline("MID1", _records(_run(t, calls)))
    assert tl.producer is not None and tl.topic == "orders"
    groups = {g.group: g for g in tl.groups}
    assert len(groups["G1"].deliveries) == 2 and len(groups["G2"].deliveries) == 1
    text = render_table(tl)
    assert "Pub" in text and "G1" in text and "G2" in text
