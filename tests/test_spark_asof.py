"""Both as-of join methods against a brute-force reference on small hand-made cases.

The cases are the edges the methods' tricks must not break: an ack of exactly a
message's offset (it does not hold the message), acks not monotonic in time (the answer
is the earliest time over all larger offsets), a key with no acks at all (the dense key
id of the window method is null there), null key parts (keys compare null-safe), a
message below every ack and one above every ack, and a bucket narrower than an interval.
The interval method runs both ways: the intervals shuffled against the messages, and broadcast
(``broadcast_limit``), where the message rows must not move at all.
"""

from __future__ import annotations

import random

import pytest

from rocketscope.spark.asof import ack_shape, asof_join, asof_members, choose_bucket
from rocketscope.spark.plans import describe, shuffles

pytestmark = pytest.mark.e2e

KEYS = ["grp", "gen", "replica"]


def brute_force(msgs: list[tuple], acks: list[tuple]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for msg_id, grp, gen, replica, offset in msgs:
        times = [ts for (g, e, r, o, ts) in acks if (g, e, r) == (grp, gen, replica) and o > offset]
        out[msg_id] = min(times) if times else None
    return out


def cases() -> tuple[list[tuple], list[tuple]]:
    msgs = [
        ("exact", "a", 1, "r1", 100),       # ack at 100 does not hold it; ack at 200 does
        ("first", "a", 1, "r1", 5),         # below every ack: the earliest of all
        ("last", "a", 1, "r1", 10_000),     # above every ack: never acked
        ("noacks", "b", 1, "r1", 50),       # a key nobody acked
        ("nullgrp", None, 1, "r1", 10),     # null key part, acked by the null-key ack
        ("other-gen", "a", 2, "r1", 10),
    ]
    acks = [
        ("a", 1, "r1", 100, 1_000),
        ("a", 1, "r1", 200, 3_000),
        ("a", 1, "r1", 5_000, 2_000),       # later offset, earlier time: wins for everything below it
        ("a", 2, "r1", 300, 7_000),
        (None, 1, "r1", 20, 9_000),
    ]
    rng = random.Random(11)
    for i in range(300):                    # random offsets, some acks far apart (wider than a bucket)
        msgs.append((f"m{i}", "c", 1, rng.choice(["r1", "r2"]), rng.randrange(0, 20_000)))
    for _ in range(40):
        acks.append(("c", 1, rng.choice(["r1", "r2"]), rng.randrange(0, 20_000), rng.randrange(0, 100_000)))
    return msgs, acks


@pytest.mark.parametrize("method,bucket,broadcast_limit", [
    ("interval", 256, None), ("interval", None, None), ("interval", 256, 1_000), ("interval", 256, 10),
    ("window", None, None),
])
def test_asof_join_matches_brute_force(spark, method: str, bucket: int | None,  # type: ignore[no-untyped-def]
                                       broadcast_limit: int | None) -> None:
    msgs, acks = cases()
    left = spark.createDataFrame(msgs, "msg_id string, grp string, gen long, replica string, offset long")
    right = spark.createDataFrame(acks, "grp string, gen long, replica string, offset long, ts long")
    joined = asof_join(left, right, KEYS, "offset", "ack_ts", method=method, bucket=bucket,
                       broadcast_limit=broadcast_limit)
    if method == "interval":
        # 45 distinct acks: within a limit of 1,000 the intervals are broadcast and the message rows stay
        # put; above a limit of 10 (and with no limit) both sides are shuffled to the keys and buckets
        moved = shuffles(joined)
        assert (not moved) == (broadcast_limit == 1_000), describe(moved)
    assert joined.columns == [*left.columns, "ack_ts"]
    got = {r["msg_id"]: r["ack_ts"] for r in joined.collect()}
    expected = brute_force(msgs, acks)
    assert got == expected
    assert got["exact"] == 2_000 and got["first"] == 1_000 and got["last"] is None and got["noacks"] is None


def test_choose_bucket_is_a_power_of_two_near_the_mean_interval(spark) -> None:  # type: ignore[no-untyped-def]
    acks = spark.createDataFrame([("a", 1, "r1", o) for o in range(0, 100_000, 1_000)],
                                 "grp string, gen long, replica string, offset long")
    assert choose_bucket(acks, KEYS) == 1_024


@pytest.mark.parametrize("bucket,broadcast_limit", [(256, 1_000), (None, None)])
def test_asof_members_gives_every_member_per_row_as_brute_force(spark, bucket: int | None,  # type: ignore[no-untyped-def]
                                                               broadcast_limit: int | None) -> None:
    """One row per message carrying every member of its key: the per-member answers of the brute force.

    The same cases with the replica moved out of the message's keys (a message of (grp, gen) is answered
    for every replica that acked in (grp, gen)), plus a message with no offset (not stored: null) and a
    message exactly at an offset another member acked (member offsets interleave).
    """
    msgs, acks = cases()
    rows = [(m, g, e, o) for (m, g, e, _, o) in msgs] + [("unstored", "a", 1, None), ("at-r2", "c", 1, None)]
    c_r2 = sorted(o for (g, _e, r, o, _t) in acks if g == "c" and r == "r2")
    rows[-1] = ("at-r2", "c", 1, c_r2[len(c_r2) // 2])
    left = spark.createDataFrame(rows, "msg_id string, grp string, gen long, offset long")
    right = spark.createDataFrame(acks, "grp string, gen long, replica string, offset long, ts long")
    joined = asof_members(left, right, ["grp", "gen"], "replica", "offset", "acks", bucket=bucket,
                          broadcast_limit=broadcast_limit)
    moved = shuffles(joined)
    assert (not moved) == (broadcast_limit == 1_000), describe(moved)
    assert joined.columns == [*left.columns, "acks"]
    got = {r["msg_id"]: r["acks"] for r in joined.collect()}
    members: dict[tuple, set[str]] = {}
    for g, e, r, _o, _t in acks:
        members.setdefault((g, e), set()).add(r)
    for msg_id, g, e, offset in rows:
        if offset is None or (g, e) not in members:
            assert got[msg_id] is None, msg_id
            continue
        expected = [(r, brute_force([(msg_id, g, e, r, offset)], acks)[msg_id]) for r in sorted(members[(g, e)])]
        assert [(a["replica"], a["ts"]) for a in got[msg_id]] == expected, msg_id
    assert got["noacks"] is None and got["unstored"] is None
    assert [a["ts"] for a in got["exact"]] == [2_000] and [a["ts"] for a in got["last"]] == [None]
    assert {a["replica"] for a in got["m0"]} == {"r1", "r2"}


def jobs_of(spark, group: str, action) -> int:  # type: ignore[no-untyped-def]
    """How many Spark jobs ``action()`` ran (a job group of its own)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group))


def test_asof_members_plans_with_one_query_of_its_acks(spark) -> None:  # type: ignore[no-untyped-def]
    """Planning the join runs exactly the jobs of one :func:`ack_shape` query and nothing else.

    Each of the bucket, the ack count, the widest key and the slots was a query of its own (13 small jobs
    at 1M messages, ~2.2 s of a warm run's wall time with a core idle); a new driver-side query in the
    planning makes this fail.  The answers themselves are the brute force's (the test above)."""
    msgs, acks = cases()
    left = spark.createDataFrame([(m, g, e, o) for (m, g, e, _, o) in msgs],
                                 "msg_id string, grp string, gen long, offset long")
    right = spark.createDataFrame(acks, "grp string, gen long, replica string, offset long, ts long")
    grouped = right.groupBy("grp", "gen", "replica", "offset").agg({"ts": "min"})
    one_query = jobs_of(spark, "shape", lambda: ack_shape(grouped, ["grp", "gen"], "replica"))
    planning = jobs_of(spark, "plan", lambda: asof_members(left, right, ["grp", "gen"], "replica", "offset", "acks",
                                                           broadcast_limit=1_000))
    assert one_query >= 1 and planning == one_query
    shape = ack_shape(grouped, ["grp", "gen"], "replica")
    expected: dict[tuple, set[str]] = {}
    for g, e, r, _o, _t in acks:
        expected.setdefault((g, e), set()).add(r)
    assert {k: set(v) for k, v in shape.names.items()} == expected
    assert all(v == sorted(v) for v in shape.names.values())
    assert shape.acks == len({(g, e, r, o) for g, e, r, o, _t in acks})
    assert shape.width == max(len(v) for v in expected.values())
