"""Screenshots of every dashboard page, for the docs, from a running demo.

Simplest: `.venv/bin/rocketscope demo --screenshots docs/screenshots` (takes them once the dashboard is up).
Against a demo already running:

    .venv/bin/rocketscope demo --failover-after 30 --data-dir /tmp/rs-demo &   # wait for "dashboard: URL"
    .venv/bin/python docs/screenshots/take.py --demo /tmp/rs-demo

Reads the dashboard URL and the message IDs from the demo's demo.json and drives headless
Chromium (rocketscope.dashboards.screenshots) through each page, waiting until it rendered.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rocketscope.dashboards.screenshots import take

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demo", type=Path, required=True, help="the demo's --data-dir (holds demo.json)")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    demo = json.loads((args.demo / "demo.json").read_text())
    for shot in take(demo["dashboard"], demo["ids"], args.out):
        print(f"{shot} ({shot.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
