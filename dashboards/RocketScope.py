"""RocketScope dashboards: `rocketscope dashboard` (or `streamlit run dashboards/RocketScope.py`).

The file is named after the product because Streamlit names the first page in the sidebar after the
entry script ("app" was what every user saw first).
"""

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
live = cfg.live_cluster
if cfg.prometheus and not cfg.fixtures:
    metrics_from = f"Prometheus {cfg.prometheus} (rates over the last 30 minutes)"
elif live:
    metrics_from = "(none) the Metrics page reads every node's /metrics now: totals and current lag, no history"
else:
    metrics_from = "(none: fixtures)"
st.dataframe(pd.DataFrame([
    {"setting": "name server", "value": cfg.namesrv if live else "(none: fixtures)"},
    {"setting": "Prometheus", "value": metrics_from},
    {"setting": "analytics dir", "value": cfg.analytics if cfg.analytics and not cfg.fixtures
     else "(none: the Replication page shows fixtures)"},
    {"setting": "mode", "value": "live" if live else "fixtures"},
]), hide_index=True)
st.caption(f"Metrics page source: {metrics_from}.")
st.caption(sources.LAG_DEFINITION[0].upper() + sources.LAG_DEFINITION[1:] + ".")
