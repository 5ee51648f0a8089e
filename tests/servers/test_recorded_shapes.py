"""Conformance: recorded exchanges of each server, replayed verbatim through the client's parser
and read by each dialect — the llama.cpp capture from a real ``llama-server`` and the bundles in
``tests/fixtures/shapes`` (trtllm-serve, SGLang before its rename, vLLM's per-choice statistics).
Expected figures are the servers' own, as the recorded bodies state them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specsweep.analyze.metrics import requests_frame
from specsweep.measure.client import RawExchange, parse_exchange
from specsweep.servers import dialect_of
from specsweep.servers.capture_bundle import Stream, read_bundle, split_events, stream_parts
from specsweep.servers.sglang import trim_server_info

pytestmark = pytest.mark.fast  # no server, socket or subprocess

FIX = Path(__file__).parents[1] / "fixtures"
SHAPES = FIX / "shapes"


def _exchange(events: list[str]) -> RawExchange:
    """The events as one read each, a second apart, as the client would have read them."""
    reads = [e.encode("utf-8") for e in events]
    return RawExchange(t_sent=0.0, t_end=float(len(reads) + 1), http_status=200, content_type="text/event-stream",
                       reads=reads, times=[float(i + 1) for i in range(len(reads))])


def _stream(bundle: str, path: str) -> Stream:
    return next(s for s in read_bundle(SHAPES / bundle).streams if s.path == path)


def test_the_real_llamacpp_capture_reads_as_the_engine_counted() -> None:
    text = (FIX / "llamacpp" / "real-b1-0c1e570" / "completions-stream.txt").read_text()
    events, trailing = split_events(text)
    assert not trailing.strip()
    rec = parse_exchange("openai-completions", _exchange(events))
    assert rec.error is None and rec.output_tokens == 24 and rec.prompt_tokens == 10
    assert rec.server["spec_draft_tokens"] == 82 and rec.server["spec_accepted_tokens"] == 0
    head, tail = stream_parts(events)  # what a capture keeps reads the same counts
    short = parse_exchange("openai-completions", _exchange(head + tail))
    assert short.output_tokens == 24 and short.server == rec.server


@pytest.mark.parametrize(("path", "flavour", "prompt"), [("/v1/chat/completions", "openai-chat", 17),
                                                         ("/v1/completions", "openai-completions", 9)])
def test_trtllm_serve_streams_give_their_tokens_per_iteration(path: str, flavour: str, prompt: int) -> None:
    stream = _stream("trtllm-serve.capture.json", path)
    assert stream.head[0].endswith("} \n\n")  # trtllm-serve's first event: a blank before its blank line
    rec = parse_exchange(flavour, _exchange(stream.head + stream.tail))  # type: ignore[arg-type]
    assert rec.error is None and rec.output_tokens == 11 and rec.prompt_tokens == prompt
    assert rec.server["spec_accept_length"] == pytest.approx(2.75)  # the last choice's avg_decoded_tokens_per_iter
    row = requests_frame([rec], t0=0.0, run_id="r", arm="a", concurrency=1, repeat=0).iloc[0]
    assert row["spec_verify_ct"] == pytest.approx(11 / 2.75)  # decoding iterations: tokens ÷ tokens per iteration


def _sglang_figures(rec_server: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in rec_server.items() if k.startswith("spec_")}


# histogram [1, 1, 1, 1] over 4 verify steps: steps that accepted more than i drafts = 3, 2, 1
SGLANG_OLD = {"spec_accept_length": 2.75, "spec_verify_ct": 4, "spec_accept_rate": 0.6, "spec_num_correct_drafts": 7,
              "spec_num_proposed_drafts": 12, "spec_accepted_pos_0": 3, "spec_accepted_pos_1": 2, "spec_accepted_pos_2": 1}


def test_sglang_before_its_rename_keeps_its_draft_counts_and_histogram() -> None:
    rec = parse_exchange("sglang", _exchange(_stream("sglang-prerename.capture.json", "/generate").head
                                            + _stream("sglang-prerename.capture.json", "/generate").tail))
    assert rec.error is None and rec.output_tokens == 11
    assert _sglang_figures(rec.server) == pytest.approx(SGLANG_OLD)
    sglext = _stream("sglang-prerename.capture.json", "/v1/completions")
    rec = parse_exchange("openai-completions", _exchange(sglext.head + sglext.tail))
    assert rec.error is None and _sglang_figures(rec.server) == pytest.approx(SGLANG_OLD)


def test_sglang_sending_both_name_sets_counts_each_figure_once() -> None:
    raw = json.loads((SHAPES / "sglang-prerename.capture.json").read_text())
    stream = _stream("sglang-prerename.capture.json", "/generate")
    rec = parse_exchange("sglang", _exchange([*stream.head, stream.tail[0], raw["both_names_final"], stream.tail[-1]]))
    assert _sglang_figures(rec.server) == pytest.approx(SGLANG_OLD)


def test_vllm_per_choice_statistics_are_read_like_the_usage_chunks() -> None:
    stream = _stream("vllm-per-choice-stats.capture.json", "/v1/chat/completions")
    rec = parse_exchange("openai-chat", _exchange(stream.head + stream.tail))
    assert rec.error is None and rec.output_tokens == 54
    # acceptance_histogram {"0": 39, "1": 1, "3": 3}: steps accepting more than 0, 1, 2 drafts = 4, 3, 3
    assert rec.server == pytest.approx({
        "spec_mean_acceptance_length": 1.2325581395348837, "spec_accept_length": 1.2325581395348837,
        "spec_draft_acceptance_rate": 0.07751937984496124, "spec_verify_ct": 43, "spec_accepted_tokens": 10,
        "spec_draft_tokens": 129, "spec_num_spec_tokens": 3,
        "spec_accepted_pos_0": 4, "spec_accepted_pos_1": 3, "spec_accepted_pos_2": 3})


def _server(info: dict[str, Any]) -> dict[str, Any]:
    """meta.json's ``server`` record of an SGLang probe: the trimmed ``/server_info``."""
    trimmed = trim_server_info(info)
    return {"name": "sglang", "max_running_requests": trimmed.get("max_running_requests"), "server_info": trimmed}


