"""Screenshots of every dashboard page from a live dashboard, for the docs (`rocketscope demo --screenshots DIR`
or docs/screenshots/take.py).

The same headless Chromium as the end-to-end tests (rocketscope.dashboards.browser): each page is loaded,
waited for until Streamlit rendered it (expected text present, charts drawn, nothing animating), then
captured whole.  The trace pages use the demo's retried and dead-lettered messages, the two timelines with
the most to show.
"""

from __future__ import annotations

from pathlib import Path

from rocketscope.dashboards.browser import chromium

# (file name, page path, texts that must be on the rendered page)
PAGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("cluster", "Cluster", ("broker groups", "name servers up")),
    ("metrics", "Metrics", ("Throughput",)),
    ("trace", "Trace?msg_id={retried}", ("producer", "audit", "Details")),
    ("trace-dlq", "Trace?msg_id={dlq}", ("producer", "dead_lettered", "Details")),
    ("replication", "Replication", ("Replication latency", "Failovers")),
    ("consumers", "Consumers", ("Groups", "Dead-letter queues")),
)


def take(url: str, ids: dict[str, str], out: Path, timeout: float = 120.0) -> list[Path]:
    """Capture every page of the dashboard at ``url`` into ``out``; ``ids`` holds the demo's message IDs."""
    shots = []
    with chromium() as page:
        for name, path, texts in PAGES:
            page.goto(f"{url.rstrip('/')}/{path.format(**ids)}")
            page.wait_rendered(*texts, timeout=timeout)
            shots.append(page.screenshot(out / f"{name}.png"))
    return shots
