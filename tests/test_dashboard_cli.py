"""The `dashboard` command builds the documented streamlit command line and environment."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rocketscope.dashboards import cli


def test_dashboard_execs_streamlit(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake_exec(path: str, argv: list[str], env: dict[str, str]) -> None:
        seen.update(path=path, argv=argv, env=env)

    monkeypatch.setattr(cli.os, "execvpe", fake_exec)
    result = CliRunner().invoke(cli.dashboard, ["--namesrv", "127.0.0.1:9876", "--prometheus", "http://p:9090",
                                                "--port", "8600", "--fixtures"])
    assert result.exit_code == 0, result.output
    argv = seen["argv"]
    assert argv[1:4] == ["-m", "streamlit", "run"] and argv[4].endswith("dashboards/RocketScope.py")
    flags = dict(zip(argv[5::2], argv[6::2], strict=True))
    assert flags == {"--server.headless": "true", "--server.address": "127.0.0.1", "--server.port": "8600",
                     "--browser.gatherUsageStats": "false", "--server.fileWatcherType": "none",
                     "--client.toolbarMode": "minimal"}  # no Streamlit "Deploy" button on a product page
    assert seen["env"]["ROCKETSCOPE_NAMESRV"] == "127.0.0.1:9876"
    assert seen["env"]["ROCKETSCOPE_PROMETHEUS"] == "http://p:9090"
    assert seen["env"]["ROCKETSCOPE_FIXTURES"] == "1"


def test_live_trace_falls_back_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from rocketscope.dashboards import sources

    monkeypatch.setitem(sys.modules, "rocketscope.trace.lookup", None)  # as if not written yet
    with pytest.raises(sources.SourceError, match="not available"):
        sources.LiveSource("127.0.0.1:1").trace("0A0B")


def test_config_query_params_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from rocketscope.dashboards import sources

    monkeypatch.setenv("ROCKETSCOPE_NAMESRV", "env:1")
    cfg = sources.load_config({"namesrv": "qp:2", "fixtures": "1"})
    assert cfg.namesrv == "qp:2" and cfg.fixtures and not cfg.live_cluster


def test_ha_fields_per_mode() -> None:
    from rocketscope.dashboards.sources import _ha_fields

    master = _ha_fields({"mode": "master_slave", "role": "SYNC_MASTER", "slaves": [{"lagBytes": 10}, {"lagBytes": 7}]})
    assert master["replica_lag_bytes"] == 10 and master["ha_role"] == "SYNC_MASTER"
    slave = _ha_fields({"mode": "master_slave", "role": "SLAVE", "lagBytes": 3})
    assert slave["replica_lag_bytes"] == 3
    leader = _ha_fields({"mode": "dledger", "role": "LEADER", "term": 4, "lastIndex": 20,
                         "peers": {"n1": {"match": 18}, "n2": {"match": 20}}})
    assert leader["term_or_epoch"] == 4 and leader["replica_lag_entries"] == 2
