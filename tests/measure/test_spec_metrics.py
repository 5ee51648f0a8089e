"""Per-request speculative acceptance: the client reads the servers' per-request
figures (vLLM ``metrics.speculative_decoding``, SGLang ``meta_info`` and
``sglext.spec_tokens_details``), and a level takes its acceptance from them where every request has
them, else from ``/metrics`` counter deltas, with the source named."""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from specsweep.analyze.compare import compare
from specsweep.analyze.metrics import (
    FORMULA_ACCEPTED,
    FORMULA_TOKENS,
    SOURCE_COUNTERS,
    SOURCE_PER_REQUEST,
    acceptance_from_requests,
)
from specsweep.markup import md_text
from specsweep.measure.client import RawExchange, parse_exchange
from specsweep.measure.sweep import run_sweep, server_figures, summary_table
from specsweep.refserver.launch import RefServer
from specsweep.report import diagnostics_markdown
from specsweep.results.store import ResultSet, load_result_set
from specsweep.servers import dialect_of
from specsweep.servers.flavours import build_body

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _raw(stream: Path | str) -> RawExchange:
    """A stream (a fixture file, or its text), one read per SSE event, 0.1 s apart."""
    text = stream.read_text() if isinstance(stream, Path) else stream
    events = [e.encode() + b"\n\n" for e in text.split("\n\n") if e]
    return RawExchange(t_sent=0.0, t_end=1.0, http_status=200, content_type="text/event-stream",
                       reads=events, times=[0.1 * (i + 1) for i in range(len(events))])


# ----------------------------------------------------------------------------------------- client

#: the documented run (ngram, k = 3): histogram [39, 1, 0, 3]: position 0 accepted in 1 + 0 + 3 steps,
#: position 1 in 0 + 3, position 2 in 3 (acceptance stops at the first rejected draft)
VLLM_SERVER = {
    "spec_mean_acceptance_length": 1.2325581395348837, "spec_accept_length": 1.2325581395348837,
    "spec_draft_acceptance_rate": 0.07751937984496124, "spec_verify_ct": 43.0, "spec_accepted_tokens": 10.0,
    "spec_draft_tokens": 129.0, "spec_num_spec_tokens": 3.0,
    "spec_accepted_pos_0": 4.0, "spec_accepted_pos_1": 3.0, "spec_accepted_pos_2": 3.0,
}


@pytest.mark.parametrize("level", ["summary", "detailed"])
def test_vllm_usage_chunk_metrics_parsed_exactly(level: str) -> None:
    rec = parse_exchange("openai-chat", _raw(FIXTURES / "vllm" / f"chat-stream-spec-{level}.txt"))
    assert rec.error is None and rec.output_tokens == 54 and rec.token_source == "usage"
    assert rec.prompt_tokens == 11742 and rec.finish_reason == "length" and len(rec.chunk_times) == 3
    assert rec.server == VLLM_SERVER
    # the per-position counts add up to the accepted drafts: 1 + Σ positions / steps = the mean
    pos = sum(v for k, v in rec.server.items() if k.startswith("spec_accepted_pos_"))
    assert 1 + pos / rec.server["spec_verify_ct"] == pytest.approx(rec.server["spec_mean_acceptance_length"])


def test_vllm_histogram_as_an_object_or_only_per_step_arrays() -> None:
    """aiperf's vLLM adapter (ai-dynamo/aiperf#1167) shows the histogram as an object keyed by the
    accepted count; without a histogram, detailed's per-step arrays give the same positions."""
    text = (FIXTURES / "vllm" / "chat-stream-spec-detailed.txt").read_text()
    sparse = text.replace('"acceptance_histogram":[39,1,0,3],', '"acceptance_histogram":{"0":39,"1":1,"3":3},')
    steps_only = text.replace('"acceptance_histogram":[39,1,0,3],', "")
    for variant in (sparse, steps_only):
        assert variant != text
        assert parse_exchange("openai-chat", _raw(variant)).server == VLLM_SERVER


def test_sglang_sglext_chunk_parsed_exactly() -> None:
    rec = parse_exchange("openai-completions", _raw(FIXTURES / "sglang" / "completions-stream-spec-tokens-details.txt"))
    assert rec.error is None and rec.output_tokens == 106 and rec.chunk_tokens.tolist() == [1, 3, 102]
    # histogram [11, 14, 11, 4, 0, 3]: steps accepting more than 0, 1, 2, 3, 4 drafts
    assert rec.server == {
        "spec_accept_length": 2.4651162790697674, "spec_verify_ct": 43.0, "spec_accept_rate": 0.2930232558139535,
        "spec_num_correct_drafts": 63.0, "spec_num_proposed_drafts": 215.0,
        "spec_accepted_pos_0": 32.0, "spec_accepted_pos_1": 18.0, "spec_accepted_pos_2": 7.0,
        "spec_accepted_pos_3": 3.0, "spec_accepted_pos_4": 3.0,
    }
    assert sum(v for k, v in rec.server.items() if k.startswith("spec_accepted_pos_")) == 63


