"""Read a topic's queues from the brokers with the pull APIs (QueryOffset, PullMessage).

Shared by the Spark data source (executors pull one queue each) and the trace lookup
(which reads RMQ_SYS_HA_EVENTS around a message's store time).  Synchronous on
purpose: Spark's Python workers and ``asyncio.to_thread`` callers both want a plain
blocking generator.  Routes come from the name server; within a broker group the master
(broker id 0) is asked first, then the other members (DLedger followers forward).

Two back ends, one shape: RocketScope's gRPC APIs, or RocketMQ's remoting protocol
(rocketscope/remoting_client.py: GET_ROUTEINFO_BY_TOPIC, GET_MIN/MAX_OFFSET,
SEARCH_OFFSET_BY_TIMESTAMP, PULL_MESSAGE) for clusters that do not serve the gRPC ones, such
as Apache RocketMQ (its name server is remoting-only, its proxy answers UNIMPLEMENTED to
QueryOffset and PullMessage).  The name-server address chooses: ``remoting://host:port``,
``grpc://host:port``, or a bare address that tries gRPC and falls back to remoting.  Either way
:func:`pull_messages` yields v2 ``Message`` protobufs with the commit-log offset in
``COMMITLOG_OFFSET_PROPERTY``, and :class:`QueueRef` remembers the protocol, so Spark executors
never detect it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rocketscope.names import COMMITLOG_OFFSET_PROPERTY, READER_GROUP

PULL_GROUP = READER_GROUP


class NoRoute(LookupError):
    """The topic has no route on the name server."""


class Unreachable(ConnectionError):
    """No name server or no broker of a group answered."""


@dataclass(frozen=True)
class QueueRef:
    topic: str
    broker: str
    queue_id: int
    addrs: tuple[str, ...]
    protocol: str = "grpc"  # how ``addrs`` are spoken to: "grpc" or "remoting" (remoting_client.py)

    @property
    def key(self) -> str:
        return f"{self.topic}|{self.broker}|{self.queue_id}"


def _metadata() -> tuple[tuple[str, str], ...]:
    return (("x-mq-client-id", f"{READER_GROUP}-{uuid.uuid4().hex[:8]}"), ("x-mq-language", "PYTHON"))


def discover_queues(namesrv: str, topics: Sequence[str], timeout_s: float = 10.0) -> list[QueueRef]:
    """Every read queue of every topic, from the first name server that answers.

    The protocol comes from the address (``remoting://``, ``grpc://``; bare: gRPC, then
    remoting when no name server answers gRPC).  Raises ValueError for a malformed address.
    """
    from rocketscope import remoting_client as rc

    protocol, addrs = rc.split_namesrv(namesrv)
    if protocol == rc.AUTO:
        protocol = rc.remembered(addrs) or rc.AUTO
    if protocol == rc.REMOTING:
        return _discover_remoting(addrs, topics, timeout_s)
    try:
        out = _discover_grpc(addrs, topics, timeout_s)
    except Unreachable as grpc_exc:
        if protocol != rc.AUTO:
            raise
        try:
            out = _discover_remoting(addrs, topics, timeout_s)
        except Unreachable as exc:
            raise Unreachable(f"{grpc_exc}; over remoting: {exc}") from None
        rc.remember(addrs, rc.REMOTING)
        return out
    if protocol == rc.AUTO:
        rc.remember(addrs, rc.GRPC)
    return out


def _discover_grpc(addrs: Sequence[str], topics: Sequence[str], timeout_s: float) -> list[QueueRef]:
    import grpc

    from rocketscope.broker.protocol import namesrv_pb2, namesrv_pb2_grpc

    out: list[QueueRef] = []
    for topic in topics:
        errors: list[str] = []
        route = None
        for addr in addrs:
            with grpc.insecure_channel(addr) as ch:
                try:
                    resp = namesrv_pb2_grpc.NameServerStub(ch).GetRouteInfoByTopic(
                        namesrv_pb2.GetRouteRequest(topic=topic), timeout=timeout_s)
                except grpc.RpcError as exc:
                    errors.append(f"{addr}: {exc.code().name}")  # type: ignore[attr-defined]
                    continue
            if resp.status.code != 0:
                raise NoRoute(f"topic {topic} has no route on name server {addr} "
                              f"({resp.status.remark or 'not found'})")
            route = resp.route
            break
        if route is None:
            raise Unreachable(f"no name server answered ({'; '.join(errors) or 'none given'})")
        addrs_of: dict[str, tuple[str, ...]] = {}
        for bd in route.broker_datas:
            ordered = sorted(bd.grpc_addrs.items())  # the master (id 0) first
            addrs_of[bd.broker_name] = tuple(a for _, a in ordered if a)
        for qd in route.queue_datas:
            for qid in range(qd.read_queue_nums):
                out.append(QueueRef(topic, qd.broker_name, qid, addrs_of.get(qd.broker_name, ())))
    return out


def _discover_remoting(addrs: Sequence[str], topics: Sequence[str], timeout_s: float) -> list[QueueRef]:
    """Routes by GET_ROUTEINFO_BY_TOPIC; the queues' addresses are the brokers' remoting ones."""
    from rocketscope import remoting_client as rc

    out: list[QueueRef] = []
    with rc.Connections(timeout_s) as conns:
        for topic in topics:
            try:
                route = rc.route(conns, list(addrs), topic)
            except rc.RemotingUnreachable as exc:
                raise Unreachable(str(exc)) from None
            except rc.RemotingCallError as exc:
                raise Unreachable(f"name server {exc.addr} refused the route of {topic}: {exc}") from None
            if route is None:
                raise NoRoute(f"topic {topic} has no route on name server {';'.join(addrs)} (TOPIC_NOT_EXIST)")
            addrs_of = {str(bd.get("brokerName")): tuple(a for _, a in rc.broker_addrs(bd))
                        for bd in route.get("brokerDatas") or []}
            for qd in route.get("queueDatas") or []:
                broker = str(qd.get("brokerName"))
                for qid in range(int(qd.get("readQueueNums") or 0)):
                    out.append(QueueRef(topic, broker, qid, addrs_of.get(broker, ()), rc.REMOTING))
    return out


def _remoting(queue: QueueRef, timeout_s: float, fn: Any, conns: Any = None) -> Any:
    """Run ``fn(conns, addr)`` against the queue's brokers in order (master first), until one answers."""
    from rocketscope import remoting_client as rc

    own = conns is None
    conns = conns or rc.Connections(timeout_s)
    last: Exception | None = None
    try:
        for addr in queue.addrs:
            try:
                return fn(conns, addr)
            except (OSError, ValueError, rc.RemotingCallError) as exc:
                last = exc
    finally:
        if own:
            conns.close()
    raise Unreachable(f"no broker of {queue.broker} answered for {queue.topic} queue {queue.queue_id}: {last}")


