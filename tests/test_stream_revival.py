"""Route variants for a producer without a Telemetry stream keep two live members (issue 15).

Session 9's chaos run (DLedger seed 7, docs/CHAOS.md) had the writer answer a producer that
had lost its stream, while one of three members was down, with endpoints naming one member
only (the other live one "left out" so the client would open a stream).  The official client
sends on the channel of the endpoints its route names, and pick_first fails over only among
that channel's addresses: when that one member was killed next, 270 sends failed for 5 s
although a new leader had been elected at once.  broker/stream_revival.py now never leaves
fewer than two live members.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product

import grpc
import pytest
from cluster import LocalCluster, cluster_with_namesrv, start_dledger_group, wait_until
from conftest import failed_call
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from test_failover_client_visible import leader_index

from rocketscope.broker.stream_revival import StreamRevival

TOPIC = "TopicRevival"
A, B, C, D = ("127.0.0.1", 1001), ("127.0.0.1", 1002), ("127.0.0.1", 1003), ("127.0.0.1", 1004)


@pytest.mark.parametrize(("live", "gone"), [
    ([A, B, C], []), ([A, B, C], [D]), ([A, B, C, D], []), ([A, B], []), ([A, B], [C]), ([A, B], [C, D]), ([A], [B, C]),
])
def test_every_variant_keeps_every_live_member_but_at_most_one(live: list, gone: list) -> None:
    variants = [StreamRevival.variant(live, gone, k) for k in range(12)]
    for v in variants:
        kept = [a for a in v if a in live]
        assert len(kept) >= min(2, len(live)), f"variant {v} of {live} keeps {kept}"
        assert len(kept) >= len(live) - 1
        assert set(v) <= set(live) | set(gone)
    if len(live) >= 3 or (len(live) == 2 and gone):  # a set the client has not seen, so it opens a stream
        assert any(v != live for v in variants)
        assert {tuple(v) for v in variants} != {tuple(live)}


def test_two_live_members_without_a_gone_one_get_no_narrower_route() -> None:
    for k, live in product(range(6), ([A, B], [A])):
        assert StreamRevival.variant(live, [], k) == live


@pytest.fixture()
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("revival"), lambda: failed_call(request)) as c:
        yield c


def _route(endpoint: str, client_id: str) -> svc.QueryRouteResponse:
    req = svc.QueryRouteRequest()
    req.topic.name = TOPIC
    with grpc.insecure_channel(endpoint) as ch:
        return svc_grpc.MessagingServiceStub(ch).QueryRoute(req, metadata=[("x-mq-client-id", client_id)], timeout=5)


def _endpoint_sets(resp: svc.QueryRouteResponse) -> set[tuple[str, ...]]:
    return {tuple(sorted(f"{a.host}:{a.port}" for a in mq.broker.endpoints.addresses)) for mq in resp.message_queues}


@pytest.mark.e2e
def test_producer_without_stream_gets_both_live_members_while_a_third_is_down(cluster: LocalCluster) -> None:
    """A real DLedger group of three, one follower killed: the route a stream-less producer gets
    from the writer names a set it has not seen that still holds both live members."""
    c = cluster
    nodes = start_dledger_group(c, "broker-rv")
    (lead,) = wait_until(lambda: leader_index(c, nodes), timeout=60, what="a leader")
    c.admin("updateTopic", "-b", nodes[lead].admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
    everyone = tuple(sorted(n.endpoint for n in nodes))
    wait_until(lambda: _endpoint_sets(_route(nodes[lead].endpoint, "anyone")) == {everyone}, timeout=60,
               what="the route naming all three members")
    down = next(i for i in range(3) if i != lead)
    nodes[down].proc.kill9()
    live = tuple(sorted(n.endpoint for i, n in enumerate(nodes) if i != down))
    wait_until(lambda: _endpoint_sets(_route(nodes[lead].endpoint, "anyone")) == {live}, timeout=60,
               what="the route naming the two live members")

    producer = "revival-producer-1"
    with grpc.insecure_channel(nodes[lead].endpoint) as ch:
        resp = svc_grpc.MessagingServiceStub(ch).Heartbeat(svc.HeartbeatRequest(client_type=pb.PRODUCER),
                                                           metadata=[("x-mq-client-id", producer)], timeout=5)
    assert resp.status.code == pb.OK
    # after StreamRevival.GRACE_S without a stream the writer varies the route
    sets = wait_until(lambda: (s := _endpoint_sets(_route(nodes[lead].endpoint, producer))) != {live} and s,
                      timeout=30, what="a route variant for the producer without a stream")
    (variant,) = sets
    assert set(live) <= set(variant), f"variant {variant} leaves out a live member of {live}"
    assert variant == everyone  # the only other set with both live members: the killed one added back


@pytest.mark.e2e
def test_producer_without_stream_at_a_single_broker_gets_the_same_address_as_a_new_set(cluster: LocalCluster) -> None:
    """One live member (here a standalone broker): the variant is the same address under the
    DOMAIN_NAME scheme, a set the official client keys apart from the IPv4 one."""
    node = cluster.start_broker("broker-one")
    cluster.admin("updateTopic", "-b", node.admin_addr, "-t", TOPIC, "-r", "2", "-w", "2")
    wait_until(lambda: _route(node.endpoint, "anyone").message_queues, timeout=60, what="the topic's route")
    plain = _route(node.endpoint, "anyone")
    assert {mq.broker.endpoints.scheme for mq in plain.message_queues} == {pb.IPv4}
    producer = "revival-producer-2"
    with grpc.insecure_channel(node.endpoint) as ch:
        svc_grpc.MessagingServiceStub(ch).Heartbeat(svc.HeartbeatRequest(client_type=pb.PRODUCER),
                                                    metadata=[("x-mq-client-id", producer)], timeout=5)
    varied = wait_until(lambda: (r := _route(node.endpoint, producer)).message_queues[0].broker.endpoints.scheme
                        != pb.IPv4 and r, timeout=30, what="a route variant for the producer without a stream")
    assert {mq.broker.endpoints.scheme for mq in varied.message_queues} == {pb.DOMAIN_NAME}
    assert _endpoint_sets(varied) == _endpoint_sets(plain) == {(node.endpoint,)}
