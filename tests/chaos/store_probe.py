"""What the cluster stored, read back at the end of a run: the ground truth the checker needs to tell
a backlog from a stall from a loss (tests/chaos/checker.py ``classify``).

A message a group has not received when the drain ends is either

* in the topic's queues (stored) at an offset the group has not committed yet: a backlog, still to
  be consumed (liveness), or
* in the topic's queues below the group's committed offset: the group acknowledged past it without
  receiving it ("skipped": lost for that group), or
* in none of the topic's queues: lost.

The queues are read the way any reader does (rocketscope/topic_reader.py: the route from the
name server, PullMessage from the writer, which replicates before it makes a message readable;
tests/chaos/harness.py ``logs_equal`` checks that the replicas' commit logs agree up to the
committed point), and each group's committed offset per queue comes from the brokers'
ConsumerProgress (``rocketscope admin consumerProgress``).  Message bodies are the workload's
unique keys (tests/chaos/workload.py).
"""

from __future__ import annotations

from typing import Any

from chaos.harness import GROUPS, TOPICS
from rocketscope import topic_reader


def stored_keys(namesrv: str, topics: tuple[str, ...] = TOPICS, timeout_s: float = 10.0
                ) -> dict[str, list[dict[str, Any]]]:
    """key -> every copy of it in the topics' queues: ``{"queue": "topic|broker|qid", "offset": n}``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for q in topic_reader.discover_queues(f"grpc://{namesrv}", list(topics), timeout_s):
        lo, hi = topic_reader.queue_bounds(q, timeout_s)
        for m in topic_reader.pull_messages(q, lo, hi, timeout_s=timeout_s):
            key = m.body.decode(errors="replace")
            out.setdefault(key, []).append({"queue": q.key, "offset": m.system_properties.queue_offset})
    return out


def committed_offsets(admin_json: Any, groups: tuple[str, ...] = GROUPS) -> dict[str, dict[str, int]]:
    """group -> "topic|broker|qid" -> the group's committed offset (everything below it acknowledged).

    ``admin_json`` is tests/cluster.py ``LocalCluster.admin_json`` (``rocketscope admin ... --json``).
    """
    out: dict[str, dict[str, int]] = {}
    for g in groups:
        data = admin_json("consumerProgress", "-g", g)
        out[g] = {f"{q['topic']}|{q['brokerName']}|{q['queueId']}": int(q["consumerOffset"]) for q in data["queues"]}
    return out


def probe(namesrv: str, admin_json: Any) -> dict[str, Any]:
    """``{"stored": stored_keys(...), "committed": committed_offsets(...)}``, or ``{"error": why}``."""
    try:
        return {"stored": stored_keys(namesrv), "committed": committed_offsets(admin_json)}
    except Exception as exc:  # the run's verdict still comes, without the classification (it says why)
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
