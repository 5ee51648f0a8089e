"""`specsweep gate` end to end on studies of the embedded reference server: a rerun of the reference's
configuration passes; the same study with the speculative arm's accept length lowered fails, naming
the accept length; a folder that holds no result set is bad input (exit status 2)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from specsweep.cli import main
from specsweep.study.file import load_study
from specsweep.study.runner import run_study

#: forward steps slowed to 10 ms, so the simulated time, not this machine's CPU, sets the figures
SLOW = ["--set", "decode.fixed_ms=10"]


def _study(tmp_path: Path, name: str, mtp_args: list[str]) -> Path:
    doc: dict[str, Any] = {
        "title": "Gate", "name": name, "baseline": "baseline", "repeats": 2,
        "sweep": {"concurrency": [1, 2, 4], "input_tokens": 32, "output_tokens": 16, "requests_per_level": 8},
        "arms": [{"name": "baseline", "embedded": {"profile": "tiny", "spec": "off", "args": SLOW}},
                 {"name": "mtp", "embedded": {"profile": "tiny", "spec": "mtp", "args": SLOW + mtp_args}}]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / name
    result = run_study(load_study(path), out_dir=out, report=False, log=lambda _: None)
    assert result.ok, result.missing
    return out


def test_a_rerun_passes_and_a_lower_accept_length_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = _study(tmp_path, "ref", [])
    again = _study(tmp_path, "again", [])
    lower = _study(tmp_path, "lower", ["--mean-accept-length", "1.4"])
    assert main(["gate", "--reference", str(ref), str(again)]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out.startswith("specsweep gate: PASS")
    assert main(["gate", "--reference", str(ref), str(lower)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("specsweep gate: FAIL")
    assert "mtp accept length at" in out
    assert main(["gate", "--reference", str(tmp_path / "nowhere"), str(again)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--reference" in err[0]