def test_spec_request_options_only_where_the_server_takes_them() -> None:
    assert dialect_of("sglang").spec_request_options("openai-completions") == {"return_spec_tokens_details": True}
    assert dialect_of("sglang").spec_request_options("openai-chat") == {"return_spec_tokens_details": True}
    # /generate always carries meta_info; vLLM needs a server flag; others may reject unknown fields
    for server, flavour in (("sglang", "sglang"), ("vllm", "openai-completions"), ("llamacpp", "openai-chat"),
                            ("openai-compatible", "openai-completions")):
        assert dialect_of(server).spec_request_options(flavour) == {}  # type: ignore[arg-type]
    body = build_body("openai-chat", "hi", 8, extra=dialect_of("sglang").spec_request_options("openai-chat"))
    assert body["return_spec_tokens_details"] is True and "sampling_params" not in body


# ------------------------------------------------------------------------ per-level acceptance

def _frame(rows: list[dict[str, float]]) -> pd.DataFrame:
    """Request rows as ``metrics.requests_frame`` has them (only the columns acceptance reads)."""
    base = {"error": None, "output_tokens": 40.0, "spec_verify_ct": math.nan, "spec_accepted_tokens": math.nan,
            "spec_draft_tokens": math.nan}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_acceptance_from_requests_hand_computed() -> None:
    # vLLM-shaped rows: 1 + (10 + 20) / (20 + 10); per position (pos_0, pos_1) over 30 steps
    vllm = _frame([{"spec_verify_ct": 20, "spec_accepted_tokens": 10, "spec_draft_tokens": 60,
                    "spec_accepted_pos_0": 8, "spec_accepted_pos_1": 2},
                   {"spec_verify_ct": 10, "spec_accepted_tokens": 20, "spec_draft_tokens": 30,
                    "spec_accepted_pos_0": 10, "spec_accepted_pos_1": 10}])
    acc = acceptance_from_requests(vllm)
    assert acc is not None and acc.source == SOURCE_PER_REQUEST == "per-request (server response)"
    assert acc.formula == FORMULA_ACCEPTED and acc.accept_length == pytest.approx(1 + 30 / 30)
    assert acc.detail == pytest.approx({"spec_draft_acceptance_rate": 30 / 90, "spec_accept_rate_pos_0": 18 / 30,
                                        "spec_accept_rate_pos_1": 12 / 30})
    assert 1 + acc.detail["spec_accept_rate_pos_0"] + acc.detail["spec_accept_rate_pos_1"] == pytest.approx(
        acc.accept_length)
    # SGLang-shaped rows (verify steps only): Σ completion tokens / Σ verify steps; a request that never
    # reached a verify step (one token, from the prefill) carries no figures and counts 0 steps
    sglang = _frame([{"spec_verify_ct": 16}, {"spec_verify_ct": 24}, {"output_tokens": 1.0}])
    acc = acceptance_from_requests(sglang)
    assert acc is not None and acc.formula == FORMULA_TOKENS and acc.accept_length == pytest.approx(81 / 40)
    assert acc.detail == {}
    # a failed request does not count; one successful request without figures: no per-request figure
    assert acceptance_from_requests(_frame([{"spec_verify_ct": 16}, {"error": "HTTP 500: x"}])) is not None
    assert acceptance_from_requests(_frame([{"spec_verify_ct": 16}, {}])) is None
    assert acceptance_from_requests(_frame([{}, {}])) is None
    assert acceptance_from_requests(_frame([{"spec_verify_ct": 16}]).drop(columns=["spec_verify_ct"])) is None


