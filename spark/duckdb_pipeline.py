"""The whole analytics pipeline in DuckDB: decode, shared tables and the four output tables.

Why it exists: issue 22's benchmark target is "the same four output tables computed by
DuckDB from the same Parquet input in the same run: Spark within 2x of DuckDB for the
whole pipeline".  DuckDB is the single-machine anchor (docs/ANALYTICS.md, "Benchmark"):
one process, vectorised, no shuffle.  Before this module it computed only the
replication as-of join; here it computes everything the Spark jobs compute, from the same
rows (``spark/schema.py``'s row schema: trace-topic bodies and HA-event bodies), with the
definitions of ``spark/model.py`` and the jobs (docs/ANALYTICS.md, "Definitions"), so a
timing comparison compares the same work and the tables can be checked against the
plain-Python reference (``spark/reference.py``, ``tests/test_duckdb_pipeline.py``).

Shape of a run (:func:`run_pipeline`): the input Parquet files are a view; decoding
creates the ``records`` and ``events`` tables; the shared tables (leaderships, pubs,
acks, replication, replica slots, copies, messages, attempts, consumers, failovers) are
each created once as tables of the connection's database (in memory unless the caller's
connection is a file; DuckDB evicts them to its temporary directory under a memory
limit), as the Spark model persists its shared tables once per run; each job is one
query over them, materialised and written as Parquet partitioned by ``date`` with the
same columns and types as the Spark job's table (timestamps as UTC-adjusted instants, as
Spark writes them too: spark/session.py ``TABLE_CONF``).

Where DuckDB differs from the Spark code, and why:

* Decoding (:data:`RECORDS_SQL`) follows ``spark/sqldecode.py`` rule for rule, but
  DuckDB's regular expressions are RE2, which has no look-around, so Spark's one
  per-body regular expression (``INVALID_RECORD``) cannot be used.  Instead every record
  of a known type must fully match its type's valid layout (:data:`VALID_RECORD`, the
  same layouts with the look-aheads written as anchored alternatives); a body with one
  bad record is skipped whole, as the codec raises for it.  The test decodes the Spark
  decoder's hand-written edge cases and random corpus both ways.
* The replication join is DuckDB's ``ASOF LEFT JOIN`` (as the benchmark's join-only
  figure).  ``ASOF`` returns the *nearest* ack past the offset, but the definition is the
  *earliest* ack time among all acks past it (``spark/asof.py``: acks can be out of order
  in time), so the acks carry the suffix minimum of their time first (one window per
  replica key, over the few ack rows), and the join takes that.
* Percentiles: Spark's jobs use ``percentile_approx`` (within one rank of exact); here
  they are the exact nearest-rank values that ``spark/reference.py`` computes
  (``nearest_rank``: the ``ceil(p * n)``-th smallest, ``p * n`` in double precision as in
  Python), so the test can require equality.
* Exact-duplicate removal is ``DISTINCT`` / ``DISTINCT ON`` (hash aggregates: DuckDB's
  spill to disk); Spark needed a sort for it (``drop_exact_duplicates``).
* Spark's message partitioning (``msg_key``) is not needed: DuckDB hash-joins and
  hash-aggregates on the msgId string directly.

Timestamps are epoch milliseconds (BIGINT) inside; the output has ``TIMESTAMP WITH TIME
ZONE`` columns (UTC instants, as Spark's timestamps) and a ``DATE`` partition column.
"""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import duckdb

from rocketscope.ha_events import EVENT_TYPES
from rocketscope.names import DLQ_PREFIX, HA_EVENTS_TOPIC
from rocketscope.spark.schema import MAX_RECONSUME_TIMES, QUORUM
from rocketscope.spark.sqldecode import _integer

NEG_INF = -(2**62)
POS_INF = 2**62
WINDOW_MS = 5_000
"""failover_impact's ``sent_before`` window (spark/jobs/failover_impact.py ``WINDOW_MS``)."""
JOB_NAMES = ("message_timeline", "replication_latency", "failover_impact", "e2e_latency")


def _lit(text: str) -> str:
    """A SQL string literal (the constants below are ours, but a quote would still break the SQL)."""
    return "'" + text.replace("'", "''") + "'"


