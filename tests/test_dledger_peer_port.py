"""DLedger's Raft port and links over framed TCP (broker/dledger/peer_port.py, peer_link.py, peer_wire.py).

In one process, on loopback: a ``PeerPort`` that records the batches it accepts and ``PeerLink``s or raw
sockets talking to it.  Ground truth is what the test sent: every message arrives, in order, exactly when
the hello carries the right group and secret (and, with mutual TLS, a client certificate of the CA);
damaged, truncated, foreign or silent connections are closed by the port (never a hang, never a crash)
and a good link still delivers afterwards.  The live group version (three brokers, a member with a wrong
secret, garbage thrown at a follower) is tests/test_e2e_dledger_peer_port.py.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from rocketscope.broker.dledger import peer_wire as wire
from rocketscope.broker.dledger.peer_link import PeerLink
from rocketscope.broker.dledger.peer_port import PeerPort
from rocketscope.broker.dledger.peer_wire import from_pb, to_pb
from rocketscope.broker.dledger.raft_codec import Batch
from rocketscope.broker.protocol import dledger_pb2
from rocketscope.broker.raft import Entry, EntryKind, Message, MsgType
from rocketscope.broker.security.certs import generate_dev_certs
from rocketscope.tls import ClientAuth, TlsClientConfig, TlsMode, TlsServerConfig

GROUP = "g1"


def app(i: int) -> Message:
    return Message(type=MsgType.APP, frm="n1", to="n0", term=3, log_term=3, index=i,
                   entries=[Entry(i + 1, 3, EntryKind.NORMAL, b"m%d" % i)], commit=i)


def header() -> dledger_pb2.RaftBatch:
    return dledger_pb2.RaftBatch(group=GROUP, sender="n1", sender_grpc_addr="127.0.0.1:1")


class Recorder:
    """The port's ``on_batch``: every message it was handed, in order."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []

    def __call__(self, batch: Batch) -> None:
        self.batches.append(batch)

    @property
    def messages(self) -> list[Message]:
        return [m for b in self.batches for m in b.messages]


async def until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.01)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 60))


async def started_port(rec: Recorder, **kw: object) -> PeerPort:
    port = PeerPort(GROUP, rec, **kw)  # type: ignore[arg-type]
    port.bind("127.0.0.1", 0)
    await port.start()
    return port


def test_frame_decoder_yields_the_same_payloads_however_the_bytes_are_cut() -> None:
    rng = random.Random(7)
    payloads = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) for _ in range(50)]
    stream = b"".join(wire.frame(p) for p in payloads)
    assert wire.FrameDecoder().feed(stream) == payloads
    for _ in range(20):
        dec, out, pos = wire.FrameDecoder(), [], 0
        while pos < len(stream):
            step = rng.randrange(1, 40)
            out += dec.feed(stream[pos:pos + step])
            pos += step
        assert out == payloads and dec.buffered == 0
    with pytest.raises(wire.WireError, match="longer than the maximum"):
        wire.FrameDecoder(100).feed(struct.pack(">I", 101))


def test_hello_round_trip_and_damage_named() -> None:
    raw = wire.hello("grp", "n2", "sekret")
    wire.check_preamble(raw[:5])
    (payload,) = wire.FrameDecoder().feed(raw[5:])
    assert wire.parse_hello(payload) == ("grp", "n2", "sekret")
    with pytest.raises(wire.WireError, match="secret field is cut short"):
        wire.parse_hello(payload[:-1])
    with pytest.raises(wire.WireError, match="after its fields"):
        wire.parse_hello(payload + b"x")
    with pytest.raises(wire.WireError, match="not the Raft peer protocol"):
        wire.check_preamble(b"PRI *")
    with pytest.raises(wire.WireError, match="version 9"):
        wire.check_preamble(wire.MAGIC + b"\x09")


def test_a_link_delivers_every_message_in_order_in_batches() -> None:
    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec)
        link = PeerLink("n0", f"127.0.0.1:{port.port}", header)
        link.start()
        try:
            await until(lambda: link.connected, "the link connects")
            sent = [app(i) for i in range(1000)]
            for m in sent:
                link.send(m)
            await until(lambda: len(rec.messages) >= len(sent), "every message arrives")
            assert rec.messages == sent
            assert all(b.group == GROUP and b.sender == "n1" for b in rec.batches)
            assert max(len(b.messages) for b in rec.batches) <= 64
            assert len(rec.batches) < len(sent), "messages sent in one loop iteration share frames"
        finally:
            await link.stop()
            await port.stop()

    run(body)


