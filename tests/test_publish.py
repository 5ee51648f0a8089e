"""``make reports`` (specsweep.publish) shows each sweep's progress on the terminal (issue 8, item 16)."""
from __future__ import annotations

from pathlib import Path

import pytest

from specsweep.publish import Published, run_sweeps
from specsweep.store import find_result_sets


def test_sweeps_stream_level_lines_and_progress_bars(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    small = {"embedded_profile": "tiny", "concurrency": [1, 2], "input_tokens": 32, "output_tokens": 32}
    pub = Published(name="progress", result_sets=(str(tmp_path / "study"),), title="t",
                    sweeps=(("baseline", dict(small)), ("mtp", dict(small))))
    run_sweeps(pub, tmp_path / "_build")
    out = capfd.readouterr()
    terminal = out.out + out.err
    for arm in ("baseline", "mtp"):
        assert f"sweeping arm {arm}" in terminal and f"swept arm {arm}" in terminal
    for level in ("C=1 repeat 0:", "C=2 repeat 0:"):  # the sweep's per-level lines, once per arm
        assert terminal.count(level) == 2, terminal[-3000:]
    assert terminal.count("C=2 r0:") >= 2 and "tok/s]" in terminal  # tqdm bars with live tok/s
    assert "without encryption" not in terminal
    assert len(find_result_sets(tmp_path / "study")) == 2
