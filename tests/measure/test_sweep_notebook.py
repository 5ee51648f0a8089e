"""notebooks/sweep.ipynb through papermill on the embedded server, then the report over its runs."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from helpers import in_progress
from specsweep.paths import REPO_ROOT
from specsweep.report import build_report
from specsweep.results.store import load_result_sets

SWEEP = REPO_ROOT / "notebooks" / "sweep.ipynb"


def run_notebook(out: Path, **params) -> nbformat.NotebookNode:
    pm.execute_notebook(str(SWEEP), str(out), parameters=params, cwd=str(REPO_ROOT), kernel_name="python3",
                        progress_bar=False)
    return nbformat.read(str(out), as_version=4)


@pytest.mark.slow
def test_sweep_notebook_on_the_embedded_server_feeds_the_report(tmp_path: Path) -> None:
    study = tmp_path / "study"
    common = dict(embedded_profile="tiny", concurrency=[1, 4], input_tokens=32, output_tokens=48,
                  out_dir=str(study))
    for arm in ("baseline", "mtp"):
        nb = run_notebook(tmp_path / f"{arm}.ipynb", arm=arm, **common)
        text = "\n".join(o.get("text", "") if o.get("output_type") == "stream" else str(o.get("data", {}).get("text/html", ""))
                         for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
        assert "starting the embedded reference server" in text
        assert "No warnings" in text
    sets = load_result_sets(study)
    assert sorted(s.arm for s in sets) == ["baseline", "mtp"]
    assert all(s.meta.complete and s.meta.server["simulated"] for s in sets)
    html = build_report([study], "demo", out_dir=tmp_path / "reports").read_text()
    flat = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "simulated reference server" in flat
    assert "Time to first token" in flat and "Acceptance length under load" in flat


def test_bad_sweep_parameter_fails_before_measuring(tmp_path: Path) -> None:
    with pytest.raises(pm.PapermillExecutionError, match=r"parameter 'concurrency'"):
        run_notebook(tmp_path / "bad.ipynb", concurrency="fast", out_dir=str(tmp_path))
    assert not list(tmp_path.glob("*-baseline"))


def test_misspelled_parameter_fails_before_measuring(tmp_path: Path) -> None:
    """papermill only warns about an unknown -p name; the notebook must refuse it, not sweep the defaults."""
    with pytest.raises(pm.PapermillExecutionError, match=r"parameter 'concurency': not a parameter of this notebook "
                                                         r"— did you mean 'concurrency'\?"):
        run_notebook(tmp_path / "typo.ipynb", concurency=[1], out_dir=str(tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()


def _outputs_text(nb: nbformat.NotebookNode) -> str:
    return json.dumps([c.get("outputs", []) for c in nb.cells if c.cell_type == "code"])


def test_the_notebook_never_shows_an_echoed_api_key(tmp_path: Path, refserver_factory,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    key = "canary-notebook-51c0ffee"
    monkeypatch.setenv("SPECSWEEP_API_KEY", key)  # the kernel inherits it, as from the user's shell
    srv = refserver_factory(args=["--fault-error-rate", "0.3", "--fault-echo-auth", "--seed", "4"])
    nb = run_notebook(tmp_path / "echo.ipynb", endpoint=srv.url, arm="echo", concurrency=[2], input_tokens=32,
                      output_tokens=32, requests_per_level=10, out_dir=str(tmp_path / "runs"))
    text = _outputs_text(nb)
    assert "failed request(s)" in text  # the errors were there and were reported ...
    assert key not in text and key not in (tmp_path / "echo.ipynb").read_text()  # ... without the key
    for f in (tmp_path / "runs").rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f


@pytest.mark.skipif(os.name != "posix", reason="process groups and SIGINT")
def test_ctrl_c_under_papermill_prints_the_resume_hint_not_a_traceback(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "lib")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "papermill", str(SWEEP), str(tmp_path / "out.ipynb"), "-p", "embedded_profile", "tiny",
         "-y", "concurrency: [1, 2]", "-p", "input_tokens", "32", "-p", "output_tokens", "400",
         "-p", "requests_per_level", "4", "-p", "out_dir", str(runs)],
        cwd=str(REPO_ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not list(runs.glob("*/levels.parquet")) or in_progress(runs) != [2, 0]:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does: papermill and kernel together
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    run_dir = next(runs.glob("*-baseline"))
    assert f"Interrupted: 1 finished level(s) are saved in {run_dir}" in err
    assert f"-p resume {run_dir}" in err
    assert "zmq" not in err  # the kernel's zmq traceback is gone
    # papermill and the kernel stop on the same SIGINT; when papermill notices the kernel gone first it
    # prints its own DeadKernelError (a race, seen under load) — any other traceback is a failure
    assert "Traceback" not in err or "DeadKernelError: Kernel died" in err, err[-3000:]
    assert json.loads((run_dir / "meta.json").read_text())["interrupted"]["level"] == [2, 0]
