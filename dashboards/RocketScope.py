"""RocketScope dashboards: `streamlit run dashboards/app.py` (or `rocketscope dashboard`)."""

import sys
from pathlib import Path

import pandas as pd
import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sources

st.set_page_config(page_title="RocketScope", layout="wide")
st.title("RocketScope")
cfg = sources.load_config(st.query_params)
st.markdown("Pages: **Cluster**, **Metrics**, **Trace**, **Replication & failover**, **Consumers** (sidebar).")
st.dataframe(pd.DataFrame([
    {"setting": "name server", "value": cfg.namesrv or "(none)"},
    {"setting": "Prometheus", "value": cfg.prometheus or "(none: fixtures)"},
    {"setting": "analytics dir", "value": cfg.analytics or "(none: fixtures)"},
    {"setting": "mode", "value": "live" if cfg.live_cluster else "fixtures"},
]), hide_index=True)
