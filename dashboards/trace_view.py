"""Turn a Timeline.to_dict() into chart rows and a details table."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

PRODUCER_ROW = "producer"
STATUS_COLOURS = {"success": "#2ca02c", "failed": "#d62728", "unknown": "#7f7f7f"}


def _row(rows: list[dict[str, Any]], lane: str, kind: str, label: str, begin: Any, end: Any, status: str,
         detail: str = "") -> None:
    if begin is None and end is None:
        return
    begin = begin if begin is not None else end
    end = end if end is not None else begin
    rows.append({"lane": lane, "kind": kind, "label": label, "begin_ms": int(begin), "end_ms": int(end),
                 "status": status if status in STATUS_COLOURS else "unknown", "detail": detail})


def timeline_rows(tl: dict[str, Any]) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for s in tl.get("sends") or []:
        _row(rows, PRODUCER_ROW, "send", s.get("group", ""), s.get("begin"), s.get("end"), s.get("status", ""),
             f"{s.get('topic', '')} via {s.get('store_host', '')}")
    store = tl.get("store") or {}
    if store.get("store_timestamp") is not None:
        _row(rows, PRODUCER_ROW, "store", store.get("store_host", ""), store["store_timestamp"],
             store["store_timestamp"], "success",
             f"{store.get('broker_group', '')} queue {store.get('queue_id')} offset {store.get('queue_offset')}")
    repl = tl.get("replication") or {}
    for a in repl.get("replicas") or []:
        _row(rows, PRODUCER_ROW, "replica_ack", a.get("replica", ""), a.get("timestamp"), a.get("timestamp"),
             "success", f"latency {a.get('latency_ms')} ms")
    for p in repl.get("pending_replicas") or []:
        rows.append({"lane": PRODUCER_ROW, "kind": "replica_pending", "label": p, "begin_ms": None, "end_ms": None,
                     "status": "unknown", "detail": "no ack seen"})
    if repl.get("commit_timestamp") is not None:
        _row(rows, PRODUCER_ROW, "commit", repl.get("broker_group", ""), repl["commit_timestamp"],
             repl["commit_timestamp"], "success", f"latency {repl.get('commit_latency_ms')} ms")
    for g in tl.get("groups") or []:
        for d in g.get("deliveries") or []:
            _row(rows, g["group"], "deliver", d.get("request_id", ""), d.get("begin"), d.get("end"),
                 d.get("status", ""), f"retry {d.get('retry_times')}, cost {d.get('cost_time')} ms")
        dlq = g.get("dlq") or {}
        if dlq.get("timestamp") is not None:
            _row(rows, g["group"], "dlq", dlq.get("dlq_topic", ""), dlq["timestamp"], dlq["timestamp"], "failed")
    df = pd.DataFrame(rows, columns=["lane", "kind", "label", "begin_ms", "end_ms", "status", "detail"])
    timed = df.dropna(subset=["begin_ms"])
    origin = timed["begin_ms"].min() if not timed.empty else 0
    df["t_ms"] = df["begin_ms"] - origin
    df["duration_ms"] = df["end_ms"] - df["begin_ms"]
    return df


SYMLOG_CONSTANT_MS = 1.0
"""Below this many ms after the first event the axis is linear, above it logarithmic."""


def timeline_chart(df: pd.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Bars on an axis of milliseconds since the first event, on a symlog scale.

    A message's life spans milliseconds (receive, store, replica acks, commit) to seconds or minutes
    (deliveries, retries): on a linear axis sized for the deliveries, a 2 ms store-to-commit step is
    thinner than a pixel.  The symlog scale gives the first milliseconds as much room as the next
    seconds, so every step is visible and still in order; the tooltip carries the exact times.
    """
    data = df.dropna(subset=["begin_ms"]).copy()
    # zero-length events (store, acks, commit) get a quarter millisecond so they show as thin bars
    data["t_end_ms"] = data["t_ms"] + data["duration_ms"].clip(lower=0.25)
    lanes = [PRODUCER_ROW] + [lane for lane in dict.fromkeys(data["lane"]) if lane != PRODUCER_ROW]
    colour = alt.Color("status:N", scale=alt.Scale(domain=list(STATUS_COLOURS), range=list(STATUS_COLOURS.values())))
    y = alt.Y("lane:N", sort=lanes, title=None)
    tooltip = ["lane", "kind", "label", "status", "t_ms", "duration_ms", "detail"]
    span_ms = float(data["t_end_ms"].max()) if not data.empty else 1.0
    x = alt.X("t_ms:Q", title="ms after the first event (symlog scale: milliseconds and seconds both readable)",
              scale=alt.Scale(type="symlog", constant=SYMLOG_CONSTANT_MS, domain=[0, max(span_ms * 1.05, 1.0)],
                              nice=False),
              axis=alt.Axis(labelAngle=0, labelOverlap=True, values=_ticks(span_ms)))
    base = alt.Chart(data)
    bars = base.mark_bar(size=18).encode(x=x, x2="t_end_ms:Q", y=y, color=colour, tooltip=tooltip)
    points = base.mark_point(filled=True, size=80).encode(x=x, y=y, color=colour, shape=alt.Shape("kind:N"),
                                                          tooltip=tooltip)
    return alt.layer(bars, points).properties(height=60 + 40 * len(lanes))


def _ticks(span_ms: float) -> list[float]:
    """0, 1, 2, 5, 10, 20, 50, ... up to the span: readable steps on a symlog axis."""
    out = [0.0]
    step = 1.0
    while step <= span_ms * 1.05:
        out += [v for v in (step, 2 * step, 5 * step) if v <= span_ms * 1.05]
        step *= 10
    return out