def _call(queue: QueueRef, timeout_s: float, fn: Any, channels: dict[str, Any] | None = None) -> Any:
    """Run ``fn(stub)`` against the queue's brokers in order (master first), until one answers.

    ``channels`` (address -> open channel) lets a caller that makes many calls, like
    ``pull_messages``, reuse one channel per broker instead of connecting for every batch;
    the caller closes them.  Without it each call opens and closes its own channel.
    """
    import grpc
    from rocketmq.grpc_protocol import service_pb2_grpc

    last: Exception | None = None
    for addr in queue.addrs:
        ch = channels.get(addr) if channels is not None else None
        if ch is None:
            ch = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)])
            if channels is not None:
                channels[addr] = ch
        try:
            return fn(service_pb2_grpc.MessagingServiceStub(ch))
        except grpc.RpcError as exc:
            last = exc
        finally:
            if channels is None:
                ch.close()
    raise Unreachable(f"no broker of {queue.broker} answered for {queue.topic} queue {queue.queue_id}: {last}")


def _mq(queue: QueueRef) -> Any:
    from rocketmq.grpc_protocol import definition_pb2 as pb

    mq = pb.MessageQueue(id=queue.queue_id)
    mq.topic.name = queue.topic
    mq.broker.name = queue.broker
    return mq


def _query_offset(queue: QueueRef, timeout_s: float, policy: int, timestamp_ms: int | None = None) -> int:
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as svc

    req = svc.QueryOffsetRequest(message_queue=_mq(queue), query_offset_policy=policy)
    if timestamp_ms is not None:
        req.timestamp.FromMilliseconds(timestamp_ms)

    def ask(stub: Any) -> int:
        resp = stub.QueryOffset(req, metadata=_metadata(), timeout=timeout_s)
        if resp.status.code != pb.OK:
            raise Unreachable(f"broker {queue.broker} refused QueryOffset for {queue.topic} queue "
                              f"{queue.queue_id}: {resp.status.message}")
        return int(resp.offset)

    return _call(queue, timeout_s, ask)  # type: ignore[no-any-return]


