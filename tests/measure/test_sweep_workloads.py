"""Prompt-set workloads through the sweep, end to end on the reference server:
categories on every request row, content-dependent acceptance recovered per category, natural
output lengths, and the real-server default workload."""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from specsweep.analyze.categories import category_metrics
from specsweep.measure.config import parse_config
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.acceptance import category_means, expected_accept_length
from specsweep.refserver.launch import RefServer
from specsweep.refserver.profiles import load_profile
from specsweep.refserver.tokens import natural_length, prompt_digest
from specsweep.results.store import load_result_set
from specsweep.workloads import datasets
from specsweep.workloads.datasets import DatasetError
from specsweep.workloads.order import record_index
from specsweep.workloads.prompts import make_workload

FIX = Path(__file__).parents[1] / "fixtures" / "datasets"


def quiet(_: str) -> None:
    pass


# ------------------------------------------------------------------------------ workload values


@pytest.mark.parametrize("spec, fmt, categories", [
    ("builtin", "prompts", {"code-edit", "extraction", "summarisation", "qa", "math", "creative-writing",
                            "copy", "edit-file", "quote-answer"}),
    ("builtin:code-edit,math", "prompts", {"code-edit", "math"}),
    (f"sharegpt:{FIX / 'sharegpt.json'}", "sharegpt", {"all"}),
    (f"mt-bench:{FIX / 'mt_bench.jsonl'}", "turns", None),
    (f"spec-bench:{FIX / 'spec_bench.jsonl'}", "turns", None),
    (f"speed-bench:{FIX / 'speed_bench.jsonl'}", "turns", None),
    (f"instructcoder:{FIX / 'instructcoder.jsonl'}", "instructcoder", {"code-edit"}),
    (str(FIX / "sharegpt.jsonl"), "sharegpt", None),
    (str(FIX / "prompts.txt"), "prompts", {"all"}),
])
def test_every_workload_value_builds_prompts_with_categories(spec: str, fmt: str, categories: set[str] | None) -> None:
    w = make_workload(spec, 100, 32, 0)
    d = datasets.load_spec(spec)
    assert w.prompts == tuple(r.prompt for r in d.records)
    assert [w.category(i) for i in range(len(d.records) + 2)] == datasets.category_of(d.records, range(len(d.records) + 2), seed=0)
    if categories is not None:
        assert set(w.categories) == categories
    meta = w.describe()
    assert meta["dataset_digest"] == d.digest and meta["dataset_digest"].startswith("sha256:")
    assert meta["dataset"] == d.describe() and meta["dataset"]["format"] == fmt
    assert meta["value"] == spec and meta["output_length"] == "fixed" and meta["ignore_eos"] is True
    json.dumps(meta)  # meta.json-ready


def test_a_bad_record_stops_the_workload_naming_file_and_line() -> None:
    with pytest.raises(DatasetError, match=r"parameter 'workload': .*turns_bad\.jsonl:\d+: "):
        make_workload(f"mt-bench:{FIX / 'turns_bad.jsonl'}", 100, 32, 0)
    with pytest.raises(ValueError, match=r"parameter 'workload': 'nope\.jsonl' is not 'random-ids'.*no such prompt file"):
        make_workload("nope.jsonl", 100, 32, 0)
    with pytest.raises(DatasetError, match=r"no category 'poetry'"):
        make_workload("builtin:poetry", 100, 32, 0)
    with pytest.raises(ValueError, match=r"parameter 'output_length': 'short'"):
        make_workload("builtin", 100, 32, 0, "short")
    with pytest.raises(ValueError, match=r"parameter 'output_length': 'reference' needs .* random-ids prompts have none"):
        make_workload("random-ids", 100, 32, 0, "reference")
    with pytest.raises(ValueError, match=r"parameter 'output_length': 'reference' needs .*mt_bench\.jsonl' has none"):
        make_workload(f"mt-bench:{FIX / 'mt_bench.jsonl'}", 100, 32, 0, "reference")


def test_natural_bodies_let_the_model_stop() -> None:
    for flavour in ("sglang", "openai-completions", "openai-chat"):
        fixed = make_workload("builtin", 100, 64, 0).bodies(flavour, [0], model=None, temperature=0.0)[0]
        natural = make_workload("builtin", 100, 64, 0, "natural").bodies(flavour, [0], model=None, temperature=0.0)[0]
        flag = (lambda b: b["sampling_params"]["ignore_eos"]) if flavour == "sglang" else (lambda b: b["ignore_eos"])
        assert flag(fixed) is True and flag(natural) is False
        assert json.dumps(natural).count("64") >= 1  # output_tokens stays the maximum


