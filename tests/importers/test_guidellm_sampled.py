"""guidellm's ``--metrics … sample_size=N`` keeps N request rows of a benchmark that ran more: the
importer refuses it (figures recomputed from the sample over the whole window would be too low)
instead of reading it silently."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from specsweep.importers import BadInput, import_files

pytestmark = pytest.mark.fast  # files only

FIX = Path(__file__).parents[1] / "fixtures" / "importers" / "guidellm"


def test_a_sampled_benchmark_is_refused_naming_the_counts(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress((FIX / "mtp.json.gz").read_bytes()))
    bench = next(b for b in doc["benchmarks"] if b["metrics"]["request_totals"]["successful"] > 8)
    ran = bench["metrics"]["request_totals"]["successful"]
    bench["requests"]["successful"] = bench["requests"]["successful"][:8]  # what sample_size=8 writes
    path = tmp_path / "sampled.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=rf"keeps 8 of the {ran} successful requests.*sample_size"):
        import_files("guidellm", [path], "mtp", tmp_path / "out")
    assert import_files("guidellm", [FIX / "mtp.json.gz"], "mtp", tmp_path / "whole")  # every row kept: read
