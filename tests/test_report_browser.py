"""The published HTML renders every chart in a real headless browser with no network at all."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import SEED, in_ci
from specsweep.report import build_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def require_chromium() -> str:
    if CHROMIUM:
        return CHROMIUM
    message = "headless Chromium is needed: install Debian's package with `apt-get install -y chromium`"
    if in_ci():
        pytest.fail(message + " (CI=true: browser tests must run, not skip)")
    pytest.skip(message)


def offline_prefix() -> list[str]:
    """Run the browser in a network namespace with no interfaces up, when we may; else block DNS."""
    if os.geteuid() == 0 and shutil.which("unshare"):
        probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
        if probe.returncode == 0:
            return ["unshare", "-n"]
    return []


def chromium_dump(uri: str, tmp_path: Path, *flags: str, budget_ms: int = 15000) -> str:
    """The DOM headless Chromium holds after ``budget_ms`` of virtual time on ``uri``, offline
    (:func:`offline_prefix`, every host name unresolvable, a dead proxy); its profile stays under
    ``tmp_path``, its singleton socket folder (``TMPDIR``: a short path, as a unix socket's must
    be) in a temporary folder removed afterwards."""
    scratch = tempfile.mkdtemp(prefix="specsweep-chromium-")
    cmd = offline_prefix() + [
        require_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", *flags, f"--virtual-time-budget={budget_ms}",
        "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
        "--dump-dom", uri,
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, TMPDIR=scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dump_dom(html: Path, tmp_path: Path) -> str:
    return chromium_dump(html.resolve().as_uri(), tmp_path)


def hover_in_chromium(html: Path, *args: str, timeout_s: float = 120) -> dict:
    """Run ``browser_hover.py`` on ``html`` (offline: in a network namespace with only loopback up,
    where we may) and return the JSON it prints."""
    import json
    import shlex
    import sys

    hover = [sys.executable, str(Path(__file__).with_name("browser_hover.py")), require_chromium(), str(html), *args]
    prefix = offline_prefix()
    cmd = prefix + ["sh", "-c", "ip link set lo up && exec " + shlex.join(hover)] if prefix else hover
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def seed_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_report([SEED], "browser", out_dir=tmp_path_factory.mktemp("reports"))


@pytest.mark.browser
def test_every_chart_renders_offline(seed_html: Path, tmp_path: Path) -> None:
    html = seed_html
    source = html.read_text()
    expected = len(re.findall(r'class="specsweep-chart"', source))
    assert expected == 8  # verdict strip, throughput, per-user, Δ, fitted Δ, Pareto, concurrency, what-if decomposition
    dom = dump_dom(html, tmp_path)
    views = re.findall(r'<svg[^>]*class="marks"|<canvas[^>]*class="marks"', dom)
    assert len(views) == expected, f"{len(views)} chart views rendered, expected {expected}"
    assert not re.search(r">\s*chart failed:", dom), "a chart reported an error"
    assert not re.search(r"Error loading script", dom)


@pytest.mark.browser
def test_tooltips_work_offline(seed_html: Path) -> None:
    """Hover a point over the DevTools protocol; the Vega tooltip must show its data."""
    result = hover_in_chromium(seed_html)
    assert result["views"] == 8
    assert "visible" in (result["tooltip_class"] or ""), result
    text = result["tooltip_text"] or ""
    assert "arm" in text and "concurrency" in text, text
    assert result["scroll_width"] <= 1400, "the page scrolls sideways in a 1400 px window"
