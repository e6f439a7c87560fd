"""The intermediate tables every job shares: decoded records, leaderships, message copies,
their replication, and consumption.

Definitions (docs/ANALYTICS.md explains the reasons):

* a **copy** is one Pub record (one send attempt) of a msgId; ``born_ts`` is its timestamp
  and ``stored_ts`` its timestamp plus cost time: for broker-side records the broker's
  receive and store times, for an instrumented client's the send start and when the result
  came back (the latest the broker can have stored it); successful copies carry the
  physical offset of their offsetMsgId;
* a copy's **broker group and generation** come from the leadership intervals of its
  store host: leader_elected / master_elected events emitted by the leader itself, and
  role_change events to a leader or master role; a copy belongs to the last leadership of
  its host that started at or before it was stored;
* a copy is **truncated** when a truncation event of its group in a later generation,
  after the copy was stored, covers its offset;
* an **attempt** is one delivery to a consumer group: SubBefore and SubAfter joined on
  (requestId, msgId); either may be missing.  A **DLQ move** of (msgId, group G) is a
  failed attempt of G with ``retry_times >= 16`` (maxReconsumeTimes) or any delivery of
  the msgId from the topic ``%DLQ%G``, whichever is earlier.

Timestamps are epoch milliseconds (long) inside the model; the jobs convert at output.

Every table keyed by msgId also carries ``msg_key`` (``xxhash64(msg_id)``), and every join,
grouping and window on msgId puts it first.  Spark sorts (sort-merge joins, the sort-based
fallback of ``collect_list`` aggregates, windows) compare an 8-byte prefix of the first sort
column first, and RocketMQ msgIds from one producer share their first 16 hex characters (IP,
pid): keyed by the string, nearly every comparison fell back to the whole row.  The hash only
orders and places rows; msg_id equality is still required, so a collision changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from rocketscope.names import DLQ_PREFIX
from rocketscope.spark.asof import BROADCAST_ACKS, asof_join, asof_members
from rocketscope.spark.decode import DEFAULT_DECODER, decode_events, decode_trace
from rocketscope.spark.partitions import scale_shuffle_partitions
from rocketscope.spark.schema import MAX_RECONSUME_TIMES, QUORUM

NEG_INF = -(2**62)
POS_INF = 2**62
MSG_KEY = "msg_key"
"""``xxhash64(msg_id)``: the leading key of every msgId join, grouping and window (module docstring)."""
OBJECT_HASH_KEYS = 4096
"""Keys per task an object hash aggregate (percentile_approx, collect_list) keeps hashing before it sorts."""
COPY_KEY = [MSG_KEY, "msg_id", "born_ts", "store_host", "phys_offset"]
"""What tells one copy (send attempt) of a msgId from another."""


def leaderships(events: DataFrame) -> DataFrame:
    """(group, gen, mode, address, node, start_ts, valid_from, valid_to) per leadership of a node.

    ``valid_from`` of a host's first leadership is open (-inf): data stored before the
    first event we have still belongs to it.
    """
    role = F.lower(F.col("role"))
    is_leader = (
        F.col("type").isin("leader_elected", "master_elected")
        & ((F.col("leader") == "") | (F.col("leader") == F.col("node")))
    ) | ((F.col("type") == "role_change") & ((role == "leader") | role.endswith("master")))
    lead = (
        events.where(is_leader & (F.col("address") != ""))
        .groupBy("group", "gen", "address")
        .agg(F.min("ts").alias("start_ts"), F.first("mode").alias("mode"), F.min("node").alias("node"))
    )
    w = Window.partitionBy("address").orderBy("start_ts", "gen")
    return lead.select(
        "group",
        "gen",
        "mode",
        "address",
        "node",
        "start_ts",
        F.when(F.lag("start_ts").over(w).isNull(), F.lit(NEG_INF)).otherwise(F.col("start_ts")).alias("valid_from"),
        F.coalesce(F.lead("start_ts").over(w), F.lit(POS_INF)).alias("valid_to"),
    )


@dataclass
class Model:
    """Lazily built, cached intermediate tables over one set of input rows."""

    spark: SparkSession
    rows: DataFrame
    asof_method: str = "interval"
    decoder: str = DEFAULT_DECODER  # the JVM decoder when `make` built its jar, else SQL (spark/decode.py)
    bucket: int | None = None
    persist: bool = True
    # Where the shared tables are kept.  On disk by default: the operating system's page
    # cache keeps them in memory outside the JVM heap, so the driver's heap (the executor's
    # in ``local`` mode) stays free for execution.  With MEMORY_AND_DISK the cached blocks
    # (one per partition, about 100 MB each at 10M messages) competed with the sorts and
    # aggregates for the same heap, and a block read back from disk is copied whole into
    # the heap (``BlockManager.maybeCacheDiskBytesInMemory``): a Java heap
    # OutOfMemoryError in a small driver.  DISK_ONLY writes and reads blocks as streams.
    storage_level: StorageLevel = field(default_factory=lambda: StorageLevel.DISK_ONLY)
    _cache: dict[str, DataFrame] = field(default_factory=dict)

    def _keep(self, name: str, df: DataFrame) -> DataFrame:
        if self.persist:
            # The plan that fills the cache is made here, and made without adaptive execution so that it
            # reports its partitioning (by message) to the plans that read the cached table.  An adaptive
            # cached plan reports none until it has run, so every aggregate and join over a cached table
            # shuffled its rows again, although they were already partitioned by message: 11 shuffles of
            # message rows per run where this layout needs 2 (tests/test_spark_jobs.py counts them).
            adaptive = self.spark.conf.get("spark.sql.adaptive.enabled")
            self.spark.conf.set("spark.sql.adaptive.enabled", "false")
            try:
                df = df.persist(self.storage_level)
            finally:
                self.spark.conf.set("spark.sql.adaptive.enabled", adaptive or "true")
        self._cache[name] = df
        return df

    def cached(self, name: str, build: Callable[[], DataFrame]) -> DataFrame:
        """A job's own intermediate table, built once per model and persisted like the shared ones."""
        if name not in self._cache:
            self._keep(name, build())
        return self._cache[name]

    def unpersist(self) -> None:
        for df in self._cache.values():
            df.unpersist()
        self._cache.clear()

    def __post_init__(self) -> None:
        # One shuffle partition per ~20 MB of input when the session's count is its automatic one
        # (spark/partitions.py): the count every msgId-partitioned table then uses (:attr:`partitions`).
        scale_shuffle_partitions(self.spark, self.rows)
        # Joins on (msg_key, msg_id, more keys) may then reuse the tables' partitioning by
        # (msg_key, msg_id) instead of shuffling both sides again (module docstring).
        self.spark.conf.set("spark.sql.requireAllClusterKeysForCoPartition", "false")
        # An aggregate whose input is already sorted by its grouping keys runs as a sort aggregate (one
        # streaming pass) instead of a hash aggregate.  Spark only replaces an aggregate whose child is
        # sorted, so this never adds a sort.  The cached tables that the msgId-keyed aggregates and joins
        # read are kept sorted for it (:meth:`_sorted`): collect_list's ObjectHashAggregate fell back to
        # sorting in every task anyway, and the hash joins built hundreds of MB of hash map at 1M messages.
        self.spark.conf.set("spark.sql.execution.replaceHashWithSortAgg", "true")
        # The hash aggregates left holding objects are per (minute, topic, group, replica) or per
        # failover: hundreds of keys per task (replication_latency: 308 at 1M), each a percentile
        # digest.  Above Spark's 128 keys a task gives up hashing and sorts all its rows: once the
        # replication rows stayed in message order (every task sees every key), replication_latency's
        # 2.66M rows were sorted in all 8 tasks (task CPU 2.1 -> 4.8 s at 1M; 2.8 s with this).  The
        # per-message collect_list aggregates that made a higher threshold a loss in session 19 are sort
        # aggregates now (above), so no hash map here grows with messages.
        self.spark.conf.set("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", str(OBJECT_HASH_KEYS))

    @property
    def partitions(self) -> int:
        """The one partition count every msgId-partitioned table uses (so joins between them need no shuffle)."""
        return int(self.spark.conf.get("spark.sql.shuffle.partitions") or 200)

    def by_message(self, df: DataFrame) -> DataFrame:
        """``df`` hash-partitioned by (msg_key, msg_id) into :attr:`partitions` partitions.

        An explicit count: adaptive execution does not coalesce it, so two tables
        partitioned here stay co-partitioned.
        """
        return df.repartition(self.partitions, MSG_KEY, "msg_id")

    @staticmethod
    def _sorted(df: DataFrame, keys: list[str]) -> DataFrame:
        """``df`` sorted within its partitions by ``keys`` (leading ``msg_key``: a long sort prefix).

        A cached table remembers its plan's ordering, so the aggregates and joins over it by a
        prefix of ``keys`` need no sort and no hash table of their own: sort aggregates and
        sort-merge joins that stream (docs/ANALYTICS.md, "How the shared tables are laid out").
        """
        return df.sortWithinPartitions(*keys)

    # ------------------------------------------------------------------ inputs
    @property
    def records(self) -> DataFrame:
        """Decoded trace records with ``msg_key``, hash-partitioned by message: the one shuffle of every record.

        Exact duplicates (a trace message written twice) are not removed here: a
        duplicated Pub is removed in :attr:`pubs`, duplicated Sub records collapse in
        :attr:`attempts` (one SubBefore and one SubAfter per request id), which is
        what the plain-Python reference does too.  Removing them from all records was a
        sort of every record by the whole row.
        """
        if "records" not in self._cache:
            records = decode_trace(self.rows, self.decoder).withColumn(MSG_KEY, F.xxhash64("msg_id"))
            self._keep("records", self.by_message(records))
        return self._cache["records"]

    @property
    def events(self) -> DataFrame:
        if "events" not in self._cache:
            self._keep("events", decode_events(self.rows))
        return self._cache["events"]

    @property
    def leaderships(self) -> DataFrame:
        if "leaderships" not in self._cache:
            self._keep("leaderships", leaderships(self.events))
        return self._cache["leaderships"]

    # ------------------------------------------------------------------ copies
    @property
    def pubs(self) -> DataFrame:
        """One row per distinct Pub record with broker group, gen, mode and truncated flag.

        Narrow work on the message-partitioned records: the exact-duplicate removal is an
        aggregate within each partition (the keys include msg_key and msg_id, so no
        shuffle), the leadership and truncation tables are broadcast.
        """
        if "pubs" in self._cache:
            return self._cache["pubs"]
        pubs = self.records.where(F.col("rec_type") == "Pub").select(
            MSG_KEY,
            "msg_id",
            "topic",
            F.col("grp").alias("producer_group"),
            "keys",
            F.col("ts").alias("born_ts"),
            (F.col("ts") + F.coalesce(F.col("cost_time"), F.lit(0))).alias("stored_ts"),
            "store_host",
            "phys_offset",
            F.coalesce(F.col("success"), F.lit(False)).alias("success"),
            "origin_topic",
        ).dropDuplicates().drop("origin_topic")
        lead = F.broadcast(self.leaderships.alias("ld"))
        mapped = pubs.join(
            lead,
            on=(pubs["store_host"] == F.col("ld.address"))
            & (F.col("ld.valid_from") <= pubs["stored_ts"])
            & (pubs["stored_ts"] < F.col("ld.valid_to")),
            how="left",
        ).select(
            *[pubs[c] for c in pubs.columns],
            F.col("ld.group").alias("broker_group"),
            F.col("ld.gen").alias("gen"),
            F.col("ld.mode").alias("ha_mode"),
        )
        # Truncations are few (one or two per failover): one broadcast row per broker group
        # with all of them, tested per copy with a higher-order function instead of a
        # semi-join and a join back (two shuffles of every copy).
        trunc = F.broadcast(
            self.events.where(F.col("type") == "truncation")
            .groupBy(F.col("group").alias("t_group"))
            .agg(F.collect_list(F.struct(
                F.col("gen").alias("gen"), F.col("ts").alias("ts"),
                F.col("from_offset").alias("lo"), F.col("to_offset").alias("hi"),
            )).alias("truncs"))
        )
        stored = F.col("success") & F.col("phys_offset").isNotNull() & F.col("broker_group").isNotNull()
        covered = F.exists(
            F.col("truncs"),
            lambda t: (t["gen"] > F.col("gen")) & (t["ts"] >= F.col("stored_ts"))
            & (t["lo"] <= F.col("phys_offset")) & (F.col("phys_offset") < t["hi"]),
        )
        out = (
            mapped.join(trunc, on=F.col("broker_group") == F.col("t_group"), how="left")
            .withColumn("truncated", F.coalesce(stored & covered, F.lit(False)))
            .drop("t_group", "truncs")
        )
        return self._keep("pubs", self._sorted(out, COPY_KEY))

    @property
    def copies(self) -> DataFrame:
        """:attr:`pubs` with ``acks``, every replica's ack of each copy, and the quorum commit time.

        ``acks`` is the array of (replica, ts) over the replicas of the copy's (broker group, generation),
        the quorum commit as ``__quorum__``, sorted by replica; null for a copy that was not stored or
        whose group and generation nobody acked.  With the interval as-of join (the default) it is one
        join of the copies themselves (:func:`~rocketscope.spark.asof.asof_members`): one row per copy,
        no aggregate.  Until session 21 every stored copy was joined once per replica (2.66M rows at 1M
        messages, cached as :attr:`replication`) and aggregated back per copy; the window method still
        does that.  The intervals are broadcast up to ``BROADCAST_ACKS`` distinct acks, so the rows keep
        :attr:`pubs`' partitioning and order and the explicit partitioning and sort below plan nothing
        (tests/test_spark_jobs.py pins it); above the limit they bring the rows back to them.
        """
        if "copies" in self._cache:
            return self._cache["copies"]
        if self.asof_method == "interval":
            stored = F.col("success") & F.col("phys_offset").isNotNull() & F.col("broker_group").isNotNull()
            left = self.pubs.withColumn("__offset", F.when(stored, F.col("phys_offset")))
            joined = asof_members(left, self.acks, ["broker_group", "gen"], "replica", "__offset", "acks",
                                  bucket=self.bucket, broadcast_limit=BROADCAST_ACKS).drop("__offset")
            copies = self._sorted(self.by_message(joined), COPY_KEY)
        else:
            rep = self._sorted(self.by_message(self.replication), COPY_KEY).groupBy(*COPY_KEY).agg(
                F.array_sort(F.collect_list(F.struct("replica", F.col("ack_ts").alias("ts")))).alias("acks"))
            # both sides sorted by the copy key: a sort-merge join with no sort
            copies = self.pubs.join(rep, on=COPY_KEY, how="left")
        committed = F.array_max(F.transform(F.filter("acks", lambda a: a["replica"] == QUORUM), lambda a: a["ts"]))
        return self._keep("copies", copies.withColumn("committed_ts", committed))

    @property
    def stored_copies(self) -> DataFrame:
        """Successful copies whose broker group and generation are known, before the truncation flag."""
        return self.pubs.where(
            F.col("success") & F.col("phys_offset").isNotNull() & F.col("broker_group").isNotNull()
        ).select(MSG_KEY, "msg_id", "topic", "born_ts", "stored_ts", "store_host", "phys_offset", "broker_group", "gen")

    # ------------------------------------------------------------- replication
    @property
    def acks(self) -> DataFrame:
        """(broker_group, gen, replica, offset, ts): replica acks, and commits under the replica ``__quorum__``."""
        ev = self.events
        return ev.where((F.col("type") == "replica_ack") & (F.col("replica") != "") & (F.col("offset") >= 0)).select(
            F.col("group").alias("broker_group"), "gen", "replica", "offset", "ts"
        ).unionByName(
            ev.where((F.col("type") == "commit_advanced") & (F.col("offset") >= 0)).select(
                F.col("group").alias("broker_group"), "gen", F.lit(QUORUM).alias("replica"), "offset", "ts"
            )
        )

    @property
    def replication(self) -> DataFrame:
        """One row per (stored copy, replica of its group and generation) with ``ack_ts`` (null: never acked).

        With the interval method, :attr:`copies`' ``acks`` exploded (not cached: replication_latency
        is its one reader); with the window method, the per-replica as-of join that :attr:`copies`
        aggregates.
        """
        columns = ["broker_group", "gen", MSG_KEY, "msg_id", "topic", "born_ts", "stored_ts", "store_host",
                   "phys_offset"]
        if self.asof_method == "interval":
            return self.copies.select(*columns, F.explode("acks").alias("a")).select(
                *columns, F.col("a.replica").alias("replica"), F.col("a.ts").alias("ack_ts"))
        if "replication" in self._cache:
            return self._cache["replication"]
        acks = self.acks
        replicas = acks.select("broker_group", "gen", "replica").distinct()
        candidates = self.stored_copies.join(F.broadcast(replicas), on=["broker_group", "gen"], how="inner")
        joined = asof_join(
            candidates, acks, ["broker_group", "gen", "replica"], "phys_offset", "ack_ts",
            method=self.asof_method, bucket=self.bucket, broadcast_limit=BROADCAST_ACKS,
        )
        return self._keep("replication", joined)

    # ------------------------------------------------------------- consumption
    def _deliveries(self) -> DataFrame:
        """The Sub records and the successful Pubs on a ``%DLQ%`` topic, in one aggregate of one scan.

        Keyed by (msg_key, msg_id, dlq_topic, request_id): a delivery is the first SubBefore and the
        first SubAfter of one (msgId, request id) (the Python reference keeps the first of each too),
        with ``dlq_topic`` null; a DLQ Pub row is one (msgId, ``%DLQ%`` topic) with its earliest
        timestamp as ``dlq_pub_t``.  Inside the records' message partitions: no shuffle.

        It was a de-duplication of each Sub kind, a full outer join of the two and a third filter of
        the records for the DLQ Pubs: three scans of the cached records (DISK_ONLY: a scan reads
        every column of every cached block) and a join, and a shuffle of the attempts afterwards,
        since a full outer join's output is not known to be partitioned by message.
        """
        rec = F.col("rec_type")
        is_pub = rec == "Pub"
        rows = self.records.where(
            rec.isin("SubBefore", "SubAfter")
            | (is_pub & F.col("topic").startswith(DLQ_PREFIX) & F.coalesce(F.col("success"), F.lit(True)))
        )
        return rows.groupBy(
            MSG_KEY, "msg_id",
            F.when(is_pub, F.col("topic")).alias("dlq_topic"),
            F.when(~is_pub, F.col("request_id")).alias("request_id"),
        ).agg(
            F.first(F.when(rec == "SubBefore", F.struct(
                F.col("grp").alias("grp"), F.col("ts").alias("ts"), "retry_times", "origin_topic",
            )), ignorenulls=True).alias("b"),
            F.first(F.when(rec == "SubAfter", F.struct(
                F.col("grp").alias("grp"), F.col("ts").alias("ts"), "cost_time", "success", "origin_topic",
            )), ignorenulls=True).alias("a"),
            F.min(F.when(is_pub, F.col("ts"))).alias("dlq_pub_t"),
        )

    @staticmethod
    def _attempt_columns() -> list[Column]:
        """An attempt's columns from a row of :meth:`_deliveries` (null for a DLQ Pub row)."""
        return [
            F.coalesce("b.grp", "a.grp").alias("grp"),
            F.col("b.ts").alias("begin_ts"),
            F.coalesce("a.ts", F.col("b.ts") + F.col("a.cost_time")).alias("end_ts"),
            F.col("a.success").alias("success"),
            F.col("b.retry_times").alias("retry_times"),
            F.coalesce("b.origin_topic", "a.origin_topic").alias("origin_topic"),
        ]

    @property
    def attempts(self) -> DataFrame:
        """One row per delivery attempt: the SubBefore and the SubAfter of one (msgId, request id)."""
        return self._deliveries().where(F.col("dlq_topic").isNull()).select(
            MSG_KEY, "msg_id", "request_id", *self._attempt_columns()
        ).where(F.col("grp").isNotNull())

    @property
    def consumers(self) -> DataFrame:
        """One row per (msg_id, consumer group): deliveries, first delivery and ack, retries, DLQ.

        One pass over the rows of :meth:`_deliveries` for all groupings: every attempt counts for its
        own group, an attempt read from %DLQ%<G> once more for G (the DLQ move it shows), and a Pub on
        %DLQ%<G> -- the broker's record of the move itself (trace/broker_side.py on_dead_lettered), also
        for a group whose retryMaxTimes is below MAX_RECONSUME_TIMES and whose dead letters nobody
        reads -- for G, with no delivery of its own (via_dlq).
        """
        if "consumers" in self._cache:
            return self._cache["consumers"]
        rows = self._deliveries().select(MSG_KEY, "msg_id", "request_id", "dlq_topic", "dlq_pub_t",
                                         *self._attempt_columns())
        dlq_grp = F.when(F.col("origin_topic").startswith(DLQ_PREFIX),
                         F.substring(F.col("origin_topic"), len(DLQ_PREFIX) + 1, 1 << 16))
        is_pub = F.col("dlq_topic").isNotNull()
        roles = F.when(is_pub, F.array(F.struct(
            F.substring(F.col("dlq_topic"), len(DLQ_PREFIX) + 1, 1 << 16).alias("g"), F.lit(True).alias("via_dlq"),
        ))).otherwise(F.array_compact(F.array(
            F.struct(F.col("grp").alias("g"), F.lit(False).alias("via_dlq")),
            F.when(dlq_grp.isNotNull(), F.struct(dlq_grp.alias("g"), F.lit(True).alias("via_dlq"))),
        )))
        tagged = rows.where(is_pub | F.col("grp").isNotNull()).select("*", F.explode(roles).alias("role")).select(
            MSG_KEY, "msg_id", "request_id", "begin_ts", "end_ts", "success", "retry_times",
            F.col("role.g").alias("role_grp"), F.col("role.via_dlq").alias("via_dlq"), "dlq_pub_t")
        own = ~F.col("via_dlq")
        failed_final = own & (F.col("success") == F.lit(False)) & (F.col("retry_times") >= MAX_RECONSUME_TIMES)
        # The rows of _deliveries (an aggregate inside the records' partitions) are already
        # partitioned by message, so Spark plans no shuffle for this explicit partitioning
        # (tests/test_spark_jobs.py counts them); it stays as the guarantee that the aggregate by
        # (message, group) and its output (the cached table message_timeline reads) are partitioned by message.
        # Sorted by the aggregate's keys first, so that it runs as a code-generated sort aggregate (its
        # buffers are all numbers) whose output is already in the order the cached table is kept in; as a hash
        # aggregate keyed by the msgId string it showed 3.7 of the step's 6.4 s of task time as "aggregation
        # build" at 1M messages, and its output was sorted again.  Quiet A/B, two rounds of three passes:
        # the step 7.15 -> 6.43 JVM CPU s warm (docs/ANALYTICS.md, "Session 24").  The optimizer drops a sort
        # below an aggregate whose functions all ignore row order (min, max, count: EliminateSorts), so
        # ``dlq_pub_ts`` is a ``first``, which keeps it; it equals the minimum: of the rows of one (msgId,
        # group) only the group's DLQ Pub row has a dlq_pub_t, and _deliveries makes one such row per
        # (msgId, %DLQ% topic).  tests/test_spark_jobs.py checks the plan.
        stats = self.by_message(tagged).sortWithinPartitions(MSG_KEY, "msg_id", "role_grp").groupBy(
            MSG_KEY, "msg_id", F.col("role_grp").alias("grp")
        ).agg(
            # attempts are unique per (msgId, request id) after the join: a plain count, no distinct aggregate
            F.count(F.when(own, F.col("request_id"))).alias("deliveries"),
            F.min(F.when(own, F.col("begin_ts"))).alias("first_delivery_ts"),
            F.min(F.when(own & F.col("success"), F.col("end_ts"))).alias("first_ack_ts"),
            F.max(F.when(own, F.col("retry_times"))).alias("max_retry_times"),
            F.count(F.when(own & (F.col("success") == F.lit(False)), True)).alias("failures"),
            F.min(F.when(failed_final, F.coalesce("end_ts", "begin_ts"))).alias("dlq_retry_ts"),
            F.min(F.when(F.col("via_dlq"), F.coalesce("begin_ts", "end_ts"))).alias("dlq_read_ts"),
            F.first("dlq_pub_t", ignorenulls=True).alias("dlq_pub_ts"),  # keeps the sort above: see there
        )
        dlq_topic_ts = F.least("dlq_read_ts", "dlq_pub_ts")
        joined = stats.select(
            MSG_KEY,
            "msg_id",
            "grp",
            F.col("deliveries").cast("int").alias("deliveries"),
            "first_delivery_ts",
            "first_ack_ts",
            "max_retry_times",
            F.col("failures").cast("int").alias("failures"),
            (F.col("dlq_retry_ts").isNotNull() | dlq_topic_ts.isNotNull()).alias("dlq"),
            F.least("dlq_retry_ts", dlq_topic_ts).alias("dlq_ts"),
        )
        # sorted for message_timeline's per-msgId aggregate and join (:meth:`_sorted`)
        return self._keep("consumers", self._sorted(joined, [MSG_KEY, "msg_id", "grp"]))

    # ---------------------------------------------------------------- messages
    @property
    def messages(self) -> DataFrame:
        """One row per msgId that has Pub records: the effective copy and the msg-level flags.

        The effective copy is the earliest successful copy that was not truncated; else
        the earliest successful one; else the earliest attempt.
        """
        if "messages" in self._cache:
            return self._cache["messages"]
        live = F.col("success") & ~F.col("truncated")
        # The effective copy as the minimum of a struct whose leading fields are the order
        # (live first, then successful, then earliest stored, then store host): one
        # aggregate within the message partitions, instead of a window sort, an aggregate
        # and a join back.
        eff = F.min(F.struct(
            (~live).alias("o1"), (~F.col("success")).alias("o2"), F.col("stored_ts").alias("o3"),
            F.col("store_host").alias("o4"),
            *[F.col(c) for c in ("topic", "producer_group", "keys", "broker_group", "ha_mode", "gen", "born_ts",
                                 "phys_offset", "success", "stored_ts", "committed_ts", "acks")],
        )).alias("eff")
        flags = self.copies.groupBy(MSG_KEY, "msg_id").agg(
            eff,
            F.min("born_ts").alias("first_born_ts"),
            F.count(F.lit(1)).cast("int").alias("send_attempts"),
            F.count(F.when(~F.col("success"), True)).cast("int").alias("failed_sends"),
            F.count(F.when(F.col("truncated"), True)).cast("int").alias("truncated_copies"),
            F.max(F.when(live, F.col("stored_ts"))).alias("last_live_ts"),
            F.min(F.when(F.col("truncated"), F.col("stored_ts"))).alias("first_truncated_ts"),
        )
        msgs = flags.select(
            MSG_KEY, "msg_id", "eff.topic", "eff.producer_group", "eff.keys",
            F.col("first_born_ts").alias("born_ts"),
            F.when(F.col("eff.success"), F.col("eff.stored_ts")).alias("stored_ts"),
            F.col("eff.o4").alias("store_host"), "eff.broker_group", "eff.ha_mode", "eff.gen",
            F.col("eff.born_ts").alias("eff_born_ts"),
            "eff.phys_offset", "eff.success", "eff.committed_ts",
            # the effective copy's followers (the quorum is committed_ts), as (replica, ack time, latency)
            F.transform(F.filter("eff.acks", lambda a: a["replica"] != QUORUM), lambda a: F.struct(
                a["replica"].alias("replica"), F.timestamp_millis(a["ts"]).alias("ack_ts"),
                (a["ts"] - F.col("eff.born_ts")).alias("latency_ms"),
            )).alias("replicas"),
            "send_attempts", "failed_sends", "truncated_copies",
            ((F.col("truncated_copies") > 0) & (F.col("last_live_ts") > F.col("first_truncated_ts"))).alias("resent"),
            ((F.col("truncated_copies") > 0) & F.col("last_live_ts").isNull()).alias("lost"),
        )
        return self._keep("messages", msgs)
