"""Provenance of imported files: an importer's notes reach the page's Setup section and name files, not
the folders they were read from; a version the file gives for the server is not the tool's."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from specsweep.analyze.compare import compare
from specsweep.importers import import_files
from specsweep.report.setup_info import differences_markdown
from specsweep.results.store import load_result_set

pytestmark = pytest.mark.fast  # files only

FIX = Path(__file__).parents[1] / "fixtures" / "importers" / "guidellm"


def _with_incomplete(src: Path, dst: Path) -> Path:
    """guidellm's file with one request cancelled at the end of each benchmark (a note of the reader)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for bench in doc["benchmarks"]:
        bench["requests"]["incomplete"] = [{"info": {}}]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(doc))
    return dst


def test_import_notes_reach_the_page_without_local_folders(tmp_path: Path) -> None:
    folder = tmp_path / "private-folder"
    base = import_files("guidellm", [_with_incomplete(FIX / "baseline.json.gz", folder / "baseline.json")], "baseline",
                        tmp_path / "out")
    arm = import_files("guidellm", [_with_incomplete(FIX / "mtp.json.gz", folder / "mtp.json")], "mtp", tmp_path / "out")
    comp = compare([load_result_set(base), load_result_set(arm)])
    page = differences_markdown(comp)
    assert "Import notes" in page and "incomplete request" in page and "mtp.json" in page
    assert str(folder) not in page and str(folder) not in (arm / "meta.json").read_text()


def test_sglangs_file_names_the_servers_version_not_the_tools(tmp_path: Path) -> None:
    sg = Path(__file__).parents[1] / "fixtures" / "importers" / "sglang" / "baseline.jsonl"
    meta = load_result_set(import_files("sglang", [sg], "baseline", tmp_path)).meta
    assert meta.server["version"] == "0.0.0-refserver"  # server_info.version: the server's
    assert meta.tool["version"] is None and (meta.source or {}).get("version") is None


def test_files_of_one_name_are_told_apart_in_provenance_and_notes(tmp_path: Path) -> None:
    """aiperf writes profile_export_aiperf.json into every run's folder: the provenance and the notes
    name each by its folder too, never three times the same name."""
    files = sorted((FIX.parent / "aiperf").glob("mtp-c*/profile_export_aiperf.json"))
    meta = load_result_set(import_files("aiperf", files, "mtp", tmp_path)).meta
    names = [f["path"] for f in (meta.source or {})["files"]]
    assert names == [f"{p.parent.name}/{p.name}" for p in files]
    assert all(any(n.startswith(f"{name}: per-request rows") for n in meta.notes) for name in names)
    assert str(FIX.parent) not in (tmp_path / "mtp" / "meta.json").read_text()


def test_tool_version_is_given_where_the_file_records_none_and_never_overrides_it(tmp_path: Path, capsys) -> None:
    from specsweep.cli import main

    vllm = sorted((FIX.parent / "vllm").glob("mtp-c*.json.gz"))
    assert main(["import", "vllm", *map(str, vllm), "--arm", "mtp", "--out", str(tmp_path), "--tool-version",
                 "0.34.0"]) == 0
    meta = load_result_set(tmp_path / "mtp").meta
    assert meta.tool["version"] == "0.34.0" and (meta.source or {})["version"] == "0.34.0"
    assert "vllm bench serve 0.34.0 result file(s)" in (meta.source or {})["citation"]
    aiperf = FIX.parent / "aiperf" / "mtp-c1" / "profile_export_aiperf.json"  # records aiperf_version
    assert main(["import", "aiperf", str(aiperf), "--arm", "a", "--out", str(tmp_path), "--tool-version", "9.9"]) == 2
    assert "records aiperf" in capsys.readouterr().err
    assert main(["import", "vllm", str(vllm[0]), "--arm", "b", "--out", str(tmp_path), "--tool-version",
                 "<b>1</b>"]) == 2
    assert "--tool-version" in capsys.readouterr().err
