"""Per-request speculation figures of the reference server over a real socket: vLLM's
``metrics.speculative_decoding`` (``--api-surface vllm --per-request-spec-decode-metrics``) and
SGLang's ``meta_info`` histogram and ``sglext.spec_tokens_details`` chunk
(``return_spec_tokens_details``), each against the server's own ``/metrics`` counters."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from refserver_helpers import post, stream

from specsweep.refserver.cli import main
from specsweep.refserver.launch import RefServer

VLLM = ["--api-surface", "vllm"]
MODEL = "specsweep-sim/tiny"
K = 3  # draft tokens per verify step of the tiny profile
Factory = Callable[..., RefServer]
SUMMARY_KEYS = ["mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram",
                "acceptance_histogram_by_draft_length", "num_spec_steps", "num_accepted_draft_tokens",
                "num_draft_tokens", "num_spec_tokens"]


def _counters(url: str) -> dict[str, float]:
    """``/metrics`` counters as {name: value summed over label sets}."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name = series.split("{", 1)[0]
            if name.endswith("_total"):
                out[name] = out.get(name, 0.0) + float(value)
    return out


def _check_vllm_identities(spec: dict[str, Any], completion_tokens: int) -> None:
    """The relations vLLM's own e2e test holds (``_validate_detailed_metrics``), plus the token count."""
    hist, steps, accepted = spec["acceptance_histogram"], spec["num_spec_steps"], spec["num_accepted_draft_tokens"]
    assert len(hist) == K + 1 and spec["num_spec_tokens"] == K
    assert sum(hist) == steps > 0 and sum(j * c for j, c in enumerate(hist)) == accepted
    assert spec["acceptance_histogram_by_draft_length"] == {str(K): hist}
    assert spec["num_draft_tokens"] == K * steps
    assert spec["mean_acceptance_length"] == pytest.approx(1 + accepted / steps)
    assert spec["draft_acceptance_rate"] == pytest.approx(accepted / (K * steps))
    # every token is the prefill's, a verify step's bonus token, or an accepted draft
    assert completion_tokens == 1 + steps + accepted


def test_vllm_surface_without_the_flag_sends_no_metrics(refserver_factory: Factory) -> None:
    url = refserver_factory(spec="mtp", args=VLLM).url
    body = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 30, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    s = stream(url + "/v1/completions", body)
    assert s.done and all("metrics" not in c for c in s.chunks)
    assert "metrics" not in post(url + "/v1/completions", {**body, "stream": False}).json()


@pytest.mark.parametrize("level", ["summary", "detailed"])
def test_vllm_per_request_metrics_ride_the_usage_chunk_and_add_up_to_the_counters(
        refserver_factory: Factory, level: str) -> None:
    url = refserver_factory(spec="mtp", args=[*VLLM, "--per-request-spec-decode-metrics", level]).url
    before = _counters(url)
    n, tokens = 6, 120
    bodies = [{"model": MODEL, "prompt": [i + 1, 7, 9], "max_tokens": tokens, "ignore_eos": True, "stream": True,
               "stream_options": {"include_usage": True}} for i in range(n)]
    streams = [stream(url + "/v1/completions", b) for b in bodies]
    specs = []
    for s in streams:
        with_metrics = [c for c in s.chunks if c.get("metrics") is not None]
        # exactly one, the final usage chunk (choices [] and usage), as in vLLM's e2e test
        assert len(with_metrics) == 1 and with_metrics[0] is s.chunks[-1] and s.chunks[-1]["choices"] == []
        spec = with_metrics[0]["metrics"]["speculative_decoding"]
        expected = SUMMARY_KEYS + (["per_step_accepted", "per_step_drafted"] if level == "detailed" else [])
        assert list(spec) == expected
        _check_vllm_identities(spec, s.chunks[-1]["usage"]["completion_tokens"])
        if level == "detailed":
            assert len(spec["per_step_accepted"]) == spec["num_spec_steps"] == len(spec["per_step_drafted"])
            assert sum(spec["per_step_accepted"]) == spec["num_accepted_draft_tokens"]
            assert spec["per_step_drafted"] == [K] * spec["num_spec_steps"]
        specs.append(spec)
    d = {k: v - before.get(k, 0.0) for k, v in _counters(url).items()}
    # vLLM's docs: summed over n == 1 requests, the per-request fields reconcile with the counters
    assert sum(s["num_spec_steps"] for s in specs) == d["vllm:spec_decode_num_drafts_total"]
    assert sum(s["num_draft_tokens"] for s in specs) == d["vllm:spec_decode_num_draft_tokens_total"]
    assert sum(s["num_accepted_draft_tokens"] for s in specs) == d["vllm:spec_decode_num_accepted_tokens_total"]
    # non-streaming: the same object at the top level of the body; no usage chunk, no metrics
    full = post(url + "/v1/completions", {**bodies[0], "stream": False}).json()
    _check_vllm_identities(full["metrics"]["speculative_decoding"], full["usage"]["completion_tokens"])
    quiet = stream(url + "/v1/completions", {**bodies[0], "stream_options": {"include_usage": False}})
    assert quiet.done and all("metrics" not in c for c in quiet.chunks)


@pytest.mark.parametrize(("args", "message"), [
    (["--per-request-spec-decode-metrics", "summary", "--spec", "mtp"], "use it with --api-surface vllm"),
    (["--per-request-spec-decode-metrics", "summary", "--api-surface", "vllm"], "requires speculative decoding"),
    (["--per-request-spec-decode-metrics", "all", "--api-surface", "vllm"], "invalid choice: 'all'"),
])
def test_the_flag_is_vllms_and_needs_speculation(args: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--profile", "tiny", *args])
    assert info.value.code == 2 and message in capsys.readouterr().err


def _sglang_identities(fig: dict[str, Any], completion_tokens: int) -> None:
    hist, verify = fig["spec_correct_drafts_histogram"], fig["spec_verify_ct"]
    # SGLang grows the histogram to the largest accepted count seen
    assert 1 <= len(hist) <= K + 1 and hist[-1] > 0
    assert sum(hist) == verify and sum(j * c for j, c in enumerate(hist)) == fig["spec_num_correct_drafts"]
    assert fig["spec_num_proposed_drafts"] == verify * K
    assert fig["spec_accept_length"] == pytest.approx(completion_tokens / verify)
    assert fig["spec_accept_rate"] == pytest.approx(fig["spec_num_correct_drafts"] / (verify * K))


def test_sglang_meta_info_and_sglext_chunk(refserver_mtp: RefServer) -> None:
    url = refserver_mtp.url
    bodies = {"/v1/completions": {"prompt": [3, 4, 5]},
              "/v1/chat/completions": {"messages": [{"role": "user", "content": "a b c"}]}}
    bodies = {path: {**b, "max_tokens": 80, "ignore_eos": True, "stream": True,
                     "stream_options": {"include_usage": True}} for path, b in bodies.items()}
    for path, body in bodies.items():  # not asked: not sent
        plain = stream(url + path, body)
        assert plain.done and all("sglext" not in c for c in plain.chunks)
    before = _counters(url)
    meta = post(url + "/generate", {"input_ids": [3, 4, 5], "sampling_params": {"max_new_tokens": 80,
                                                                               "ignore_eos": True}}).json()["meta_info"]
    _sglang_identities(meta, meta["completion_tokens"])
    keys = [k for k in meta if k.startswith("spec_")]
    assert keys == ["spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts",
                    "spec_verify_ct", "spec_correct_drafts_histogram"]  # SGLang 0.5.23's order
    verify_calls, tokens = meta["spec_verify_ct"], meta["completion_tokens"]
    for path, body in bodies.items():
        s = stream(url + path, {**body, "return_spec_tokens_details": True})
        ext = [i for i, c in enumerate(s.chunks) if "sglext" in c]
        # one chunk of its own after the finishing content chunk, before the usage chunk
        assert len(ext) == 1 and ext[0] == len(s.chunks) - 2
        assert s.chunks[ext[0] - 1]["choices"][0]["finish_reason"] == "length"
        chunk = s.chunks[ext[0]]
        assert chunk["choices"] == [] and chunk["usage"] is None and list(chunk["sglext"]) == ["spec_tokens_details"]
        details = chunk["sglext"]["spec_tokens_details"]
        assert list(details) == ["spec_accept_rate", "spec_accept_length", "spec_cap_length",
                                 "spec_block_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts",
                                 "spec_verify_ct", "spec_correct_drafts_histogram", "spec_cap_lens_histogram"]
        _sglang_identities(details, s.chunks[-1]["usage"]["completion_tokens"])
        full = post(url + path, {**body, "stream": False, "return_spec_tokens_details": True}).json()
        _sglang_identities(full["sglext"]["spec_tokens_details"], full["usage"]["completion_tokens"])
        verify_calls += details["spec_verify_ct"] + full["sglext"]["spec_tokens_details"]["spec_verify_ct"]
        tokens += s.chunks[-1]["usage"]["completion_tokens"] + full["usage"]["completion_tokens"]
    d = {k: v - before.get(k, 0.0) for k, v in _counters(url).items()}
    assert d["sglang:spec_verify_calls_total"] == verify_calls
    assert d["sglang:generation_tokens_total"] == tokens