# ------------------------------------------------------------------ the trace format in RE2
_S = r"\x01"
_X = r"[^\x01\x02]*"  # any field
_I32, _I64 = _integer(32), _integer(64)
_B = r"(?i:true|false|null)?"  # Boolean.parseBoolean's true/false, empty or null
_MT = r"(?:\+?0*[0-4]|-0+)"  # message type ordinal 0..4
_TAIL = r"(?:\x01[^\x02]*)?"  # any further fields: sqldecode's look-ahead _END then _REST, anchored
_VALID = {
    "Pub": f"Pub{_S}{_I64}(?:{_S}{_X}){{7}}{_S}{_I32}{_S}{_I32}{_S}{_MT}(?:{_S}{_B}|{_S}{_X}{_S}{_B}{_TAIL})?",
    "SubBefore": f"SubBefore{_S}{_I64}(?:{_S}{_X}){{4}}{_S}{_I32}{_TAIL}",
    "SubAfter": f"SubAfter{_S}{_X}{_S}{_X}{_S}{_I32}{_S}{_B}(?:{_S}{_X}(?:{_S}{_I32}(?:{_S}{_I64}{_TAIL})?)?)?",
    "EndTransaction": f"EndTransaction{_S}{_I64}(?:{_S}{_X}){{7}}{_S}{_MT}"
                      f"(?:{_S}{_X}{_S}{_X}{_S}{_B}|{_S}{_X}{_S}{_X}{_S}{_X}{_S}{_B}{_TAIL})",
    "Recall": f"Recall{_S}{_I64}(?:{_S}{_X}){{4}}{_S}{_B}{_TAIL}",
}
KNOWN_RECORD = "(?:" + "|".join(_VALID) + r")(?:\x01[^\x02]*)?"
"""A record (one ``\\x02``-separated chunk) whose first field is a type the codec knows."""
VALID_RECORD = "(?:" + "|".join(_VALID.values()) + r")\x01*"
"""A known record the codec accepts, whole (full match; trailing empty fields allowed, as Java's
split drops them).  Typed fields are followed by a separator or the record's end in every
alternative, which is what sqldecode's look-ahead ``_END`` says: ``12abc`` is not an integer."""
USED_RECORD = r"^(?:Pub|SubBefore|SubAfter)(?:\x01|\z)"
"""The record types the jobs read; EndTransaction and Recall are validated, then dropped."""
HEX_ID = "[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56}"

MACROS = [
    # epoch ms -> UTC instant / UTC date / minute (spark/jobs/common.py ts, utc_date, minute)
    "CREATE OR REPLACE TEMP MACRO rs_ts(ms) AS epoch_ms(ms)::TIMESTAMPTZ",
    "CREATE OR REPLACE TEMP MACRO rs_date(ms) AS epoch_ms(ms)::DATE",
    "CREATE OR REPLACE TEMP MACRO rs_minute(ms) AS date_trunc('minute', epoch_ms(ms))::TIMESTAMPTZ",
    # exact nearest rank over a sorted list (spark/reference.py nearest_rank); p as DOUBLE, as Python's float
    "CREATE OR REPLACE TEMP MACRO rs_rank(v, p) AS CASE WHEN len(v) > 0 THEN "
    "v[greatest(1, CAST(ceil(CAST(p AS DOUBLE) * len(v)) AS BIGINT))] END",
    # the commit-log offset of an offsetMsgId, null when no broker could have written it (sqldecode.phys_offset)
    f"""CREATE OR REPLACE TEMP MACRO rs_phys(omid) AS CASE
        WHEN regexp_full_match(omid, {_lit(HEX_ID)})
         AND substr(omid, CASE WHEN length(omid) = 32 THEN 9 ELSE 33 END, 4) = '0000'
         AND substr(right(omid, 16), 1, 1) IN ('0', '1', '2', '3', '4', '5', '6', '7')
        THEN TRY_CAST('0x' || right(omid, 16) AS BIGINT) END""",
    # a text field: absent trailing fields are empty; keys' literal "null" is empty (sqldecode _text, _nullable_text)
    "CREATE OR REPLACE TEMP MACRO rs_text(f, i) AS coalesce(f[i], '')",
    "CREATE OR REPLACE TEMP MACRO rs_keys(f, i) AS CASE WHEN coalesce(f[i], '') = 'null' THEN '' "
    "ELSE coalesce(f[i], '') END",
]

RECORDS_SQL = f"""
CREATE OR REPLACE TABLE records AS
WITH bodies AS (
    -- invalid UTF-8 is not trace data: try() makes decode's error a null, as sqldecode's is_valid_utf8
    SELECT tags AS origin_topic, string_split(try(decode(body)), chr(2)) AS chunks
    FROM rs_rows WHERE topic <> {_lit(HA_EVENTS_TOPIC)}
), valid AS (
    -- one malformed record of a known type skips the whole body (the codec raises for it); the
    -- valid layout is tested first (nearly every record passes it: a CASE skips the second test)
    SELECT origin_topic, chunks FROM bodies
    WHERE chunks IS NOT NULL
      AND len(list_filter(chunks, lambda c: CASE WHEN regexp_full_match(c, {_lit(VALID_RECORD)}) THEN false
                                                  ELSE regexp_full_match(c, {_lit(KNOWN_RECORD)}) END)) = 0
), chunks AS (
    SELECT origin_topic, unnest(chunks) AS chunk FROM valid
), fields AS (
    -- 1-based: f[1] is the type; Java's split drops trailing empty fields before the count is read
    SELECT origin_topic, f, f[1] AS kind, len(f) AS n
    FROM (SELECT origin_topic, string_split(rtrim(chunk, chr(1)), chr(1)) AS f FROM chunks
          WHERE regexp_matches(chunk, {_lit(USED_RECORD)}))
)
SELECT
    kind AS rec_type,
    CASE WHEN kind = 'SubAfter'
         THEN CASE WHEN n >= 8 AND TRY_CAST(f[8] AS BIGINT) <> 0 THEN TRY_CAST(f[8] AS BIGINT) END
         ELSE TRY_CAST(f[2] AS BIGINT) END AS ts,
    CASE WHEN kind = 'SubAfter' THEN nullif(rs_text(f, 9), '') ELSE rs_text(f, 4) END AS grp,
    CASE WHEN kind = 'Pub' THEN rs_text(f, 5) END AS topic,
    CASE WHEN kind = 'SubAfter' THEN rs_text(f, 3) ELSE rs_text(f, 6) END AS msg_id,
    CASE WHEN kind = 'SubAfter' THEN rs_keys(f, 6) ELSE rs_keys(f, 8) END AS keys,
    CASE WHEN kind = 'Pub' THEN rs_text(f, 9) END AS store_host,
    CASE kind WHEN 'Pub' THEN TRY_CAST(f[11] AS INTEGER) WHEN 'SubAfter' THEN TRY_CAST(f[4] AS INTEGER) END
        AS cost_time,
    CASE kind WHEN 'Pub' THEN CASE WHEN n = 13 THEN lower(f[13]) = 'true'
                                   WHEN n >= 14 THEN lower(f[14]) = 'true' ELSE true END
              WHEN 'SubAfter' THEN lower(f[5]) = 'true' END AS success,
    CASE WHEN kind = 'Pub' AND n >= 14 AND rs_text(f, 13) <> '' THEN rs_phys(f[13]) END AS phys_offset,
    CASE kind WHEN 'SubBefore' THEN rs_text(f, 5) WHEN 'SubAfter' THEN rs_text(f, 2) END AS request_id,
    CASE WHEN kind = 'SubBefore' THEN TRY_CAST(f[7] AS INTEGER) END AS retry_times,
    origin_topic
FROM fields
"""
"""Flat trace records with ``spark/schema.py``'s ``RECORD_SCHEMA`` columns (spark/sqldecode.py's rules)."""

