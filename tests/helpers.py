"""Test helpers: hand-made result sets written to disk in the real format (import as ``helpers``)."""
from __future__ import annotations

import json
import os
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from specsweep.analyze.metrics import level_metrics, requests_frame
from specsweep.results.meta import Meta
from specsweep.results.records import RequestRecord
from specsweep.results.store import SCHEMA_VERSION, append_level, write_meta

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "data" / "reference" / "seed-qwen3.5-122b-a10b"
#: a ``serve`` arm's program (``python -c FLAKY_SERVER {port} MARKER``): its first attempt SIGKILLs the process
#: that runs the arm (the server's parent is the study's server guard, whose parent is that worker); once
#: MARKER exists it serves the reference server's ``tiny`` profile on the port
FLAKY_SERVER = ("import os, signal, sys, psutil; port, marker = sys.argv[1], sys.argv[2]\n"
                "if not os.path.exists(marker):\n    open(marker, 'w').close()\n"
                "    os.kill(psutil.Process(os.getppid()).ppid(), signal.SIGKILL)\n"
                "else:\n    os.execv(sys.executable, [sys.executable, '-m', 'specsweep.refserver', '--profile', 'tiny', "
                "'--port', port, '--health-delay-s', '0.2'])\n")


T = TypeVar("T")

#: how much lower than the rest of the suite pure computations run (nice increment, Linux)
LOW_PRIORITY = 10


