"""Server-side queue allocation for QUERY_ASSIGNMENT, as Apache RocketMQ 5.3.3's QueryAssignmentProcessor does it.

A queue is (topic, broker name, queue id); both lists are sorted first (queues by topic, broker
name, id; client ids as strings), so every broker that answers gives each consumer the same
share.  The two strategies Apache's broker knows by name are here: ``AVG`` (consecutive blocks,
the first ``len(queues) % len(clients)`` clients one more) and ``AVG_BY_CIRCLE`` (every n-th).
In POP mode ``popShareQueueNum`` widens a consumer's share to its own and the next N clients'
blocks; at 0 or below, or when that covers (almost) everyone, each consumer gets every broker's
queue -1 ("any queue of that broker"), which is what Apache answers by default.
"""

from __future__ import annotations

from collections.abc import Callable

Queue = tuple[str, str, int]  # topic, broker name, queue id
Strategy = Callable[[str, list[Queue], list[str]], list[Queue]]


def averagely(client: str, queues: list[Queue], clients: list[str]) -> list[Queue]:
    if client not in clients or not queues:
        return []
    index, n, m = clients.index(client), len(clients), len(queues)
    extra = m % n
    size = 1 if m <= n else m // n + (1 if index < extra else 0)
    start = index * size if index < extra else index * size + extra
    return [queues[(start + i) % m] for i in range(min(size, m - start))]


def by_circle(client: str, queues: list[Queue], clients: list[str]) -> list[Queue]:
    if client not in clients:
        return []
    return queues[clients.index(client)::len(clients)]


STRATEGIES: dict[str, Strategy] = {"AVG": averagely, "AVG_BY_CIRCLE": by_circle}


def for_pop(strategy: Strategy, client: str, queues: list[Queue], clients: list[str], share: int) -> list[Queue]:
    """A POP consumer's queues: its own share and the next ``share`` clients' (see the module doc)."""
    if share <= 0 or share >= len(clients) - 1:
        return list(dict.fromkeys((t, b, -1) for t, b, _ in queues))
    if len(clients) > len(queues):  # more clients than queues: each still gets one
        return [queues[clients.index(client) % len(queues)]] if client in clients else []
    out = strategy(client, queues, clients)
    if client in clients:
        index = clients.index(client)
        for i in range(1, share + 1):
            out += strategy(clients[(index + i) % len(clients)], queues, clients)
    return list(dict.fromkeys(out))


def allocate(strategy: Strategy, client: str, queues: list[Queue], clients: list[str], pop: bool,
             share: int) -> list[Queue]:
    queues, clients = sorted(queues), sorted(clients)
    return for_pop(strategy, client, queues, clients, share) if pop else strategy(client, queues, clients)
