"""The ``rocketscope`` Spark data source: read broker topics live through PullMessage.

    from rocketscope.spark.datasource import register
    register(spark)
    df = (spark.read.format("rocketscope")
          .option("namesrv", "127.0.0.1:9876")
          .option("topic", "RMQ_SYS_TRACE_TOPIC,RMQ_SYS_HA_EVENTS")
          .option("startingOffsets", "earliest")          # or latest, or per-queue JSON
          .option("endingOffsets", "latest")
          .load())

Why a Python data source (``pyspark.sql.datasource``, Spark 4) and not a JVM connector:
the broker speaks gRPC with protobuf messages that the ``rocketmq`` package already
defines, and executors run Python workers anyway; nothing has to be built or shipped.

Routes come from the name server (``GetRouteInfoByTopic``): every broker group hosting
a topic and its read queues.  Each (topic, broker group, queue) is one input partition,
read by one task with ``PullMessage`` from its start offset up to (excluding) its end
offset.  The driver only asks for queue bounds (``QueryOffset``); the messages never pass
through it, and the gRPC channels are opened inside ``read()`` on the executor (a
channel does not survive pickling to a Python worker).  The columns are
:data:`rocketscope.spark.schema.SOURCE_SCHEMA`; :func:`as_rows` projects them onto the
jobs' row schema, so every job reads live topics and Parquet files alike.

Offsets options, in the style of Spark's Kafka source:

* ``earliest`` / ``latest`` for every queue;
* JSON ``{"<broker>": {"<queueId>": offset}}`` (one topic) or
  ``{"<topic>": {"<broker>": {"<queueId>": offset}}}``, where ``-2`` means earliest and
  ``-1`` latest; queues not named take ``earliest`` (starting) or ``latest`` (ending).
  A named queue the topic's route does not have is an error (a typo would otherwise
  read everything).

Streaming (``spark.readStream.format("rocketscope")``): the offset of a micro-batch is
the next offset of every queue in the same nested shape, ``{"<topic>": {"<broker>":
{"<queueId>": next}}}``, kept in Spark's checkpoint, so a restarted query continues
where it stopped (and a checkpoint's offsets can be pasted into ``startingOffsets``);
queues that appear later start at their earliest offset.  ``maxMessagesPerTrigger``
caps a micro-batch (shared fairly over the queues); ``Trigger.AvailableNow`` reads up to
the offsets seen when it started.  A retention-deleted range is skipped (ILLEGAL_OFFSET
gives the queue's new minimum).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from rocketscope import topic_reader
from rocketscope.names import COMMITLOG_OFFSET_PROPERTY
from rocketscope.spark.schema import SOURCE_SCHEMA
from rocketscope.topic_reader import QueueRef

NAME = "rocketscope"
EARLIEST, LATEST = -2, -1
DEFAULT_BATCH = 256

OPTION_NAMES = ("namesrv", "topic", "startingOffsets", "endingOffsets", "maxMessagesPerTrigger", "batchSize",
                "timeoutMs")

Offsets = dict[str, int]
"""Offsets by queue key ``topic|broker|queueId`` (the flat form used inside this module)."""


class OptionError(ValueError):
    """A bad option: the message names it."""


class QueueRange(InputPartition):
    """One input partition: messages [start, end) of one queue."""

    def __init__(self, queue: QueueRef, start: int, end: int) -> None:
        super().__init__(queue.key)
        self.queue, self.start, self.end = queue, start, end


# ----------------------------------------------------------------------- options
def _required(options: dict[str, str], name: str) -> str:
    value = (options.get(name) or "").strip()
    if not value:
        raise OptionError(f"option {name} is required (e.g. .option('{name}', ...))")
    return value


def nest(offsets: Offsets) -> dict[str, dict[str, dict[str, int]]]:
    """``{"t|b|q": n}`` as ``{"t": {"b": {"q": n}}}``, keys sorted (Spark compares offsets as JSON text)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for key in sorted(offsets, key=_sort_key):
        topic, broker, qid = key.split("|")
        out.setdefault(topic, {}).setdefault(broker, {})[qid] = int(offsets[key])
    return out