_EVENT_JSON = (
    '{"type": "VARCHAR", "group": "VARCHAR", "node": "VARCHAR", "ts": "BIGINT", "address": "VARCHAR", '
    '"term": "BIGINT", "epoch": "BIGINT", "replica": "VARCHAR", "offset": "BIGINT", "from_offset": "BIGINT", '
    '"to_offset": "BIGINT", "role": "VARCHAR", "leader": "VARCHAR", "steps": "BIGINT[][]"}'
)
EVENTS_SQL = f"""
CREATE OR REPLACE TABLE events AS
WITH parsed AS (
    SELECT json_transform(j, {_lit(_EVENT_JSON)}) AS e
    FROM (SELECT try(decode(body)) AS j FROM rs_rows WHERE topic = {_lit(HA_EVENTS_TOPIC)})
    WHERE json_valid(j) AND json_type(j) = 'OBJECT'
), expanded AS (
    -- HaEvent.expand: a throttled event is one row per advance it folds in (its steps), then itself
    SELECT e, unnest(CASE WHEN e.steps IS NULL THEN [{{'offset': e.offset, 'ts': e.ts}}]
                          ELSE list_concat(list_transform(e.steps, lambda s: {{'offset': s[1], 'ts': s[2]}}),
                                           [{{'offset': e.offset, 'ts': e.ts}}]) END) AS adv
    FROM parsed
), typed AS (
    SELECT e, adv, coalesce(e.term, -1) AS term, coalesce(e.epoch, -1) AS epoch FROM expanded
)
SELECT DISTINCT
    e.type AS type, e."group" AS "group", e.node AS node, adv.ts AS ts,
    coalesce(e.address, '') AS address,
    CASE WHEN term >= 0 THEN term WHEN epoch >= 0 THEN epoch ELSE -1 END AS gen,
    CASE WHEN term >= 0 THEN 'dledger' WHEN epoch >= 0 THEN 'controller' ELSE 'master_slave' END AS mode,
    coalesce(e.replica, '') AS replica, coalesce(adv.offset, -1) AS "offset",
    coalesce(e.from_offset, -1) AS from_offset, coalesce(e.to_offset, -1) AS to_offset,
    coalesce(e.role, '') AS role, coalesce(e.leader, '') AS leader
FROM typed
WHERE e.type IN ({", ".join(_lit(t) for t in EVENT_TYPES)})
  AND e."group" IS NOT NULL AND e.node IS NOT NULL AND adv.ts IS NOT NULL
"""
"""HA events with ``gen`` and ``mode``, one row per advance, exact duplicates removed (spark/decode.py)."""

_Q = _lit(QUORUM)
_DLQ = _lit(DLQ_PREFIX)
_DLQ_FROM = len(DLQ_PREFIX) + 1

