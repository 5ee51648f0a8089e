"""Hover chart points of an HTML page in headless Chromium and print what happened as JSON.

Run as a script (the browser tests start it inside a network namespace with only loopback up):
``python tests/browser_hover.py CHROMIUM FILE.html [--all]``. Speaks the Chrome DevTools Protocol
over a websocket on 127.0.0.1. Default: hover the first point and print
{"views": n, "tooltip_class": ..., "tooltip_text": ..., "scroll_width": px} in a 1400 px window. ``--all``: hover every point (up to
80), then print {"charts", "views", "failed", "hovered", "tooltips", "pwned", "text"} — ``pwned``
is ``window.__pwned`` (None unless an injected script ran), ``text`` the page's visible text.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket  # websocket-client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=30)
        self.next_id = 0

    def call(self, method: str, **params: object) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def js(self, expression: str) -> object:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return res.get("result", {}).get("value")


def hover_all(page: Page) -> int:
    """Hover every symbol and text mark in turn; count the tooltips that showed; report the page's state."""
    n = int(page.js("document.querySelectorAll('.mark-symbol path, .mark-text text').length") or 0)
    hovered = tooltips = 0
    for i in range(min(n, 80)):
        box = page.js(f"""(() => {{ const p = document.querySelectorAll('.mark-symbol path, .mark-text text')[{i}];
            p.scrollIntoView({{block: 'center'}}); const r = p.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
        x, y = box  # type: ignore[misc]
        for dx in (0, 1):
            page.call("Input.dispatchMouseEvent", type="mouseMoved", x=x + dx, y=y)
        time.sleep(0.05)
        hovered += 1
        tip = page.js("(() => { const t = document.querySelector('#vg-tooltip-element');"
                      " return !!t && t.className.includes('visible'); })()")
        tooltips += bool(tip)
    time.sleep(0.5)  # let any onerror handler of an injected <img> fire
    failed = int(page.js("[...document.querySelectorAll('.specsweep-chart')]"
                         ".filter(d => d.innerText.startsWith('chart failed')).length") or 0)
    print(json.dumps({
        "charts": int(page.js("document.querySelectorAll('.specsweep-chart').length") or 0),"views": int(page.js("document.querySelectorAll('svg.marks').length") or 0),
        "failed": failed, "hovered": hovered, "tooltips": tooltips,
        "pwned": page.js("window.__pwned === undefined ? null : String(window.__pwned)"),
        "text": page.js("document.body.innerText"),
    }))
    return 0


def main(browser: str, html: str, all_points: bool = False) -> int:
    port = free_port()
    profile = tempfile.mkdtemp(prefix="specsweep-chromium-")
    proc = subprocess.Popen([
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", f"--remote-debugging-port={port}", "--remote-allow-origins=*",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--window-size=1400,1000",
        "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ, TMPDIR=profile))  # its singleton socket folder too goes with the profile
    try:
        deadline = time.time() + 30
        targets = None
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as resp:
                    targets = [t for t in json.load(resp) if t.get("type") == "page"]
                if targets:
                    break
            except OSError:
                time.sleep(0.2)
        if not targets:
            raise RuntimeError("Chromium did not open its DevTools port")
        page = Page(targets[0]["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Page.navigate", url=Path(html).resolve().as_uri())
        views = 0
        for _attempt in range(150):  # charts render asynchronously: wait for every chart's view
            loaded = page.js("document.readyState") == "complete"  # first: counts taken after it are final
            charts = int(page.js("document.querySelectorAll('.specsweep-chart').length") or 0)
            views = int(page.js("document.querySelectorAll('svg.marks').length") or 0)
            if loaded and charts and views >= charts:
                break
            time.sleep(0.1)
        if all_points:
            return hover_all(page)
        box = page.js("""(() => { const p = document.querySelector('.mark-symbol path');
            p.scrollIntoView({block: 'center'}); const r = p.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2]; })()""")
        x, y = box  # type: ignore[misc]
        for dx in (0, 1, 0):
            page.call("Input.dispatchMouseEvent", type="mouseMoved", x=x + dx, y=y)
            time.sleep(0.3)
        tip = page.js("""(() => { const t = document.querySelector('#vg-tooltip-element');
            return t ? [t.className, t.innerText] : [null, null]; })()""")
        width = page.js("document.documentElement.scrollWidth")
        print(json.dumps({"views": views, "tooltip_class": tip[0], "tooltip_text": tip[1],  # type: ignore[index]
                          "scroll_width": width}))
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)  # 2.5 MB a run, left in /tmp before


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], "--all" in sys.argv[3:]))
