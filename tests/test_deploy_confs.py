"""Every sample config in deploy/conf parses with no unknown keys and no port clash inside its layout."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rocketscope.broker.broker_config import load_broker_config
from rocketscope.broker.container import load_container_config
from rocketscope.config import read_properties

CONF = Path(__file__).resolve().parent.parent / "deploy" / "conf"
LAYOUTS = ["dledger", "2m-2s-async", "2m-2s-sync", "container", "controller"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_configs_load(layout: str, caplog: pytest.LogCaptureFixture) -> None:
    ports: list[int] = []
    with caplog.at_level(logging.WARNING):
        for path in sorted((CONF / layout).glob("*.conf")):
            raw = read_properties(path)
            if path.name.startswith("controller"):
                from rocketscope.broker.controller.config import load_controller_config

                c = load_controller_config(raw)
                ports.append(c.listenPort)
                continue
            if path.name.startswith("container"):
                load_container_config(raw)
                continue
            s = load_broker_config(raw)
            ports += [s.grpcServerPort, s.listenPort, s.haListenPort or s.listenPort + 1]
    assert not [r for r in caplog.records if "unknown" in r.getMessage()]
    assert len(ports) == len(set(ports)), f"port clash in {layout}"
