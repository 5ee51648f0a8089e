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


def _papermill(tmp_path: Path, *params: str) -> subprocess.CompletedProcess[str]:
    """``papermill notebooks/sweep.ipynb OUT`` as the README runs it (no --log-output), from the repository root."""
    env = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"}
    env["PYTHONPATH"] = str(REPO_ROOT / "lib")
    return subprocess.run([sys.executable, "-m", "papermill", str(SWEEP), str(tmp_path / "out.ipynb"), *params],
                          cwd=str(REPO_ROOT), env=env, capture_output=True, text=True, timeout=300)


def test_plain_papermill_shows_each_level_and_explains_the_transport_warning(tmp_path: Path) -> None:
    """papermill shows no cell output without --log-output: the sweep's lines reach its terminal anyway."""
    done = _papermill(tmp_path, "-p", "embedded_profile", "tiny", "-y", "concurrency: [1, 2]", "-p", "input_tokens",
                      "32", "-p", "output_tokens", "16", "-p", "requests_per_level", "2", "-p", "out_dir",
                      str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "starting the embedded reference server" in done.stderr
    for c in (1, 2):
        assert re.search(rf"^C={c} repeat 0: .* tok/s aggregate, .* — saved$", done.stderr, re.M), done.stderr[-3000:]
    if "Kernel is running over TCP without encryption" in done.stderr:
        assert "specsweep: Jupyter's warning above is about the link between papermill and this notebook's kernel" \
            in done.stderr
    lines = _outputs_text(nbformat.read(str(tmp_path / "out.ipynb"), as_version=4))
    assert lines.count("C=1 repeat 0:") == 1  # once in the notebook: the terminal copy stays out of it


def test_an_unreachable_endpoint_under_papermill_ends_in_one_line_not_a_traceback(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _papermill(tmp_path, "-p", "endpoint", f"http://127.0.0.1:{port}", "-p", "arm", "mtp",
                      "-p", "out_dir", str(tmp_path / "runs"))
    assert done.returncode != 0
    cell = done.stderr.split('Exception encountered at "In [', 1)[1].strip().splitlines()[1:]
    assert len(cell) == 1 and cell[0].startswith(f"ProbeError: cannot reach an inference server at http://127.0.0.1:{port}"), \
        done.stderr[-3000:]