SHARED_SQL: dict[str, str] = {
    # Leadership intervals per node address (spark/model.py leaderships).
    "leaderships": f"""
WITH lead AS (
    SELECT "group", gen, address, min(ts) AS start_ts, any_value(mode) AS mode, min(node) AS node
    FROM events
    WHERE address <> '' AND (
        (type IN ('leader_elected', 'master_elected') AND (leader = '' OR leader = node))
        OR (type = 'role_change' AND (lower(role) = 'leader' OR ends_with(lower(role), 'master'))))
    GROUP BY "group", gen, address
)
SELECT "group", gen, mode, address, node, start_ts,
    CASE WHEN lag(start_ts) OVER w IS NULL THEN {NEG_INF} ELSE start_ts END AS valid_from,
    coalesce(lead(start_ts) OVER w, {POS_INF}) AS valid_to
FROM lead WINDOW w AS (PARTITION BY address ORDER BY start_ts, gen)""",
    # Distinct Pub records with broker group, generation, mode and the truncated flag (Model.pubs).
    "pubs": """
WITH p AS (
    SELECT DISTINCT msg_id, topic, grp AS producer_group, keys, ts AS born_ts, ts + coalesce(cost_time, 0) AS stored_ts,
        store_host, phys_offset, coalesce(success, false) AS success, origin_topic
    FROM records WHERE rec_type = 'Pub'
), mapped AS (
    SELECT p.* EXCLUDE (origin_topic), ld."group" AS broker_group, ld.gen AS gen, ld.mode AS ha_mode
    FROM p LEFT JOIN leaderships ld
      ON p.store_host = ld.address AND ld.valid_from <= p.stored_ts AND p.stored_ts < ld.valid_to
), truncs AS (
    SELECT "group", gen, ts, from_offset AS lo, to_offset AS hi FROM events WHERE type = 'truncation'
)
SELECT m.*, coalesce(m.success AND m.phys_offset IS NOT NULL AND m.broker_group IS NOT NULL AND EXISTS (
        SELECT 1 FROM truncs t WHERE t."group" = m.broker_group AND t.gen > m.gen AND t.ts >= m.stored_ts
                                 AND t.lo <= m.phys_offset AND m.phys_offset < t.hi), false) AS truncated
FROM mapped m""",
    # Acks per (group, gen, replica, offset), commits under __quorum__, with the suffix-minimum time
    # (module docstring: ASOF finds the nearest ack, the definition wants the earliest of all past it).
    "acks": f"""
WITH raw AS (
    SELECT "group" AS broker_group, gen, replica, "offset", ts FROM events
    WHERE type = 'replica_ack' AND replica <> '' AND "offset" >= 0
    UNION ALL
    SELECT "group", gen, {_Q}, "offset", ts FROM events WHERE type = 'commit_advanced' AND "offset" >= 0
), per_offset AS (
    SELECT broker_group, gen, replica, "offset", min(ts) AS ts FROM raw GROUP BY broker_group, gen, replica, "offset"
)
SELECT broker_group, gen, replica, "offset",
    min(ts) OVER (PARTITION BY broker_group, gen, replica ORDER BY "offset" DESC
                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS asof_ts
FROM per_offset""",
    # One row per (stored copy, replica of its group and generation) with ack_ts (Model.replication).
    "replication": """
WITH replicas AS (SELECT DISTINCT broker_group, gen, replica FROM acks),
cand AS (
    SELECT c.msg_id, c.topic, c.born_ts, c.stored_ts, c.store_host, c.phys_offset, c.broker_group, c.gen, r.replica
    FROM pubs c JOIN replicas r ON c.broker_group = r.broker_group AND c.gen = r.gen
    WHERE c.success AND c.phys_offset IS NOT NULL AND c.broker_group IS NOT NULL
)
SELECT cand.*, a.asof_ts AS ack_ts
FROM cand ASOF LEFT JOIN acks a
  ON cand.broker_group = a.broker_group AND cand.gen = a.gen AND cand.replica = a.replica
 AND a."offset" > cand.phys_offset""",
    # The replicas of each (group, generation) numbered by name: the slots of :func:`copies_sql`.
    "replica_slots": f"""
SELECT broker_group, gen, replica, row_number() OVER (PARTITION BY broker_group, gen ORDER BY replica) AS slot
FROM (SELECT DISTINCT broker_group, gen, replica FROM acks WHERE replica <> {_Q})""",
    "slot_names": """
SELECT broker_group, gen, list(replica ORDER BY slot) AS names FROM replica_slots GROUP BY broker_group, gen""",
    "copies": "",  # copies_sql(): its shape depends on the most replicas a group has
    # One row per msgId with Pub records: the effective copy and the flags (Model.messages).  The
    # effective copy is the minimum of a struct led by the order (live first, then successful, then
    # earliest stored, then store host), the same tie-breaking as the Spark aggregate.
    "messages": """
WITH f AS (
    SELECT msg_id,
        min({'o1': NOT (success AND NOT truncated), 'o2': NOT success, 'o3': stored_ts, 'o4': store_host,
             'topic': topic, 'producer_group': producer_group, 'keys': keys, 'broker_group': broker_group,
             'ha_mode': ha_mode, 'gen': gen, 'born_ts': born_ts, 'phys_offset': phys_offset, 'success': success,
             'stored_ts': stored_ts, 'committed_ts': committed_ts, 'replicas': replicas}) AS eff,
        min(born_ts) AS first_born_ts,
        count(*)::INTEGER AS send_attempts,
        (count(*) FILTER (WHERE NOT success))::INTEGER AS failed_sends,
        (count(*) FILTER (WHERE truncated))::INTEGER AS truncated_copies,
        max(stored_ts) FILTER (WHERE success AND NOT truncated) AS last_live_ts,
        min(stored_ts) FILTER (WHERE truncated) AS first_truncated_ts
    FROM copies GROUP BY msg_id
)
SELECT msg_id, eff.topic AS topic, eff.producer_group AS producer_group, eff.keys AS keys,
    first_born_ts AS born_ts, CASE WHEN eff.success THEN eff.stored_ts END AS stored_ts,
    eff.o4 AS store_host, eff.broker_group AS broker_group, eff.ha_mode AS ha_mode, eff.gen AS gen,
    eff.born_ts AS eff_born_ts, eff.phys_offset AS phys_offset, eff.success AS success,
    eff.committed_ts AS committed_ts, eff.replicas AS replicas,
    send_attempts, failed_sends, truncated_copies,
    truncated_copies > 0 AND last_live_ts > first_truncated_ts AS resent,
    truncated_copies > 0 AND last_live_ts IS NULL AS lost
FROM f""",
    # One row per delivery attempt: SubBefore full-outer-joined with SubAfter (Model.attempts).
    "attempts": """
WITH b AS (
    SELECT DISTINCT ON (msg_id, request_id) msg_id, request_id, grp AS b_grp, ts AS begin_ts, retry_times,
        origin_topic AS b_origin
    FROM records WHERE rec_type = 'SubBefore'
), a AS (
    SELECT DISTINCT ON (msg_id, request_id) msg_id, request_id, grp AS a_grp, ts AS a_ts, cost_time, success,
        origin_topic AS a_origin
    FROM records WHERE rec_type = 'SubAfter'
)
SELECT coalesce(b.msg_id, a.msg_id) AS msg_id, coalesce(b.request_id, a.request_id) AS request_id,
    coalesce(b_grp, a_grp) AS grp, begin_ts, coalesce(a_ts, begin_ts + cost_time) AS end_ts, success,
    retry_times, coalesce(b_origin, a_origin) AS origin_topic
FROM b FULL OUTER JOIN a ON b.msg_id = a.msg_id AND b.request_id = a.request_id
WHERE coalesce(b_grp, a_grp) IS NOT NULL""",
    # One row per (msgId, consumer group): deliveries, first delivery and ack, retries, DLQ (Model.consumers).
    "consumers": f"""
WITH stats AS (
    SELECT msg_id, grp, count(request_id) AS deliveries, min(begin_ts) AS first_delivery_ts,
        min(end_ts) FILTER (WHERE success) AS first_ack_ts, max(retry_times) AS max_retry_times,
        count(*) FILTER (WHERE success = false) AS failures,
        min(coalesce(end_ts, begin_ts)) FILTER (WHERE success = false AND retry_times >= {MAX_RECONSUME_TIMES})
            AS dlq_retry_ts
    FROM attempts GROUP BY msg_id, grp
), from_dlq AS (
    SELECT msg_id, grp, min(t) AS dlq_topic_ts FROM (
        SELECT msg_id, substr(origin_topic, {_DLQ_FROM}) AS grp, coalesce(begin_ts, end_ts) AS t
        FROM attempts WHERE starts_with(origin_topic, {_DLQ})
        UNION ALL
        -- the broker's record of the move itself: a Pub on %DLQ%<group> (spark/model.py says why)
        SELECT msg_id, substr(topic, {_DLQ_FROM}), ts FROM records
        WHERE rec_type = 'Pub' AND starts_with(topic, {_DLQ}) AND coalesce(success, true)
    ) GROUP BY msg_id, grp
)
SELECT coalesce(s.msg_id, d.msg_id) AS msg_id, coalesce(s.grp, d.grp) AS grp,
    coalesce(deliveries, 0)::INTEGER AS deliveries, first_delivery_ts, first_ack_ts, max_retry_times,
    coalesce(failures, 0)::INTEGER AS failures,
    dlq_retry_ts IS NOT NULL OR dlq_topic_ts IS NOT NULL AS dlq, least(dlq_retry_ts, dlq_topic_ts) AS dlq_ts
FROM stats s FULL OUTER JOIN from_dlq d ON s.msg_id = d.msg_id AND s.grp = d.grp""",
    # Failovers: a new leadership of a group in a higher generation (failover_impact.failovers).
    "failovers": """
WITH ordered AS (
    SELECT "group", mode, lag(gen) OVER w AS old_gen, gen AS new_gen, lag(node) OVER w AS old_leader,
        lag(address) OVER w AS old_address, node AS new_leader, address AS new_address, start_ts AS elected_ts
    FROM leaderships WINDOW w AS (PARTITION BY "group" ORDER BY gen, start_ts)
), started AS (
    SELECT "group", gen AS new_gen, min(ts) AS election_started_ts FROM events
    WHERE type = 'election_started' GROUP BY "group", gen
), trunc AS (
    SELECT "group", gen AS new_gen, sum(to_offset - from_offset)::BIGINT AS truncated_bytes FROM events
    WHERE type = 'truncation' GROUP BY "group", gen
)
SELECT o.*, coalesce(s.election_started_ts, o.elected_ts) AS election_started_ts,
    coalesce(t.truncated_bytes, 0) AS truncated_bytes
FROM ordered o
LEFT JOIN started s ON o."group" = s."group" AND o.new_gen = s.new_gen
LEFT JOIN trunc t ON o."group" = t."group" AND o.new_gen = t.new_gen
WHERE o.old_gen IS NOT NULL AND o.new_gen > o.old_gen""",
}
"""The shared tables, in build order; each is created once per run (``copies`` by :func:`copies_sql`)."""

