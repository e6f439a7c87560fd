import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sources

st.header("Cluster")
cfg = sources.load_config(st.query_params)
src = sources.get_source(cfg)
try:
    df = src.cluster()
except sources.SourceError as exc:
    st.error(f"Cannot reach the cluster at {cfg.namesrv}: {exc}. Check that the name server is running and "
             "ROCKETSCOPE_NAMESRV (or ?namesrv=) is right, or set ROCKETSCOPE_FIXTURES=1.")
    st.stop()
st.caption(f"source: {src.name}")
if df.empty:
    st.warning("No brokers registered with the name server.")
    st.stop()
c1, c2 = st.columns(2)
c1.metric("broker groups", df["broker_group"].nunique())
c2.metric("brokers", len(df))
st.dataframe(df, hide_index=True)
lag = df.dropna(subset=["replica_lag_bytes"])
if not lag.empty:
    st.subheader("Replica lag (bytes)")
    st.bar_chart(lag, x="addr", y="replica_lag_bytes", color="broker_group")
