"""Headless Chromium for the page tests: a DOM dump and a hover script, offline (Debian's ``chromium``)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import in_ci

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