def queue_bounds(queue: QueueRef, timeout_s: float = 10.0) -> tuple[int, int]:
    """(min, max) offsets of a queue; max is the offset the next message will get."""
    from rocketmq.grpc_protocol import definition_pb2 as pb

    if queue.protocol == "remoting":
        from rocketscope import remoting_client as rc

        return _remoting(queue, timeout_s, lambda c, a: (rc.min_offset(c, a, queue.topic, queue.queue_id),
                                                         rc.max_offset(c, a, queue.topic, queue.queue_id)))

    return _query_offset(queue, timeout_s, pb.BEGINNING), _query_offset(queue, timeout_s, pb.END)


def offset_at(queue: QueueRef, timestamp_ms: int, timeout_s: float = 10.0) -> int:
    """The first offset stored at or after ``timestamp_ms`` (the queue's end if none)."""
    from rocketmq.grpc_protocol import definition_pb2 as pb

    if queue.protocol == "remoting":
        from rocketscope import remoting_client as rc

        return _remoting(queue, timeout_s,  # type: ignore[no-any-return]
                         lambda c, a: rc.search_offset(c, a, queue.topic, queue.queue_id, timestamp_ms))

    return _query_offset(queue, timeout_s, pb.TIMESTAMP, timestamp_ms)


def pull_messages(queue: QueueRef, start: int, end: int, batch_size: int = 256,
                  timeout_s: float = 10.0) -> Iterator[Any]:
    """The v2 Messages at offsets [start, end) of one queue, pulled in batches over one channel per broker."""
    if queue.protocol == "remoting":
        yield from _pull_range_remoting(queue, start, end, batch_size, timeout_s)
        return
    channels: dict[str, Any] = {}
    try:
        yield from _pull_range(queue, start, end, batch_size, timeout_s, _metadata(), channels)
    finally:
        for ch in channels.values():
            ch.close()


def _pull_range(queue: QueueRef, offset: int, end: int, batch_size: int, timeout_s: float,
                md: tuple[tuple[str, str], ...], channels: dict[str, Any]) -> Iterator[Any]:
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as svc

    while offset < end:
        req = svc.PullMessageRequest(message_queue=_mq(queue), offset=offset,
                                     batch_size=min(batch_size, end - offset))
        req.group.name = PULL_GROUP
        req.filter_expression.type = pb.TAG
        req.filter_expression.expression = "*"
        responses = _call(queue, timeout_s, lambda stub, r=req: list(stub.PullMessage(r, metadata=md,
                                                                                      timeout=timeout_s)),
                          channels)
        next_offset = offset
        for resp in responses:
            kind = resp.WhichOneof("content")
            if kind == "status":
                code = resp.status.code
                if code not in (pb.OK, pb.MESSAGE_NOT_FOUND, pb.ILLEGAL_OFFSET):
                    raise Unreachable(f"PullMessage {queue.topic}/{queue.broker}/{queue.queue_id} at {offset}: "
                                      f"{pb.Code.Name(code)} {resp.status.message}")
            elif kind == "message":
                if resp.message.system_properties.queue_offset < end:
                    yield resp.message
            elif kind == "next_offset":
                next_offset = resp.next_offset
        if next_offset <= offset:
            break  # nothing more below ``end`` (a truncated or shrinking queue): stop rather than spin
        offset = next_offset


def _pull_range_remoting(queue: QueueRef, offset: int, end: int, batch_size: int,
                         timeout_s: float) -> Iterator[Any]:
    """PULL_MESSAGE in batches over one connection per broker.  A range the broker no longer has
    (PULL_OFFSET_MOVED: retention deleted it) is skipped to its new minimum, as the gRPC path's
    ILLEGAL_OFFSET is."""
    from rocketscope import remoting_client as rc

    with rc.Connections(timeout_s) as conns:
        while offset < end:
            res = _remoting(queue, timeout_s, lambda c, a, o=offset: rc.pull(
                c, a, PULL_GROUP, queue.topic, queue.queue_id, o, min(batch_size, end - o)), conns)
            for m in res.messages:
                if offset <= m.queue_offset < end:
                    yield rc.to_v2(m, COMMITLOG_OFFSET_PROPERTY)
            if res.next_offset <= offset:
                break  # nothing more below ``end``: stop rather than spin
            offset = res.next_offset
