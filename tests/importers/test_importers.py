"""Importers of peer tools' result files (``specsweep.importers``), on the fixtures in
``tests/fixtures/importers`` (README there: which files the real tools wrote).

Expectations come from the files themselves (the tool's own raw figures, recomputed here with
numpy) and from specsweep's own sweep of the same two servers (``fixtures/importers/specsweep``),
never from the importer's output.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from helpers import base_meta
from specsweep.analyze.compare import compare
from specsweep.analyze.join import agreeing_definitions
from specsweep.importers import BadInput, import_files
from specsweep.results.meta import Meta
from specsweep.results.store import load_result_set, load_result_sets

FIX = Path(__file__).parents[1] / "fixtures" / "importers"
LEVELS = [1, 8, 64]


def _files(tool: str, arm: str) -> list[Path]:
    return {
        "vllm": sorted((FIX / "vllm").glob(f"{arm}-c*.json.gz")),
        "vllm-summary": [FIX / "vllm" / f"{arm}-summary.jsonl"],
        "sglang": [FIX / "sglang" / f"{arm}.jsonl"],
        "guidellm": [FIX / "guidellm" / f"{arm}.json.gz"],
        "aiperf": sorted((FIX / "aiperf").glob(f"{arm}-c*/profile_export_aiperf.json")),
        "table": [FIX / "table" / f"{arm}.csv"],
    }[tool]


def _load_json(path: Path) -> list[dict]:
    text = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def own():
    """specsweep's own comparison of the two reference servers (the reference direction)."""
    return compare(load_result_sets([FIX / "specsweep" / "baseline", FIX / "specsweep" / "mtp"]))


def _import_pair(tool: str, out: Path) -> list:
    name = "vllm" if tool == "vllm-summary" else tool
    for arm in ("baseline", "mtp"):
        import_files(name, _files(tool, arm), arm, out, output_tokens=64 if tool == "table" else None)
    return load_result_sets(out)


def _raw_aggregate(tool: str, arm: str) -> dict[int, float]:
    """The tool's own aggregate output tok/s per concurrency, read straight from its files."""
    out: dict[int, float] = {}
    for path in _files(tool, arm):
        for obj in _load_json(path):
            if tool in ("vllm", "vllm-summary", "sglang"):
                out[obj["max_concurrency"]] = obj["total_output_tokens"] / obj["duration"]
            elif tool == "aiperf":
                conc = obj["input_config"]["phases"][0]["concurrency"]
                out[conc] = obj["total_output_tokens"]["avg"] / obj["benchmark_duration"]["avg"]
            elif tool == "guidellm":
                for b in obj["benchmarks"]:
                    reqs = b["requests"]["successful"]
                    start = min(r["info"]["timings"]["request_start"] for r in reqs)
                    end = max(r["info"]["timings"]["request_end"] for r in reqs)
                    out[b["config"]["strategy"]["streams"]] = sum(r["output_tokens"] for r in reqs) / (end - start)
    return out


def _client_bound(tool: str, arm: str) -> set[int]:
    """Levels whose file shows the client received tokens in bursts (median time per token 0)."""
    bound = set()
    if tool == "aiperf":
        for path in _files(tool, arm):
            obj = _load_json(path)[0]
            if obj["inter_token_latency"]["p50"] == 0:
                bound.add(obj["input_config"]["phases"][0]["concurrency"])
    return bound


# ------------------------------------------------------------------------- end to end, per tool


@pytest.mark.parametrize("tool", ["vllm", "vllm-summary", "sglang", "guidellm", "aiperf", "table"])
def test_verdict_direction_agrees_with_the_data_and_with_specsweeps_own_sweep(tool, tmp_path, own):
    sets = _import_pair(tool, tmp_path)
    comp = compare(sets)
    got = comp.delta("mtp", "output_tok_s").set_index("concurrency")
    assert sorted(got.index) == LEVELS
    if tool == "table":  # the CSVs are specsweep's own figures, rounded
        raw_b = {1: 538.6, 8: 3761.5, 64: 10500.7}
        raw_m = {1: 730.7, 8: 4139.5, 64: 6568.4}
    else:
        raw_b, raw_m = _raw_aggregate(tool, "baseline"), _raw_aggregate(tool, "mtp")
    bound = _client_bound(tool, "baseline") | _client_bound(tool, "mtp")
    own_d = own.delta("mtp", "output_tok_s").set_index("concurrency")
    for c in LEVELS:
        expected = math.copysign(1, math.log(raw_m[c] / raw_b[c]))
        assert math.copysign(1, got.loc[c, "delta_pct"]) == expected, (tool, c)
        if got.loc[c, "credible"] != 0 and own_d.loc[c, "credible"] != 0 and c not in bound:
            assert got.loc[c, "credible"] == own_d.loc[c, "credible"], (tool, c)
    # where specsweep's own sweep is sure, the imported comparison says the same (unless the tool's client was the limit)
    for c in LEVELS:
        if own_d.loc[c, "credible"] != 0 and c not in bound:
            assert math.copysign(1, got.loc[c, "delta_pct"]) == own_d.loc[c, "credible"], (tool, c)