def test_server_figures_fall_back_to_counter_deltas_and_name_the_source() -> None:
    before = {"spec_drafts": 100.0, "spec_accepted_tokens": 50.0, "spec_draft_tokens": 300.0,
              "spec_accepted_pos_0": 30.0, "spec_accepted_pos_1": 20.0}
    after = {"spec_drafts": 140.0, "spec_accepted_tokens": 90.0, "spec_draft_tokens": 420.0,
             "spec_accepted_pos_0": 60.0, "spec_accepted_pos_1": 30.0}
    partial = _frame([{"spec_verify_ct": 20, "spec_accepted_tokens": 10, "spec_draft_tokens": 60}, {}])
    out = server_figures(partial, [], (0.0, 1.0), before, after, "vllm")
    assert out["spec_accept_length"] == pytest.approx(1 + 40 / 40) == out["spec_accept_length_counters"]
    assert out["spec_accept_length_source"] == SOURCE_COUNTERS == "per-level counter deltas (/metrics)"
    assert out["spec_accept_length_formula"] == dialect_of("vllm").acceptance_formula
    assert out["spec_draft_acceptance_rate"] == pytest.approx(40 / 120)
    assert out["spec_accept_rate_pos_0"] == pytest.approx(30 / 40)
    # every request has figures: they win, the counters' figure is kept beside as a cross-check
    full = _frame([{"spec_verify_ct": 20, "spec_accepted_tokens": 10, "spec_draft_tokens": 60,
                    "spec_accepted_pos_0": 10}])
    out = server_figures(full, [], (0.0, 1.0), before, after, "vllm")
    assert out["spec_accept_length"] == pytest.approx(1.5) and out["spec_accept_length_counters"] == pytest.approx(2.0)
    assert out["spec_accept_length_source"] == SOURCE_PER_REQUEST
    assert out["spec_draft_acceptance_rate"] == pytest.approx(10 / 60)
    assert out["spec_accept_rate_pos_0"] == pytest.approx(10 / 20)
    assert out["spec_accept_rate_pos_1"] == pytest.approx(10 / 40)  # the request figures have no position 1
    # neither: nothing is claimed
    assert "spec_accept_length" not in server_figures(partial, [], (0.0, 1.0), {}, {}, "vllm")


@pytest.mark.fast
def test_llamacpp_level_accept_length_is_tokens_per_target_step_as_sglangs() -> None:
    """Two requests of 20 tokens: one drafted 16 tokens over 4 verification steps and kept 8 (12
    target steps), one never drafted (20 steps). Tokens per target step: 40 ÷ 32 = 1.25, the figure
    SGLang's completion tokens ÷ verify steps gives; llama.cpp's counters: 1 + 8 ÷ 4 = 3 per drafted
    step, kept under its own name beside the share of steps that carried a draft: the 32 steps less
    the two prompt passes are 30, of which 4 verified a draft."""
    rows = _frame([{"output_tokens": 20.0, "spec_verify_ct": 12.0, "spec_accepted_tokens": 8.0, "spec_draft_tokens": 16.0},
                   {"output_tokens": 20.0, "spec_verify_ct": 20.0, "spec_accepted_tokens": 0.0, "spec_draft_tokens": 0.0}])
    before = {"spec_drafts": 10.0, "spec_accepted_tokens": 5.0, "spec_draft_tokens": 50.0}
    after = {"spec_drafts": 14.0, "spec_accepted_tokens": 13.0, "spec_draft_tokens": 66.0}
    out = server_figures(rows, [], (0.0, 1.0), before, after, "llamacpp")
    assert out["spec_accept_length"] == pytest.approx(40 / 32) == out["spec_tokens_per_step"]
    assert out["spec_accept_length_source"] == SOURCE_PER_REQUEST
    assert "tokens per target step" in out["spec_accept_length_formula"]
    assert out["spec_accept_length_counters"] == pytest.approx(1 + 8 / 4)
    assert out["spec_plain_steps"] == pytest.approx(26.0)
    assert out["spec_draft_share"] == pytest.approx(4 / 30)


# --------------------------------------------------------------- sweeps on the reference server

def _sweep(tmp_path: Path, url: str, arm: str, **kw: object) -> ResultSet:
    cfg = {"endpoint": url, "arm": arm, "concurrency": [1, 4], "input_tokens": 16, "output_tokens": 60,
           "workload": "random-ids", "out_dir": str(tmp_path), "metrics_interval_s": 0.05, **kw}
    lines: list[str] = []
    res = run_sweep(cfg, progress=False, log=lines.append)
    assert res.complete
    rs = load_result_set(res.run_dir)
    rs.meta.log = lines
    return rs


def _measured(rs: ResultSet) -> pd.DataFrame:
    req = rs.requests
    return req[~req["warmup"] & req["error"].isna()]


def _check_named(rs: ResultSet, source: str) -> None:
    """The source is in every level row, the summary table and the progress line."""
    assert (rs.levels["spec_accept_length_source"] == source).all()
    assert (summary_table(rs.levels)["accept length source"] == source).all()
    assert sum("accept length " in line and f"[{source}]" in line for line in rs.meta.log) == len(rs.levels)