def test_auto_workload_is_builtin_for_real_servers_and_random_ids_embedded() -> None:
    real = parse_config({"endpoint": "http://h:1"}).resolved_workload()
    assert real[0] == "builtin" and "real traffic" in real[1]
    assert parse_config({}).resolved_workload()[0] == "random-ids"
    assert parse_config({"endpoint": "http://h:1", "workload": "random-ids"}).resolved_workload() == ("random-ids", "given")
    assert make_workload("random-text", 8, 8, 0).describe()["value"] == "random-text"


# ------------------------------------------------------------------------------- end to end


def test_builtin_sweep_recovers_each_categorys_acceptance(tmp_path: Path, refserver_mtp: RefServer) -> None:
    """Every prompt of the built-in set's six open categories once (145 requests at C=16, 128 tokens each, SGLang meta_info per
    request): each category's measured accept length (analyze.categories.category_metrics) is close to
    the rule's prediction for the prompts sent (harmonic mean of the per-prompt means: Σ tokens
    / Σ steps with equal tokens per request), and that prediction is within 0.1 tokens/step of
    the server's configured per-category mean (/server_info, repetitiveness 0). Which prompt draws
    which seeded acceptance depends on arrival order at C=16, so each run is a fresh draw: the
    tolerance is 4.5 standard errors of the category's ratio estimate (Σ tokens / Σ steps, from
    its own requests' step counts: about 0.04 for code-edit, 0.02 for creative-writing, measured
    over 24 runs) plus 0.02 for the truncated last steps (they bias it down by about 0.015), so
    a run fails by chance about once in 10⁴, not once in a hundred as a fixed 0.12 did."""
    info = httpx.get(f"{refserver_mtp.url}/server_info", timeout=10).json()["specsweep_refserver"]
    configured = info["category_accept_lengths"]
    assert configured == pytest.approx(category_means(2.0, 3))  # tiny profile: 3 draft steps, mean 2
    # the categories the reference server's rule names (the input-grounded ones have no shift of their own)
    records = datasets.builtin_prompts([c for c in configured if c != "all"])
    n = len(records)
    workload = "builtin:" + ",".join(c for c in configured if c != "all")
    res = run_sweep({"endpoint": refserver_mtp.url, "arm": "mtp", "workload": workload, "concurrency": [16],
                     "output_tokens": 128, "requests_per_level": n, "warmup_requests": 0,
                     "out_dir": str(tmp_path), "metrics_interval_s": 0.2}, progress=False, log=quiet)
    rs = load_result_set(res.run_dir)
    req = rs.requests
    assert req["error"].isna().all() and (req["output_tokens"] == 128).all()
    ids = req.sort_values("prompt_id")["prompt_id"].astype(int)
    sent = [records[record_index(int(rs.meta.workload.seed), n, i)] for i in ids]  # the shuffled order
    assert sorted(r.text() for r in sent) == sorted(r.text() for r in records)  # every prompt once
    assert list(req.sort_values("prompt_id")["category"]) == [r.category for r in sent]  # stored per row
    assert rs.meta.workload.kind == "builtin" and rs.meta.workload.dataset["prompts"] == n
    cats = category_metrics(req).set_index("category")
    assert set(cats.index) == set(configured) - {"all"}
    measured = req[~req["warmup"].astype(bool)] if "warmup" in req else req
    for cat, row in cats.iterrows():
        per_prompt = [expected_accept_length(r.text(), r.category, 2.0, 3) for r in records if r.category == cat]
        predicted = len(per_prompt) / sum(1 / x for x in per_prompt)
        steps = measured.loc[measured["category"] == cat, "spec_verify_ct"].astype(float)
        se = row["spec_accept_length"] * steps.std(ddof=1) / (steps.mean() * len(steps) ** 0.5)  # tokens fixed at 128
        assert 0 < se < 0.08, (cat, se)
        assert abs(row["spec_accept_length"] - predicted) <= 4.5 * se + 0.02, (cat, row["spec_accept_length"], predicted, se)
        assert predicted == pytest.approx(configured[cat], abs=0.1), cat  # repetitiveness moves it little
    assert cats.at["code-edit", "spec_accept_length"] > cats.at["summarisation", "spec_accept_length"] \
        > cats.at["creative-writing", "spec_accept_length"]
    # per request, SGLang's meta_info stays consistent: accept length = completion tokens / verify steps
    assert (req["spec_accept_length"] - req["output_tokens"] / req["spec_verify_ct"]).abs().max() < 1e-9
    by_prompt = req.groupby("category")["spec_accept_length"].mean()
    assert by_prompt["code-edit"] > by_prompt["creative-writing"] + 0.8
    # the level figure is the same rule over all rows
    assert rs.levels["spec_accept_length"].iloc[0] == pytest.approx(
        req["output_tokens"].sum() / req["spec_verify_ct"].sum())


