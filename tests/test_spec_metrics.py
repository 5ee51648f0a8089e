"""Per-request speculative acceptance (issue 10 item 4): the client reads the servers' per-request
figures (vLLM ``metrics.speculative_decoding``, SGLang ``meta_info`` and
``sglext.spec_tokens_details``), and a level takes its acceptance from them where every request has
them, else from ``/metrics`` counter deltas, with the source named."""
from __future__ import annotations

from pathlib import Path

import pytest

from specsweep.client import RawExchange, build_body, parse_exchange, spec_request_options

FIXTURES = Path(__file__).parent / "fixtures"


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
    assert rec.error is None and rec.output_tokens == 106 and rec.chunk_tokens == [1, 3, 102]
    # histogram [11, 14, 11, 4, 0, 3]: steps accepting more than 0, 1, 2, 3, 4 drafts
    assert rec.server == {
        "spec_accept_length": 2.4651162790697674, "spec_verify_ct": 43.0, "spec_accept_rate": 0.2930232558139535,
        "spec_num_correct_drafts": 63.0, "spec_num_proposed_drafts": 215.0,
        "spec_accepted_pos_0": 32.0, "spec_accepted_pos_1": 18.0, "spec_accepted_pos_2": 7.0,
        "spec_accepted_pos_3": 3.0, "spec_accepted_pos_4": 3.0,
    }
    assert sum(v for k, v in rec.server.items() if k.startswith("spec_accepted_pos_")) == 63


def test_spec_request_options_only_where_the_server_takes_them() -> None:
    assert spec_request_options("sglang", "openai-completions") == {"return_spec_tokens_details": True}
    assert spec_request_options("sglang", "openai-chat") == {"return_spec_tokens_details": True}
    # /generate always carries meta_info; vLLM needs a server flag; others may reject unknown fields
    for server, flavour in (("sglang", "sglang"), ("vllm", "openai-completions"), ("llamacpp", "openai-chat"),
                            ("openai-compatible", "openai-completions")):
        assert spec_request_options(server, flavour) == {}  # type: ignore[arg-type]
    body = build_body("openai-chat", "hi", 8, extra=spec_request_options("sglang", "openai-chat"))
    assert body["return_spec_tokens_details"] is True and "sampling_params" not in body