def test_a_link_reconnects_after_the_port_restarts_and_drops_the_stale_queue(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec)
        number = port.port
        link = PeerLink("n0", f"127.0.0.1:{number}", header)
        link.start()
        try:
            await until(lambda: link.connected, "the link connects")
            await port.stop()
            await until(lambda: not link.connected, "the link notices the port is gone")
            assert any("link to n0" in r.getMessage() and "down" in r.getMessage() for r in caplog.records)
            port = PeerPort(GROUP, rec)
            port.bind("127.0.0.1", number)
            await port.start()
            await until(lambda: link.connected, "the link reconnects")
            assert any("link to n0" in r.getMessage() and r.getMessage().endswith("up") for r in caplog.records)
            link.send(app(5))
            await until(lambda: rec.messages == [app(5)], "a message after the reconnect arrives")
        finally:
            await link.stop()
            await port.stop()

    run(body)


@pytest.mark.parametrize(("given", "why"), [("", "no peer secret"), ("guess", "a wrong peer secret")])
def test_a_member_without_the_secret_is_refused(given: str, why: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec, secret="right")
        bad = PeerLink("n0", f"127.0.0.1:{port.port}", header, TlsClientConfig(peer_secret=given))
        good = PeerLink("n0", f"127.0.0.1:{port.port}", header, TlsClientConfig(peer_secret="right"))
        bad.start()
        try:
            await until(lambda: any("refused our messages" in r.getMessage() for r in caplog.records),
                        "the bad link hears the refusal")
            for i in range(10):
                bad.send(app(i))
            await asyncio.sleep(0.2)
            assert not bad.connected and rec.batches == []
            refusal = next(r.getMessage() for r in caplog.records if "refused our messages" in r.getMessage())
            assert why in refusal and "internalPeerSecret" in refusal  # the text the port answered
            assert any(f"refused with {why}" in r.getMessage() for r in caplog.records)  # the port's own line
            good.start()
            await until(lambda: good.connected, "the member with the secret connects")
            good.send(app(1))
            await until(lambda: rec.messages == [app(1)], "the member with the secret is heard")
        finally:
            await bad.stop()
            await good.stop()
            await port.stop()

    run(body)


async def _exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data``, half-close, and read until the port closes the connection (TimeoutError if it never does)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        if writer.can_write_eof():
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), timeout)
    except (ConnectionResetError, BrokenPipeError):
        return b""
    finally:
        writer.close()


def _good_stream(messages: list[Message], secret: str = "") -> bytes:
    batch = header()
    batch.messages.extend(to_pb(m) for m in messages)
    return wire.hello(GROUP, "n1", secret) + wire.frame(batch.SerializeToString())


def test_bad_input_closes_the_connection_with_a_named_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    other = dledger_pb2.RaftBatch(group="other", sender="n1")
    other.messages.append(to_pb(app(1)))
    cases = {
        "not the Raft peer protocol": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "expected b'RSRF'": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "version 7": wire.MAGIC + b"\x07" + wire.frame(b""),
        "longer than the maximum": wire.MAGIC + bytes([wire.VERSION]) + struct.pack(">I", wire.MAX_FRAME + 1),
        "hello frame ends before its group": wire.MAGIC + bytes([wire.VERSION]) + wire.frame(b"\x00"),
        "group 'other' is not 'g1'": wire.hello("other", "n1", ""),
        "is not a RaftBatch": wire.hello(GROUP, "n1", "") + wire.frame(b"\xff\xff\xff\xff\x0f"),
        "a batch of group 'other'": wire.hello(GROUP, "n1", "") + wire.frame(other.SerializeToString()),
    }

    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec)
        try:
            for why, data in cases.items():
                before = port.refused
                answer = await _exchange(port.port, data)
                assert port.refused == before + 1, f"{why}: the port did not refuse {data[:20]!r}"
                assert any(why in r.getMessage() for r in caplog.records), f"no log line naming {why!r}"
                if "group 'other' is not" in why:
                    assert wire.parse_reply(wire.FrameDecoder().feed(answer)[0]).endswith("is not 'g1'")
            assert rec.batches == [], "nothing of a refused connection reached the node"
            # a connection that never says hello is closed after hello_timeout_s
            quiet = PeerPort(GROUP, rec, hello_timeout_s=0.3)
            quiet.bind("127.0.0.1", 0)
            await quiet.start()
            reader, writer = await asyncio.open_connection("127.0.0.1", quiet.port)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            await quiet.stop()
            assert any("no hello within 0.3 s" in r.getMessage() for r in caplog.records)
        finally:
            await port.stop()

    run(body)


