"""Turn a name-server route into the MessageQueues a RocketMQ 5 client understands.

Clients only send to and receive from queues of brokerId 0 (the master or Raft leader);
its client-facing gRPC address becomes the queue's endpoints.  Which message types a
queue accepts comes from the topic's ``message.type`` attribute, as in RocketMQ 5;
topics without one accept every type (MIXED).

A broker set whose master is gone is served read-only by its live slave with the smallest
id.  With ``acting_master`` (slaveReadEnable on the broker answering, broker/slave_read.py)
that slave is reported as broker 0, as Apache RocketMQ's name server reports its "acting
master": the official clients receive only from queues of broker 0, so otherwise its queues
would be listed but never read.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketscope.broker.protocol import namesrv_pb2

PERM_READ, PERM_WRITE = 4, 2
ACCEPT = {
    "NORMAL": [pb.NORMAL],
    "FIFO": [pb.FIFO],
    "DELAY": [pb.DELAY],
    "TRANSACTION": [pb.TRANSACTION],
    "PRIORITY": [pb.PRIORITY],
    "LITE": [pb.LITE],
    "MIXED": [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}


def endpoints_of(address: str, *more: str) -> pb.Endpoints:
    """Endpoints of one or several addresses; the official client's gRPC channel then fails over
    between them by itself (pick_first), with no route refresh."""
    host = address.rpartition(":")[0]
    ep = pb.Endpoints(scheme=pb.IPv4 if host.replace(".", "").isdigit() else pb.DOMAIN_NAME)
    for addr in (address, *more):
        h, _, p = addr.rpartition(":")
        ep.addresses.add(host=h, port=int(p or 0))
    if len(ep.addresses) > 1 and ep.scheme == pb.DOMAIN_NAME:
        del ep.addresses[1:]  # the client refuses several domain names
    return ep


def queue_permission(qid: int, read_nums: int, write_nums: int, perm: int) -> int:
    readable = qid < read_nums and perm & PERM_READ
    writable = qid < write_nums and perm & PERM_WRITE
    if readable and writable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    if writable:
        return pb.WRITE
    return pb.NONE


def message_queues(topic: str, route: namesrv_pb2.TopicRouteData, namespace: str = "",
                   acting_master: bool = False) -> list[pb.MessageQueue]:
    accept = ACCEPT.get(route.attributes.get("message.type", "MIXED").upper(), ACCEPT["MIXED"])
    brokers = {bd.broker_name: bd for bd in route.broker_datas}
    out: list[pb.MessageQueue] = []
    for qd in route.queue_datas:
        bd = brokers.get(qd.broker_name)
        if bd is None:
            continue
        others: list[str] = []
        if bd.any_node_serves and bd.grpc_addrs:
            ordered = sorted(bd.grpc_addrs.items())
            broker_id, address, perm = 0, ordered[0][1], qd.perm
            others = [a for _, a in ordered[1:]]
        elif 0 in bd.grpc_addrs:
            broker_id, address, perm = 0, bd.grpc_addrs[0], qd.perm
        elif bd.grpc_addrs:  # no master: the smallest live id serves reads only
            broker_id = min(bd.grpc_addrs)
            address, perm = bd.grpc_addrs[broker_id], qd.perm & ~PERM_WRITE
        else:
            continue
        for qid in range(max(qd.read_queue_nums, qd.write_queue_nums)):
            permission = queue_permission(qid, qd.read_queue_nums, qd.write_queue_nums, perm)
            mq = pb.MessageQueue(id=qid, permission=permission)
            mq.topic.name = topic
            mq.topic.resource_namespace = namespace
            # the client receives only from broker 0 ("master"): a read-only slave is reported as 0 when it
            # acts for its master (slaveReadEnable), else with its own id (listed, not read)
            mq.broker.name = qd.broker_name
            mq.broker.id = 0 if acting_master else broker_id
            mq.broker.endpoints.CopyFrom(endpoints_of(address, *others))
            mq.accept_message_types.extend(accept)
            out.append(mq)
    return out

