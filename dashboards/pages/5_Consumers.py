import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sources

st.set_page_config(page_title="RocketScope · Consumers", layout="wide", initial_sidebar_state="expanded")

st.header("Consumers")
cfg = sources.load_config(st.query_params)
src = sources.get_source(cfg)
try:
    queues, dlq = src.consumers()
except sources.SourceError as exc:
    st.error(f"Cannot read consumer progress from {cfg.namesrv}: {exc}. Check the name server and brokers, "
             "or set ROCKETSCOPE_FIXTURES=1.")
    st.stop()
st.caption(f"source: {src.name}. {sources.LAG_DEFINITION[0].upper()}{sources.LAG_DEFINITION[1:]}.")
if queues.empty:
    st.info("No consumer groups.")
    st.stop()
summary = queues.groupby(["group", "topic"], as_index=False)[["lag", "inflight"]].sum()
st.subheader("Groups")
st.dataframe(summary, hide_index=True)
group = st.selectbox("consumer group", sorted(queues["group"].unique()), key="group")
st.subheader(f"Per-queue lag of {group}")
st.dataframe(queues[queues["group"] == group], hide_index=True)
st.subheader("Dead-letter queues")
st.dataframe(dlq, hide_index=True)
