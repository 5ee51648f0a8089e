"""aiperf's files as it writes them: the per-request export found beside a summary of any
``--profile-export-prefix``, and aiperf's own headline figures kept beside specsweep's."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specsweep.importers import import_files
from specsweep.results.store import load_result_set

pytestmark = pytest.mark.fast  # files only

FIX = Path(__file__).parents[1] / "fixtures" / "importers" / "aiperf" / "mtp-c8"


def test_a_prefixed_export_keeps_its_per_request_rows_and_aiperfs_own_figures(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIX / "profile_export_aiperf.json", run / "mtp8_aiperf.json")  # --profile-export-prefix mtp8
    shutil.copy(FIX / "profile_export.jsonl.gz", run / "mtp8.jsonl.gz")
    rs = load_result_set(import_files("aiperf", [run / "mtp8_aiperf.json"], "mtp", tmp_path / "out"))
    assert rs.requests is not None and len(rs.requests) > 0 and not rs.meta.level_only
    own = json.loads((FIX / "profile_export_aiperf.json").read_text())
    assert rs.levels["aiperf_output_tok_s"].tolist() == pytest.approx([own["output_token_throughput"]["avg"]])
    assert rs.levels["aiperf_request_per_s"].tolist() == pytest.approx([own["request_throughput"]["avg"]])
    assert "benchmark_duration" in rs.meta.metric_definitions["aiperf_output_tok_s"]
