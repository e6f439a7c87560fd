import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sources

st.header("Metrics")
cfg = sources.load_config(st.query_params)
if cfg.prometheus and not cfg.fixtures:
    try:
        tput, lag = sources.prometheus_metrics(cfg.prometheus)
    except sources.SourceError as exc:
        st.error(f"{exc}. Start Prometheus or fix the URL, or set ROCKETSCOPE_FIXTURES=1.")
        st.stop()
    st.caption(f"source: Prometheus {cfg.prometheus}")
else:
    tput, lag = sources.fixture_metrics()
    st.caption("source: fixtures (set ROCKETSCOPE_PROMETHEUS for live data)")
st.subheader("Throughput (messages/s by topic)")
if tput.empty:
    st.info("No throughput samples yet.")
else:
    st.line_chart(tput, x="time", y="msgs_per_s", color="topic")
st.subheader("Consumer lag (messages by group)")
if lag.empty:
    st.info("No lag samples yet.")
else:
    st.line_chart(lag, x="time", y="lag_messages", color="group")
