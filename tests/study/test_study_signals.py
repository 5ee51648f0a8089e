"""SIGTERM or SIGINT to a study runner with ``parallel`` workers takes every process of the study with it.

What ``make reports`` (``python -m specsweep.publish``) or a ``specsweep study`` gets when it is stopped
by a supervisor: the runner's workers, the forkserver they were forked from, their Jupyter kernels and
the embedded reference servers the kernels started must all be gone within seconds, or they go on
measuring against the next run. The finished levels stay in the run folders, so ``--resume`` goes on.

Real processes throughout: the study CLI as a subprocess, its forkserver, workers, kernels and
embedded reference servers. A process counts as this study's when its environment carries a mark
set for this test only (every descendant inherits the runner's environment); nothing else is touched.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from specsweep.study.arm import complete_run

PY = sys.executable
#: the environment variable whose value marks this test's processes
MARK = "SPECSWEEP_TEST_STUDY_MARK"
#: seconds every process of the study may take to go after the runner got the signal: the workers
#: stop their kernels, which stop their servers (each step within about a second)
GONE_WITHIN_S = 20.0


def _study_pids(mark: str) -> dict[int, str]:
    """pid -> command line of every process whose environment carries ``MARK=mark`` (read from /proc)."""
    found: dict[int, str] = {}
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or another user's process: not ours
            continue
    return found


def _alive(pids: dict[int, str]) -> dict[int, str]:
    """Those of ``pids`` that still run (a zombie is gone: it only waits to be reaped)."""
    alive = {}
    for pid, cmd in pids.items():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive[pid] = cmd
    return alive


def _study(tmp_path: Path, out: Path) -> Path:
    # enough requests that both sweeps are still measuring after their first level
    doc = {"title": "Signals", "name": "sig", "baseline": "baseline", "parallel": 2, "out_dir": str(out),
           "sweep": {"concurrency": [1, 2, 4], "input_tokens": 32, "output_tokens": 32, "requests_per_level": 200},
           "arms": [{"name": "baseline", "embedded": {"profile": "tiny", "spec": "off"}},
                    {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp"}}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


#: ``python -m specsweep.publish`` measuring only the study file argv[1] (each study in a thread of its own)
PUBLISH = """
import sys
from specsweep.runtime import configure_process
configure_process()
import specsweep.publish as publish
publish.PUBLISHED = (publish.Published(name="sig", study=sys.argv[1]),)
sys.exit(publish.main(["--out-dir", sys.argv[2]]))
"""


def _levels_done(out: Path) -> dict[str, Path]:
    """arm -> its run folder's levels file, for the arms that finished a level."""
    return {p.parents[2].name: p for p in (out / "_runs").glob("*/r0/*/levels.parquet")}


def _wait_until_measured(runner: subprocess.Popen[str], out: Path, lines: list[str]) -> None:
    """Poll until each arm finished a level and measures the next."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and runner.poll() is None:
        if len(_levels_done(out)) == 2:
            return
        time.sleep(0.2)
    raise AssertionError("the study's two arms never finished a level:\n" + "".join(lines[-60:]))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="finds the study's processes in Linux's /proc")
@pytest.mark.parametrize(("entry", "sig"), [("study", signal.SIGTERM), ("publish", signal.SIGTERM),
                                            ("publish", signal.SIGINT)],
                         ids=["study-SIGTERM", "publish-SIGTERM", "publish-SIGINT"])
def test_a_signal_to_the_runner_leaves_no_process_of_a_parallel_study_and_resume_goes_on(
        tmp_path: Path, entry: str, sig: signal.Signals) -> None:
    mark = uuid.uuid4().hex
    out = tmp_path / "out"
    study = _study(tmp_path, out)
    cmd = ([PY, "-m", "specsweep.study", str(study), "--no-report"] if entry == "study"
           else [PY, "-c", PUBLISH, str(study), str(tmp_path / "reports")])
    # a session of its own: the signal goes to the runner alone, as a supervisor's kill does, not to a
    # terminal's process group
    runner = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True, env={**os.environ, MARK: mark})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(runner.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        _wait_until_measured(runner, out, lines)
        before = _study_pids(mark)
        assert sum("specsweep.refserver" in c for c in before.values()) == 2, before
        assert any("forkserver" in c for c in before.values()), before  # the workers' parent is among them
        kept = {path: path.stat().st_size for path in _levels_done(out).values()}
        runner.send_signal(sig)
        deadline = time.monotonic() + GONE_WITHIN_S
        while (left := _alive(_study_pids(mark))) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"processes of the study outlived its runner stopped by {sig.name}: {left}"
    finally:
        for pid in _alive(_study_pids(mark)):  # ours only: they carry this test's mark
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if runner.poll() is None:
            runner.kill()
        runner.wait()
        reader.join(timeout=10)
    text = "".join(lines)
    # nothing went on measuring after the signal (the runner waited for a study thread that did)
    assert complete_run(out, "baseline", 0) is None and complete_run(out, "mtp", 0) is None, text[-3000:]
    assert runner.returncode == 1, text[-3000:]
    assert "interrupted: finished arms are kept; continue with --resume" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]

    # the finished levels are kept, the study is recorded as interrupted, and --resume completes it
    assert all(path.is_file() and path.stat().st_size >= size for path, size in kept.items()), kept
    assert json.loads((out / "study.json").read_text()).get("interrupted")
    again = subprocess.run([PY, "-m", "specsweep.study", str(study), "--no-report", "--resume"], capture_output=True,
                           text=True, timeout=400)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert complete_run(out, "baseline", 0) is not None and complete_run(out, "mtp", 0) is not None
