"""One logging format for every RocketScope process: one line per event, at INFO."""

from __future__ import annotations

import logging
import os
import sys


def setup_logging(role: str, level: str | None = None) -> None:
    level = (level or os.environ.get("ROCKETSCOPE_LOG_LEVEL", "INFO")).upper()
    fmt = f"%(asctime)s %(levelname)s {role} %(name)s: %(message)s"
    logging.basicConfig(level=level, format=fmt, stream=sys.stderr, force=True)
    for noisy in ("grpc", "asyncio", "urllib3", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
