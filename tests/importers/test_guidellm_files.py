"""guidellm's files as it writes them: a benchmark whose file keeps fewer request rows than it ran
(``--metrics … sample_size=N``) is refused, not read silently; its YAML report reads as its JSON;
a CSV or HTML output (and aiperf's CSV) is refused naming the file to give."""
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


def test_guidellms_yaml_report_reads_as_its_json_and_csv_html_name_the_file_to_give(tmp_path: Path) -> None:
    import yaml

    from specsweep.results.store import load_result_set

    doc = json.loads(gzip.decompress((FIX / "mtp.json.gz").read_bytes()))
    doc["benchmarks"] = doc["benchmarks"][:2]  # two levels are enough, and YAML is slow to write
    (tmp_path / "benchmarks.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "benchmarks.json").write_text(json.dumps(doc))
    from_yaml = load_result_set(import_files("guidellm", [tmp_path / "benchmarks.yaml"], "y", tmp_path / "out"))
    from_json = load_result_set(import_files("guidellm", [tmp_path / "benchmarks.json"], "j", tmp_path / "out"))
    assert from_yaml.levels["output_tok_s"].tolist() == pytest.approx(from_json.levels["output_tok_s"].tolist())
    for name in ("benchmarks.csv", "benchmarks.html"):
        (tmp_path / name).write_text("a,b\n1,2\n")
        with pytest.raises(BadInput, match=r"pass the benchmarks.json"):
            import_files("guidellm", [tmp_path / name], "x", tmp_path / "out")
    (tmp_path / "profile_export_aiperf.csv").write_text("Metric,avg\n")
    with pytest.raises(BadInput, match=r"pass the profile_export_aiperf.json"):
        import_files("aiperf", [tmp_path / "profile_export_aiperf.csv"], "x", tmp_path / "out")


def test_a_rate_sweep_is_refused_naming_the_concurrent_profile(tmp_path: Path) -> None:
    """guidellm's default --profile sweep runs synchronous, throughput and constant-rate benchmarks:
    only the synchronous one is closed-loop, so it would import as one level at concurrency 1."""
    doc = json.loads(gzip.decompress((FIX / "mtp.json.gz").read_bytes()))
    first = doc["benchmarks"][0]
    kinds = [{"type_": "synchronous"}, {"type_": "throughput", "max_concurrency": 512},
             {"type_": "constant", "rate": 12.5}, {"type_": "constant", "rate": 25.0}]
    doc["benchmarks"] = [dict(first, config=dict(first["config"], strategy=k)) for k in kinds]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=r"rate sweep.*constant, throughput.*--profile concurrent --rate 1,4,16"):
        import_files("guidellm", [path], "mtp", tmp_path / "out")
    # a synchronous-only run (--profile synchronous) is one level at concurrency 1, as asked: read
    doc["benchmarks"] = doc["benchmarks"][:1]
    path.write_text(json.dumps(doc))
    assert import_files("guidellm", [path], "sync", tmp_path / "out")
    # concurrent benchmarks beside open-loop ones: the closed-loop ones are read, the others named in a note
    doc["benchmarks"] = [*json.loads(gzip.decompress((FIX / "mtp.json.gz").read_bytes()))["benchmarks"],
                         dict(first, config=dict(first["config"], strategy=kinds[2]))]
    path.write_text(json.dumps(doc))
    from specsweep.results.store import load_result_set

    meta = load_result_set(import_files("guidellm", [path], "mixed", tmp_path / "out")).meta
    assert any("open-loop strategies (constant) left out" in n for n in meta.notes)
