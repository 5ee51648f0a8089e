"""``vllm bench sweep serve`` folders: a folder's ``summary.json`` imports as its runs (repeats),
files of different serve-parameter sets are refused as one arm (they became one arm's repeats
before), and the sweep's ``summary.csv`` is refused naming the files to give."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from specsweep.importers import BadInput, import_files
from specsweep.results.store import load_result_set

pytestmark = pytest.mark.fast  # files only

FIX = Path(__file__).parents[1] / "fixtures" / "importers" / "vllm"


def _run(arm: str, c: int, n: int) -> dict:
    """What sweep serve writes as run=N.json: vllm bench serve's result with the run number merged in."""
    return {**json.loads(gzip.decompress((FIX / f"{arm}-c{c}.json.gz").read_bytes())), "run_number": n}


def _folder(exp: Path, serve: str, runs: list[dict]) -> Path:
    folder = exp / f"SERVE--{serve}-BENCH--max_concurrency=1"
    folder.mkdir(parents=True)
    for r in runs:
        (folder / f"run={r['run_number']}.json").write_text(json.dumps(r))
    (folder / "summary.json").write_text(json.dumps(runs))
    return folder


def test_a_sweep_folders_summary_is_its_runs_and_two_settings_are_never_one_arm(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    base = _folder(exp, "baseline", [_run("baseline", 1, 0), _run("baseline", 1, 1)])
    mtp = _folder(exp, "mtp", [_run("mtp", 1, 0)])
    rs = load_result_set(import_files("vllm", [base / "summary.json"], "baseline", tmp_path / "out"))
    assert sorted(rs.levels["repeat"].tolist()) == [0, 1] and rs.meta.server["sweep_serve"] == "baseline"
    with pytest.raises(BadInput, match=r"different server settings.*SERVE--baseline.*SERVE--mtp"):
        import_files("vllm", [base / "run=0.json", mtp / "run=0.json"], "both", tmp_path / "out")
    (exp / "summary.csv").write_text(",run_number\n0,0\n")
    with pytest.raises(BadInput, match=r"summary.json"):
        import_files("vllm", [exp / "summary.csv"], "x", tmp_path / "out")
