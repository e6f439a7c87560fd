import sys
from pathlib import Path

import altair as alt
import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sources

st.header("Replication & failover")
cfg = sources.load_config(st.query_params)
if cfg.analytics and not cfg.fixtures:
    try:
        latency, failovers = sources.analytics_tables(cfg.analytics)
    except sources.SourceError as exc:
        st.error(f"{exc}.")
        st.stop()
    st.caption(f"source: Parquet tables under {cfg.analytics}")
else:
    latency, failovers = sources.fixture_analytics()
    st.caption("source: fixtures (set ROCKETSCOPE_ANALYTICS to the `rocketscope analyze` output)")
if latency.empty:
    st.info("The replication_latency table is empty.")
else:
    groups = sorted(latency["broker_group"].unique())
    group = st.selectbox("broker group", groups, key="broker_group")
    pct = st.radio("percentile", ["p50_ms", "p95_ms", "p99_ms", "max_ms"], index=2, horizontal=True, key="pct")
    sel = latency[latency["broker_group"] == group]
    per_minute = sel.groupby(["minute", "replica"], as_index=False)[pct].max()
    st.subheader(f"Replication latency {pct} per replica, {group}")
    st.altair_chart(alt.Chart(per_minute).mark_line(point=True).encode(
        x=alt.X("minute:T"), y=alt.Y(f"{pct}:Q", title="ms"), color="replica:N",
        tooltip=["minute:T", "replica", f"{pct}:Q"]), use_container_width=True)
st.subheader("Failovers")
if failovers.empty:
    st.info("No failovers in the analysed period.")
else:
    fo = failovers.copy()
    if {"unavailable_from_ts", "unavailable_to_ts"} <= set(fo.columns):
        st.altair_chart(alt.Chart(fo).mark_bar(color="#d62728").encode(
            x=alt.X("unavailable_from_ts:T", title="unavailable"), x2="unavailable_to_ts:T",
            y=alt.Y("broker_group:N"), tooltip=[c for c in ("broker_group", "old_gen", "new_gen", "unavailability_ms",
                                                            "truncated", "lost") if c in fo.columns]),
            use_container_width=True)
    st.dataframe(fo, hide_index=True)