@pytest.mark.parametrize("api", ["sglang", "openai-chat"])
def test_natural_lengths_run_end_to_end(tmp_path: Path, refserver: RefServer, api: str) -> None:
    """output_length=natural with the default workload on a real server (auto → builtin): the
    server stops each request at its seeded natural length (tokens.natural_length of the
    prompt's digest, tiny profile 8..64 tokens), capped at output_tokens."""
    res = run_sweep({"endpoint": refserver.url, "arm": f"nat-{api}", "api": api, "output_length": "natural",
                     "concurrency": [1, 4], "output_tokens": 48, "out_dir": str(tmp_path),
                     "metrics_interval_s": 0.2}, progress=False, log=quiet)
    rs = load_result_set(res.run_dir)
    wl = rs.meta.workload
    assert wl.kind == "builtin" and wl.chosen_by.startswith("auto:") and wl.output_length == "natural"
    assert wl.ignore_eos is False and "natural output lengths" in wl.description
    req = rs.requests.sort_values("prompt_id")
    assert req["error"].isna().all()
    eng = load_profile("tiny").engine
    w = make_workload("builtin", 100, 48, 0, "natural")
    expected = []
    for i in req["prompt_id"]:
        p = w.prompt(int(i), api)
        raw = json.dumps([{"role": "user", "content": p}], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() \
            if api == "openai-chat" else p
        expected.append(min(48, natural_length(prompt_digest(raw), eng.natural_length_min, eng.natural_length_max)))
    assert list(req["output_tokens"]) == expected
    assert len(set(expected)) > 3 and min(expected) < 48  # lengths really vary and stop early
    stopped = req[req["output_tokens"] < 48]
    assert (stopped["finish_reason"] == "stop").all()
    assert (rs.levels["short_outputs"] == 0).all() and not any("ignore_eos" in w for w in res.warnings)
    assert set(req["category"]) <= set(datasets.load_builtin().categories())


def test_reference_lengths_run_end_to_end(tmp_path: Path, refserver: RefServer) -> None:
    """output_length=reference: each request asks for its prompt's reference length (built-in
    set: given per record), capped at output_tokens, with ignore_eos; the server honours it."""
    res = run_sweep({"endpoint": refserver.url, "arm": "ref", "workload": "builtin:code-edit,qa",
                     "output_length": "reference", "concurrency": [2], "output_tokens": 80,
                     "requests_per_level": 20, "out_dir": str(tmp_path), "metrics_interval_s": 0.2},
                    progress=False, log=quiet)
    rs = load_result_set(res.run_dir)
    assert rs.meta.workload.output_length == "reference" and rs.meta.workload.ignore_eos is True
    req = rs.requests.sort_values("prompt_id")
    refs = [r.reference_output_tokens for r in datasets.builtin_prompts(["code-edit", "qa"])]
    seed = int(rs.meta.workload.seed)
    expected = [min(80, refs[record_index(seed, len(refs), int(i))]) for i in req["prompt_id"]]
    assert list(req["requested_output_tokens"]) == expected and list(req["output_tokens"]) == expected
    assert len(set(expected)) > 1 and 80 in expected  # varied, and some capped
    assert (rs.levels["short_outputs"] == 0).all()


def test_prompt_repeats_warn_of_a_prefix_cache_unless_the_server_keeps_none() -> None:
    """A level that sends more requests than the prompt set holds warns that a prefix cache can serve
    the repeats; a server whose own ``server_info`` says it keeps none (SGLang's
    ``disable_radix_cache: true``, as the reference server says) gets no such warning."""
    from specsweep.measure.sweep import _workload_warnings

    wl = make_workload("builtin", 16, 8, 0)
    cfg = parse_config({"workload": "builtin", "min_requests_per_level": len(wl.prompts), "concurrency": [4, 128]})
    for info in ({}, {"disable_radix_cache": False}):
        (text,) = _workload_warnings(cfg, wl, info)
        assert f"has {len(wl.prompts)} prompts but a level sends up to 256" in text and "prefix cache" in text
    assert _workload_warnings(cfg, wl, {"disable_radix_cache": True}) == []
    within = parse_config({"workload": "builtin", "requests_per_level": len(wl.prompts), "concurrency": [4, 128]})
    assert "flush_cache=true" in _workload_warnings(within, wl, {})[0]  # repeats across levels only
