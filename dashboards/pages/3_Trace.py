import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sources
import trace_view

st.set_page_config(page_title="RocketScope · Trace", layout="wide", initial_sidebar_state="expanded")

st.header("Message trace")
cfg = sources.load_config(st.query_params)
src = sources.get_source(cfg)
default = st.query_params.get("msg_id", "")
if not cfg.live_cluster:
    st.caption(f"fixtures: try {sources.FIXTURE_MSG_ID} or {sources.FIXTURE_FAILED_MSG_ID} (failed delivery)")
msg_id = st.text_input("message ID", value=default, key="msg_id").strip()
if not msg_id:
    st.info("Enter a message ID (the msgId the producer got back) to see its timeline.")
    st.stop()
if len(msg_id) > 128 or not all(c.isalnum() or c in "-_:." for c in msg_id):
    st.error(f"'{msg_id[:64]}' is not a message ID: paste the msgId from the send result (hex, e.g. "
             f"{sources.FIXTURE_MSG_ID}).")
    st.stop()
try:
    tl = src.trace(msg_id)
except sources.SourceError as exc:
    st.error(f"Trace lookup failed: {exc}. Check ROCKETSCOPE_NAMESRV and that tracing is enabled.")
    st.stop()
if tl is None:
    st.error(f"No trace found for message ID {msg_id}. Check the ID, that the producer has tracing enabled, "
             "and that the trace records have been written (they are batched: wait a few seconds).")
    st.stop()
st.subheader(f"{tl.get('topic', '')} · keys {tl.get('keys') or '-'} · tags {tl.get('tags') or '-'}")
for w in tl.get("warnings") or []:
    st.warning(w)
rows = trace_view.timeline_rows(tl)
if rows.dropna(subset=["begin_ms"]).empty:
    st.warning("The trace has no timed events.")
else:
    st.altair_chart(trace_view.timeline_chart(rows), use_container_width=True)
groups = tl.get("groups") or []
if groups:
    cols = st.columns(len(groups))
    for col, g in zip(cols, groups, strict=True):
        col.metric(g["group"], g.get("status", "unknown"))
st.subheader("Details")
# tall enough for every row (a retried or dead-lettered message has a dozen): no scrolling inside the table
st.dataframe(rows[["lane", "kind", "label", "status", "t_ms", "duration_ms", "detail"]], hide_index=True,
             height=min(36 + 35 * len(rows), 900))
