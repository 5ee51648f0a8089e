"""Where a result came from: tool version and commit, Python and package versions, host, time."""
from __future__ import annotations

import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from specsweep import __version__
from specsweep.paths import REPO_ROOT

PACKAGES = ("httpx", "aiohttp", "uvloop", "orjson", "pandas", "numpy", "pyarrow", "altair", "papermill", "nbconvert")


def utc_now() -> str:
    """The current UTC time as ISO 8601 with a Z suffix (seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_stamp() -> str:
    """The current UTC time as yyyymmddThhmmssZ (for run ids)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def git_commit(root: Path = REPO_ROOT) -> str | None:
    """The checkout's commit, with ``-dirty`` when it has uncommitted changes; None outside git."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def tool() -> dict[str, Any]:
    """The ``tool`` record of meta.json."""
    return {"name": "specsweep", "version": __version__, "git_commit": git_commit()}


def environment() -> dict[str, Any]:
    """Python, package versions and host of the measuring machine."""
    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "python": sys.version.split()[0],
        "packages": packages,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpus": __import__("os").cpu_count(),
    }
