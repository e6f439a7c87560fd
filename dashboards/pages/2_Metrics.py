import sys
from pathlib import Path

import altair as alt
import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sources

st.set_page_config(page_title="RocketScope · Metrics", layout="wide", initial_sidebar_state="expanded")

st.header("Metrics")
cfg = sources.load_config(st.query_params)
if cfg.prometheus and not cfg.fixtures:
    try:
        tput, lag = sources.prometheus_metrics(cfg.prometheus)
        out, latency = sources.prometheus_flow_and_latency(cfg.prometheus)
    except sources.SourceError as exc:
        st.error(f"{exc}. Start Prometheus or fix the URL, or set ROCKETSCOPE_FIXTURES=1.")
        st.stop()
    st.caption(f"source: Prometheus {cfg.prometheus} (last 30 minutes)")
    for title, frame, color, empty in (
            ("Throughput in (messages/s by topic)", tput, "topic", "No samples yet."),
            ("Throughput out (messages/s by consumer group)", out, "consumer_group", "No deliveries yet."),
            ("SendMessage latency (ms, from the rocketmq_rpc_latency histogram)", latency, "quantile",
             "No sends yet.")):
        st.subheader(title)
        if frame.empty:
            st.info(empty)
        else:
            y = "latency_ms" if color == "quantile" else "msgs_per_s"
            st.line_chart(frame, x="time", y=y, color=color)
elif cfg.live_cluster:
    try:
        flows, hist, lag_now = sources.scrape_nodes(cfg.namesrv)
    except sources.SourceError as exc:
        st.error(f"Cannot read the nodes' /metrics: {exc}")
        st.stop()
    st.caption(f"source: every node's /metrics, read now (name server {cfg.namesrv}); "
               "give --prometheus for rates over time")
    st.subheader("Messages in and out by topic (since the nodes started)")
    if flows.empty:
        st.info("No messages yet.")
    else:
        st.altair_chart(alt.Chart(flows).mark_bar().encode(
            x=alt.X("messages:Q", title="messages"), y=alt.Y("topic:N", title=None),
            color=alt.Color("direction:N"), yOffset="direction:N"), use_container_width=True)
    st.subheader("SendMessage latency histogram")
    if hist.empty or hist["requests"].sum() == 0:
        st.info("No sends yet.")
    else:
        st.altair_chart(alt.Chart(hist).mark_bar().encode(
            x=alt.X("bucket:N", sort=alt.SortField("order"), title="latency"), y=alt.Y("requests:Q")),
            use_container_width=True)
    st.subheader("Consumer lag now (messages by group)")
    st.caption(sources.LAG_DEFINITION[0].upper() + sources.LAG_DEFINITION[1:] + ".")
    if lag_now.empty:
        st.info("No consumer groups yet.")
    else:
        st.altair_chart(alt.Chart(lag_now).mark_bar().encode(x="lag_messages:Q", y=alt.Y("group:N", title=None)),
                        use_container_width=True)
    st.stop()
else:
    tput, lag = sources.fixture_metrics()
    st.caption("source: fixtures (set ROCKETSCOPE_PROMETHEUS or ROCKETSCOPE_NAMESRV for live data)")
    st.subheader("Throughput (messages/s by topic)")
    if tput.empty:
        st.info("No throughput samples yet.")
    else:
        st.line_chart(tput, x="time", y="msgs_per_s", color="topic")
st.subheader("Consumer lag (messages by group)")
st.caption(sources.LAG_DEFINITION[0].upper() + sources.LAG_DEFINITION[1:] + ".")
if lag.empty:
    st.info("No lag samples yet.")
else:
    st.line_chart(lag, x="time", y="lag_messages", color="group")
