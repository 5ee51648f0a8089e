"""Prompt sets: every supported format read from small fixtures, malformed records named by file
and line, the built-in set, category helpers and per-category metrics."""
from __future__ import annotations

import json
import math
import re
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from helpers import require_extra
from specsweep.analyze.categories import category_metrics
from specsweep.analyze.metrics import level_metrics, requests_frame
from specsweep.refserver.launch import RefServer
from specsweep.results.records import RequestRecord
from specsweep.workloads import datasets as ds
from specsweep.workloads.datasets import DatasetError, PromptRecord
from specsweep.workloads.order import record_index

FIX = Path(__file__).parents[1] / "fixtures" / "datasets"
ROOT = Path(__file__).resolve().parents[2]


def test_sharegpt_json_array_first_human_turn_and_reference_length() -> None:
    d = ds.load(FIX / "sharegpt.json")
    assert d.format == "sharegpt" and len(d.records) == 3 and d.digest and d.digest.startswith("sha256:")
    first, second, third = d.records
    assert first.prompt == "Name three uses for a paper clip."
    reply = "Holding sheets together, resetting a small device, and marking a page in a book."
    assert first.reference_output_tokens == math.ceil(len(reply) / 4)
    assert first.category == "all"
    assert first.source.endswith("sharegpt.json:2 (record 1)")  # the line where the record starts
    # a leading system turn makes the prompt chat messages; later turns are not used
    assert second.prompt == [{"role": "system", "content": "You answer briefly."},
                             {"role": "user", "content": "What colour is a ripe lemon?"}]
    assert second.reference_output_tokens == math.ceil(len("Yellow.") / 4)
    assert second.source.endswith("sharegpt.json:9 (record 2)")
    assert second.text() == "You answer briefly.\nWhat colour is a ripe lemon?"
    # no model turn: no reference length
    assert third.prompt == "Say hello in Dutch." and third.reference_output_tokens is None


def test_sharegpt_jsonl_user_assistant_roles_and_a_real_tokenizer() -> None:
    recs = ds.read_records(FIX / "sharegpt.jsonl", count_tokens=lambda text: len(text.split()))
    assert [r.prompt for r in recs] == ["Give me a word that rhymes with moon.", "Count from one to five."]
    assert [r.reference_output_tokens for r in recs] == [1, 5]  # the given counter, not the estimate
    assert ds.load(FIX / "sharegpt.jsonl", count_tokens=len).reference_counter == "count_tokens"
    assert ds.load(FIX / "mt_bench.jsonl").reference_counter == "none"
    assert [r.source.rsplit(":", 1)[1] for r in recs] == ["1", "3"]  # blank line 2 skipped, lines kept


def test_sharegpt_invalid_records_name_file_and_line_or_are_skipped() -> None:
    path = FIX / "sharegpt_bad.json"
    with pytest.raises(DatasetError, match=re.escape(f"{path}:9 (record 2): turn 1 is from 'gpt' before any human")):
        ds.load(path)
    d = ds.load(path, skip_invalid=True)
    assert [r.prompt for r in d.records] == ["Is water wet?"]
    assert len(d.skipped) == 2 and "sharegpt_bad.json:16 (record 3)" in d.skipped[1]
    assert "'conversations' must be a non-empty list" in d.skipped[1]
    desc = d.describe()
    assert desc["skipped"] == 2 and desc["with_reference_output_tokens"] == 1
    assert desc["reference_counter"] == "estimate" and desc["categories"] == {"all": 1}
    assert json.loads(json.dumps(desc)) == desc


