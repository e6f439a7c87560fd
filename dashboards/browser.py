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
         "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1440,1100", "--force-device-scale-factor=1"]
# Streamlit shows its status widget while a script runs; the page is done when it is gone
STREAMLIT_IDLE_JS = ("document.readyState === 'complete' && !!document.querySelector('[data-testid=\"stApp\"]')"
                     " && !document.querySelector('[data-testid=\"stStatusWidget\"]')"
                     " && !document.querySelector('[data-testid=\"stSkeleton\"]')")


CHARTS_DRAWN_JS = ("Array.from(document.querySelectorAll('.vega-embed'))"
                   ".every(e => !!e.querySelector('canvas, svg'))")
# null while a CSS animation or transition runs (Streamlit fades elements in and slides the sidebar: a capture
# taken then shows a half-drawn sidebar), else a layout signature that must stop changing
SETTLED_JS = ("(() => { if (document.getAnimations().some(a => a.playState === 'running')) return null;"
              " const s = document.querySelector('[data-testid=\"stSidebar\"]');"
              " const r = s ? s.getBoundingClientRect() : {left: -1, width: -1};"
              " return [document.body.innerHTML.length, Math.round(r.left), Math.round(r.width)].join(','); })()")
# Streamlit scrolls its main container, not the body: the page's real height is the tallest scroll height
CONTENT_HEIGHT_JS = "Math.max(...Array.from(document.querySelectorAll('*')).map(e => e.scrollHeight))"
WIDTH, HEIGHT, MAX_HEIGHT = 1440, 1100, 6000


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

    def type_into(self, selector: str, text: str) -> None:
        """Type ``text`` into the element like a user (focus, insert, Enter): Streamlit's text input only
        reruns the script when the value is committed with Enter or on blur."""
        if not self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                             "if (!e) return false; e.focus(); e.select && e.select(); return true; })()"):
            raise RuntimeError(f"no element {selector!r} on the page")
        self.call("Input.insertText", text=text)
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                      nativeVirtualKeyCode=13, **({"text": "\r"} if kind == "keyDown" else {}))

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
        """Wait until Streamlit is idle, every one of ``texts`` is on the page, every chart is drawn, nothing
        is animating and the layout stopped changing (same signature over three polls); return the page text."""
        signatures: list[str] = []

        def done(page: Page) -> bool:
            if not page.evaluate(f"({STREAMLIT_IDLE_JS}) && ({CHARTS_DRAWN_JS})"):
                signatures.clear()
                return False
            body = page.text()
            if not all(t in body for t in texts):
                signatures.clear()
                return False
            return page._settled_once(signatures)
        self.wait(done, timeout, f"the page to show {texts!r}")
        return self.text()

    def _settled_once(self, signatures: list[str]) -> bool:
        sig = self.evaluate(SETTLED_JS)
        if sig is None:
            signatures.clear()
            return False
        signatures.append(str(sig))
        return len(signatures) >= 3 and len(set(signatures[-3:])) == 1

    def settle(self, timeout: float = 20.0) -> None:
        """Wait until no animation runs and the layout is the same over three polls (after a resize)."""
        signatures: list[str] = []
        self.wait(lambda page: page._settled_once(signatures), timeout, "the layout to settle")

    def set_viewport(self, height: int = HEIGHT) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=height, deviceScaleFactor=1,
                  mobile=False)

    def screenshot(self, path: Path) -> Path:
        """The whole page: the viewport is made as tall as the content (Streamlit's main container scrolls, so
        captureBeyondViewport alone would cut it), the layout allowed to settle, then captured and restored."""
        height = min(max(int(self.evaluate(CONTENT_HEIGHT_JS) or HEIGHT), HEIGHT), MAX_HEIGHT)
        if height > HEIGHT:
            self.set_viewport(height)
            self.settle()
            height = min(max(int(self.evaluate(CONTENT_HEIGHT_JS) or height), height), MAX_HEIGHT)
            self.set_viewport(height)
        self.settle()
        data = self.call("Page.captureScreenshot", format="png")["data"]
        if height > HEIGHT:
            self.set_viewport(HEIGHT)
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
            page.set_viewport()  # fixed from the start: a later resize makes Streamlit re-lay out the sidebar
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