def test_sglang_cap_left_unset_is_the_schedulers_effective_cap() -> None:
    raw = json.loads((SHAPES / "sglang-prerename.capture.json").read_text())
    baseline = _server(raw["baseline_server_info"])  # max_running_requests null: the scheduler chose 2048
    assert baseline["max_running_requests"] is None
    assert dialect_of("sglang").running_cap(baseline) == 2048
    assert dialect_of("sglang").running_cap(_server(dict(raw["baseline_server_info"], dp_size=2))) == 4096
    spec = next(r for r in read_bundle(SHAPES / "sglang-prerename.capture.json").routes if r.path == "/server_info")
    assert dialect_of("sglang").running_cap(_server(json.loads(spec.body))) == 48  # set: the flag's value


def test_every_dialect_says_what_its_accept_length_counts_and_vllm_its_cap_is_not_exposed() -> None:
    for name in ("sglang", "vllm", "llamacpp", "trtllm"):
        assert dialect_of(name).acceptance_definition.startswith(dialect_of(name).label)
    assert "empty" in dialect_of("vllm").acceptance_definition or "nothing" in dialect_of("vllm").acceptance_definition
    assert dialect_of("vllm").running_cap({"name": "vllm"}) is None
    assert dialect_of("vllm").cap_unexposed and dialect_of("vllm").cap_unexposed.startswith("not exposed")


def test_trtllm_advice_names_its_own_flags() -> None:
    from specsweep.decide.caps import cap_argv, memory_argv
    from specsweep.report.consistency import advice_error

    for argv in (cap_argv("trtllm", 128), memory_argv("trtllm", 0.85)):
        assert advice_error("trtllm", argv) is None
        assert advice_error("vllm", argv) is not None  # not vLLM's flags, as it was read before


def test_llamacpp_advice_names_the_launchers_own_slots_flag() -> None:
    """The cap advice for an arm of specsweep's llama.cpp launcher is its --slots (llama-server's own
    --parallel is not a flag of the launcher), and the what-if's next experiment says the same."""
    from specsweep.analyze.compare import compare
    from specsweep.decide.caps import cap_argv
    from specsweep.report import whatif_section
    from specsweep.report.consistency import advice_error
    from specsweep.results.store import load_result_sets

    assert cap_argv("llamacpp", 16) == ("--slots", "16") and advice_error("llamacpp", cap_argv("llamacpp", 16)) is None
    assert cap_argv("llama.cpp", 16) == ("--parallel", "16")
    sets = load_result_sets([str(Path(__file__).resolve().parents[2] / "data" / "reference" / "real-llamacpp-crossover")])
    comp = compare(sets, baseline="baseline", n_boot=50)
    nxt = whatif_section.next_experiment(comp, sets)
    assert nxt is not None and "--slots " in nxt["sentence"] and "--max-running-requests" not in nxt["sentence"], nxt
