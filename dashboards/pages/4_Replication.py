import sys
from pathlib import Path

import altair as alt
import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sources

st.set_page_config(page_title="RocketScope · Replication", layout="wide", initial_sidebar_state="expanded")

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
        # the tables' minutes are UTC: shown as UTC on a 24-hour clock (Vega's default is the browser's
        # zone and a 12-hour clock without AM/PM, so 22:25 read as "10:25"); seconds shown since Vega puts
        # ticks between the minutes, which "%H:%M" labelled as the same minute twice
        x=alt.X("minute:T", title="minute (UTC)", scale=alt.Scale(type="utc"),
                axis=alt.Axis(format="%H:%M:%S")),
        y=alt.Y(f"{pct}:Q", title="ms"), color="replica:N",
        tooltip=[alt.Tooltip("utcyearmonthdatehoursminutes(minute):T", title="minute (UTC)"), "replica",
                 f"{pct}:Q"]), use_container_width=True)
st.subheader("Failovers")
if failovers.empty:
    st.info("No failovers in the analysed period.")
else:
    fo = failovers.copy()
    phases = [c for c in ("detection_gap_ms", "election_ms", "unavailability_ms") if c in fo.columns]
    if phases and {"broker_group", "old_gen", "new_gen"} <= set(fo.columns):
        # one bar per phase of each failover, in ms: how long until the old leader was missed, how long the
        # election took, and how long producers saw no successful send (0 when the client never noticed)
        fo["failover"] = (fo["broker_group"].astype(str) + " gen " + fo["old_gen"].astype(str) + " → "
                          + fo["new_gen"].astype(str))
        long = fo.melt(id_vars=["failover"], value_vars=phases, var_name="phase", value_name="ms")
        long["ms"] = long["ms"].clip(lower=0)
        st.altair_chart(alt.Chart(long).mark_bar().encode(
            x=alt.X("ms:Q", title="ms"), y=alt.Y("failover:N", title=None), yOffset="phase:N",
            color=alt.Color("phase:N", sort=phases), tooltip=["failover", "phase", "ms"]),
            use_container_width=True)
    st.dataframe(fo, hide_index=True)