def test_fuzz_random_and_damaged_streams_never_hang_and_good_links_still_deliver() -> None:
    rng = random.Random(20)
    good = _good_stream([app(i) for i in range(20)])

    def damaged() -> bytes:
        kind = rng.randrange(4)
        if kind == 0:  # random bytes, sometimes behind the real preamble
            noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
            return (wire.MAGIC + bytes([wire.VERSION]) if rng.random() < 0.5 else b"") + noise
        if kind == 1:  # a good stream cut anywhere
            return good[:rng.randrange(len(good))]
        if kind == 2:  # a good stream with bytes flipped
            data = bytearray(good)
            for _ in range(rng.randrange(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            return bytes(data)
        return good[:5] + struct.pack(">I", rng.randrange(1 << 32))  # a wild length

    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec)
        try:
            for _ in range(150):
                await _exchange(port.port, damaged())  # TimeoutError here = the port hung on it
            # whatever got through passed the group check (a member's own bytes): the port still serves
            rec.batches.clear()
            link = PeerLink("n0", f"127.0.0.1:{port.port}", header)
            link.start()
            await until(lambda: link.connected, "a good link connects after the fuzzing")
            sent = [app(i) for i in range(100)]
            for m in sent:
                link.send(m)
            await until(lambda: len(rec.messages) >= 100, "the good link's messages arrive")
            assert rec.messages == sent
            await link.stop()
        finally:
            await port.stop()

    run(body)


def _tls_pair(tmp: Path, mode: TlsMode) -> tuple[TlsServerConfig, TlsClientConfig, TlsClientConfig]:
    certs = generate_dev_certs(tmp)
    cert, key = certs.client_certs["client"]
    server = TlsServerConfig(mode=mode, cert_path=str(certs.server_cert), key_path=str(certs.server_key),
                             trust_cert_path=str(certs.ca_cert), need_client_auth=ClientAuth.REQUIRE,
                             internal_need_client_auth=ClientAuth.REQUIRE).for_internal()
    with_cert = TlsClientConfig(enabled=True, trust_cert_path=str(certs.ca_cert), cert_path=str(cert),
                                key_path=str(key))
    without_cert = TlsClientConfig(enabled=True, trust_cert_path=str(certs.ca_cert))
    return server, with_cert, without_cert


def test_mutual_tls_lets_in_only_a_client_certificate_of_the_ca(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    server, with_cert, without_cert = _tls_pair(tmp_path, TlsMode.ENFORCING)

    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec, tls=server)
        links = {name: PeerLink("n0", f"127.0.0.1:{port.port}", header, cfg)
                 for name, cfg in (("no cert", without_cert), ("plaintext", TlsClientConfig()))}
        ok = PeerLink("n0", f"127.0.0.1:{port.port}", header, with_cert)
        try:
            for link in links.values():
                link.start()
            await until(lambda: any("sent plaintext while tls.server.mode=enforcing" in r.getMessage()
                                    for r in caplog.records), "the plaintext link is refused")
            await until(lambda: any("failed before its hello" in r.getMessage() for r in caplog.records),
                        "the handshake without a client certificate fails")
            for link in links.values():
                link.send(app(9))
            ok.start()
            await until(lambda: ok.connected, "the link with a client certificate connects")
            ok.send(app(1))
            await until(lambda: bool(rec.batches), "the mutual-TLS link delivers")
            assert rec.messages == [app(1)], "only the link with a CA client certificate was heard"
            assert not any(link.connected for link in links.values())
        finally:
            for link in [*links.values(), ok]:
                await link.stop()
            await port.stop()

    run(body)


def test_permissive_tls_accepts_both_and_a_client_checks_the_server(tmp_path: Path) -> None:
    server, with_cert, _ = _tls_pair(tmp_path, TlsMode.PERMISSIVE)

    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec, tls=server)
        tls_link = PeerLink("n0", f"127.0.0.1:{port.port}", header, with_cert)
        plain_link = PeerLink("n0", f"127.0.0.1:{port.port}", header)
        try:
            tls_link.start()
            plain_link.start()
            await until(lambda: tls_link.connected and plain_link.connected, "both links connect")
            tls_link.send(app(1))
            plain_link.send(app(2))
            await until(lambda: len(rec.messages) == 2, "both deliver")
            assert sorted(m.index for m in rec.messages) == [1, 2]
        finally:
            await tls_link.stop()
            await plain_link.stop()
            await port.stop()
        # ground truth for the client side: a context without our CA refuses the server's certificate
        ctx = ssl.create_default_context()
        with pytest.raises(ssl.SSLCertVerificationError):
            port2 = await started_port(rec, tls=server)
            try:
                await asyncio.open_connection("127.0.0.1", port2.port, ssl=ctx, server_hostname="127.0.0.1")
            finally:
                await port2.stop()

    run(body)


