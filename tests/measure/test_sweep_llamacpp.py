"""Sweeps against models with a small vocabulary, llama.cpp's API, and servers that give no token
counts — the reference server over real sockets."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specsweep.analyze.compare import compare
from specsweep.measure.config import ConfigError
from specsweep.measure.probe import ProbeError
from specsweep.measure.sweep import run_sweep
from specsweep.refserver.launch import RefServer
from specsweep.report import diagnostics_markdown
from specsweep.results.store import load_result_set

SMALL_VOCAB = ["--set", "model.vocab_size=1403"]


def quiet(_: str) -> None:
    pass


def small(tmp_path: Path, url: str, **kw: object) -> dict:
    return {"endpoint": url, "concurrency": [1, 3], "input_tokens": 32, "output_tokens": 40, "workload": "random-ids",
            "out_dir": str(tmp_path), "metrics_interval_s": 0.05, **kw}


@pytest.mark.parametrize("surface", ["llamacpp", "sglang"])
def test_text_workload_runs_on_a_small_vocabulary(tmp_path: Path, refserver_factory: Callable[..., RefServer],
                                                  surface: str) -> None:
    """Preflight and warm-up send text when the workload is text (they used to send random IDs up to
    29,999, which a 1,403-token model rejects: 'Prompt contains invalid tokens')."""
    srv = refserver_factory("off", ["--api-surface", surface, *SMALL_VOCAB])
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"tell me a story about the river number {i}\n" for i in range(20)))
    for workload in ("random-text", str(prompts)):
        res = run_sweep(small(tmp_path / "runs", srv.url, workload=workload, arm=f"a{len(workload)}"),
                        progress=False, log=quiet)
        assert res.complete
        req = load_result_set(res.run_dir).requests
        assert req["error"].isna().all() and (req["output_tokens"] == 40).all()
        assert res.meta.server["name"] == surface


def test_random_ids_beyond_a_known_vocabulary_fail_before_any_request(
        tmp_path: Path, refserver_factory: Callable[..., RefServer]) -> None:
    srv = refserver_factory("off", ["--api-surface", "llamacpp", *SMALL_VOCAB])
    with pytest.raises(ConfigError, match=r"1,403 token IDs .*meta\.n_vocab.*\[1000, 30000\).*random-text"):
        run_sweep(small(tmp_path, srv.url), progress=False, log=quiet)
    assert not any(tmp_path.iterdir())  # refused before a run folder was written


def test_a_rejection_of_token_ids_names_the_cause(tmp_path: Path, refserver_factory: Callable[..., RefServer]) -> None:
    # SGLang does not publish its vocabulary size, so the server's own rejection is what we see
    srv = refserver_factory("off", ["--api-surface", "sglang", *SMALL_VOCAB])
    with pytest.raises(ProbeError, match=r"greater than the vocab size \(1403\).*rejected the prompt's token IDs.*"
                                         r"vocabulary is probably smaller.*random-text"):
        run_sweep(small(tmp_path, srv.url), progress=False, log=quiet)


@pytest.mark.parametrize("surface", ["llamacpp", "sglang", "vllm"])
def test_speculative_arm_without_usage_gets_exact_counts_from_tokenize(
        tmp_path: Path, refserver_factory: Callable[..., RefServer], surface: str) -> None:
    srv = refserver_factory("mtp", ["--api-surface", surface, "--fault-omit-usage"])
    res = run_sweep(small(tmp_path, srv.url, arm="mtp", output_tokens=60), progress=False, log=quiet)
    rs = load_result_set(res.run_dir)
    req = rs.requests
    assert (req["token_source"] == "tokenize").all() and (req["output_tokens"] == 60).all()
    # counting chunks would have been short: several tokens arrive per chunk under speculation
    assert (req["chunks"] < 60).all()
    assert (rs.levels["token_source"] == "tokenize").all()
    assert any("POST /tokenize" in w for w in res.meta.warnings)
    assert rs.levels["output_tok_s"].notna().all()


def test_llamacpp_acceptance_from_timings_and_per_position(tmp_path: Path,
                                                           refserver_factory: Callable[..., RefServer]) -> None:
    srv = refserver_factory("mtp", ["--api-surface", "llamacpp", "--max-running-requests", "4"])
    res = run_sweep(small(tmp_path, srv.url, arm="draft", output_tokens=60, workload="random-text"),
                    progress=False, log=quiet)
    rs = load_result_set(res.run_dir)
    req, lv = rs.requests, rs.levels
    assert (req["token_source"] == "usage").all() and (req["output_tokens"] == 60).all()
    # per request, from the final chunk's timings
    assert req["spec_draft_tokens"].notna().all() and (req["spec_accepted_tokens"] <= req["spec_draft_tokens"]).all()
    assert (req["spec_verify_ct"] == 60 - req["spec_accepted_tokens"]).all()
    assert lv["spec_accept_length"].between(1.5, 3.0).all()
    # the level's accept length is tokens per target step (steps = predicted − accepted), from the
    # timings, as SGLang's: comparable across servers
    assert (lv["spec_accept_length_source"] == "per-request (server response)").all()
    assert lv["spec_accept_length_formula"].str.contains("tokens per target step").all()
    ok = req[req["error"].isna() & ~req["warmup"]]
    by_level = ok.groupby("concurrency")[["output_tokens", "spec_verify_ct", "spec_draft_tokens",
                                          "spec_accepted_tokens"]].sum()
    lvc = lv.set_index("concurrency")
    assert lvc["spec_accept_length"].to_numpy() == pytest.approx(
        (by_level["output_tokens"] / by_level["spec_verify_ct"]).to_numpy())
    assert lvc["spec_tokens_per_step"].to_numpy() == pytest.approx(lvc["spec_accept_length"].to_numpy())
    # llama.cpp's own figure, 1 + accepted / verification steps (only its counters count those), under
    # its own name, with the share of decode steps that carried a draft
    assert lv["spec_accept_length_counters"].to_numpy() == pytest.approx(
        (1 + lv["spec_accepted_tokens_counters"] / lv["spec_verify_steps_counters"]).to_numpy())
    decode_steps = by_level["spec_verify_ct"] - by_level.index.map(ok.groupby("concurrency").size())
    assert lvc["spec_draft_share"].to_numpy() == pytest.approx(
        (lvc["spec_verify_steps_counters"] / decode_steps).to_numpy())
    assert lvc["spec_draft_share"].between(0.0, 1.0).all()
    # the page names both: the comparable figure first, llama.cpp's with its draft share beside
    text = diagnostics_markdown(compare([rs], baseline="draft"))
    assert "tokens per target step" in text and "per drafted step" in text
    first = lvc.iloc[0]
    assert (f"{first['spec_accept_length_counters']:.2f} at {lvc.index[0]} "
            f"({100 * first['spec_draft_share']:.0f} %)") in text
    # the same drafted and accepted tokens on both sides: only the step denominator differs
    assert (lvc["spec_draft_tokens_timings"] == by_level["spec_draft_tokens"]).all()
    assert (lvc["spec_draft_tokens_timings"] == lvc["spec_draft_tokens_counters"]).all()
    assert (lvc["spec_accepted_tokens_timings"] == lvc["spec_accepted_tokens_counters"]).all()
    assert lv["spec_draft_acceptance_rate"].between(0.0, 1.0).all()
    # per draft position, from /metrics counter deltas: 1 + Σ rates = tokens per verify step
    pos = lv[[f"spec_accept_rate_pos_{i}" for i in range(3)]]
    assert (pos.diff(axis=1).iloc[:, 1:] <= 1e-9).all().all()  # a later draft token is accepted no more often
    server = res.meta.server
    assert server["name"] == "llamacpp" and server["parallel_slots"] == 4 and server["draft_max"] == 3
    assert server["speculative_algorithm"] == "speculative (type not reported)"  # /props says "none"
    assert lv["server_running_max"].max() <= 4


def test_vllm_acceptance_per_draft_position(tmp_path: Path, refserver_factory: Callable[..., RefServer]) -> None:
    srv = refserver_factory("mtp", ["--api-surface", "vllm"])
    res = run_sweep(small(tmp_path, srv.url, arm="mtp", output_tokens=60), progress=False, log=quiet)
    lv = load_result_set(res.run_dir).levels
    rates = lv[[f"spec_accept_rate_pos_{i}" for i in range(3)]]
    # vllm:spec_decode_num_accepted_tokens_per_pos: 1 + Σ rates is the counters' acceptance length
    assert (1 + rates.sum(axis=1)).to_numpy() == pytest.approx(lv["spec_accept_length"].to_numpy())
    assert lv["spec_draft_acceptance_rate"].between(0.0, 1.0).all()