@pytest.mark.parametrize("name, categories", [
    ("mt_bench.jsonl", ["writing", "math", "coding"]),
    ("spec_bench.jsonl", ["translation", "summarization", "qa", "math_reasoning"]),
    ("speed_bench.jsonl", ["coding", "writing"]),
])
def test_question_files_take_the_first_turn_and_their_category(name: str, categories: list[str]) -> None:
    d = ds.load(FIX / name)
    assert d.format == "turns"
    assert [r.category for r in d.records] == categories
    raw = [json.loads(line) for line in (FIX / name).read_text().splitlines()]
    assert [r.prompt for r in d.records] == [obj["turns"][0] for obj in raw]
    # MT-Bench's 'reference' is a grader's key, not an answer length
    assert all(r.reference_output_tokens is None for r in d.records)
    assert d.categories() == {c: 1 for c in categories}
    for alias in ("mt-bench", "spec-bench", "speed-bench", "turns"):
        assert ds.load(FIX / name, alias).records == d.records


def test_speed_bench_parquet_rows() -> None:
    rows = [json.loads(line) for line in (FIX / "speed_bench.jsonl").read_text().splitlines()]
    out = FIX.parent / "_tmp_speed_bench.parquet"
    try:
        pd.DataFrame(rows).to_parquet(out)
        d = ds.load(out)
        assert d.format == "turns" and [r.category for r in d.records] == ["coding", "writing"]
        assert d.records[1].prompt == "Write four lines about a kite that will not fly."
        assert d.records[1].source.endswith("(row 2)")
        pd.DataFrame([rows[0], {**rows[1], "turns": []}]).to_parquet(out)
        with pytest.raises(DatasetError, match=re.escape(f"{out} (row 2): 'turns' must be a non-empty list")):
            ds.load(out)
    finally:
        out.unlink(missing_ok=True)


def test_instructcoder_instruction_then_code_and_output_length() -> None:
    d = ds.load(FIX / "instructcoder.jsonl")
    assert d.format == "instructcoder"
    r = d.records[0]
    assert r.prompt == ("Add a default value of 1 to the step parameter.\n\n"
                        "def count_up(start, stop, step):\n    return list(range(start, stop, step))")
    out = "def count_up(start, stop, step=1):\n    return list(range(start, stop, step))"
    assert r.reference_output_tokens == math.ceil(len(out) / 4)
    assert {x.category for x in d.records} == {"code-edit"}
    assert {x.category for x in ds.load(FIX / "instructcoder.jsonl", category="refactor").records} == {"refactor"}


def test_prompt_files_jsonl_and_txt() -> None:
    recs = ds.read_records(FIX / "prompts.jsonl")
    assert recs[0] == PromptRecord("List the days of the week.", "qa", 20, recs[0].source)
    assert recs[1].prompt == [101, 2023, 2003, 102] and recs[1].category == "all" and recs[1].text() == ""
    assert recs[2].prompt == [{"role": "user", "content": "Say something kind."}]
    assert recs[2].category == "creative-writing"
    txt = ds.load(FIX / "prompts.txt")
    assert [r.prompt for r in txt.records] == ["First plain prompt.", "Second plain prompt."]
    assert txt.records[1].source.endswith("prompts.txt:3")
    with pytest.raises(DatasetError, match=r"prompts\.txt: a \.txt file holds one prompt a line"):
        ds.load(FIX / "prompts.txt", "sharegpt")


@pytest.mark.parametrize("name, pattern", [
    ("bad_json.jsonl", r"bad_json\.jsonl:3: not valid JSON"),
    ("turns_bad.jsonl", r"turns_bad\.jsonl:2: 'turns' must be a non-empty list"),
    ("turns_bad_category.jsonl", r"turns_bad_category\.jsonl:3: 'category' must be a non-empty string, got 7"),
    ("instructcoder_bad.jsonl", r"instructcoder_bad\.jsonl:2: 'instruction' must be non-empty text"),
    ("unknown.jsonl", r"unknown\.jsonl:1: cannot tell the format from this record \(keys: label, text\).*format="),
    ("bad_array.json", r"bad_array\.json:3: record 2 \(from line 3\) is not valid JSON"),
])
def test_malformed_files_name_file_and_line(name: str, pattern: str) -> None:
    with pytest.raises(DatasetError, match=pattern) as info:
        ds.load(FIX / name)
    assert str(FIX / name) in str(info.value)


