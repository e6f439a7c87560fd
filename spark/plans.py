"""Reading a DataFrame's physical plan as a tree of nodes, for tests of how the jobs are planned.

docs/ANALYTICS.md ("How the shared tables are laid out") claims what the jobs' plans look like:
the Parquet scans read only the columns the decoders use, the msgId-keyed steps run inside the
message partitioning of the cached records (no shuffle between a cached table and the aggregate
over it), and no sort over message rows is keyed by a string.  ``explain()`` text is made for
people and nests the cached tables' plans inside the plan that reads them, so the tests walk the
plan objects in the JVM instead: :func:`nodes` yields every node with the cached tables it reads
kept separate (a walk stops at an ``InMemoryTableScan`` unless asked to go in).  Planning only:
nothing here runs a Spark job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame


@dataclass(frozen=True)
class Node:
    """One physical operator: its class (``ShuffleExchangeExec``, ``SortExec``, ...) and the JVM object."""

    kind: str
    depth: int
    jvm: Any

    def read_columns(self) -> list[str]:
        """The columns a file scan reads (its ``ReadSchema``); empty for other nodes."""
        if self.kind != "FileSourceScanExec":
            return []
        return list(self.jvm.requiredSchema().fieldNames())

    def sort_key_types(self) -> list[str]:
        """The data types of a sort's keys, leading key first; empty for other nodes."""
        if self.kind != "SortExec":
            return []
        order = self.jvm.sortOrder()
        return [order.apply(i).dataType().typeName() for i in range(order.size())]


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _walk(plan: Any, depth: int, into_cache: bool, into_broadcasts: bool, seen: set[int]) -> Iterator[Node]:
    kind = plan.getClass().getSimpleName()
    yield Node(kind, depth, plan)
    if kind == "AdaptiveSparkPlanExec":  # a leaf of the tree: its current plan is a field
        inner = [plan.executedPlan()]
    elif kind.endswith("QueryStageExec"):
        inner = [plan.plan()]
    elif kind == "InMemoryTableScanExec":
        cached = plan.relation().cachedPlan()
        # a cached table read by several others is walked once (each py4j call is a round trip)
        inner = [cached] if into_cache and cached.id() not in seen else []
        seen.add(cached.id())
    elif kind == "BroadcastExchangeExec" and not into_broadcasts:
        inner = []
    else:
        inner = _seq(plan.children())
    for child in inner:
        yield from _walk(child, depth + 1, into_cache, into_broadcasts, seen)


def _root(df: DataFrame) -> Any:
    """The physical plan of ``df``; for a cached ``df`` the plan that computes it, not the scan of itself."""
    plan = df._jdf.queryExecution().executedPlan()
    top = plan.executedPlan() if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec" else plan
    if top.getClass().getSimpleName() == "InMemoryTableScanExec":
        return top.relation().cachedPlan()
    return plan


def nodes(df: DataFrame, into_cache: bool = False, into_broadcasts: bool = True) -> list[Node]:
    """Every node of ``df``'s physical plan (for a cached ``df``: of the plan that fills the cache).

    ``into_cache``: also those of the cached tables it reads.  ``into_broadcasts=False`` leaves out
    what builds a broadcast table (small tables by construction: the leaderships, truncations).
    """
    return list(_walk(_root(df), 0, into_cache, into_broadcasts, set()))


def shuffles(df: DataFrame) -> list[Node]:
    """Shuffle exchanges that ``df``'s own rows pass through: neither the cached tables it reads nor
    the building of broadcast tables counted."""
    return [n for n in nodes(df, into_broadcasts=False) if n.kind == "ShuffleExchangeExec"]


def describe(found: list[Node]) -> list[str]:
    """One line per node (its operator text), for assertion messages."""
    return [n.jvm.simpleStringWithNodeId() if hasattr(n.jvm, "simpleStringWithNodeId") else n.jvm.simpleString(200)
            for n in found]
