"""failover_impact: one row per failover (a new leadership of a broker group in a higher generation).

* ``detection_gap_ms``: from the old leader's last sign of life (its last event or stored
  message of the old generation before the election) to the election start (the first
  ``election_started`` of the new generation, else the election itself);
* ``election_ms``: election start to the new leader's announcement;
* ``unavailability_ms``: last message stored in the group before the election start to
  the first message stored in the new generation;
* ``sent_before``: messages stored in the old generation in the ``window_ms`` before the
  election start; ``at_risk``: old-generation messages never committed at quorum;
* ``truncated``: old-generation copies the truncation events removed; ``resent`` of them
  stored again later with the same msgId, ``lost`` never; ``truncated_bytes`` from the events;
* ``failed_sends``: failed send attempts to the group inside the unavailability window.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from rocketscope.spark.jobs.common import ts, utc_date
from rocketscope.spark.model import MSG_KEY, Model

WINDOW_MS = 5_000


def failovers(model: Model) -> DataFrame:
    """(group, mode, old/new gen, leader, address, elected_ts, election_started_ts): small."""
    lead = model.leaderships
    w = Window.partitionBy("group").orderBy("gen", "start_ts")
    fo = lead.select(
        "group",
        "mode",
        F.lag("gen").over(w).alias("old_gen"),
        F.col("gen").alias("new_gen"),
        F.lag("node").over(w).alias("old_leader"),
        F.lag("address").over(w).alias("old_address"),
        F.col("node").alias("new_leader"),
        F.col("address").alias("new_address"),
        F.col("start_ts").alias("elected_ts"),
    ).where(F.col("old_gen").isNotNull() & (F.col("new_gen") > F.col("old_gen")))
    ev = model.events
    started = ev.where(F.col("type") == "election_started").groupBy("group", F.col("gen").alias("new_gen")).agg(
        F.min("ts").alias("election_started_ts")
    )
    trunc = (
        ev.where(F.col("type") == "truncation")
        .groupBy("group", F.col("gen").alias("new_gen"))
        .agg(F.sum(F.col("to_offset") - F.col("from_offset")).alias("truncated_bytes"))
    )
    return (
        fo.join(started, on=["group", "new_gen"], how="left")
        .join(trunc, on=["group", "new_gen"], how="left")
        .withColumn("election_started_ts", F.coalesce("election_started_ts", "elected_ts"))
        .withColumn("truncated_bytes", F.coalesce("truncated_bytes", F.lit(0)))
    )


def build(model: Model, window_ms: int = WINDOW_MS) -> DataFrame:
    fo_table = model.cached("failovers", lambda: failovers(model))
    fo = F.broadcast(fo_table.alias("f"))
    key = ["group", "new_gen"]
    start = F.col("f.election_started_ts")
    ev_seen = (
        model.events.alias("e")
        .join(fo, on=(F.col("e.group") == F.col("f.group")) & (F.col("e.address") == F.col("f.old_address"))
              & (F.col("e.gen") == F.col("f.old_gen")) & (F.col("e.ts") < start), how="inner")
        .groupBy(F.col("f.group").alias("group"), F.col("f.new_gen").alias("new_gen"))
        .agg(F.max("e.ts").alias("ev_seen_ts"))
    )
    # One pass over the copies (joined with the broadcast failovers of their group): the window bounds, the
    # counts that do not depend on them, and two short lists per failover -- the born times of the failed
    # sends (counted against the bounds afterwards) and the truncated old-generation copies (looked up in
    # the messages for resent/lost).  It was two passes, each joining all copies with all messages (1M
    # messages: 55 of 426 CPU seconds of the pipeline, for a table of a few rows).
    c = model.copies.select(MSG_KEY, "msg_id", "broker_group", "gen", "success", "store_host", "stored_ts",
                            "born_ts", "committed_ts", "truncated").alias("c")
    per_failover = c.join(fo, on=F.col("c.broker_group") == F.col("f.group"), how="inner")
    ok = F.col("c.success")
    old = ok & (F.col("c.gen") == F.col("f.old_gen"))
    before = F.col("c.stored_ts") < start
    bounds = model.cached(f"failover_bounds_{window_ms}", lambda: per_failover.groupBy(
        F.col("f.group").alias("group"), F.col("f.new_gen").alias("new_gen")).agg(
        F.max(F.when(old & (F.col("c.store_host") == F.col("f.old_address")) & before, F.col("c.stored_ts")))
        .alias("pub_seen_ts"),
        F.max(F.when(ok & before, F.col("c.stored_ts"))).alias("window_start_ts"),
        F.min(F.when(ok & (F.col("c.gen") == F.col("f.new_gen")), F.col("c.stored_ts"))).alias("window_end_ts"),
        F.count(F.when(old & before & (F.col("c.stored_ts") >= start - window_ms), True)).alias("sent_before"),
        F.count(F.when(old & F.col("c.committed_ts").isNull(), True)).alias("at_risk"),
        F.count(F.when(old & F.col("c.truncated"), True)).alias("truncated"),
        F.collect_list(F.when(~ok, F.col("c.born_ts"))).alias("failed_born"),
        F.collect_list(F.when(old & F.col("c.truncated"), F.struct(F.col(f"c.{MSG_KEY}").alias(MSG_KEY),
                                                                  F.col("c.msg_id").alias("msg_id"))))
        .alias("truncated_copies"),
    ))  # a few rows, read twice below
    ws, we = F.col("window_start_ts"), F.col("window_end_ts")
    windowed = bounds.select(
        *key, "pub_seen_ts", "window_start_ts", "window_end_ts", "sent_before", "at_risk", "truncated",
        F.size(F.filter("failed_born", lambda born: (born >= ws) & (born <= we))).alias("failed_sends"),
    )
    # one row per truncated copy: a short list, broadcast against the messages
    truncated = bounds.select(*key, F.explode("truncated_copies").alias("t")).select(*key, f"t.{MSG_KEY}", "t.msg_id")
    fates = (
        model.messages.select(MSG_KEY, "msg_id", "resent", "lost")
        .join(F.broadcast(truncated), on=[MSG_KEY, "msg_id"], how="inner")
        .groupBy(*key)
        .agg(F.count(F.when(F.col("resent"), True)).alias("resent"), F.count(F.when(F.col("lost"), True))
             .alias("lost"))
    )
    counts = windowed.join(fates, on=key, how="left")
    out = fo_table.join(ev_seen, on=key, how="left").join(counts, on=key, how="left")
    last_seen = F.greatest("ev_seen_ts", "pub_seen_ts")
    return out.select(
        utc_date("elected_ts").alias("date"),
        F.col("group").alias("broker_group"),
        "mode",
        "old_gen",
        "new_gen",
        "old_leader",
        "new_leader",
        ts(last_seen).alias("last_seen_ts"),
        ts("election_started_ts").alias("election_started_ts"),
        ts("elected_ts").alias("elected_ts"),
        (F.col("election_started_ts") - last_seen).alias("detection_gap_ms"),
        (F.col("elected_ts") - F.col("election_started_ts")).alias("election_ms"),
        ts("window_start_ts").alias("unavailable_from_ts"),
        ts("window_end_ts").alias("unavailable_to_ts"),
        (F.col("window_end_ts") - F.col("window_start_ts")).alias("unavailability_ms"),
        F.coalesce("sent_before", F.lit(0)).alias("sent_before"),
        F.coalesce("at_risk", F.lit(0)).alias("at_risk"),
        F.coalesce("truncated", F.lit(0)).alias("truncated"),
        F.coalesce("resent", F.lit(0)).alias("resent"),
        F.coalesce("lost", F.lit(0)).alias("lost"),
        "truncated_bytes",
        F.coalesce("failed_sends", F.lit(0)).alias("failed_sends"),
    )
