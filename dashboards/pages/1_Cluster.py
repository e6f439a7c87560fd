import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sources

st.set_page_config(page_title="RocketScope · Cluster", layout="wide", initial_sidebar_state="expanded")

st.header("Cluster")
cfg = sources.load_config(st.query_params)
src = sources.get_source(cfg)
every = st.toggle("auto-refresh every 5 s", value=cfg.live_cluster)


@st.fragment(run_every=5 if every else None)
def cluster_view() -> None:
    """Re-run on its own every 5 s (only this part of the page), so roles and lag stay current."""
    try:
        df = src.cluster()
        ns = src.name_servers()
    except sources.SourceError as exc:
        st.error(f"Cannot reach the cluster at {cfg.namesrv}: {exc}. Check that the name server is running and "
                 "ROCKETSCOPE_NAMESRV (or ?namesrv=) is right, or set ROCKETSCOPE_FIXTURES=1.")
        return
    st.caption(f"source: {src.name}")
    if df.empty:
        st.warning("No brokers registered with the name server.")
        return
    c1, c2, c3 = st.columns(3)
    c1.metric("broker groups", df["broker_group"].nunique())
    c2.metric("brokers", len(df))
    c3.metric("name servers up", f"{int(ns['reachable'].sum())} / {len(ns)}")
    st.subheader("Brokers")
    st.dataframe(df, hide_index=True)
    lag = df.dropna(subset=["replica_lag_bytes"])
    if not lag.empty:
        st.subheader("Replica lag (bytes)")
        st.bar_chart(lag, x="addr", y="replica_lag_bytes", color="broker_group")
    st.subheader("Name servers")
    st.dataframe(ns, hide_index=True)
    st.caption("Controllers are not listed on this page: `rocketscope admin getControllerMetaData -a "
               "<controller>` shows them.  In controller mode each broker row shows its master epoch and "
               "SyncStateSet; DLedger groups elect among themselves and show their term.")


cluster_view()