def copies_sql(slots: int) -> str:
    """Pubs with the quorum commit time and the sorted ``replicas`` array of each copy (Model.copies).

    The array is built from one column pair per replica slot (ack time, and whether the copy
    has a row for that replica), aggregated per copy with fixed-size states, and the slots'
    names (sorted, so the array is sorted as Spark's ``array_sort``) joined afterwards.  A
    ``list()`` aggregate per copy, the direct translation, keeps its state in memory (it
    does not spill): it was what ran out of memory under a memory limit.
    """
    slots = max(1, slots)
    aggs = ",\n        ".join(
        f"max(r.ack_ts) FILTER (WHERE s.slot = {i}) AS t{i}, count(*) FILTER (WHERE s.slot = {i}) AS c{i}"
        for i in range(1, slots + 1))
    items = ", ".join(
        f"CASE WHEN rep.c{i} > 0 THEN {{'replica': n.names[{i}], 'ack_ts': rs_ts(rep.t{i}), "
        f"'latency_ms': rep.t{i} - rep.born_ts}} END" for i in range(1, slots + 1))
    return f"""
WITH rep AS (
    SELECT r.msg_id, r.born_ts, r.store_host, r.phys_offset, r.broker_group, r.gen,
        max(r.ack_ts) FILTER (WHERE r.replica = {_Q}) AS committed_ts,
        {aggs}
    FROM replication r LEFT JOIN replica_slots s
      ON r.broker_group = s.broker_group AND r.gen = s.gen AND r.replica = s.replica
    GROUP BY r.msg_id, r.born_ts, r.store_host, r.phys_offset, r.broker_group, r.gen
)
SELECT p.*, rep.committed_ts,
    CASE WHEN rep.msg_id IS NOT NULL THEN list_filter([{items}], lambda x: x IS NOT NULL) END AS replicas
FROM pubs p
LEFT JOIN rep
  ON p.msg_id = rep.msg_id AND p.born_ts = rep.born_ts AND p.store_host = rep.store_host
 AND p.phys_offset = rep.phys_offset
LEFT JOIN slot_names n ON rep.broker_group = n.broker_group AND rep.gen = n.gen"""