def at_low_priority(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a thread of its own at nice +:data:`LOW_PRIORITY`, its result or its
    exception. For the suite's long pure computations (the verdict draws: minutes of CPU on one
    worker): with 2 workers per core they would otherwise take CPU at the same priority from the
    tests that measure real-time servers beside them, whose figures then suffer. On Linux the nice
    value belongs to a thread, so the worker's own thread keeps its priority; elsewhere, or where
    it cannot be set, the call runs as is."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            me = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + LOW_PRIORITY))
        except (AttributeError, OSError):
            pass
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            out["error"] = exc

    worker = threading.Thread(target=run, name="specsweep-test-low-priority")
    worker.start()
    worker.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def base_meta(arm: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "reference",
        "run_id": f"test-{arm}",
        "arm": arm,
        "label": arm.upper() if arm != "baseline" else "Baseline",
        "complete": True,
        "level_only": True,
        "server": {"name": "sglang"},
        "workload": {"kind": "random-ids", "input_tokens": 100, "output_tokens": 100, "seed": 1},
        "sweep": {"concurrency": [], "repeats": 1},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(meta.get(key), dict):
            meta[key] = {**meta[key], **value}
        else:
            meta[key] = value
    return meta


def write_level_only(
    folder: Path, arm: str, rows: dict[int, tuple[float, float]], **meta: Any
) -> Path:
    """A level-only result set: {concurrency: (aggregate tok/s, per-request tok/s)}."""
    folder.mkdir(parents=True, exist_ok=True)
    m = base_meta(arm, **meta)
    m["sweep"]["concurrency"] = sorted(rows)
    (folder / "meta.json").write_text(json.dumps(m))
    pd.DataFrame(
        [{"run_id": m["run_id"], "arm": arm, "concurrency": c, "repeat": 0, "output_tok_s": a, "request_tok_s_mean": u}
         for c, (a, u) in sorted(rows.items())]
    ).to_csv(folder / "levels.csv", index=False)
    return folder


def synthetic_records(
    n: int, concurrency: int, *, tokens: int, step_s: float, ttft_s: float, tokens_per_chunk: int = 1,
    jitter: float = 0.0, rng: np.random.Generator | None = None,
) -> list[RequestRecord]:
    """A closed loop of ``n`` requests at ``concurrency`` with regular chunk timing (seconds)."""
    rng = rng or np.random.default_rng(0)
    slots = [0.0] * concurrency
    out = []
    for i in range(n):
        slot = min(range(concurrency), key=lambda k: slots[k])
        t0 = slots[slot]
        t = t0 + ttft_s * (1 + jitter * rng.standard_normal())
        times, counts, left = [], [], tokens
        first = True
        while left > 0:
            k = 1 if first else min(tokens_per_chunk, left)
            first = False
            times.append(t)
            counts.append(k)
            left -= k
            t += step_s * k * (1 + jitter * rng.standard_normal())
        out.append(RequestRecord(t_sent=t0, t_end=times[-1] + 1e-4, http_status=200, chunk_times=times,
                                 chunk_tokens=counts, prompt_tokens=100, output_tokens=tokens,
                                 token_source="usage", finish_reason="length"))
        slots[slot] = times[-1] + 1e-4
    return out


def write_measured(
    folder: Path, arm: str, levels: dict[int, dict[str, Any]], repeats: int = 1, seed: int | None = None,
    level_extra: dict[int, dict[str, Any]] | None = None, **meta: Any
) -> Path:
    """A measured result set built from synthetic records through the real metrics and store code.

    ``levels`` maps concurrency to keyword arguments of :func:`synthetic_records`;
    ``level_extra`` adds columns to a level's row (e.g. server gauges).
    """
    folder.mkdir(parents=True, exist_ok=True)
    m = base_meta(arm, kind="run", level_only=False, **meta)
    m["sweep"] = {"concurrency": sorted(levels), "repeats": repeats}
    rng = np.random.default_rng(zlib.crc32(arm.encode()) if seed is None else seed)
    for c, kw in sorted(levels.items()):
        for r in range(repeats):
            kw = {"n": max(2 * c, 8), **kw}
            recs = synthetic_records(concurrency=c, rng=rng, **kw)
            req = requests_frame(recs, t0=0.0, run_id=m["run_id"], arm=arm, concurrency=c, repeat=r)
            lv = level_metrics(req, c)
            lv.update(run_id=m["run_id"], arm=arm, concurrency=c, repeat=r, **(level_extra or {}).get(c, {}))
            append_level(folder, pd.DataFrame([lv]), req)
    write_meta(folder, Meta.model_validate(m))
    return folder


def in_progress(runs: Path) -> list[int] | None:
    """meta.json ``in_progress`` of the (first) run folder under ``runs``: the level a live sweep is measuring."""
    for meta in runs.glob("*/meta.json"):
        try:
            return json.loads(meta.read_text()).get("in_progress")
        except ValueError:  # caught between two writes
            return None
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_extra(module: str, extra: str) -> Any:
    """Import an optional extra's module; skip (saying how to install it) locally, fail under CI=true.

    ``.ci/run`` installs every extra, so under CI a test of an extra always runs.
    """
    import importlib

    import pytest

    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"the optional [{extra}] extra is not installed: .venv/bin/pip install -e '.[{extra}]'"
        if in_ci():
            pytest.fail(message + " (CI=true: tests of extras must run, not skip)")
        pytest.skip(message)


def load_fastsse() -> Any:
    """Import ``bench/fastsse_server.py`` (a script, not a package) once per session."""
    import importlib.util
    import sys

    if "fastsse_server" in sys.modules:
        return sys.modules["fastsse_server"]
    spec = importlib.util.spec_from_file_location("fastsse_server", ROOT / "bench" / "fastsse_server.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fastsse_server"] = mod
    spec.loader.exec_module(mod)
    return mod


def run_canary_study(tmp_path: Path, server_args: list[str], env: dict[str, str], requests: int,
                     log: Any = None) -> tuple[Any, Path, Path]:
    """A two-arm study whose baseline is a reference server started by the study (``serve``) with
    ``server_args`` (faults that quote secrets) and ``env``: (its result, out dir, report dir)."""
    import sys

    import yaml

    from specsweep.study.file import load_study
    from specsweep.study.runner import run_study

    argv = [sys.executable, "-m", "specsweep.refserver", "--profile", "tiny", "--port", "{port}",
            "--health-delay-s", "0.2", *server_args]
    doc = {"title": "Canary study", "name": "canary", "baseline": "baseline",
           "sweep": {"concurrency": [1, 2], "input_tokens": 32, "output_tokens": 16, "requests_per_level": requests},
           "arms": [{"name": "baseline", "serve": {"argv": argv, "env": env,
                                                   "ready_url": "http://127.0.0.1:{port}/health",
                                                   "start_timeout_s": 60, "stop_grace_s": 5}},
                    {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    out, reports = tmp_path / "out", tmp_path / "reports"
    result = run_study(load_study(path), out_dir=out, report_dir=reports, log=log or (lambda _: None))
    return result, out, reports
