"""Trace bodies decoded by Spark SQL expressions in the JVM: no Python worker on the hot path.

RocketMQ's trace text format (``rocketscope.trace.codec``) is two levels of separators:
records end with ``\\x02``, fields within a record are separated by ``\\x01``.  Both
levels are plain ``split`` calls, the numbers are ``try_cast``s guarded by the same
integer pattern the codec uses, and the batched records of one trace message become rows
with ``explode``.  The Python codec stays the reference: ``tests/test_spark_sqldecode.py``
decodes a generated corpus with edge cases both ways and compares them row by row.

The codec's compatibility rules are reproduced exactly (trace/codec.py documents them):

* fields are split as Java's ``String.split`` does, trailing empty fields removed before
  the field count is looked at (here: trailing ``\\x01`` stripped, then split);
* the field count selects the layout (Pub 12/13/14+, SubBefore 7+, SubAfter 5..9+,
  EndTransaction 13 or 14, Recall 7+);
* the literal ``null`` in keys means empty;
* a body with any malformed record of a known type (a missing or non-integer number, a
  bad boolean, a message type out of range) is not trace data and is skipped whole, as
  the Python decoder raises ``TraceDecodeError`` for it; records of unknown types are
  skipped, the rest of the body kept.  Invalid UTF-8 skips the body too.

The physical offset of a Pub comes from its offsetMsgId (trace/ids.py): 32 or 56 hex
characters, the last 16 the big-endian int64 offset; IDs whose port or offset field no
broker could have written give a null offset, as ``parse_offset_msg_id`` raises for them.

Why it matters: the ``mapInArrow`` decoder spent 235 of the 707 s of all jobs at 10M
messages moving bodies to Python and records back (docs/ANALYTICS.md, "Decoding").  One
bad record drops its neighbours, so validity is a property of the whole body: it is one
regular expression (:data:`INVALID_RECORD`) per body, run in generated code, before the
records are split and exploded.  A first version tested each record inside a ``forall``
lambda; Spark evaluates lambda bodies interpreted, and that cost milliseconds per body.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from rocketscope.names import HA_EVENTS_TOPIC
from rocketscope.spark.schema import RECORD_SCHEMA

FIELD_SEP = "\x01"
RECORD_SEP = "\x02"
HEX_ID = "^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{56})\\z"


def _field(f: Column, pos: int) -> Column:
    """Field ``pos`` (0-based), null when absent; ``get`` does not fail past the end under ANSI mode."""
    return F.get(f, pos)


def _text(f: Column, pos: int) -> Column:
    """A string field: absent trailing fields are empty (``_Fields.text``)."""
    return F.coalesce(_field(f, pos), F.lit(""))


def _nullable_text(f: Column, pos: int) -> Column:
    """Tags and keys: Java writes a null value as the literal text ``null`` (``_Fields.nullable_text``)."""
    value = _text(f, pos)
    return F.when(value == "null", F.lit("")).otherwise(value)


def _int(f: Column, pos: int, kind: str = "int") -> Column:
    return _field(f, pos).try_cast(kind)


def _bool(f: Column, pos: int) -> Column:
    return F.lower(_field(f, pos)) == "true"


def _upto(bound: str) -> str:
    """A regex of the decimal numbers 0..``bound`` (leading zeros allowed), for range checks without a cast."""
    alts = [f"[0-9]{{1,{len(bound) - 1}}}"] if len(bound) > 1 else []
    for i, ch in enumerate(bound):
        if ch != "0":
            low = "0" if ch == "1" else f"[0-{int(ch) - 1}]"
            rest = f"[0-9]{{{len(bound) - i - 1}}}" if i < len(bound) - 1 else ""
            alts.append(bound[:i] + low + rest)
    alts.append(bound)
    return "(?:" + "|".join(alts) + ")"


def _integer(bits: int) -> str:
    """The integers the codec accepts for a signed ``bits``-bit field: sign, ASCII digits, in range."""
    top = 2 ** (bits - 1)
    return f"(?:\\+?0*{_upto(str(top - 1))}|-0*{_upto(str(top))})"


_X = "[^\x01\x02]*"  # any field
_S = "\x01"
_END = "(?=[\x01\x02]|\\z)"  # a typed field ends at a separator: "12abc" is not an integer
_I32, _I64 = _integer(32) + _END, _integer(64) + _END
_B = "(?i:true|false|null)?" + _END  # Boolean.parseBoolean's true/false, empty or null; anything else is garbage
_MT = "(?:\\+?0*[0-4]|-0+)" + _END  # message type ordinal 0..4
_REST = "[^\x02]*"  # any further fields
_VALID = {
    # 12 fields; 13: + success; 14+: offsetMsgId, success, anything
    "Pub": f"Pub{_S}{_I64}(?:{_S}{_X}){{7}}{_S}{_I32}{_S}{_I32}{_S}{_MT}(?:{_S}{_B}|{_S}{_X}{_S}{_B}{_REST})?",
    "SubBefore": f"SubBefore{_S}{_I64}(?:{_S}{_X}){{4}}{_S}{_I32}{_REST}",
    # 5 fields; then keys, contextCode, timestamp, anything
    "SubAfter": f"SubAfter{_S}{_X}{_S}{_X}{_S}{_I32}{_S}{_B}(?:{_S}{_X}(?:{_S}{_I32}(?:{_S}{_I64}{_REST})?)?)?",
    # 13 fields, from_check at 12; the 14-field build: at 13
    "EndTransaction": f"EndTransaction{_S}{_I64}(?:{_S}{_X}){{7}}{_S}{_MT}"
                      f"(?:{_S}{_X}{_S}{_X}{_S}{_B}|{_S}{_X}{_S}{_X}{_S}{_X}{_S}{_B}{_REST})",
    "Recall": f"Recall{_S}{_I64}(?:{_S}{_X}){{4}}{_S}{_B}{_REST}",
}
INVALID_RECORD = (
    "(?:^|\x02)(?=(?:" + "|".join(_VALID) + ")(?:\x01|\x02|\\z))"
    "(?!(?:" + "|".join(_VALID.values()) + ")\x01*(?:\x02|\\z))"
)
"""Finds a record of a known type that the codec would reject: at a record start, a known type
name as the whole first field, not followed by that type's valid layout up to the record's end
(trailing empty fields allowed, as Java's split drops them).  One ``rlike`` per body, compiled
once and run in generated code: the per-record checks inside a ``forall`` lambda were
interpreted and cost milliseconds per body."""


def phys_offset(offset_msg_id: Column) -> Column:
    """The commit-log offset of an offsetMsgId (trace/ids.py ``parse_offset_msg_id``), null when invalid.

    The port field (the 4 bytes after the 4- or 16-byte address) must be 0..65535 and the
    offset field (the last 8 bytes) non-negative, both signed big-endian: as hex, the
    port starts with ``0000`` and the offset with 0-7.
    """
    port_hex = F.when(F.length(offset_msg_id) == 32, F.substring(offset_msg_id, 9, 4)).otherwise(
        F.substring(offset_msg_id, 33, 4))
    offset_hex = F.substring(offset_msg_id, -16, 16)
    ok = offset_msg_id.rlike(HEX_ID) & (port_hex == "0000") & F.substring(offset_hex, 1, 1).isin(*"01234567")
    return F.when(ok, F.conv(offset_hex, 16, 10).try_cast("long"))


def _body_text(body: Column) -> Column:
    """The body as text, null when it is not valid UTF-8 or holds a malformed record (not trace data)."""
    text = F.when(F.is_valid_utf8(body), body.cast("string"))
    return F.when(~text.rlike(INVALID_RECORD), text)


USED_TYPES = ("Pub", "SubBefore", "SubAfter")
"""The record types the jobs read; EndTransaction and Recall are validated, then dropped."""


def decode_trace_sql(rows: DataFrame) -> DataFrame:
    """Flat trace records (``RECORD_SCHEMA``) of the trace rows in ``rows``, decoded in the JVM.

    Same rows as the ``mapInArrow`` decoder (``rocketscope.spark.decode.decode_trace_python``)
    over the same input, in no particular order.
    """
    bodies = rows.where(F.col("topic") != HA_EVENTS_TOPIC).select(
        _body_text(F.col("body")).alias("text"), F.col("tags").alias("origin_topic"))
    f = F.col("f")
    n = F.size(f)
    kind = _field(f, 0)
    is_pub, is_before, is_after = kind == "Pub", kind == "SubBefore", kind == "SubAfter"
    omid = F.when(n >= 14, _text(f, 12)).otherwise(F.lit(""))
    after_ts = F.when(n >= 8, _int(f, 7, "long"))
    after_grp = _text(f, 8)
    records = (
        # No filter on ``text``: ``explode`` of a null array (a body that is not trace data) gives
        # no rows.  A filter there was pushed below the projection by the optimizer, which then
        # ran the body's regular expression twice (once in the filter, once in the projection).
        bodies.select(F.explode(F.split("text", RECORD_SEP, -1)).alias("chunk"), "origin_topic")
        # the first field names a used type (no regular expression per record)
        .where(F.substring_index("chunk", FIELD_SEP, 1).isin(*USED_TYPES))
        # trailing separators stripped (Java's split drops trailing empty fields) by a trim, not a regex
        .select(F.split(F.rtrim("chunk", F.lit(FIELD_SEP)), FIELD_SEP, -1).alias("f"), "origin_topic")
        .select(
            kind.alias("rec_type"),
            F.when(is_after, F.when(after_ts != 0, after_ts)).otherwise(_int(f, 1, "long")).alias("ts"),
            F.when(is_after, F.when(after_grp != "", after_grp)).otherwise(_text(f, 3)).alias("grp"),
            F.when(is_pub, _text(f, 4)).alias("topic"),
            F.when(is_pub | is_before, _text(f, 5)).otherwise(_text(f, 2)).alias("msg_id"),
            F.when(is_pub | is_before, _nullable_text(f, 7)).otherwise(_nullable_text(f, 5)).alias("keys"),
            F.when(is_pub, _text(f, 8)).alias("store_host"),
            F.when(is_pub, _int(f, 10)).when(is_after, _int(f, 3)).alias("cost_time"),
            F.when(is_pub, F.when(n == 13, _bool(f, 12)).when(n >= 14, _bool(f, 13)).otherwise(F.lit(True)))
            .when(is_after, _bool(f, 4)).alias("success"),
            F.when(is_pub, F.when(omid != "", phys_offset(omid))).alias("phys_offset"),
            F.when(is_before, _text(f, 4)).when(is_after, _text(f, 1)).alias("request_id"),
            F.when(is_before, _int(f, 6)).alias("retry_times"),
            "origin_topic",
        )
    )
    return records.select([F.col(x.name).cast(x.dataType).alias(x.name) for x in RECORD_SCHEMA.fields])