def test_a_taken_port_fails_at_bind_naming_the_key() -> None:
    first = PeerPort(GROUP, Recorder())
    first.bind("127.0.0.1", 0)
    try:
        with pytest.raises(OSError, match=rf"config key dLegerPeers: cannot listen on 127.0.0.1:{first.port}: "
                                          "the port is in use"):
            PeerPort(GROUP, Recorder()).bind("127.0.0.1", first.port)
    finally:
        asyncio.run(first.stop())


@pytest.mark.parametrize("threaded", [True, False], ids=["writer-thread", "loop-writes"])
def test_a_stalled_peer_bounds_the_queue_and_the_link_resumes(threaded: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from rocketscope.broker.dledger import peer_link

    monkeypatch.setattr(peer_link, "THREAD_WRITER", threaded)
    blob = b"x" * 8192

    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec)
        link = PeerLink("n0", f"127.0.0.1:{port.port}", header)
        link.start()
        try:
            await until(lambda: link.connected and bool(port.conns), "the link connects")
            for c in port.conns:
                assert c.transport is not None
                c.transport.pause_reading()  # the peer stops reading: kernel buffers, then ours, fill up
            sent = [Message(type=MsgType.APP, frm="n1", to="n0", term=3, index=i,
                            entries=[Entry(i + 1, 3, EntryKind.NORMAL, blob)]) for i in range(12000)]
            for i in range(0, len(sent), 200):  # in rounds, as a leader's Readies would
                for m in sent[i:i + 200]:
                    link.send(m)
                await asyncio.sleep(0.005)
            assert link.dropped > 0, "12,000 x 8 KiB did not fill the socket, the writer and the queue"
            assert link.connected and len(link.queue) <= peer_link.QUEUE_LIMIT
            for c in port.conns:
                assert c.transport is not None
                c.transport.resume_reading()
            await until(lambda: len(rec.messages) == len(sent) - link.dropped, "everything not dropped arrives",
                        timeout=30)
            got = [m.index for m in rec.messages]
            assert got == sorted(got) and got[-1] == len(sent) - 1, "the oldest were dropped, order kept"
        finally:
            await link.stop()
            await port.stop()

    run(body)


def test_a_stranger_learns_no_group_name_before_the_secret() -> None:
    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec, secret="right")
        try:
            answer = await _exchange(port.port, wire.hello("guessed-group", "n9", ""))
            text = wire.parse_reply(wire.FrameDecoder().feed(answer)[0])
            assert "no peer secret" in text and GROUP not in text.replace("guessed-group", "")
        finally:
            await port.stop()

    run(body)


def test_add_pb_builds_in_place_exactly_what_to_pb_builds() -> None:
    """The links build their frames with ``add_pb`` (no copy through ``to_pb``); the bytes must be the same."""
    rng = random.Random(7)
    for _ in range(300):
        entries = [Entry(rng.randrange(1, 1 << 40), rng.randrange(0, 1 << 20), rng.choice(list(EntryKind)),
                         rng.randbytes(rng.randrange(0, 64))) for _ in range(rng.randrange(0, 4))]
        m = Message(rng.choice(list(MsgType)), "n0", "n1", rng.randrange(0, 99),
                    log_term=rng.choice([0, rng.randrange(1, 99)]), index=rng.choice([0, rng.randrange(1, 1 << 40)]),
                    entries=entries, commit=rng.choice([0, rng.randrange(1, 1 << 40)]), reject=rng.random() < 0.3,
                    reject_hint=rng.choice([0, rng.randrange(1, 999)]), force=rng.random() < 0.2)
        built = dledger_pb2.RaftBatch()
        wire.add_pb(built.messages, m)
        assert built.SerializeToString() == dledger_pb2.RaftBatch(messages=[to_pb(m)]).SerializeToString()
        assert from_pb(built.messages[0]) == m


def test_a_message_of_an_unknown_type_is_left_out_and_named_while_the_rest_arrive() -> None:
    """A newer member's message type (or a damaged enum) costs that message only, as ``from_pb``'s error did:
    the port keeps the connection, hands on the others and names the left-out one in ``Batch.bad``."""
    unknown = dledger_pb2.RaftMessage(type=42, frm="n1", to="n0", term=3)
    batch = header()
    batch.messages.extend([to_pb(app(1)), unknown, to_pb(app(2))])
    stream = wire.hello(GROUP, "n1", "") + wire.frame(batch.SerializeToString())

    async def body() -> None:
        rec = Recorder()
        port = await started_port(rec)
        try:
            await _exchange(port.port, stream)
            await until(lambda: len(rec.messages) == 2, "the two known messages arrive")
            assert rec.messages == [app(1), app(2)]
            assert rec.batches[0].bad == ["message 1: field type has unknown value 42"]
            assert port.refused == 0
        finally:
            await port.stop()

    run(body)
