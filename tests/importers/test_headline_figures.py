"""Every peer-tool fixture's headline figures (output tok/s, request rate, TTFT / TPOT / e2e / ITL
medians where the tool gives them) import within 0.1 % of the tool's own figure in the file, or the
import notes (shown on the page) name the difference: the file, the column, the level and why.

The tool's figures are read here straight from the files, not through the readers."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from specsweep.importers import import_files
from specsweep.results.store import load_result_set

pytestmark = pytest.mark.fast  # files only

FIX = Path(__file__).parents[1] / "fixtures" / "importers"
TOLERANCE = 1e-3
#: (file, column, concurrency) named by a note: "FILE: specsweep's COLUMN differs … at concurrency 1, 8: why"
NOTE = re.compile(r"^(?P<file>\S+): specsweep's (?P<col>\w+) differs from .* own figure by .* at concurrency "
                  r"(?P<levels>[\d, ]+):")


def _load(path: Path) -> Any:
    return json.loads(gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_text())


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _vllm(o: dict[str, Any]) -> tuple[int, dict[str, float]]:
    figs = {"output_tok_s": o["output_throughput"], "request_per_s": o["request_throughput"],
            "ttft_p50_s": o["median_ttft_ms"] / 1e3, "tpot_p50_s": o["median_tpot_ms"] / 1e3}
    if "median_e2el_ms" in o:
        figs["e2e_p50_s"] = o["median_e2el_ms"] / 1e3
    figs["vllm_itl_p50_s"] = o["median_itl_ms"] / 1e3
    return o["max_concurrency"], figs


def _sglang(o: dict[str, Any]) -> tuple[int, dict[str, float]]:
    return o["max_concurrency"], {
        "output_tok_s": o["output_throughput"], "request_per_s": o["request_throughput"],
        "ttft_p50_s": o["median_ttft_ms"] / 1e3, "tpot_p50_s": o["median_tpot_ms"] / 1e3,
        "e2e_p50_s": o["median_e2e_latency_ms"] / 1e3, "sglang_itl_p50_s": o["median_itl_ms"] / 1e3}


def _guidellm(b: dict[str, Any]) -> tuple[int, dict[str, float]]:
    m = {k: v["successful"] for k, v in b["metrics"].items() if isinstance(v, dict) and "successful" in v}
    return b["config"]["strategy"].get("streams") or 1, {
        "output_tok_s": m["output_tokens_per_second"]["mean"], "request_per_s": m["requests_per_second"]["mean"],
        "ttft_p50_s": m["time_to_first_token_ms"]["median"] / 1e3,
        "tpot_p50_s": m["inter_token_latency_ms"]["median"] / 1e3, "e2e_p50_s": m["request_latency"]["median"]}


def _aiperf(o: dict[str, Any]) -> tuple[int, dict[str, float]]:
    phase = next(p for p in o["input_config"]["phases"] if p.get("kind", "profiling") == "profiling")
    return phase["concurrency"], {
        "output_tok_s": o["output_token_throughput"]["avg"], "request_per_s": o["request_throughput"]["avg"],
        "ttft_p50_s": o["time_to_first_token"]["p50"] / 1e3, "tpot_p50_s": o["inter_token_latency"]["p50"] / 1e3,
        "e2e_p50_s": o["request_latency"]["p50"] / 1e3}


def _sweep_summary(tmp: Path, arm: str) -> Path:
    """A vllm bench sweep serve folder's summary.json: the detailed runs of one serve setting."""
    folder = tmp / "exp" / f"SERVE--{arm}-BENCH--max_concurrency=1"
    folder.mkdir(parents=True)
    runs = [{**_load(FIX / "vllm" / f"{arm}-c{c}.json.gz"), "run_number": 0} for c in (1, 8, 64)]
    (folder / "summary.json").write_text(json.dumps(runs))
    return folder / "summary.json"


def _cases(tmp: Path) -> list[tuple[str, list[Path], list[tuple[str, int, dict[str, float]]]]]:
    """(tool, files, [(file name in notes, concurrency, the tool's own figures)]) per fixture set."""
    cases = []
    for arm in ("baseline", "mtp"):
        detailed = sorted((FIX / "vllm").glob(f"{arm}-c*.json.gz"))
        cases.append(("vllm", detailed, [(p.name, *_vllm(_load(p))) for p in detailed]))
        summary = FIX / "vllm" / f"{arm}-summary.jsonl"
        cases.append(("vllm", [summary], [(summary.name, *_vllm(o)) for o in _lines(summary)]))
        sweep = _sweep_summary(tmp, arm)
        cases.append(("vllm", [sweep], [("summary.json", *_vllm(o)) for o in _load(sweep)]))
        aiperf = sorted((FIX / "aiperf").glob(f"{arm}-c*/profile_export_aiperf.json"))
        cases.append(("aiperf", aiperf, [(f"{p.parent.name}/{p.name}", *_aiperf(_load(p))) for p in aiperf]))
        guidellm = FIX / "guidellm" / f"{arm}.json.gz"
        cases.append(("guidellm", [guidellm], [(guidellm.name, *_guidellm(b)) for b in _load(guidellm)["benchmarks"]]))
    for name in ("baseline", "mtp", "mtp-oai"):
        path = FIX / "sglang" / f"{name}.jsonl"
        cases.append(("sglang", [path], [(path.name, *_sglang(o)) for o in _lines(path)]))
    return cases


def _named(notes: list[str]) -> set[tuple[str, str, int]]:
    out = set()
    for note in notes:
        m = NOTE.match(note)
        if m:
            out |= {(m["file"], m["col"], int(c)) for c in m["levels"].split(",")}
    return out


def test_every_headline_figure_is_the_tools_own_or_the_difference_is_named(tmp_path: Path) -> None:
    checked = named = 0
    for i, (tool, files, expected) in enumerate(_cases(tmp_path)):
        rs = load_result_set(import_files(tool, files, f"arm{i}", tmp_path / "out"))
        levels = rs.levels.groupby("concurrency").mean(numeric_only=True)
        said = _named(rs.meta.notes)
        for name, c, figures in expected:
            for col, theirs in figures.items():
                ours = float(levels.loc[c, col])
                checked += 1
                if abs(ours / theirs - 1) > TOLERANCE:
                    named += 1
                    assert (name, col, c) in said, (f"{tool} {name} at {c}: {col} {ours:.6g} against the tool's "
                                                    f"{theirs:.6g}, and no import note names it: {rs.meta.notes}")
    assert checked > 200 and named > 0  # the fixtures hold both cases
