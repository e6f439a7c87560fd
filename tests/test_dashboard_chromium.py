"""End to end: a live cluster, the dashboard server, and headless Chromium driven over DevTools.

The screenshots are kept as test artifacts under tests/artifacts/ (git-ignored).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import LocalCluster, wait_until
from conftest import free_port, missing_install
from rmq import drain, message, producer, simple_consumer

from rocketscope.dashboards.browser import chromium, chromium_binary

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
BIN = Path(sys.executable).parent / "rocketscope"


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def live_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    if not chromium_binary():
        missing_install("chromium is not installed: run `make setup` as root (it installs the Debian package chromium)")
    root = tmp_path_factory.mktemp("dash-live")
    c = LocalCluster(root)
    dash: subprocess.Popen[bytes] | None = None
    try:
        c.start_namesrv()
        node = c.start_broker("broker-web", traceTopicEnable="true", brokerTraceEnable="true",
                              metricsExporterType="PROM", metricsPromExporterHost="127.0.0.1",
                              metricsPromExporterPort=free_port())
        c.admin("updateTopic", "-b", node.admin_addr, "-t", "TopicWeb", "-r", "2", "-w", "2")
        with producer(node.endpoint, "TopicWeb") as p:
            msg_id = p.send(message("TopicWeb", b"look me up", tag="web", keys=["order-web"])).message_id
        with simple_consumer(node.endpoint, "GroupWeb", "TopicWeb") as consumer:
            assert msg_id in {m.message_id for m in drain(consumer, 1)}
        # the broker writes trace records in batches: wait (through the same lookup the page uses) until the
        # consumer group's delivery is there, so the page is asked once the answer is complete
        from rocketscope.trace.lookup import TraceLookup

        def delivered() -> bool:
            doc = asyncio.run(TraceLookup(c.namesrv_addr).lookup(msg_id)).to_dict()
            return any(g["group"] == "GroupWeb" and g.get("deliveries") for g in doc.get("groups") or [])
        wait_until(delivered, timeout=60, interval=0.5, what="the message's trace records")
        port = free_port()
        with open(root / "dashboard.log", "wb") as log:
            dash = subprocess.Popen([str(BIN), "dashboard", "--namesrv", c.namesrv_addr, "--port", str(port)],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _http_ok(f"{url}/_stcore/health"), timeout=90, what="the dashboard server")
        yield url, msg_id
    except BaseException:
        print(c.logs())
        raise
    finally:
        if dash is not None and dash.poll() is None:
            os.killpg(dash.pid, signal.SIGTERM)
            dash.wait(20)
        c.stop()


def test_trace_page_shows_a_real_message(live_dashboard: tuple[str, str]) -> None:
    url, msg_id = live_dashboard
    with chromium() as page:
        page.goto(f"{url}/Trace")
        page.wait_rendered("Message trace", "Enter a message ID", timeout=90)
        page.type_into("input[type=text], input", msg_id)  # as a user would: paste the ID, press Enter
        # the broker writes its trace records asynchronously: the lookup may need a moment
        text = page.wait_rendered("producer", "GroupWeb", "consumed", "Details", timeout=120)
        assert page.evaluate("document.querySelector('input').value") == msg_id
        assert "TopicWeb" in text and "order-web" in text
        shot = page.screenshot(ARTIFACTS / "trace.png")
        assert shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")


def test_trace_page_explains_an_unknown_id(live_dashboard: tuple[str, str]) -> None:
    url, _ = live_dashboard
    with chromium() as page:
        page.goto(f"{url}/Trace?msg_id=0102FC0000000000000000000000FFFF")
        text = page.wait_rendered("No trace found", timeout=90)
        assert "Traceback" not in text


def test_cluster_and_metrics_pages_render_live_data(live_dashboard: tuple[str, str]) -> None:
    url, _ = live_dashboard
    with chromium() as page:
        page.goto(f"{url}/Cluster")
        # the node table is a canvas grid (not in innerText): assert the summary the page derives from it
        text = page.wait_rendered("source: live", "broker groups", timeout=90)
        assert "Traceback" not in text and "unavailable" not in text
        page.screenshot(ARTIFACTS / "cluster.png")
        page.goto(f"{url}/Metrics")
        text = page.wait_rendered("Messages in and out by topic", "SendMessage latency histogram", timeout=90)
        assert "Cannot read" not in text and "No sends yet" not in text  # the histogram has our send
        page.screenshot(ARTIFACTS / "metrics.png")


def test_home_page_tells_what_it_reads(live_dashboard: tuple[str, str]) -> None:
    """The first page is named after the product (not "app"), has no Streamlit "Deploy" button, and
    says what the Metrics page reads when no Prometheus is given (each node's /metrics, not fixtures)."""
    url, _ = live_dashboard
    with chromium() as page:
        page.goto(url)
        text = page.wait_rendered("Metrics page source", timeout=90)  # the settings grid is a canvas
        assert "reads every node's /metrics" in text and "fixtures" not in text, text
        assert "Deploy" not in text
        nav = page.evaluate("(document.querySelector('[data-testid=\"stSidebarNav\"]') || {}).innerText || ''")
        assert nav.split("\n")[0].strip() == "RocketScope", nav
        assert "app" not in nav.split("\n")
