"""QUERY_ASSIGNMENT's shares (broker/remoting/assignment.py) on uneven cases the e2e test does not reach.

Expected values worked out by hand from Apache RocketMQ 5.3.3's AllocateMessageQueueAveragely,
AllocateMessageQueueAveragelyByCircle and QueryAssignmentProcessor.allocate4Pop (read in its source):
consecutive blocks with the first ``queues % clients`` clients one larger; every n-th queue; in POP
mode the own block plus the next N clients', one queue per client when clients outnumber queues, and
queue -1 per broker when the share covers (almost) everyone.
"""

from __future__ import annotations

from rocketscope.broker.remoting.assignment import allocate, averagely, by_circle

Q = [("T", "broker-a", i) for i in range(5)]


def ids(queues: list[tuple[str, str, int]]) -> list[int]:
    return [q for _, _, q in queues]


def test_averagely_gives_the_first_clients_one_more() -> None:
    assert ids(allocate(averagely, "a", Q, ["b", "a"], False, 0)) == [0, 1, 2]  # clients sorted first
    assert ids(allocate(averagely, "b", Q, ["b", "a"], False, 0)) == [3, 4]
    two = Q[:2]
    assert [ids(allocate(averagely, c, two, ["a", "b", "c"], False, 0)) for c in "abc"] == [[0], [1], []]
    assert allocate(averagely, "stranger", Q, ["a", "b"], False, 0) == []


def test_by_circle_takes_every_nth() -> None:
    assert ids(allocate(by_circle, "a", Q, ["a", "b"], False, 0)) == [0, 2, 4]
    assert ids(allocate(by_circle, "b", Q, ["a", "b"], False, 0)) == [1, 3]


def test_pop_shares() -> None:
    four = Q[:4]
    clients = ["a", "b", "c", "d"]
    assert ids(allocate(averagely, "a", four, clients, True, 1)) == [0, 1]  # its own and b's
    assert ids(allocate(averagely, "d", four, clients, True, 1)) == [3, 0]  # wraps to a's
    assert ids(allocate(averagely, "c", four[:2], clients, True, 1)) == [0]  # more clients than queues
    both = [("T", "broker-a", 0), ("T", "broker-a", 1), ("T", "broker-b", 0)]
    assert allocate(averagely, "a", both, clients, True, 0) == [("T", "broker-a", -1), ("T", "broker-b", -1)]
    assert allocate(averagely, "a", both, clients, True, 3) == [("T", "broker-a", -1), ("T", "broker-b", -1)]