def test_a_report_of_imported_guidellm_runs_names_the_tool_and_its_definitions(tmp_path):
    from specsweep.report import build_report

    out = tmp_path / "sets"
    for arm in ("baseline", "mtp"):
        import_files("guidellm", _files("guidellm", arm), arm, out)
    page = Path(build_report([str(out)], "imported", out_dir=str(tmp_path))).read_text()
    top = page[page.find("Verdict"):][:20000]
    assert "Imported from guidellm" in top
    assert "includes the first token" in top
    assert "guidellm_tpot_mean_s" in page and "0.8.1" in page


# ------------------------------------------------------------------------------ per tool, exact


def test_vllm_detailed_rows_keep_vllms_raw_samples_and_its_itl_becomes_inter_chunk_latency(tmp_path):
    path = FIX / "vllm" / "mtp-c8.json.gz"
    raw = _load_json(path)[0]
    rs = load_result_set(import_files("vllm", [path], "mtp", tmp_path))
    assert rs.meta.source["files"][0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert rs.meta.source["tool"] == "vllm bench serve" and rs.meta.kind == "run"
    req = rs.requests
    assert len(req) == len(raw["ttfts"])
    assert np.allclose(sorted(req["ttft_s"]), sorted(raw["ttfts"]))
    assert list(req["chunks"]) == [len(g) + 1 for g in raw["itls"]]
    lv = rs.levels.iloc[0]
    pooled = np.concatenate([np.asarray(g) for g in raw["itls"]])
    assert lv["chunk_gap_mean_s"] == pytest.approx(pooled.mean(), rel=1e-9)
    assert lv["chunk_gap_mean_s"] == pytest.approx(raw["mean_itl_ms"] / 1000, rel=1e-9)
    # token-normalised ITL spreads each gap over its tokens: under MTP it is below vLLM's per-chunk "ITL"
    assert lv["itl_mean_s"] < raw["mean_itl_ms"] / 1000
    tpots = [(l - t) / (o - 1) for l, t, o in zip(raw["latencies"], raw["ttfts"], raw["output_lens"]) if o > 1]
    assert lv["tpot_mean_s"] == pytest.approx(np.mean(tpots), rel=1e-9)
    assert lv["vllm_peak_output_tok_s"] == raw["max_output_tokens_per_s"]
    assert "chunks (not tokens)" in rs.meta.metric_definitions["vllm_peak_output_tok_s"]
    assert any("one sample per stream chunk" in w for w in rs.meta.warnings)


def test_vllm_summary_only_is_level_only_and_its_per_user_speed_is_named_as_one_over_mean_tpot(tmp_path):
    path = FIX / "vllm" / "baseline-summary.jsonl"
    raw = _load_json(path)
    rs = load_result_set(import_files("vllm", [path], "baseline", tmp_path))
    assert rs.meta.level_only and rs.requests is None
    lv = rs.levels.set_index("concurrency")
    for obj in raw:
        c = obj["max_concurrency"]
        assert lv.loc[c, "output_tok_s"] == obj["output_throughput"]
        assert lv.loc[c, "user_tok_s_mean"] == pytest.approx(1000 / obj["mean_tpot_ms"])
        assert lv.loc[c, "chunk_gap_p99_s"] == pytest.approx(obj["p99_itl_ms"] / 1000)
    assert "1 / mean TPOT" in rs.meta.metric_definition_ids["user_tok_s_mean"]
    assert rs.meta.workload.output_tokens == 64  # derived from tokens per successful request


def test_sglang_openai_backend_names_the_requested_length_fallback(tmp_path):
    native = load_result_set(import_files("sglang", [FIX / "sglang" / "baseline.jsonl"], "baseline", tmp_path))
    oai = load_result_set(import_files("sglang", [FIX / "sglang" / "mtp-oai.jsonl"], "mtp", tmp_path))
    assert "output_tok_s" not in native.meta.metric_definition_ids
    assert "requested length" in oai.meta.metric_definition_ids["output_tok_s"]
    assert any("sglang-oai" in w for w in oai.meta.warnings)
    assert "cumulative" in oai.meta.metric_definitions["sglang_accept_length"]
    # the two arms count tokens differently: nothing token-based is set against each other, but the
    # waits that do not depend on the count are, and the page says so instead of refusing the whole comparison
    comp = compare([native, oai])
    assert any(n.startswith("Metric `output_tok_s` is not compared") for n in comp.notes)
    assert any("count output tokens differently" in n and "time to first token" in n for n in comp.notes)
    compared = set(comp.deltas["metric"])
    assert {"ttft_p50_s", "ttft_p99_s"} <= compared and not {"output_tok_s", "tpot_p50_s", "user_tok_s_mean"} & compared
    from specsweep.decide import recommend
    from specsweep.decide.profiles import DEFAULT_PROFILES

    for profile in DEFAULT_PROFILES:
        rec = recommend(comp, profile)
        assert rec.arm is None and "count output tokens differently" in rec.headline


def test_guidellm_tpot_includes_the_first_token_and_is_kept_apart(tmp_path):
    path = FIX / "guidellm" / "mtp.json.gz"
    raw = _load_json(path)[0]
    rs = load_result_set(import_files("guidellm", [path], "mtp", tmp_path))
    n = sum(len(b["requests"]["successful"]) + len(b["requests"]["errored"]) for b in raw["benchmarks"])
    assert len(rs.requests) == n
    for b in raw["benchmarks"]:
        c = b["config"]["strategy"]["streams"]
        reqs = b["requests"]["successful"]
        lv = rs.levels.set_index("concurrency").loc[c]
        # guidellm's own per-request ITL is specsweep's TPOT; its TPOT adds the first token's wait
        assert lv["tpot_mean_s"] == pytest.approx(np.mean([r["inter_token_latency_ms"] for r in reqs]) / 1000, rel=1e-6)
        assert lv["guidellm_tpot_mean_s"] > lv["tpot_mean_s"]
        chunks = sum(r["info"]["timings"]["token_iterations"] for r in reqs)
        assert lv["tokens_per_chunk_mean"] == pytest.approx(sum(r["output_tokens"] for r in reqs) / chunks)
    assert set(rs.requests["token_source"]) == {"usage"}
    assert "chunk_gap_mean_s" not in rs.levels or rs.levels["chunk_gap_mean_s"].isna().all()


def test_aiperf_client_tokenizer_counts_are_not_compared_with_server_counts(tmp_path):
    server = load_result_set(import_files("aiperf", [FIX / "aiperf" / "baseline-c1" / "profile_export_aiperf.json"],
                                          "baseline", tmp_path))
    client_file = FIX / "aiperf" / "extra" / "mtp-c1-client-tokenizer.json"
    client = load_result_set(import_files("aiperf", [client_file], "mtp", tmp_path))
    assert any("client tokenizer" in w for w in client.meta.warnings)
    raw = _load_json(client_file)[0]
    assert client.levels["output_tok_s"].iloc[0] == raw["output_token_throughput"]["avg"]
    _, notes = agreeing_definitions({"baseline": server.meta, "mtp": client.meta},
                                    {"baseline": server.levels, "mtp": client.levels})
    left_out = {n.split()[1].strip("`") for n in notes}
    assert {"output_tok_s", "user_tok_s_mean", "tpot_p50_s"} <= left_out
    assert "ttft_p50_s" not in left_out  # time to first token does not depend on the count


def test_aiperf_per_request_rows_come_from_the_export_beside_the_summary(tmp_path):
    folder = FIX / "aiperf" / "mtp-c8"
    summary = _load_json(folder / "profile_export_aiperf.json")[0]
    rows = [r for r in _load_json(folder / "profile_export.jsonl.gz") if r["metadata"]["benchmark_phase"] == "profiling"]
    rs = load_result_set(import_files("aiperf", [folder / "profile_export_aiperf.json"], "mtp", tmp_path))
    assert rs.meta.kind == "run" and len(rs.requests) == len(rows)
    assert rs.requests["output_tokens"].sum() == summary["total_output_tokens"]["avg"]
    by_start = sorted(rows, key=lambda r: r["metadata"]["request_start_ns"])
    got = rs.requests.sort_values("t_start_s")
    # the chunk timeline (TTFT, then aiperf's inter-chunk gaps) ends where aiperf's request latency does
    latency = np.array([r["metrics"]["request_latency"]["value"] / 1000 for r in by_start])
    assert np.allclose(got["e2e_s"].to_numpy(), latency, atol=1e-6)
    assert list(got["chunks"]) == [len(r["metrics"]["inter_chunk_latency"]["value"]) + 1 for r in by_start]
    osl = np.array([r["metrics"]["output_sequence_length"]["value"] for r in by_start])
    ttft = np.array([r["metrics"]["time_to_first_token"]["value"] / 1000 for r in by_start])
    assert np.allclose(got["tpot_s"], (latency - ttft) / (osl - 1), rtol=1e-5)  # aiperf's own per-request ITL


def test_aiperf_level_whose_tokens_arrived_in_bursts_is_flagged_client_bound(tmp_path):
    bound = FIX / "aiperf" / "extra" / "baseline-c64-client-bound.json"
    assert _load_json(bound)[0]["inter_token_latency"]["p50"] == 0  # what the recorded file says
    flagged = load_result_set(import_files("aiperf", [bound], "baseline", tmp_path))
    assert any("client, not the server" in w for w in flagged.meta.warnings)
    fine = load_result_set(import_files("aiperf", [FIX / "aiperf" / "baseline-c64" / "profile_export_aiperf.json"],
                                        "again", tmp_path))
    assert not any("client, not the server" in w for w in fine.meta.warnings)


def test_table_reads_the_seeds_pasted_markdown_for_each_arm(tmp_path):
    path = FIX / "table" / "seed.md"
    for arm in ("baseline", "mtp"):
        import_files("table", [path], arm, tmp_path, output_tokens=1000)
    sets = {rs.arm: rs for rs in load_result_sets(tmp_path)}
    rows = [line.strip("|").split("|") for line in path.read_text().splitlines()[2:]]
    for cells in rows:
        c, b_agg, m_agg, b_per, m_per = (float(x) for x in cells)
        b = sets["baseline"].levels.set_index("concurrency").loc[int(c)]
        m = sets["mtp"].levels.set_index("concurrency").loc[int(c)]
        assert (b["output_tok_s"], b["request_tok_s_mean"], m["output_tok_s"], m["request_tok_s_mean"]) == \
            (b_agg, b_per, m_agg, m_per)
    assert sets["mtp"].meta.level_only and sets["mtp"].meta.source["files"][0]["path"] == "seed.md"
    # the same figures as the seed's hand-transcribed reference data
    seed = load_result_set(Path(__file__).parents[2] / "data" / "reference" / "seed-qwen3.5-122b-a10b" / "baseline")
    assert list(seed.levels["output_tok_s"]) == list(sets["baseline"].levels["output_tok_s"])


def test_table_with_natural_headers_reads_each_arm_and_the_summary_names_no_server(tmp_path):
    """Headers as people write them: a rate and the arm's name, no 'agg'; the summary then says the server
    was not recorded (the table names none) instead of a bare '?'."""
    from specsweep.decide import DEFAULT_PROFILES, recommend
    from specsweep.report.summary import summary_markdown

    figures = {1: (108, 121.5, 110, 123.1), 4: (286, 400.5, 82, 118.6), 16: (873, 1209, 61, 84.4)}
    path = _write(tmp_path, "pasted.md", "| Concurrency | Baseline tok/s | MTP tok/s | Baseline per-user tok/s | "
                  "MTP per-user tok/s |\n|---|---|---|---|---|\n"
                  + "".join(f"| {c} | {' | '.join(map(str, f))} |\n" for c, f in figures.items()))
    for arm in ("baseline", "mtp"):
        import_files("table", [path], arm, tmp_path / "out", output_tokens=1000)
    sets = {rs.arm: rs for rs in load_result_sets(tmp_path / "out")}
    for c, (b_agg, m_agg, b_per, m_per) in figures.items():
        b = sets["baseline"].levels.set_index("concurrency").loc[c]
        m = sets["mtp"].levels.set_index("concurrency").loc[c]
        assert (b["output_tok_s"], m["output_tok_s"], b["request_tok_s_mean"], m["request_tok_s_mean"]) == \
            (b_agg, m_agg, b_per, m_per)
    comp = compare(list(sets.values()))
    summary = summary_markdown(comp, [recommend(comp, p) for p in DEFAULT_PROFILES], "pasted")
    assert "server ?" not in summary and "— server not recorded (results table)" in summary


def test_a_table_without_the_columns_shows_the_shape_it_needs(tmp_path):
    path = _write(tmp_path, "odd.md", "| load | baseline | mtp |\n|---|---|---|\n| 1 | 108 | 121.5 |\n")
    with pytest.raises(BadInput, match=r"no concurrency column .* as in \| concurrency \| baseline tok/s \| mtp tok/s \|"):
        import_files("table", [path], "baseline", tmp_path / "out", output_tokens=8)
    path = _write(tmp_path, "odd2.md", "| concurrency | baseline | mtp |\n|---|---|---|\n| 1 | 108 | 121.5 |\n")
    with pytest.raises(BadInput, match=r"no aggregate tok/s column .* as in \| concurrency \| baseline tok/s"):
        import_files("table", [path], "baseline", tmp_path / "out", output_tokens=8)


def test_readme_and_docs_name_each_tools_source_command_as_import_help_does():
    """One description of each importer's source command: the comment beside each README / docs import line
    is the start of the tool's description in ``specsweep import --help``."""
    import re

    from specsweep.importers import TOOLS

    root = Path(__file__).parents[2]
    for doc in ("README.md", "docs/importers.md"):
        said = dict(re.findall(r"specsweep import (\w+) .*?#\s*(.+)$", (root / doc).read_text(), re.M))
        assert set(said) == set(TOOLS), doc
        for tool, comment in said.items():
            assert TOOLS[tool][1].startswith(comment.split(";")[0].strip()), (doc, tool, comment)


def test_llamacpp_batched_bench_compares_only_with_itself(tmp_path):
    base = load_result_set(import_files("llamacpp", [FIX / "llamacpp" / "baseline.jsonl"], "baseline", tmp_path))
    fa = load_result_set(import_files("llamacpp", [FIX / "llamacpp" / "flash-attn.jsonl"], "fa", tmp_path))
    for rs, name in ((base, "baseline"), (fa, "flash-attn")):
        for line in (FIX / "llamacpp" / f"{name}.jsonl").read_text().splitlines():
            obj = json.loads(line)
            lv = rs.levels.set_index("concurrency").loc[obj["pl"]]
            assert lv["output_tok_s"] == pytest.approx(obj["speed_tg"], rel=1e-5)
            assert lv["user_tok_s_mean"] == pytest.approx(obj["tg"] / obj["t_tg"])
    comp = compare([base, fa])
    assert len(comp.delta("fa", "output_tok_s")) == 3
    guided = load_result_set(import_files("guidellm", _files("guidellm", "mtp"), "mtp", tmp_path))
    with pytest.raises(ValueError, match="not compared"):
        compare([base, guided], allow_workload_mismatch=True)


# --------------------------------------------------------------------------------- bad input


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bad_files_get_errors_that_name_the_file_line_and_the_fix(tmp_path):
    good = _load_json(FIX / "vllm" / "baseline-c1.json.gz")[0]
    cases = [
        ("vllm", _write(tmp_path, "cut.jsonl", json.dumps(good) + "\n" + json.dumps(good)[:200]), r"cut\.jsonl, line 2"),
        ("vllm", _write(tmp_path, "open.json", json.dumps(dict(good, max_concurrency=None))), r"max-concurrency"),
        ("vllm", _write(tmp_path, "other.json", json.dumps({"hello": 1})), r"not a vllm bench serve"),
        ("vllm", _write(tmp_path, "short.json", json.dumps(dict(good, ttfts=good["ttfts"][:3]))), r"different length"),
        ("sglang", _write(tmp_path, "s.jsonl", '{"output_throughput": "fast", "duration": 1, "max_concurrency": 4}\n'),
         r"s\.jsonl, line 1: field 'output_throughput' must be a number"),
        ("table", _write(tmp_path, "t.md", "| concurrency | agg tok/s |\n|---|---|\n| 1 | lots |\n"), r"t\.md, line 3"),
        ("table", _write(tmp_path, "u.md", "| users | A agg | B agg |\n|---|---|---|\n| 1 | 2 | 3 |\n"),
         r"pass --select"),
        ("aiperf", _write(tmp_path, "a.json", "[]"), r"a\.json: holds a JSON list"),
        ("guidellm", tmp_path / "missing.json", r"missing\.json: no such file"),
    ]
    for tool, path, message in cases:
        with pytest.raises(BadInput, match=message):
            import_files(tool, [path], "x" if tool != "table" else "baseline", tmp_path / "out", output_tokens=8)
    with pytest.raises(BadInput, match="--arm"):
        import_files("vllm", [FIX / "vllm" / "baseline-c1.json.gz"], "../up", tmp_path / "out")
    with pytest.raises(BadInput, match="--output-tokens"):
        import_files("table", [FIX / "table" / "seed.md"], "mtp", tmp_path / "out")


def test_an_existing_result_set_is_never_overwritten_and_an_imported_one_only_with_force(tmp_path):
    files = _files("vllm", "baseline")
    first = import_files("vllm", files, "baseline", tmp_path)
    with pytest.raises(BadInput, match="--force"):
        import_files("vllm", files, "baseline", tmp_path)
    assert import_files("vllm", files, "baseline", tmp_path, force=True) == first
    measured = tmp_path / "measured"
    measured.mkdir()
    (measured / "meta.json").write_text(json.dumps({"kind": "run"}))
    with pytest.raises(BadInput, match="already there"):
        import_files("vllm", files, "measured", tmp_path, force=True)


def test_definitions_that_differ_leave_the_metric_out_and_say_so():
    """Many synthetic arm pairs: a metric stays exactly when every arm having it gives it the same id."""
    import pandas as pd

    rng = np.random.default_rng(7)
    for _ in range(200):
        metas, frames, truth = {}, {}, {}
        ids = ["specsweep", "a", "b"]
        choice = {m: rng.choice(ids, 2) for m in ("output_tok_s", "tpot_p50_s", "ttft_p50_s")}
        for i, arm in enumerate(("base", "spec")):
            metas[arm] = Meta.model_validate(base_meta(arm, metric_definition_ids={
                m: str(v[i]) for m, v in choice.items() if v[i] != "specsweep"}))
            frames[arm] = pd.DataFrame({"concurrency": [1, 2], **{m: rng.random(2) + 0.1 for m in choice}})
        for m, v in choice.items():
            truth[m] = v[0] == v[1]
        kept, notes = agreeing_definitions(metas, frames)
        if not any(metas[a].metric_definition_ids for a in metas):
            assert notes == []
        for m, agree in truth.items():
            assert (m in kept["base"].columns) == agree
            assert any(n.startswith(f"Metric `{m}` ") for n in notes) == (not agree)


def test_definition_notes_escape_what_meta_json_says():
    import pandas as pd

    evil = "[click](javascript:alert(1)) <img src=x onerror=alert(1)>"
    frames = {a: pd.DataFrame({"concurrency": [1], "output_tok_s": [1.0]}) for a in ("base", "x")}
    metas = {"base": Meta.model_validate(base_meta("base")),
             "x": Meta.model_validate(base_meta("x", metric_definition_ids={"output_tok_s": evil}))}
    _, notes = agreeing_definitions(metas, frames)
    from specsweep.markup import markdown_html

    (note,) = notes
    page = markdown_html(note)  # as the report renders its notes
    assert "<img" not in page and "href" not in page and "[click](javascript:alert(1))" in page


def test_a_concurrency_seen_again_becomes_the_next_repeat(tmp_path):
    lines = (FIX / "vllm" / "baseline-summary.jsonl").read_text().splitlines()
    again = _write(tmp_path, "twice.jsonl", "\n".join(lines + lines[:1]))  # --append-result of a second run at c=1
    rs = load_result_set(import_files("vllm", [again], "baseline", tmp_path / "out"))
    first = json.loads(lines[0])["max_concurrency"]
    assert sorted(rs.levels.loc[rs.levels["concurrency"] == first, "repeat"]) == [0, 1]
    assert rs.meta.sweep.repeats == 2
