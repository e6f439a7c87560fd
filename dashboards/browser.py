"""Headless Chromium over the DevTools protocol: the dashboard's end-to-end tests and its screenshots.

Why raw CDP over a websocket instead of Playwright or Selenium: Debian's ``chromium`` is all
that is needed (no browser download, no driver binary, no Node.js), and the three calls we
use (navigate, evaluate, screenshot) are a few lines each.  Waiting is done by polling the
page through ``Runtime.evaluate`` until a condition holds (Streamlit renders after the page
"loads", so a load event says nothing), never by sleeping a fixed time.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from rocketscope.ports import free_port

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1440,1100"]
# Streamlit shows its status widget while a script runs; the page is done when it is gone
STREAMLIT_IDLE_JS = ("document.readyState === 'complete' && !!document.querySelector('[data-testid=\"stApp\"]')"
                     " && !document.querySelector('[data-testid=\"stStatusWidget\"]')"
                     " && !document.querySelector('[data-testid=\"stSkeleton\"]')")


CHARTS_DRAWN_JS = ("Array.from(document.querySelectorAll('.vega-embed'))"
                   ".every(e => !!e.querySelector('canvas, svg'))")


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Page:
    """One tab, driven by DevTools commands over its websocket."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._next_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        msg_id = self._next_id
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:  # events arrive in between; skip them
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"DevTools {method} failed: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''") or "")

    def wait(self, condition: Callable[[Page], bool], timeout: float = 60.0, what: str = "the page") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self):
                return
            time.sleep(0.2)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}; page text: {self.text()[:1500]!r}")

    def wait_rendered(self, *texts: str, timeout: float = 90.0) -> str:
        """Wait until Streamlit is idle, every one of ``texts`` is on the page, every chart is drawn
        and the DOM stopped changing (same size over three polls); return the page text."""
        sizes: list[int] = []

        def done(page: Page) -> bool:
            if not page.evaluate(f"({STREAMLIT_IDLE_JS}) && ({CHARTS_DRAWN_JS})"):
                sizes.clear()
                return False
            body = page.text()
            if not all(t in body for t in texts):
                sizes.clear()
                return False
            sizes.append(int(page.evaluate("document.body.innerHTML.length") or 0))
            return len(sizes) >= 3 and len(set(sizes[-3:])) == 1
        self.wait(done, timeout, f"the page to show {texts!r}")
        return self.text()

    def screenshot(self, path: Path) -> Path:
        height = int(self.evaluate("Math.max(document.body.scrollHeight, 1100)") or 1100)
        self.call("Emulation.setDeviceMetricsOverride", width=1440, height=min(height, 4000), deviceScaleFactor=1,
                  mobile=False)
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


@contextlib.contextmanager
def chromium(binary: str | None = None) -> Iterator[Page]:
    """A headless Chromium with a fresh profile; yields its first tab."""
    exe = binary or chromium_binary()
    if not exe:
        raise FileNotFoundError("chromium is not installed (apt-get install chromium)")
    port = free_port()
    profile = tempfile.mkdtemp(prefix="rocketscope-chromium-")
    proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        ws_url = _page_websocket(port, proc)
        with connect(ws_url, max_size=64 << 20, open_timeout=30) as ws:
            page = Page(ws)
            page.call("Page.enable")
            page.call("Runtime.enable")
            yield page
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(profile, ignore_errors=True)


def _page_websocket(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before DevTools came up")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as resp:
                targets = json.loads(resp.read())
            pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError("chromium's DevTools endpoint did not come up")
