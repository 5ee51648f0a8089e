"""Reproduce works as a sequence: measure, build; then run the page's printed re-measure commands and its
printed rebuild command (as subprocesses, from the repository root as the page says) and the new page
holds the new runs' data. Two runs of one arm with the same configuration: the newest complete one is
used; a name clash between different configurations is an error that says what to do.

Real processes: the embedded reference server (tiny profile) started by each sweep, papermill and the
report CLI.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from specsweep.measure.sweep import run_sweep
from specsweep.paths import REPO_ROOT
from specsweep.report import reproduce_markdown
from specsweep.results.store import SchemaError, load_result_set, load_result_sets


def _sweep(out: Path, arm: str, spec: str) -> Path:
    params = {"arm": arm, "endpoint": "", "embedded_profile": "tiny", "embedded_spec": spec,
              "concurrency": [1, 2], "input_tokens": 32, "output_tokens": 16, "requests_per_level": 4,
              "out_dir": str(out)}
    return run_sweep(params, progress=False, log=lambda _: None).run_dir


def _blocks(markdown: str) -> list[list[str]]:
    """The fenced code blocks of a Markdown text, as lists of lines."""
    return [b.strip("\n").splitlines() for b in re.findall(r"```+sh\n(.*?)\n```+", markdown, re.DOTALL)]


@pytest.fixture()
def name() -> str:
    n = f"test-reproduce-{uuid.uuid4().hex[:8]}"
    yield n
    shutil.rmtree(REPO_ROOT / "data" / "runs" / "remeasured" / n, ignore_errors=True)
    for p in (REPO_ROOT / "reports" / f"{n}.html", REPO_ROOT / "reports" / "_build" / f"{n}.ipynb"):
        p.unlink(missing_ok=True)


def test_remeasure_then_rebuild_as_printed_gives_a_page_of_the_new_runs(tmp_path: Path, name: str) -> None:
    old = [_sweep(tmp_path / "runs", "baseline", "off"), _sweep(tmp_path / "runs", "mtp", "mtp")]
    params = {"result_sets": [str(p) for p in old], "baseline": "baseline", "output_name": name,
              "allow_workload_mismatch": False}
    text = reproduce_markdown(params)
    blocks = _blocks(text)
    sweeps = next(b for b in blocks if b[0].startswith(".venv/bin/papermill notebooks/sweep.ipynb"))
    rebuild = blocks[blocks.index(sweeps) + 1]
    assert len(sweeps) == 2 and len(rebuild) == 1 and "specsweep.report" in rebuild[0]
    work = tmp_path / "cwd"  # the printed sweeps write their executed notebooks to the current folder
    work.mkdir()
    for command in sweeps:
        argv = shlex.split(command)
        argv[2] = str(work / argv[2])  # out-<arm>.ipynb: kept out of the checkout
        run = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
    argv = shlex.split(rebuild[0]) + ["--out-dir", str(tmp_path / "reports")]
    run = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    page = (tmp_path / "reports" / f"{name}.html").read_text()
    new = sorted((REPO_ROOT / "data" / "runs" / "remeasured" / name).glob("*/meta.json"))
    assert len(new) == 2
    for meta_path in new:
        started = json.loads(meta_path.read_text())["started_utc"]
        assert started in page  # Setup: "measured (UTC)" of each new run
    for folder in old:
        assert load_result_set(folder).meta.started_utc not in page

    # measured again once more: two runs of each arm with the same configuration, the newest is used
    both = load_result_sets([*old, *(p.parent for p in new)])
    assert sorted(rs.arm for rs in both) == ["baseline", "mtp"]
    newest = {rs.arm: rs for rs in both}
    for meta_path in new:
        meta = json.loads(meta_path.read_text())
        assert newest[meta["arm"]].meta.started_utc == meta["started_utc"]
        assert any("supersedes 1 older run(s)" in n for n in newest[meta["arm"]].notes)


def test_two_arms_of_one_name_but_different_configurations_say_what_to_do(tmp_path: Path) -> None:
    one = _sweep(tmp_path / "a", "mtp", "mtp")
    two = tmp_path / "b" / one.name
    shutil.copytree(one, two)
    meta = json.loads((two / "meta.json").read_text())
    meta["embedded_server"]["args"] = ["--max-running-requests", "8"]
    (two / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SchemaError) as err:
        load_result_sets([one, two])
    msg = str(err.value)
    assert "arm 'mtp' is also the arm of" in msg and "different embedded" in msg
    assert "Give one of them another name" in msg and "--result-set" in msg