_STATS = """count(*) AS messages, count(latency_ms) AS samples,
        list_sort(list(latency_ms) FILTER (WHERE latency_ms IS NOT NULL)) AS v, max(latency_ms) AS max_ms"""
_PCT = "rs_rank(v, 0.5) AS p50_ms, rs_rank(v, 0.95) AS p95_ms, rs_rank(v, 0.99) AS p99_ms, max_ms"

JOB_SQL: dict[str, str] = {
    # spark/jobs/message_timeline.py: one aggregate of the consumers per msgId, one full outer join.
    "message_timeline": """
WITH cons AS (
    SELECT msg_id,
        list_sort(list({'group': grp, 'first_delivery_ts': rs_ts(first_delivery_ts),
                        'first_ack_ts': rs_ts(first_ack_ts), 'deliveries': deliveries,
                        'max_retry_times': max_retry_times, 'failures': failures, 'dlq': dlq,
                        'dlq_ts': rs_ts(dlq_ts)})) AS consumers,
        min(first_delivery_ts) AS first_delivery, min(first_ack_ts) AS first_ack
    FROM consumers GROUP BY msg_id
)
SELECT rs_date(coalesce(m.born_ts, c.first_delivery, c.first_ack)) AS date,
    coalesce(m.msg_id, c.msg_id) AS msg_id, m.topic, m.producer_group, m.keys,
    rs_ts(m.born_ts) AS born_ts, rs_ts(m.stored_ts) AS stored_ts, m.store_host, m.broker_group, m.ha_mode, m.gen,
    m.phys_offset, rs_ts(m.committed_ts) AS committed_ts,
    coalesce(m.send_attempts, 0) AS send_attempts, coalesce(m.failed_sends, 0) AS failed_sends,
    coalesce(m.truncated_copies, 0) AS truncated_copies,
    coalesce(m.resent, false) AS resent, coalesce(m.lost, false) AS lost,
    coalesce(m.replicas, []) AS replicas, coalesce(c.consumers, []) AS consumers
FROM messages m FULL OUTER JOIN cons c ON m.msg_id = c.msg_id""",
    # spark/jobs/replication_latency.py: per topic, broker group, replica and minute of born.
    "replication_latency": f"""
WITH r AS (
    SELECT rs_date(born_ts) AS date, rs_minute(born_ts) AS minute, topic, broker_group, replica,
        ack_ts - born_ts AS latency_ms
    FROM replication
), g AS (
    SELECT date, minute, topic, broker_group, replica, {_STATS}
    FROM r GROUP BY date, minute, topic, broker_group, replica
)
SELECT date, minute, topic, broker_group, replica, messages, samples, {_PCT} FROM g""",
    # spark/jobs/failover_impact.py: one row per failover.
    "failover_impact": f"""
WITH ev_seen AS (
    SELECT f."group", f.new_gen, max(e.ts) AS ev_seen_ts
    FROM events e JOIN failovers f
      ON e."group" = f."group" AND e.address = f.old_address AND e.gen = f.old_gen AND e.ts < f.election_started_ts
    GROUP BY f."group", f.new_gen
), pf AS (
    SELECT f."group" AS fg, f.new_gen AS ng, f.old_gen AS og, f.old_address AS old_address,
        f.election_started_ts AS start, c.*, m.resent AS m_resent, m.lost AS m_lost
    FROM copies c JOIN failovers f ON c.broker_group = f."group"
    LEFT JOIN messages m ON c.msg_id = m.msg_id
), bounds AS (
    SELECT fg, ng,
        max(stored_ts) FILTER (WHERE success AND gen = og AND store_host = old_address AND stored_ts < start)
            AS pub_seen_ts,
        max(stored_ts) FILTER (WHERE success AND stored_ts < start) AS window_start_ts,
        min(stored_ts) FILTER (WHERE success AND gen = ng) AS window_end_ts
    FROM pf GROUP BY fg, ng
), counts AS (
    SELECT pf.fg, pf.ng,
        count(*) FILTER (WHERE success AND gen = og AND stored_ts < start AND stored_ts >= start - {WINDOW_MS})
            AS sent_before,
        count(*) FILTER (WHERE success AND gen = og AND committed_ts IS NULL) AS at_risk,
        count(*) FILTER (WHERE success AND gen = og AND truncated) AS truncated,
        count(*) FILTER (WHERE success AND gen = og AND truncated AND m_resent) AS resent,
        count(*) FILTER (WHERE success AND gen = og AND truncated AND m_lost) AS lost,
        count(*) FILTER (WHERE NOT success AND born_ts >= b.window_start_ts AND born_ts <= b.window_end_ts)
            AS failed_sends
    FROM pf JOIN bounds b ON pf.fg = b.fg AND pf.ng = b.ng
    GROUP BY pf.fg, pf.ng
), joined AS (
    SELECT f.*, ev_seen_ts, pub_seen_ts, window_start_ts, window_end_ts, sent_before, at_risk,
        counts.truncated, counts.resent, counts.lost, failed_sends,
        greatest(ev_seen_ts, pub_seen_ts) AS last_seen
    FROM failovers f
    LEFT JOIN ev_seen ON f."group" = ev_seen."group" AND f.new_gen = ev_seen.new_gen
    LEFT JOIN bounds ON f."group" = bounds.fg AND f.new_gen = bounds.ng
    LEFT JOIN counts ON f."group" = counts.fg AND f.new_gen = counts.ng
)
SELECT rs_date(elected_ts) AS date, "group" AS broker_group, mode, old_gen, new_gen, old_leader, new_leader,
    rs_ts(last_seen) AS last_seen_ts, rs_ts(election_started_ts) AS election_started_ts,
    rs_ts(elected_ts) AS elected_ts, election_started_ts - last_seen AS detection_gap_ms,
    elected_ts - election_started_ts AS election_ms,
    rs_ts(window_start_ts) AS unavailable_from_ts, rs_ts(window_end_ts) AS unavailable_to_ts,
    window_end_ts - window_start_ts AS unavailability_ms,
    coalesce(sent_before, 0) AS sent_before, coalesce(at_risk, 0) AS at_risk,
    coalesce(truncated, 0) AS truncated, coalesce(resent, 0) AS resent, coalesce(lost, 0) AS lost,
    truncated_bytes, coalesce(failed_sends, 0) AS failed_sends
FROM joined""",
    # spark/jobs/e2e_latency.py: per topic, consumer group and minute of born.
    "e2e_latency": f"""
WITH c AS (
    SELECT rs_date(m.born_ts) AS date, rs_minute(m.born_ts) AS minute, m.topic, c.grp AS "group", c.dlq,
        c.first_ack_ts - m.born_ts AS latency_ms
    FROM consumers c JOIN messages m ON c.msg_id = m.msg_id
), g AS (
    SELECT date, minute, topic, "group", count(*) FILTER (WHERE dlq) AS dlq, {_STATS}
    FROM c GROUP BY date, minute, topic, "group"
)
SELECT date, minute, topic, "group", messages, dlq, samples, {_PCT} FROM g""",
}
"""The four output tables, each one query over the shared tables (same columns as the Spark jobs)."""