def test_vllm_surface_with_and_without_per_request_metrics(tmp_path: Path,
                                                           refserver_factory: Callable[..., RefServer]) -> None:
    """Without the flag the level's acceptance comes from the spec-decode counters; with it, from the
    responses. Both count the same simulated verify steps, and a level's counter window holds exactly
    its measured requests (warm-up and preflight finish before the first read; every counter moves
    before the chunk that ends a request is written), so the two figures must agree to rounding
    (rel 1e-9). On a real server they agree only as closely as the window is clean: other traffic,
    n > 1 requests and warm-up stragglers move the counters too."""
    plain = refserver_factory("mtp", ["--api-surface", "vllm"])
    counters = _sweep(tmp_path, plain.url, "counters")
    _check_named(counters, SOURCE_COUNTERS)
    assert _measured(counters)["spec_verify_ct"].isna().all()
    assert (counters.levels["spec_accept_length"] == counters.levels["spec_accept_length_counters"]).all()
    assert counters.levels["spec_accept_length"].between(1.5, 3.0).all()

    flagged = refserver_factory("mtp", ["--api-surface", "vllm", "--per-request-spec-decode-metrics", "summary"])
    per_request = _sweep(tmp_path, flagged.url, "per-request")
    _check_named(per_request, SOURCE_PER_REQUEST)
    lv = per_request.levels.set_index("concurrency")
    assert (lv["spec_accept_length_formula"] == FORMULA_ACCEPTED).all()
    assert lv["spec_accept_length"].to_numpy() == pytest.approx(lv["spec_accept_length_counters"].to_numpy(), rel=1e-9)
    # recovered from the requests' own figures: 1 + Σ accepted / Σ steps per level
    req = _measured(per_request)
    assert (req["output_tokens"] == 1 + req["spec_verify_ct"] + req["spec_accepted_tokens"]).all()
    sums = req.groupby("concurrency")[["spec_accepted_tokens", "spec_verify_ct", "spec_draft_tokens"]].sum()
    assert lv["spec_accept_length"].to_numpy() == pytest.approx(
        (1 + sums["spec_accepted_tokens"] / sums["spec_verify_ct"]).to_numpy())
    assert lv["spec_draft_acceptance_rate"].to_numpy() == pytest.approx(
        (sums["spec_accepted_tokens"] / sums["spec_draft_tokens"]).to_numpy())
    # per draft position from the histograms: the counters' per-position rates, and 1 + Σ = the length
    rates = lv[[f"spec_accept_rate_pos_{i}" for i in range(3)]]
    assert (1 + rates.sum(axis=1)).to_numpy() == pytest.approx(lv["spec_accept_length"].to_numpy())
    # the report's diagnostics name each arm's source where acceptance is shown
    comp = compare([counters, per_request], baseline="counters")
    text = diagnostics_markdown(comp)
    assert "Server-side acceptance length per level" in text
    assert f"— {md_text(SOURCE_COUNTERS)}" in text and f"— {md_text(SOURCE_PER_REQUEST)}" in text


@pytest.mark.parametrize("api", ["sglang", "openai-completions"])
def test_sglang_surface_per_request_from_meta_info_and_sglext(tmp_path: Path, refserver_mtp: RefServer,
                                                              api: str) -> None:
    """/generate always carries the figures; the OpenAI route only when asked, which the sweep does
    for SGLang. SGLang's per-request acceptance (completion tokens / verify steps) sums to the same
    ratio as its counters (Δgeneration tokens / Δspec_verify_calls): equal to rounding (rel 1e-9),
    for the reasons given for vLLM above."""
    rs = _sweep(tmp_path, refserver_mtp.url, f"sglang-{api}", api=api)
    _check_named(rs, SOURCE_PER_REQUEST)
    lv = rs.levels.set_index("concurrency")
    assert (lv["spec_accept_length_formula"] == FORMULA_TOKENS).all()
    assert lv["spec_accept_length"].to_numpy() == pytest.approx(lv["spec_accept_length_counters"].to_numpy(), rel=1e-9)
    req = _measured(rs)
    sums = req.groupby("concurrency")[["output_tokens", "spec_verify_ct"]].sum()
    assert lv["spec_accept_length"].to_numpy() == pytest.approx((sums["output_tokens"] / sums["spec_verify_ct"]).to_numpy())
    # per position from spec_correct_drafts_histogram: Σ over positions = the correct drafts
    assert req["spec_accepted_pos_0"].notna().all()
    accepted = req["output_tokens"] - 1 - req["spec_verify_ct"]  # prefill token + one bonus token per step
    pos = [c for c in req.columns if c.startswith("spec_accepted_pos_")]
    assert (req[pos].fillna(0).sum(axis=1) == accepted).all()
