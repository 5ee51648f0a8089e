"""The page says what each measured server's accept length counts (its dialect's definition), and
only where it shows an accept length."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from helpers import write_level_only
from specsweep.analyze.compare import compare
from specsweep.report.definitions import acceptance_definitions
from specsweep.results.store import load_result_set

pytestmark = pytest.mark.fast  # files only

ROWS = {1: (100.0, 100.0), 8: (600.0, 75.0)}


def test_each_servers_accept_length_definition_is_quoted(tmp_path: Path) -> None:
    base = write_level_only(tmp_path / "baseline", "baseline", ROWS, server={"name": "vllm"})
    arm = write_level_only(tmp_path / "mtp", "mtp", ROWS, server={"name": "vllm"})
    assert acceptance_definitions(compare([load_result_set(base), load_result_set(arm)])) == []  # none shown
    lv = pd.read_csv(arm / "levels.csv").assign(spec_accept_length=[2.1, 1.9])
    lv.to_csv(arm / "levels.csv", index=False)
    lines = acceptance_definitions(compare([load_result_set(base), load_result_set(arm)]))
    assert len(lines) == 1 and "vLLM's accept length is 1 + accepted draft tokens per draft step" in lines[0]
    assert "proposed nothing" in lines[0]