MIN_DUCKDB = (1, 3)
"""``try()`` (invalid UTF-8 as null) and the ``lambda x: ...`` syntax (the arrow form is refused from 2.0) are 1.3+."""


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def connect(threads: int = 2, memory_limit: str | None = None,
            temp_directory: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with ``threads`` threads (the benchmark gives it Spark's ``local[2]`` cores)."""
    if _version(duckdb.__version__) < MIN_DUCKDB:
        raise RuntimeError(f"the DuckDB pipeline needs duckdb >= {'.'.join(map(str, MIN_DUCKDB))} (try() and "
                           f"lambda syntax), found {duckdb.__version__}: pip install 'duckdb>=1.3'")
    con = duckdb.connect()
    con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute(f"SET memory_limit = {_lit(memory_limit)}")
    if temp_directory:
        con.execute(f"SET temp_directory = {_lit(temp_directory)}")  # where it spills beyond the limit
    # timestamps are UTC instants; TIMESTAMP -> TIMESTAMPTZ casts and date_trunc then mean UTC
    con.execute("SET TimeZone = 'UTC'")
    # no query here needs its input's order (the tables are sets): less memory, more parallel plans
    con.execute("SET preserve_insertion_order = false")
    # no progress bar on stdout: the benchmark reads its result from stdout's last line
    con.execute("SET enable_progress_bar = false")
    for macro in MACROS:
        con.execute(macro)
    return con


def _parquet_files(inputs: Iterable[str | Path]) -> list[str]:
    """Parquet files of the input directories (recursively, like Spark's reader) or files as given."""
    files: list[str] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            files.extend(str(f) for f in sorted(path.rglob("*.parquet")))
        else:
            files.append(str(path))
    if not files:
        raise ValueError(f"no Parquet input files under {', '.join(str(p) for p in inputs)}")
    return files


def load_rows(con: duckdb.DuckDBPyConnection, inputs: Iterable[str | Path]) -> None:
    """The view ``rs_rows`` over the input rows (only ``topic``, ``tags`` and ``body`` are ever read)."""
    files = ", ".join(_lit(f) for f in _parquet_files(inputs))
    con.execute(f"CREATE OR REPLACE TEMP VIEW rs_rows AS SELECT topic, tags, body "
                f"FROM read_parquet([{files}], union_by_name = true, hive_partitioning = false)")


def decode(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """Create ``records`` and ``events``; returns their row counts."""
    con.execute(RECORDS_SQL)
    con.execute(EVENTS_SQL)
    return _count(con, "records"), _count(con, "events")


SCRATCH = ("records", "pubs", "attempts")
"""Shared tables no job reads (only other shared tables do): dropped once those are built, so the
memory they hold (the decoded records above all) is free for the jobs."""


def build_shared(con: duckdb.DuckDBPyConnection, keep_scratch: bool = False) -> None:
    """Create the shared tables once, in dependency order; drop the :data:`SCRATCH` ones unless asked to keep them."""
    for name, sql in SHARED_SQL.items():
        if name == "copies":
            row = con.execute("SELECT max(slot) FROM replica_slots").fetchone()
            sql = copies_sql(int(row[0] or 0) if row else 0)
        con.execute(f"CREATE OR REPLACE TABLE {name} AS {sql}")
    if not keep_scratch:
        for name in SCRATCH:
            con.execute(f"DROP TABLE {name}")


def build_job(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """Create the output table ``out_<name>`` of job ``name``; returns the table's name."""
    if name not in JOB_SQL:
        raise ValueError(f"unknown job {name!r}: choose from {', '.join(JOB_SQL)}")
    table = f"out_{name}"
    con.execute(f"CREATE OR REPLACE TABLE {table} AS {JOB_SQL[name]}")
    return table


def write_table(con: duckdb.DuckDBPyConnection, table: str, output: str | Path, name: str) -> Path:
    """Write ``table`` to ``<output>/<name>/date=YYYY-MM-DD/`` as Parquet, replacing only those dates.

    The same contract as the Spark writer (spark/output.py: dynamic partition overwrite): a
    re-run replaces exactly the date partitions it produces and leaves the others.
    """
    path = Path(output) / name
    dates = [row[0] for row in con.execute(f"SELECT DISTINCT date FROM {table} WHERE date IS NOT NULL").fetchall()]
    for day in dates:
        shutil.rmtree(path / f"date={day.isoformat()}", ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    con.execute(f"COPY (SELECT * FROM {table}) TO {_lit(str(path))} (FORMAT parquet, PARTITION_BY (date), "
                f"OVERWRITE_OR_IGNORE, FILENAME_PATTERN {_lit('part-' + uuid.uuid4().hex + '-{i}')})")
    return path


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0]) if row else 0


def run_pipeline(inputs: Iterable[str | Path], output: str | Path | None = None, *, threads: int = 2,
                 jobs: Iterable[str] = JOB_NAMES, con: duckdb.DuckDBPyConnection | None = None,
                 progress: bool = False) -> dict[str, object]:
    """Decode, build the shared tables and every job (written under ``output`` when given).

    Returns wall seconds per step (``decode_s``, ``shared_s``, ``jobs_s`` per job, ``all_s``:
    everything from the input files to the written tables) and the row counts.  Pass ``con``
    to keep the tables for inspection; otherwise the connection is closed at the end.
    """
    own = con is None
    con = con or connect(threads)
    result: dict[str, object] = {"threads": threads}
    jobs_s: dict[str, float] = {}
    rows: dict[str, int] = {}

    def step(label: str, started: float) -> float:
        secs = round(time.monotonic() - started, 2)
        if progress:
            print(f"duckdb: {label} {secs:.2f} s", file=sys.stderr, flush=True)
        return secs

    try:
        began = time.monotonic()
        load_rows(con, inputs)
        t = time.monotonic()
        result["records"], result["events"] = decode(con)
        result["decode_s"] = step("decode trace records and events", t)
        t = time.monotonic()
        build_shared(con)
        result["shared_s"] = step("shared tables", t)
        for name in jobs:
            t = time.monotonic()
            table = build_job(con, name)
            if output is not None:
                write_table(con, table, output, name)
            rows[name] = _count(con, table)
            jobs_s[name] = step(f"job {name}", t)
        result["jobs_s"] = jobs_s
        result["rows"] = rows
        result["all_s"] = round(time.monotonic() - began, 2)
    finally:
        if own:
            con.close()
    return result