def flatten(nested: dict[str, Any]) -> Offsets:
    """The inverse of :func:`nest` (a checkpointed streaming offset)."""
    return {f"{t}|{b}|{q}": int(n) for t, brokers in nested.items() for b, queues in brokers.items()
            for q, n in queues.items()}


def _sort_key(key: str) -> tuple[str, str, int]:
    topic, broker, qid = key.split("|")
    return topic, broker, int(qid)


def parse_offsets(text: str | None, topics: Sequence[str], name: str, default: int) -> tuple[int, Offsets]:
    """(default for unnamed queues, {"topic|broker|qid": offset}) from an offsets option."""
    raw = (text or "").strip()
    if not raw:
        return default, {}
    if raw.lower() == "earliest":
        return EARLIEST, {}
    if raw.lower() == "latest":
        return LATEST, {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise OptionError(f"option {name} must be earliest, latest or JSON like "
                          f'{{"broker-a": {{"0": 12, "1": -2}}}}: {exc}') from None
    if not isinstance(data, dict):
        raise OptionError(f"option {name} must be a JSON object of topics or brokers")
    if len(topics) == 1 and topics[0] not in data:
        data = {topics[0]: data}
    out: Offsets = {}
    for topic, brokers in data.items():
        if topic not in topics:
            raise OptionError(f"option {name} names topic {topic!r}, which is not in option topic")
        if not isinstance(brokers, dict):
            raise OptionError(f"option {name}: the value of topic {topic!r} must be an object of brokers")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise OptionError(f"option {name}: broker {broker!r} must map queue ids to offsets")
            for qid, offset in queues.items():
                if not str(qid).isdigit() or type(offset) is not int or offset < -2:
                    raise OptionError(f"option {name}: queue {qid!r} of broker {broker!r} needs an integer "
                                      f"offset >= -2 (got {offset!r})")
                out[f"{topic}|{broker}|{int(qid)}"] = offset
    return default, out


@dataclass(frozen=True)
class Settings:
    namesrv: str
    topics: tuple[str, ...]
    starting: tuple[int, Offsets]
    ending: tuple[int, Offsets]
    ending_given: bool
    max_per_trigger: int | None
    batch_size: int
    timeout_s: float

    @classmethod
    def from_options(cls, given: dict[str, str]) -> Settings:
        """Spark passes option names case-insensitively (often lower-cased): look them up that way."""
        lowered = {k.lower(): v for k, v in given.items()}
        options = {name: lowered[name.lower()] for name in OPTION_NAMES if name.lower() in lowered}
        unknown = sorted(set(lowered) - {n.lower() for n in OPTION_NAMES} - {"path"})
        if unknown:
            raise OptionError(f"unknown option(s) {', '.join(unknown)}: the rocketscope source takes "
                              f"{', '.join(OPTION_NAMES)}")
        namesrv = _required(options, "namesrv")
        topics = tuple(t.strip() for t in _required(options, "topic").split(",") if t.strip())
        numbers: dict[str, float] = {}
        for name, default in (("batchSize", DEFAULT_BATCH), ("timeoutMs", 10_000), ("maxMessagesPerTrigger", 0)):
            try:
                numbers[name] = float(options.get(name, default))
            except ValueError:
                raise OptionError(f"option {name} must be a number (got {options[name]!r})") from None
        batch = int(numbers["batchSize"])
        if not 1 <= batch <= 1024:
            raise OptionError(f"option batchSize must be between 1 and 1024 (got {batch})")
        if numbers["timeoutMs"] <= 0:
            raise OptionError("option timeoutMs must be positive")
        if numbers["maxMessagesPerTrigger"] < 0:
            raise OptionError("option maxMessagesPerTrigger must be positive")
        return cls(namesrv, topics,
                   parse_offsets(options.get("startingOffsets"), topics, "startingOffsets", EARLIEST),
                   parse_offsets(options.get("endingOffsets"), topics, "endingOffsets", LATEST),
                   "endingOffsets" in options, int(numbers["maxMessagesPerTrigger"]) or None,
                   batch, numbers["timeoutMs"] / 1000)


# ------------------------------------------------------------------- broker calls
def discover_queues(settings: Settings) -> list[QueueRef]:
    """Every read queue of every topic (a route problem is reported against the option that caused it)."""
    try:
        return topic_reader.discover_queues(settings.namesrv, settings.topics, settings.timeout_s)
    except topic_reader.NoRoute as exc:
        raise OptionError(f"option topic: {exc}") from None
    except topic_reader.Unreachable as exc:
        raise OptionError(f"option namesrv: {exc}") from None


def _check_named(named: Offsets, queues: Sequence[QueueRef], name: str) -> None:
    """A queue named in an offsets option that the route does not have is a mistake, not 'nothing to read'."""
    missing = sorted(set(named) - {q.key for q in queues})
    if missing:
        have = ", ".join(sorted({f"{q.topic}/{q.broker}/{q.queue_id}" for q in queues})) or "none"
        raise OptionError(f"option {name} names queue(s) {', '.join(m.replace('|', '/') for m in missing)} "
                          f"that the route does not have (it has {have})")


def resolve(wanted: int, lo: int, hi: int) -> int:
    if wanted == EARLIEST:
        return lo
    if wanted == LATEST:
        return hi
    return min(max(wanted, lo), hi)


def share(budget: int, backlog: dict[str, int]) -> dict[str, int]:
    """Split ``budget`` messages over queues fairly (water-filling): small backlogs are read
    whole, the rest get equal shares, so one busy queue cannot starve the others."""
    out = dict.fromkeys(backlog, 0)
    waiting = sorted((n, k) for k, n in backlog.items() if n > 0)
    while waiting and budget > 0:
        each = max(1, budget // len(waiting))
        n, key = waiting.pop(0)
        take = min(n, each, budget)
        out[key] = take
        budget -= take
    return out


def pull_rows(queue: QueueRef, start: int, end: int, batch_size: int, timeout_s: float) -> Iterator[tuple[Any, ...]]:
    """Rows of [start, end) of one queue, pulled in batches (runs on executors)."""
    for m in topic_reader.pull_messages(queue, start, end, batch_size, timeout_s):
        yield to_row(m, queue)


def _ts(sp: Any, field: str) -> datetime | None:
    return datetime.fromtimestamp(getattr(sp, field).ToMilliseconds() / 1000, UTC) if sp.HasField(field) else None


def to_row(m: Any, queue: QueueRef) -> tuple[Any, ...]:
    """A v2 Message as a SOURCE_SCHEMA tuple."""
    sp = m.system_properties
    props = dict(m.user_properties)
    commitlog = int(props.pop(COMMITLOG_OFFSET_PROPERTY, "-1") or -1)
    return (m.topic.name, queue.broker, queue.queue_id, sp.queue_offset, commitlog, _ts(sp, "store_timestamp"),
            _ts(sp, "born_timestamp"), list(sp.keys), sp.tag if sp.HasField("tag") else None, props,
            bytes(m.body), sp.message_id or None)


# ------------------------------------------------------------------- the source
class RocketScopeDataSource(DataSource):
    """``format("rocketscope")``: batch and streaming reads of broker topics."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(Settings.from_options(dict(self.options)))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        settings = Settings.from_options(dict(self.options))
        if settings.ending_given:
            raise OptionError("option endingOffsets is for batch reads only: a stream has no end")
        return StreamReader(settings)


class BatchReader(DataSourceReader):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        s = self.settings
        queues = discover_queues(s)
        _check_named(s.starting[1], queues, "startingOffsets")
        _check_named(s.ending[1], queues, "endingOffsets")
        parts: list[InputPartition] = []
        for q in queues:
            lo, hi = topic_reader.queue_bounds(q, s.timeout_s)
            start = resolve(s.starting[1].get(q.key, s.starting[0]), lo, hi)
            end = resolve(s.ending[1].get(q.key, s.ending[0]), lo, hi)
            if start < end:
                parts.append(QueueRange(q, start, end))
        return parts or [QueueRange(QueueRef("", "", -1, ()), 0, 0)]  # Spark wants at least one partition

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, QueueRange)
        if partition.start >= partition.end:
            return iter(())
        return pull_rows(partition.queue, partition.start, partition.end, self.settings.batch_size,
                         self.settings.timeout_s)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over every queue; offsets ``{topic: {broker: {queueId: next}}}`` live in the checkpoint.

    Uses the 4.2+ ``latestOffset(start, limit)`` form (admission control), so
    ``maxMessagesPerTrigger`` and ``Trigger.AvailableNow`` both work.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._queues: dict[str, QueueRef] = {}
        self._target: Offsets | None = None  # AvailableNow: never read past what existed when it started

    def _bounds(self) -> dict[str, tuple[int, int]]:
        bounds = {}
        for q in discover_queues(self.settings):
            self._queues[q.key] = q
            bounds[q.key] = topic_reader.queue_bounds(q, self.settings.timeout_s)
        return bounds

    def initialOffset(self) -> dict:
        default, named = self.settings.starting
        bounds = self._bounds()
        _check_named(named, [self._queues[k] for k in bounds], "startingOffsets")
        return nest({key: resolve(named.get(key, default), lo, hi) for key, (lo, hi) in bounds.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.settings.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {key: hi for key, (_lo, hi) in self._bounds().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = flatten(start)
        bounds = self._bounds()
        latest = {key: hi for key, (_lo, hi) in bounds.items()}
        if self._target is not None:
            latest = {key: min(hi, self._target.get(key, begin.get(key, bounds[key][0]))) for key, hi in latest.items()}
        # a queue that appeared since ``start`` begins at its earliest offset
        first = {key: begin.get(key, bounds[key][0]) for key in latest}
        end = {key: max(first[key], hi) for key, hi in latest.items()}
        if isinstance(limit, ReadMaxRows):
            allowed = share(int(limit.max_rows), {key: end[key] - first[key] for key in end})
            end = {key: first[key] + allowed[key] for key in end}
        for key, offset in begin.items():  # a queue gone from the route keeps its offset
            end.setdefault(key, offset)
        return nest(end)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = flatten(start), flatten(end)
        if any(key not in self._queues for key in stop):
            self._bounds()
        parts: list[InputPartition] = []
        for key, upto in sorted(stop.items()):
            q = self._queues.get(key)
            lo = begin.get(key, 0)  # not in start: appeared during this batch; the pull skips to its minimum
            if q is not None and lo < upto:
                parts.append(QueueRange(q, lo, upto))
        return parts

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, QueueRange)
        return pull_rows(partition.queue, partition.start, partition.end, self.settings.batch_size,
                         self.settings.timeout_s)

    def commit(self, end: dict) -> None:
        """Nothing to do: the broker keeps no state for this reader; Spark's checkpoint holds the offsets."""


# ------------------------------------------------------------------- helpers
def register(spark: Any) -> None:
    """Make ``format("rocketscope")`` available in this SparkSession."""
    spark.dataSource.register(RocketScopeDataSource)


def read_topics(spark: Any, namesrv: str, topics: Sequence[str], **options: str) -> Any:
    """A batch DataFrame (SOURCE_SCHEMA) of ``topics``, earliest to latest unless options say otherwise."""
    register(spark)
    reader = spark.read.format(NAME).option("namesrv", namesrv).option("topic", ",".join(topics))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def stream_topics(spark: Any, namesrv: str, topics: Sequence[str], **options: str) -> Any:
    """A streaming DataFrame (SOURCE_SCHEMA) of ``topics`` (from the earliest offsets unless options say otherwise)."""
    register(spark)
    reader = (spark.readStream.format(NAME).option("namesrv", namesrv).option("topic", ",".join(topics))
              .option("startingOffsets", options.pop("startingOffsets", "earliest")))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def as_rows(df: Any) -> Any:
    """SOURCE_SCHEMA rows projected onto the jobs' ROW_SCHEMA (batch or streaming alike).

    Keys become RocketMQ's space-separated KEYS string and the message ID goes back into
    the properties as ``UNIQ_KEY``, as in the Parquet row files.
    """
    from pyspark.sql import functions as F

    props = F.coalesce(F.col("properties"), F.create_map().cast("map<string,string>"))
    with_id = F.when(F.col("msg_id").isNull() | props.getItem("UNIQ_KEY").isNotNull(), props).otherwise(
        F.map_concat(props, F.create_map(F.lit("UNIQ_KEY"), F.col("msg_id"))))
    keys = F.when(F.size("keys") > 0, F.array_join("keys", " "))
    return df.select("topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp", "born_timestamp",
                     keys.alias("keys"), "tags", with_id.alias("properties"), "body")
