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
