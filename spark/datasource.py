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
through it.  The columns are exactly :data:`rocketscope.spark.schema.ROW_SCHEMA`, so
every job reads live topics and Parquet files alike.

Offsets options, in the style of Spark's Kafka source:

* ``earliest`` / ``latest`` for every queue;
* JSON ``{"<topic>": {"<broker>": {"<queueId>": offset}}}``, where ``-2`` means earliest
  and ``-1`` latest; queues not named take ``earliest`` (starting) or ``latest`` (ending).
  With one topic the topic level may be left out: ``{"broker-a": {"0": 12}}``.

Streaming (``spark.readStream.format("rocketscope")``): the offset of a micro-batch is a
JSON object ``{"<topic>|<broker>|<queueId>": next offset}`` that Spark keeps in its
checkpoint, so a restarted query continues where it stopped; queues that appear later
start at their earliest offset.  A message read from a queue moves the offset past it,
so nothing is read twice, and a retention-deleted range is skipped (ILLEGAL_OFFSET
gives the queue's new minimum).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from rocketscope import topic_reader
from rocketscope.spark.schema import ROW_SCHEMA
from rocketscope.topic_reader import COMMITLOG_OFFSET_PROPERTY, QueueRef

NAME = "rocketscope"
EARLIEST, LATEST = -2, -1
DEFAULT_BATCH = 256


OPTION_NAMES = ("namesrv", "topic", "startingOffsets", "endingOffsets", "batchSize", "timeoutMs")


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


def parse_offsets(text: str | None, topics: Sequence[str], name: str, default: int) -> tuple[int, dict[str, int]]:
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
        raise OptionError(f"option {name} must be earliest, latest or JSON: {exc}") from None
    if not isinstance(data, dict):
        raise OptionError(f"option {name} must be a JSON object of topics or brokers")
    if len(topics) == 1 and topics[0] not in data:
        data = {topics[0]: data}
    out: dict[str, int] = {}
    for topic, brokers in data.items():
        if topic not in topics:
            raise OptionError(f"option {name} names topic {topic!r}, which is not in option topic")
        if not isinstance(brokers, dict):
            raise OptionError(f"option {name}: the value of topic {topic!r} must be an object of brokers")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise OptionError(f"option {name}: broker {broker!r} must map queue ids to offsets")
            for qid, offset in queues.items():
                if not str(qid).isdigit() or not isinstance(offset, int) or offset < -2:
                    raise OptionError(f"option {name}: queue {qid!r} of broker {broker!r} needs an integer "
                                      f"offset >= -2 (got {offset!r})")
                out[f"{topic}|{broker}|{int(qid)}"] = offset
    return default, out


@dataclass(frozen=True)
class Settings:
    namesrv: str
    topics: tuple[str, ...]
    starting: tuple[int, dict[str, int]]
    ending: tuple[int, dict[str, int]]
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
        try:
            batch = int(options.get("batchSize", DEFAULT_BATCH))
            timeout_s = float(options.get("timeoutMs", 10_000)) / 1000
        except ValueError as exc:
            raise OptionError(f"options batchSize and timeoutMs must be numbers: {exc}") from None
        if not 1 <= batch <= 1024:
            raise OptionError(f"option batchSize must be between 1 and 1024 (got {batch})")
        return cls(namesrv, topics,
                   parse_offsets(options.get("startingOffsets"), topics, "startingOffsets", EARLIEST),
                   parse_offsets(options.get("endingOffsets"), topics, "endingOffsets", LATEST),
                   batch, timeout_s)


# ------------------------------------------------------------------- broker calls
def discover_queues(settings: Settings) -> list[QueueRef]:
    """Every read queue of every topic (a route problem is reported against the option that caused it)."""
    try:
        return topic_reader.discover_queues(settings.namesrv, settings.topics, settings.timeout_s)
    except topic_reader.NoRoute as exc:
        raise OptionError(f"option topic: {exc}") from None
    except topic_reader.Unreachable as exc:
        raise OptionError(f"option namesrv: {exc}") from None


def queue_bounds(queue: QueueRef, timeout_s: float) -> tuple[int, int]:
    return topic_reader.queue_bounds(queue, timeout_s)


def resolve(wanted: int, lo: int, hi: int) -> int:
    if wanted == EARLIEST:
        return lo
    if wanted == LATEST:
        return hi
    return min(max(wanted, lo), hi)


def pull_rows(queue: QueueRef, start: int, end: int, batch_size: int, timeout_s: float) -> Iterator[tuple[Any, ...]]:
    """Rows of [start, end) of one queue, pulled in batches (runs on executors)."""
    for m in topic_reader.pull_messages(queue, start, end, batch_size, timeout_s):
        yield to_row(m, queue.queue_id)


def to_row(m: Any, queue_id: int) -> tuple[Any, ...]:
    """A v2 Message as a ROW_SCHEMA tuple."""
    sp = m.system_properties
    props = dict(m.user_properties)
    commitlog = int(props.pop(COMMITLOG_OFFSET_PROPERTY, "-1") or -1)
    if sp.message_id:
        props.setdefault("UNIQ_KEY", sp.message_id)
    store = datetime.fromtimestamp(sp.store_timestamp.ToMilliseconds() / 1000, UTC) \
        if sp.HasField("store_timestamp") else None
    born = datetime.fromtimestamp(sp.born_timestamp.ToMilliseconds() / 1000, UTC) \
        if sp.HasField("born_timestamp") else None
    return (m.topic.name, queue_id, sp.queue_offset, commitlog, store, born, " ".join(sp.keys) or None,
            sp.tag if sp.HasField("tag") else None, props, bytes(m.body))


# ------------------------------------------------------------------- the source
class RocketScopeDataSource(DataSource):
    """``format("rocketscope")``: batch and streaming reads of broker topics."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return ROW_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(Settings.from_options(dict(self.options)))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(Settings.from_options(dict(self.options)))


class BatchReader(DataSourceReader):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        s = self.settings
        parts: list[InputPartition] = []
        for q in discover_queues(s):
            lo, hi = queue_bounds(q, s.timeout_s)
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


class StreamReader(DataSourceStreamReader):
    """Micro-batches over every queue; offsets {"topic|broker|qid": next offset} live in the checkpoint."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._queues: dict[str, QueueRef] = {}

    def _refresh(self) -> dict[str, tuple[int, int]]:
        bounds = {}
        for q in discover_queues(self.settings):
            self._queues[q.key] = q
            bounds[q.key] = queue_bounds(q, self.settings.timeout_s)
        return bounds

    def initialOffset(self) -> dict[str, int]:
        default, named = self.settings.starting
        return {key: resolve(named.get(key, default), lo, hi) for key, (lo, hi) in self._refresh().items()}

    def latestOffset(self) -> dict[str, int]:
        return {key: hi for key, (_lo, hi) in self._refresh().items()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        if not self._queues:
            self._refresh()
        parts: list[InputPartition] = []
        for key, stop in end.items():
            begin = start.get(key, 0)  # a queue that appeared since the last batch: from its beginning
            q = self._queues.get(key)
            if q is not None and begin < stop:
                parts.append(QueueRange(q, begin, stop))
        return parts

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, QueueRange)
        return pull_rows(partition.queue, partition.start, partition.end, self.settings.batch_size,
                         self.settings.timeout_s)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the broker keeps no state for this reader; Spark's checkpoint holds the offsets."""


def register(spark: Any) -> None:
    """Make ``format("rocketscope")`` available in this SparkSession."""
    spark.dataSource.register(RocketScopeDataSource)


def read_topics(spark: Any, namesrv: str, topics: Sequence[str], **options: str) -> Any:
    """A batch DataFrame of ROW_SCHEMA rows of ``topics`` (earliest to latest unless options say otherwise)."""
    register(spark)
    reader = spark.read.format(NAME).option("namesrv", namesrv).option("topic", ",".join(topics))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()
