"""The telemetry keys a broker, name server or controller config may carry (read by telemetry/config.py).

A module of its own so that the broker's, the controller's and the name server's config loaders
import it without importing each other (broker/broker_config.py imports the controller's keys).
"""

from __future__ import annotations

from rocketscope.telemetry.config import KEYS

TELEMETRY_KEYS: tuple[str, ...] = (*(k.name for k in KEYS), "metricCollectorMode", "metricCollectorAddress")
