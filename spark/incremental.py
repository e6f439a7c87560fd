"""Incremental runs: process only the input rows added since the last run and merge them into the tables.

A run keeps its state under ``<output>/_incremental/``:

* ``checkpoint.json``: the input Parquet files already processed (a file is new when its
  path was not seen; input files are immutable, as the generator, the streaming sink
  and Spark's own writers leave them);
* ``rows/slot=N/``: the trace and replica-ack rows processed so far, partitioned by the
  time slot (``slot_ms`` wide, absolute slot number) of their store time;
* ``control/``: the HA events other than acks and commits (elections, role changes,
  truncations): few, and every run needs all of them (a leadership can have begun long
  before the new rows).

**Merging.**  A run finds the earliest store time ``t0`` of the new rows and recomputes
every time slot from the one holding ``t0 - lateness`` onwards, from the stored rows of
those slots plus the new ones (and the rows of one more ``lateness`` before, read but not
written: a message born there is seen whole and left alone, not taken for a message
known only from its Sub records; such a producer-less row is also not written when its
msgId already has a row in an earlier slot).  The tables are partitioned by ``date`` and ``slot`` (the
minute of the day at which the slot starts) and the recomputed slots are overwritten
(dynamic partition overwrite); a message's row lives in the slot of its born time
(message_timeline: born, else first delivery, else first ack), a latency row in the slot
of its minute, a failover in the slot of its election.

**Late records.**  A record stored after ``t0`` about a message born in a slot at or
after the one holding ``t0 - lateness`` is merged exactly: the message is recomputed
from all its records.  A record about a message born earlier than that (a consumer
that acks more than ``lateness`` after the send, a retry chain that outlives it) does
not change the message's row, which keeps what the earlier run wrote; a full run, or a
run with a larger ``lateness``, takes it into account.  failover_impact rows of the
recomputed slots count copies within the recomputed slots only (a failover's old
generation that began before them is counted from the window start).

The cost of a run grows with the new rows plus the recomputed window (at most one slot
plus ``lateness`` of earlier traffic), not with the history.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from rocketscope.ha_events import COMMIT_ADVANCED, EVENT_TYPES, REPLICA_ACK
from rocketscope.names import HA_EVENTS_TOPIC
from rocketscope.spark.jobs import JOBS
from rocketscope.spark.model import MSG_KEY, Model
from rocketscope.spark.run import resolve_jobs
from rocketscope.spark.schema import ROW_SCHEMA

STATE_DIR = "_incremental"
DEFAULT_SLOT_MS = 5 * 60_000
DEFAULT_LATENESS_MS = 2 * 60_000
CONTROL_TYPES = tuple(t for t in EVENT_TYPES if t not in (REPLICA_ACK, COMMIT_ADVANCED))
DAY_MS = 86_400_000


def _log(text: str) -> None:
    print(f"analyze: {text}", file=sys.stderr, flush=True)


def input_files(inputs: Iterable[str | Path]) -> list[str]:
    """Every Parquet file under the input directories (hidden and ``_`` directories left out, as Spark does)."""
    files: list[str] = []
    for root in inputs:
        root = Path(root)
        if root.is_file():
            files.append(str(root.resolve()))
            continue
        for f in sorted(root.rglob("*.parquet")):
            rel = f.relative_to(root).parts
            if not any(p.startswith((".", "_")) for p in rel):
                files.append(str(f.resolve()))
    return files


def _row_ms() -> Column:
    return F.coalesce(F.unix_millis("store_timestamp"), F.unix_millis("born_timestamp"), F.lit(0))


def _key_ms(name: str, df: DataFrame) -> Column:
    """The time that places a table row in its slot (module docstring)."""
    if name == "message_timeline":
        return F.unix_millis(F.coalesce(
            F.col("born_ts"), F.array_min("consumers.first_delivery_ts"), F.array_min("consumers.first_ack_ts")))
    if name == "failover_impact":
        return F.unix_millis(F.col("elected_ts"))
    return F.unix_millis(F.col("minute"))


def slot_column(ms: Column, slot_ms: int) -> Column:
    """The output partition ``slot``: the minute of the UTC day at which the row's slot starts."""
    return (F.floor(F.pmod(ms, F.lit(DAY_MS)) / slot_ms) * (slot_ms // 60_000)).cast("int")


def _without_earlier_messages(spark: SparkSession, df: DataFrame, model: Model, table: Path, from_ms: int,
                              slot_ms: int, say: Callable[[str], None]) -> DataFrame:
    """``df`` without the rows known only from Sub records whose msgId already has a row before the window.

    Such a row is a message born long before the window (its Pub outside the rows read)
    with a record stored after the checkpoint: its earlier row stays (module docstring),
    and a second, producer-less row must not be written.  Only the few producer-less rows
    are looked up: a broadcast semi-join against the msgId column of the earlier slots.

    The msgIds to leave out are found first, in jobs of their own, and handed to ``df`` as a
    local table.  Left inside ``df``'s plan, the lookup was a broadcast that adaptive execution
    runs beside the table's own stages: two jobs asking for the same cached messages and
    consumers at once, the second's tasks holding both task slots of ``local[2]`` while they
    waited for the first's blocks (a 1M-message window: ~12 s with a core idle).
    """
    if not table.exists():
        return df
    day, minute = divmod(from_ms, DAY_MS)
    first_slot = (minute // slot_ms) * (slot_ms // 60_000)
    from_date = time.strftime("%Y-%m-%d", time.gmtime(day * 86_400))
    earlier = spark.read.parquet(str(table)).where(
        (F.col("date") < F.lit(from_date).cast("date"))
        | ((F.col("date") == F.lit(from_date).cast("date")) & (F.col("slot") < first_slot)))
    # The producer-less msgIds straight from the shared tables (consumed, no Pub: a left anti join of two
    # tables partitioned alike, no shuffle), not from ``df`` itself: ``df`` under a broadcast is planned
    # and run a second time, the consumers' aggregate and the full outer join of message_timeline again.
    orphans = model.consumers.join(model.messages, on=[MSG_KEY, "msg_id"], how="left_anti").select("msg_id")
    seen = [row[0] for row in earlier.select("msg_id").join(F.broadcast(orphans), "msg_id", "left_semi")
            .distinct().collect()]
    if not seen:
        return df
    say(f"incremental: {len(seen)} message(s) born before the window keep their earlier message_timeline row")
    known = spark.createDataFrame([(msg_id,) for msg_id in seen], "msg_id string")
    return df.join(F.broadcast(known), "msg_id", "left_anti")


def window_rows(spark: SparkSession, rows_dir: Path, from_slot: int | None) -> DataFrame:
    """The stored rows of the slots from ``from_slot`` on (every slot when None), read from those slots' directories.

    The same rows as the whole table filtered on ``slot``, but the DataFrame's input files are the window's
    only: the run's shuffle partition count is sized by them (spark/partitions.py reads ``inputFiles()``,
    which lists every file of a table whatever its partition filter), and a 1M-message window on a 10M
    history was planned with the history's 73 partitions, eight times the window's.
    """
    if from_slot is not None:
        dirs = []
        for path in sorted(rows_dir.iterdir()):
            name, _, value = path.name.partition("=")
            try:
                slot = int(value)
            except ValueError:
                continue  # not a slot (a null slot's directory is never in a window: the filter below drops it)
            if name == "slot" and path.is_dir() and slot >= from_slot:
                dirs.append(str(path))
        if dirs:
            stored = spark.read.option("basePath", str(rows_dir)).parquet(*dirs)
            return stored.where(F.col("slot") >= from_slot)
    stored = spark.read.parquet(str(rows_dir))
    return stored if from_slot is None else stored.where(F.col("slot") >= from_slot)


def run_incremental(spark: SparkSession, inputs: Iterable[str | Path], output: str | Path, jobs: Iterable[str],
                    *, asof_method: str = "interval", lateness_ms: int = DEFAULT_LATENESS_MS,
                    slot_ms: int = DEFAULT_SLOT_MS, progress: bool = True) -> dict[str, Any]:
    """Process the input files not processed before and merge their effect into the tables at ``output``.

    Returns what was done: new files, the first recomputed time, seconds per step.
    """
    if slot_ms % 60_000 or DAY_MS % slot_ms:
        raise ValueError(f"slot_ms must be whole minutes dividing a day, got {slot_ms}")
    say = _log if progress else (lambda _text: None)
    out = Path(output)
    state = out / STATE_DIR
    ckpt_path = state / "checkpoint.json"
    ckpt: dict[str, Any] = json.loads(ckpt_path.read_text()) if ckpt_path.exists() else {"files": [], "runs": 0}
    if ckpt.get("slot_ms", slot_ms) != slot_ms:
        raise ValueError(f"slot_ms {slot_ms} differs from the {ckpt['slot_ms']} of the earlier runs in {state}")
    seen = set(ckpt["files"])
    new_files = [f for f in input_files(inputs) if f not in seen]
    result: dict[str, Any] = {"new_files": len(new_files), "seconds": {}}
    if not new_files:
        say(f"incremental: no new input files since run {ckpt['runs']}; nothing to do")
        return result
    say(f"incremental run {ckpt['runs'] + 1}: {len(new_files)} new input file(s), {len(seen)} processed before")
    started = time.monotonic()
    new = spark.read.schema(ROW_SCHEMA).parquet(*new_files).withColumn("__ms", _row_ms())
    is_control = (F.col("topic") == HA_EVENTS_TOPIC) & F.get_json_object(
        F.col("body").cast("string"), "$.type").isin(*CONTROL_TYPES)
    tagged = new.withColumn("__control", is_control).withColumn("slot", F.floor(F.col("__ms") / slot_ms))
    tagged.where(F.col("__control")).drop("__ms", "__control", "slot").write.mode("append").parquet(
        str(state / "control"))
    tagged.where(~F.col("__control")).drop("__ms", "__control").write.mode("append").partitionBy("slot").parquet(
        str(state / "rows"))
    first = spark.read.schema(ROW_SCHEMA).parquet(*new_files).agg(F.min(_row_ms())).first()
    assert first is not None  # an aggregate without grouping always answers one row
    first_ms = first[0]
    result["seconds"]["store_new_rows"] = round(time.monotonic() - started, 2)
    first_run = ckpt["runs"] == 0
    from_ms = None if first_run else (int(first_ms) - lateness_ms) // slot_ms * slot_ms
    result["recompute_from_ms"] = from_ms
    say(f"incremental: new rows stored in {result['seconds']['store_new_rows']:.1f} s; recomputing "
        + ("everything (first run)" if from_ms is None else
           f"from {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(from_ms / 1000))} UTC "
           f"(earliest new row minus {lateness_ms / 1000:.0f} s lateness)"))
    # Read one lateness further back than the output window, so that a message born
    # there is seen whole (its Pub included) and is left out by its born time, not
    # mistaken for a message known only from Sub records.  Only these slots are read,
    # not the history (window_rows).
    from_slot = None if from_ms is None else (from_ms - lateness_ms) // slot_ms
    rows = window_rows(spark, state / "rows", from_slot).select(*ROW_SCHEMA.names)
    if (state / "control").exists():
        rows = rows.unionByName(spark.read.schema(ROW_SCHEMA).parquet(str(state / "control")))
    model = Model(spark, rows, asof_method=asof_method)
    try:
        for name in resolve_jobs(jobs):
            t = time.monotonic()
            df = JOBS[name](model)
            key = _key_ms(name, df)
            if from_ms is not None:
                df = df.where(key >= from_ms)
                if name == "message_timeline":
                    df = _without_earlier_messages(spark, df, model, out / name, from_ms, slot_ms, say)
            (df.withColumn("slot", slot_column(key, slot_ms)).write.mode("overwrite")
             .option("partitionOverwriteMode", "dynamic").partitionBy("date", "slot").parquet(str(out / name)))
            result["seconds"][name] = round(time.monotonic() - t, 2)
            say(f"incremental: {name} merged into {out / name} in {result['seconds'][name]:.1f} s")
    finally:
        model.unpersist()
    ckpt = {"files": sorted(seen | set(new_files)), "runs": ckpt["runs"] + 1, "slot_ms": slot_ms,
            "last_recompute_from_ms": from_ms, "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = ckpt_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ckpt))
    tmp.replace(ckpt_path)  # the checkpoint moves only after every table is written: a failed run is redone
    result["seconds"]["total"] = round(time.monotonic() - started, 2)
    say(f"incremental run {ckpt['runs']} done in {result['seconds']['total']:.1f} s")
    return result