def test_explicit_format_validates_every_record(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"mt_bench\.jsonl:1: 'conversations' must be a non-empty list"):
        ds.load(FIX / "mt_bench.jsonl", "sharegpt")
    # auto-detection reads the first record; a later record of another shape is invalid for it
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"prompt": "a"}\n{"turns": ["b"], "category": "x"}\n')
    with pytest.raises(DatasetError, match=r"mixed\.jsonl:2: needs 'prompt'"):
        ds.load(mixed)
    with pytest.raises(DatasetError, match=r"format 'csv' is not known"):
        ds.load(FIX / "prompts.jsonl", "csv")
    with pytest.raises(DatasetError, match=r"no such prompt file"):
        ds.load(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DatasetError, match=r"empty\.jsonl: has no prompts"):
        ds.load(empty)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match=r"latin\.jsonl:2: not UTF-8"):
        ds.load(latin)
    as_json = tmp_path / "lines.json"
    as_json.write_bytes((FIX / "sharegpt.jsonl").read_bytes())
    assert ds.load(as_json).records[1].source == f"{as_json}:3"  # JSON Lines under .json
    scalar = tmp_path / "scalar.json"
    scalar.write_text('\n"just text"\n')
    with pytest.raises(DatasetError, match=r"scalar\.json:2: a \.json prompt set must be one JSON array"):
        ds.load(scalar)
    with pytest.raises(DatasetError, match=r"unknown file type '\.csv'"):
        (tmp_path / "p.csv").write_text("prompt\nx\n")
        ds.load(tmp_path / "p.csv")


def test_estimate_tokens() -> None:
    assert ds.estimate_tokens("") == 1 and ds.estimate_tokens("abcd") == 1 and ds.estimate_tokens("abcde") == 2
    assert ds.estimate_tokens("x" * 400) == 100


def test_records_from_rows_is_the_hugging_face_path() -> None:
    """load_hf feeds (name, row) pairs to records_from_rows: check that path on rows as the
    datasets library yields them (plain dicts; list columns may be numpy arrays)."""
    import numpy as np

    rows = [("hf:x:test (row 1)", {"question_id": "q1", "category": "rag", "turns": np.array(["Use the notes."])}),
            ("hf:x:test (row 2)", {"question_id": "q2", "category": "qa", "turns": ["Why?", "Why not?"]})]
    recs, fmt, skipped = ds.records_from_rows(rows)
    assert fmt == "turns" and not skipped
    assert [(r.prompt, r.category, r.source) for r in recs] == [
        ("Use the notes.", "rag", "hf:x:test (row 1)"), ("Why?", "qa", "hf:x:test (row 2)")]
    with pytest.raises(DatasetError, match=re.escape("hf:x:test (row 1): expected a ShareGPT object")):
        ds.records_from_rows([("hf:x:test (row 1)", ["not", "a", "dict"])], "sharegpt")


def test_load_hf_without_the_extra_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # what Python does when a package is absent
    with pytest.raises(DatasetError, match=re.escape("pip install -e '.[datasets]'")):
        ds.load_hf("nvidia/SPEED-Bench", "test", name="qualitative")


