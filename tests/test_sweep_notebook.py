"""notebooks/sweep.ipynb through papermill on the embedded server, then the report over its runs."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from specsweep.report import REPO_ROOT, build_report
from specsweep.store import load_result_sets

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
    assert all(s.meta["complete"] and s.meta["server"]["simulated"] for s in sets)
    html = build_report([study], "demo", out_dir=tmp_path / "reports").read_text()
    flat = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "simulated reference server" in flat
    assert "Time to first token" in flat and "Acceptance length under load" in flat


def test_bad_sweep_parameter_fails_before_measuring(tmp_path: Path) -> None:
    with pytest.raises(pm.PapermillExecutionError, match=r"parameter 'concurrency'"):
        run_notebook(tmp_path / "bad.ipynb", concurrency="fast", out_dir=str(tmp_path))
    assert not list(tmp_path.glob("*-baseline"))
