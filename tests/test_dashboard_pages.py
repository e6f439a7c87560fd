"""Every dashboard page in fixture mode, in-process with streamlit.testing.v1.AppTest."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

DASH = Path(__file__).resolve().parents[1] / "dashboards"


@pytest.fixture(autouse=True)
def _fixture_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCKETSCOPE_FIXTURES", "1")
    for name in ("NAMESRV", "PROMETHEUS", "ANALYTICS"):
        monkeypatch.delenv(f"ROCKETSCOPE_{name}", raising=False)


def run(page: str) -> AppTest:
    at = AppTest.from_file(str(DASH / page), default_timeout=90)  # a loaded CI machine needed more than 20 s
    at.run()
    assert not at.exception, at.exception
    return at


def texts(at: AppTest) -> str:
    parts = [e.value for e in (*at.header, *at.subheader, *at.caption, *at.markdown, *at.info, *at.warning)]
    return "\n".join(str(p) for p in parts)


def charts(at: AppTest) -> list:
    return list(at.get("vega_lite_chart"))


def test_home() -> None:
    at = run("RocketScope.py")
    df = at.dataframe[0].value
    assert "fixtures" in set(df["value"])
    assert "Metrics page source: (none: fixtures)" in texts(at)


def test_cluster() -> None:
    at = run("pages/1_Cluster.py")
    df = at.dataframe[0].value
    assert set(df["broker_group"]) == {"bg-a", "bg-b", "bg-c"}
    assert {"LEADER", "MASTER", "SLAVE", "FOLLOWER"} <= set(df["role"])
    assert at.metric[0].value == "3"
    assert at.metric[2].value == "1 / 1"  # name servers up
    assert list(at.dataframe[1].value["name_server"]) == ["127.0.0.1:9876"]
    assert charts(at)
    assert at.toggle[0].value is False  # fixtures: no auto-refresh by default
    at.toggle[0].set_value(True).run()
    assert not at.exception and at.metric[0].value == "3"


def test_metrics() -> None:
    at = run("pages/2_Metrics.py")
    assert "fixtures" in texts(at)
    assert len(charts(at)) == 2


def test_trace_prompt_then_lookup() -> None:
    from rocketscope.dashboards import sources

    at = run("pages/3_Trace.py")
    assert "Enter a message ID" in texts(at)
    at.text_input(key="msg_id").set_value(sources.FIXTURE_MSG_ID).run()
    assert not at.exception and not at.error
    assert charts(at), "no Altair timeline"
    df = at.dataframe[0].value
    assert set(df["lane"]) == {"producer", "cg-billing", "cg-audit"}
    assert {"send", "store", "replica_ack", "commit", "deliver"} <= set(df["kind"])
    assert set(df["status"]) == {"success"}
    assert [m.value for m in at.metric] == ["success", "success"]


def test_trace_failed_delivery() -> None:
    from rocketscope.dashboards import sources

    at = run("pages/3_Trace.py")
    at.text_input(key="msg_id").set_value(sources.FIXTURE_FAILED_MSG_ID).run()
    df = at.dataframe[0].value
    audit = df[df["lane"] == "cg-audit"]
    assert list(audit["status"]) == ["failed", "unknown"]


@pytest.mark.parametrize("bad,expected", [("0A0B0C0D00000000DEADBEEF", "No trace found"),
                                          ("not an id!", "is not a message ID")])
def test_trace_bad_id(bad: str, expected: str) -> None:
    at = run("pages/3_Trace.py")
    at.text_input(key="msg_id").set_value(bad).run()
    assert not at.exception
    assert at.error and expected in at.error[0].value
    assert not charts(at)


def test_replication() -> None:
    at = run("pages/4_Replication.py")
    assert len(charts(at)) == 2
    fo = at.dataframe[0].value
    assert fo.loc[0, "new_gen"] == 3
    at.radio(key="pct").set_value("p50_ms").run()
    assert any("p50_ms" in s.value for s in at.subheader)


def test_replication_bad_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ROCKETSCOPE_FIXTURES")
    monkeypatch.setenv("ROCKETSCOPE_ANALYTICS", str(tmp_path))
    at = run("pages/4_Replication.py")
    assert at.error and "replication_latency" in at.error[0].value


def test_consumers() -> None:
    at = run("pages/5_Consumers.py")
    summary = at.dataframe[0].value
    assert set(summary["group"]) == {"cg-audit", "cg-billing", "cg-mail"}
    at.selectbox(key="group").set_value("cg-audit").run()
    queues = at.dataframe[1].value
    assert set(queues["group"]) == {"cg-audit"} and len(queues) == 4
    dlq = at.dataframe[2].value
    assert "%DLQ%cg-audit" in set(dlq["dlq_topic"])


def test_unreachable_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETSCOPE_FIXTURES")
    monkeypatch.setenv("ROCKETSCOPE_NAMESRV", "127.0.0.1:1")
    for page in ("pages/1_Cluster.py", "pages/5_Consumers.py"):
        at = run(page)
        assert at.error and "ROCKETSCOPE_FIXTURES" in at.error[0].value


def test_trace_unreachable_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETSCOPE_FIXTURES")
    monkeypatch.setenv("ROCKETSCOPE_NAMESRV", "127.0.0.1:1")
    at = run("pages/3_Trace.py")
    at.text_input(key="msg_id").set_value("0A0B0C0D00000000DEADBEEF").run()
    assert not at.exception
    assert at.error and "Trace lookup failed" in at.error[0].value


def test_replication_from_parquet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rocketscope.dashboards import sources

    latency, failovers = sources.fixture_analytics()
    failovers = failovers.assign(broker_group="bg-parquet")
    for name, df in (("replication_latency", latency), ("failover_impact", failovers)):
        part = tmp_path / name / "date=2025-11-22"
        part.mkdir(parents=True)
        df.drop(columns=["date"], errors="ignore").to_parquet(part / "part-0.parquet")
    monkeypatch.delenv("ROCKETSCOPE_FIXTURES")
    monkeypatch.setenv("ROCKETSCOPE_ANALYTICS", str(tmp_path))
    at = run("pages/4_Replication.py")
    assert not at.error
    assert "Parquet" in texts(at)
    assert len(charts(at)) == 2
    assert at.dataframe[0].value.loc[0, "broker_group"] == "bg-parquet"