@pytest.mark.slow
def test_load_hf_reads_a_local_dataset_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_extra("datasets", "datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "instructcoder"
    folder.mkdir()
    (folder / "train.jsonl").write_bytes((FIX / "instructcoder.jsonl").read_bytes())
    d = ds.load_hf(str(folder), "train", cache_dir=str(tmp_path / "cache"))
    assert d.format == "instructcoder" and len(d.records) == 2
    assert d.records[1].source == f"hf:{folder}:train (row 2)"
    assert [r.prompt for r in d.records] == [r.prompt for r in ds.read_records(FIX / "instructcoder.jsonl")]
    assert len(ds.load_hf(str(folder), "train", limit=1, cache_dir=str(tmp_path / "cache")).records) == 1
    with pytest.raises(DatasetError, match=r"hf:.*:nope: could not load"):
        ds.load_hf(str(folder), "nope", cache_dir=str(tmp_path / "cache"))


@pytest.mark.slow
def test_an_hf_workload_runs_through_a_sweep_offline(tmp_path: Path, refserver_mtp: RefServer) -> None:
    """``workload="hf:<dataset>"`` end to end: a sweep in its own process, offline
    (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``, its own ``HF_HOME``), reads a local Hugging Face
    dataset folder (MT-Bench shape) through the ``datasets`` library, sends its prompts to the
    reference server and stores each prompt's category on its request rows. The server sees the
    text: it counts one prompt token per word, and accepts more drafts on the code edits."""
    import os
    import subprocess

    require_extra("datasets", "datasets")
    from specsweep.results.store import load_result_set

    code = ds.builtin_prompts(["code-edit"])[:3]
    writing = ds.builtin_prompts(["creative-writing"])[:3]
    rows = []
    for c, w in zip(code, writing):  # alternating, relabelled: the categories come from the dataset's rows
        rows += [{"question_id": len(rows), "category": "code", "turns": [c.prompt, "And then?"]},
                 {"question_id": len(rows) + 1, "category": "writing", "turns": [w.prompt, "And then?"]}]
    folder = tmp_path / "local-mtbench"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = f"hf:{folder}"
    params = {"endpoint": refserver_mtp.url, "arm": "mtp", "workload": spec, "concurrency": [2, 3],
              "output_tokens": 24, "requests_per_level": 6, "warmup_requests": 0, "out_dir": str(tmp_path / "runs")}
    hf_home = tmp_path / "hf-home"
    env = {**os.environ, "PYTHONPATH": str(Path(ds.__file__).resolve().parents[1]), "HF_HOME": str(hf_home),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    script = ("import json, sys; from specsweep.measure.sweep import run_sweep; "
              "print(run_sweep(json.loads(sys.argv[1]), progress=False, log=lambda _: None).run_dir)")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(params)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert any((hf_home / "datasets").iterdir())  # read through the datasets library, into its own cache

    rs = load_result_set(Path(done.stdout.strip().splitlines()[-1]))
    workload = rs.meta.workload
    assert workload.kind == "hf-dataset" and workload.value == spec
    assert str(workload.dataset_digest).startswith("hf-fingerprint:")
    req = rs.requests[~rs.requests["warmup"].astype(bool)]
    assert len(req) == 12 and req["error"].isna().all()
    n, seed = len(rows), int(rs.meta.workload.seed)
    sent = [rows[record_index(seed, n, int(i))] for i in req["prompt_id"]]  # the sweep's shuffled order
    assert list(req["category"]) == [r["category"] for r in sent]
    assert list(req["prompt_tokens"]) == [len(r["turns"][0].split()) for r in sent]
    acc = category_metrics(req).groupby("category")["spec_accept_length"].mean()
    assert set(acc.index) == {"code", "writing"} and acc["code"] > acc["writing"]


# ----------------------------------------------------------------------------------- built-in set


def test_builtin_set_categories_of_12_or_more_license_clean_and_shipped() -> None:
    recs = ds.builtin_prompts()
    counts = pd.Series([r.category for r in recs]).value_counts().to_dict()
    assert set(counts) == {"code-edit", "extraction", "summarisation", "qa", "math", "creative-writing",
                           *ds.INPUT_GROUNDED}
    assert min(counts[c] for c in counts if c not in ds.INPUT_GROUNDED) >= 24
    assert min(counts[c] for c in ds.INPUT_GROUNDED) >= 12
    assert len({r.prompt for r in recs}) == len(recs)
    assert all(isinstance(r.prompt, str) and r.reference_output_tokens and r.reference_output_tokens > 0
               for r in recs)
    assert recs == ds.builtin_prompts()  # deterministic: file order, no sampling
    assert [r.category for r in ds.builtin_prompts(["math"])] == ["math"] * counts["math"]
    with pytest.raises(DatasetError, match=r"no category 'poetry'"):
        ds.builtin_prompts(["poetry"])
    # code edits carry the code; extraction and summarisation carry the text they work on
    assert all("```" in r.prompt for r in recs if r.category == "code-edit")
    assert all("\nText:\n" in r.prompt for r in recs if r.category == "extraction")
    readme = (ds.builtin_path().parent / "README.md").read_text()
    assert "License: the same as\nthe project's" in readme
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["specsweep"]
    rel = ds.builtin_path().relative_to(ROOT / "lib" / "specsweep")
    assert any(rel.match(p) for p in patterns), (rel, patterns)


@pytest.mark.fast
def test_input_grounded_categories_carry_the_text_their_answer_repeats() -> None:
    """The traffic where prompt-lookup and n-gram drafts are accepted: the answer is (mostly) a
    span of the prompt. Copy prompts hold the text to repeat after one instruction line, edit-file
    prompts a whole file to return, quote-answer prompts the passage to quote from."""
    copy = ds.builtin_prompts(["copy"])
    assert len(copy) == 32 and len({r.prompt for r in copy}) == 32  # the real-engine demo sends each once
    for r in copy:
        head, _, text = r.prompt.partition("\n\n")
        assert head.startswith("Repeat the following text exactly") and text.count(". ") >= 4
        assert r.reference_output_tokens and r.reference_output_tokens >= len(text) // 4
    for r in ds.builtin_prompts(["edit-file"]):
        body = r.prompt.split("```")[1]
        assert "Return the whole file" in r.prompt and body.count("\n") >= 8
        assert r.reference_output_tokens and r.reference_output_tokens >= len(body) // 4
    for r in ds.builtin_prompts(["quote-answer"]):
        assert "exact quotes" in r.prompt and "\n\nPassage: " in r.prompt and "\n\nQuestion: " in r.prompt
    readme = (ds.builtin_path().parent / "README.md").read_text()
    doc = (ROOT / "docs" / "workloads.md").read_text()
    for cat in ds.INPUT_GROUNDED:
        assert f"| `{cat}` | {len(ds.builtin_prompts([cat]))} |" in readme
        assert f"`{cat}`" in doc
    assert "n-gram" in doc and "prompt-lookup" in doc


# ----------------------------------------------------------------------------------- categories


def test_category_of_cycles_like_the_workload() -> None:
    recs = [PromptRecord("a", "x"), PromptRecord("b", "y"), PromptRecord("c")]
    assert ds.category_of(recs) == ["x", "y", "all"]
    assert ds.category_of(recs, [0, 4, 5, 6]) == ["x", "y", "all", "x"]


def _rec(t0: float, times: list[float], tokens: list[int], verify: int | None = None) -> RequestRecord:
    return RequestRecord(t_sent=t0, t_end=times[-1], http_status=200, chunk_times=times, chunk_tokens=tokens,
                         output_tokens=sum(tokens), token_source="usage",
                         server={"spec_verify_ct": verify} if verify else {})


def _two_category_level() -> pd.DataFrame:
    recs = [
        _rec(0.0, [1.0, 2.0, 3.0], [1, 4, 5], verify=4),  # prompt 0 (code): ttft 1, e2e 3, 10 tokens
        _rec(0.0, [0.5, 1.5], [1, 3], verify=3),          # prompt 1 (creative): ttft 0.5, e2e 1.5, 4 tokens
        _rec(1.5, [2.5, 4.5], [1, 9], verify=4),          # prompt 2 (code): ttft 1, e2e 3, 10 tokens
        _rec(3.0, [3.5, 4.0], [1, 1], verify=2),          # prompt 3 (creative): ttft 0.5, e2e 1, 2 tokens
    ]
    frame = requests_frame(recs, t0=0.0, run_id="r", arm="mtp", concurrency=2, repeat=0)
    warm = requests_frame([_rec(-1.0, [-0.5], [1])], t0=0.0, run_id="r", arm="mtp", concurrency=2, repeat=0,
                          warmup=True, prompt_ids=[1])
    return pd.concat([warm, frame], ignore_index=True)


def test_with_category_defaults_to_all_and_maps_prompt_ids() -> None:
    frame = _two_category_level()
    assert set(ds.with_category(frame)["category"]) == {"all"}
    recs = [PromptRecord("def f(): pass", "code-edit"), PromptRecord("A poem", "creative-writing")]
    cats = ds.with_category(frame, recs)["category"].tolist()
    assert cats == ["creative-writing", "code-edit", "creative-writing", "code-edit", "creative-writing"]
    assert "category" not in frame.columns  # a copy


def test_category_metrics_hand_computed() -> None:
    recs = [PromptRecord("def f(): pass", "code-edit"), PromptRecord("A poem", "creative-writing")]
    frame = ds.with_category(_two_category_level(), recs)
    out = category_metrics(frame).set_index("category")
    assert list(out.index) == ["code-edit", "creative-writing"]
    code, creative = out.loc["code-edit"], out.loc["creative-writing"]
    assert (code["arm"], code["concurrency"], code["repeat"]) == ("mtp", 2, 0)
    assert code["n_requests"] == 2 and creative["n_requests"] == 2  # warm-up excluded
    assert code["ttft_p50_s"] == pytest.approx(1.0) and creative["ttft_p50_s"] == pytest.approx(0.5)
    # code: 20 tokens over its window [0, 4.5]; creative: 6 tokens over [0, 4.0]
    assert code["output_tok_s"] == pytest.approx(20 / 4.5) and creative["output_tok_s"] == pytest.approx(6 / 4.0)
    # tokens per verify step: (10 + 10) / (4 + 4) and (4 + 2) / (3 + 2)
    assert code["spec_accept_length"] == pytest.approx(2.5) and creative["spec_accept_length"] == pytest.approx(1.2)
    assert code["category_share"] == 0.5
    assert math.isnan(code["steady_output_tok_s"])  # needs all C slots: not defined for a part of the level
    # the same definitions as the level's: per-request figures equal level_metrics on the rows
    rows = frame[(frame["category"] == "code-edit") & ~frame["warmup"]].reset_index(drop=True)
    ref = level_metrics(rows, 2)
    for col in ("tpot_p50_s", "user_tok_s_mean", "e2e_p99_s", "effective_concurrency"):
        assert code[col] == pytest.approx(ref[col], nan_ok=True)


def test_category_metrics_single_category_is_the_level() -> None:
    frame = ds.with_category(_two_category_level())
    out = category_metrics(frame)
    assert list(out["category"]) == ["all"] and out["category_share"].tolist() == [1.0]
    level = level_metrics(frame[~frame["warmup"]].reset_index(drop=True), 2)
    for col in ("output_tok_s", "steady_output_tok_s", "ttft_p90_s", "decoding_concurrency"):
        assert out[col].iloc[0] == pytest.approx(level[col], nan_ok=True)
    assert out["spec_accept_length"].iloc[0] == pytest.approx(26 / 13)
    no_verify = frame.drop(columns=["spec_verify_ct"])
    assert math.isnan(category_metrics(no_verify)["spec_accept_length"].iloc[0])


def test_load_spec_names_every_source(monkeypatch: pytest.MonkeyPatch) -> None:
    full = ds.load_spec("builtin")
    assert full.records == ds.builtin_prompts() and full.digest and full.digest.startswith("sha256:")
    some = ds.load_spec("builtin:code-edit, math")
    assert set(some.categories()) == {"code-edit", "math"} and some.source == "builtin:code-edit,math"
    assert ds.load_spec(f"sharegpt:{FIX / 'sharegpt.jsonl'}").format == "sharegpt"
    assert ds.load_spec(f"spec-bench:{FIX / 'spec_bench.jsonl'}").format == "turns"
    assert ds.load_spec(str(FIX / "instructcoder.jsonl")).format == "instructcoder"
    with pytest.raises(DatasetError, match=r"mt_bench\.jsonl:1: 'instruction' must be non-empty text"):
        ds.load_spec(f"instructcoder:{FIX / 'mt_bench.jsonl'}")
    with pytest.raises(DatasetError, match=r"hf:<dataset id>\[:<split>\[:<config>\]\]"):
        ds.load_spec("hf:a:b:c:d")
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DatasetError, match=r"'nvidia/SPEED-Bench' needs the optional 'datasets' package"):
        ds.load_spec("hf:nvidia/SPEED-Bench:test:qualitative")
    with pytest.raises(DatasetError, match=r"workload '': give 'builtin'"):
        ds.load_spec("")


@pytest.mark.parametrize("prefix, fixture, fmt", [
    ("prompts", "prompts.jsonl", "prompts"), ("jsonl", "prompts.jsonl", "prompts"),
    ("prompt-file", "prompts.jsonl", "prompts"), ("txt", "prompts.txt", "prompts"),
    ("sharegpt", "sharegpt.json", "sharegpt"), ("instructcoder", "instructcoder.jsonl", "instructcoder"),
    ("turns", "mt_bench.jsonl", "turns"), ("mt-bench", "mt_bench.jsonl", "turns"), ("mtbench", "mt_bench.jsonl", "turns"),
    ("spec-bench", "spec_bench.jsonl", "turns"), ("specbench", "spec_bench.jsonl", "turns"),
    ("speed-bench", "speed_bench.jsonl", "turns"), ("speedbench", "speed_bench.jsonl", "turns"),
])
def test_every_format_prefix_reads_its_file_as_that_format(prefix: str, fixture: str, fmt: str) -> None:
    d = ds.load_spec(f"{prefix}:{FIX / fixture}")
    assert d.format == fmt and d.records == ds.load(FIX / fixture, fmt).records


def test_the_readme_names_every_workload_value() -> None:
    """docs/workloads.md's workload table has a row (with an example) for every value ``load_spec`` and the
    sweep accept: each format and alias as a ``<name>:`` prefix, the built-in set, hf:, random IDs/text, auto."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "workloads.md").read_text()
    table = readme.split("| `workload` | what is sent | example |")[1].split("\n\n")[0]
    names = [f"`{name}:" for name in (*ds.FORMATS, *ds._ALIASES)]
    names += ["`builtin`", "`builtin:", "`hf:", "`random-ids`", "`random-text`", "`auto`"]
    missing = [n for n in names if n not in table]
    assert not missing, f"docs/workloads.md workload table lacks {missing}"
    assert all(row.count("`-p workload") >= 1 for row in table.strip().splitlines()[1:])  # one example each


def test_category_metrics_groups_by_arm_concurrency_and_repeat() -> None:
    one = _two_category_level()
    other = one.copy()
    other["arm"], other["repeat"] = "baseline", 1
    recs = [PromptRecord("def f(): pass", "code-edit"), PromptRecord("A poem", "creative-writing")]
    out = category_metrics(ds.with_category(pd.concat([one, other], ignore_index=True), recs))
    keys = list(zip(out["arm"], out["repeat"], out["category"]))
    assert keys == [("baseline", 1, "code-edit"), ("baseline", 1, "creative-writing"),
                    ("mtp", 0, "code-edit"), ("mtp", 0, "creative-writing")]
    assert out["n_requests"].tolist() == [2.0] * 4
