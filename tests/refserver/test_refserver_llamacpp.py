"""The reference server's vocabulary (out-of-range token IDs rejected in each real server's words),
/tokenize on every surface, and the llama.cpp API surface, over real sockets."""
from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from refserver_helpers import post, stream

from specsweep.measure.probe import parse_metrics
from specsweep.refserver.launch import RefServer

SMALL = ["--set", "model.vocab_size=1403"]


@pytest.mark.parametrize("surface, path, body, message", [
    ("sglang", "/generate", {"input_ids": [5, 1403], "sampling_params": {"max_new_tokens": 4}},
     "The input_ids [5, 1403] contains values greater than the vocab size (1403)."),
    ("sglang", "/v1/completions", {"prompt": [5, 2000], "max_tokens": 4},
     "The input_ids [5, 2000] contains values greater than the vocab size (1403)."),
    ("vllm", "/v1/completions", {"model": "specsweep-sim/tiny", "prompt": [5, 2000, 1500], "max_tokens": 4},
     "Token id 2000 is out of vocabulary"),
    ("llamacpp", "/v1/completions", {"prompt": [5, 2000], "max_tokens": 4}, "Prompt contains invalid tokens"),
])
def test_out_of_vocabulary_ids_are_rejected_in_each_servers_words(
        refserver_factory: Callable[..., RefServer], surface: str, path: str, body: dict, message: str) -> None:
    srv = refserver_factory("off", ["--api-surface", surface, *SMALL])
    for stream_it in (False, True):
        resp = post(srv.url + path, {**body, "stream": stream_it})
        assert resp.status_code == 400
        err = resp.json()["error"]
        assert err["message"] == message
        if surface == "llamacpp":
            assert err == {"code": 400, "message": message, "type": "invalid_request_error"}
    # the highest ID the model has is accepted
    ok = post(srv.url + path, {**body, **({"input_ids": [5, 1402]} if path == "/generate" else {"prompt": [5, 1402]})})
    assert ok.status_code == 200


def test_profiles_carry_a_vocabulary(refserver: RefServer) -> None:
    # tiny: 32,000 IDs, so the default random-ID range [1000, 30000) fits
    assert post(refserver.url + "/generate", {"input_ids": [29999], "sampling_params": {"max_new_tokens": 2}}).status_code == 200
    assert post(refserver.url + "/generate", {"input_ids": [32000], "sampling_params": {"max_new_tokens": 2}}).status_code == 400


@pytest.mark.parametrize("surface", ["sglang", "vllm"])
def test_tokenize_counts_words(refserver_factory: Callable[..., RefServer], surface: str) -> None:
    srv = refserver_factory("off", ["--api-surface", surface, *SMALL])
    r = post(srv.url + "/tokenize", {"model": "specsweep-sim/tiny", "prompt": "  one two  three "})
    assert r.status_code == 200
    body = r.json()
    assert body["count"] == 3 and len(body["tokens"]) == 3 and all(0 <= t < 1403 for t in body["tokens"])
    assert body["max_model_len"] == 32768
    assert post(srv.url + "/tokenize", {"prompt": 5}).status_code == 400


def test_llamacpp_surface_routes(refserver_factory: Callable[..., RefServer]) -> None:
    srv = refserver_factory("mtp", ["--api-surface", "llamacpp", "--max-running-requests", "4", *SMALL])
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        props = c.get("/props").json()
        assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 32768
        assert props["default_generation_settings"]["params"]["speculative.n_max"] == 3
        assert "simulated" in props["build_info"]
        slots = c.get("/slots").json()
        assert len(slots) == 4 and all(s["speculative"] is True for s in slots)
        assert c.get("/health").json() == {"status": "ok"}
        models = c.get("/v1/models").json()["data"][0]
        assert models["owned_by"] == "llamacpp" and models["meta"]["n_vocab"] == 1403
        tok = c.post("/tokenize", json={"content": "tas vir sel"}).json()
        assert len(tok["tokens"]) == 3
        pieces = c.post("/tokenize", json={"content": "tas vir", "with_pieces": True}).json()
        assert [p["piece"] for p in pieces["tokens"]] == [" tas", " vir"]
        for route in ("/generate", "/server_info", "/version"):
            assert c.get(route).status_code in (404, 405)
        assert c.post("/generate", json={"text": "x"}).status_code == 404


def test_llamacpp_stream_has_final_timings_that_match_the_metrics(refserver_factory: Callable[..., RefServer]) -> None:
    srv = refserver_factory("mtp", ["--api-surface", "llamacpp", *SMALL])
    before = {n: v for n, _, v in parse_metrics(httpx.get(srv.url + "/metrics").text) if "position" not in n}
    s = stream(srv.url + "/v1/completions", {"prompt": "one two three", "max_tokens": 60, "ignore_eos": True,
                                             "stream": True, "stream_options": {"include_usage": True,
                                                                                "continuous_usage_stats": True}})
    assert s.status == 200 and s.done
    *content, final = s.chunks
    assert all(c["usage"] is None for c in content)  # llama.cpp: no per-chunk usage
    # /v1/completions: usage and timings on the finishing chunk (as a real llama-server does)
    assert final["choices"][0]["finish_reason"] == "length" and final["usage"]["completion_tokens"] == 60
    t = final["timings"]
    assert t["predicted_n"] == 60 and t["prompt_n"] == 3
    assert 0 <= t["draft_n_accepted"] <= t["draft_n"] and t["draft_n"] % 3 == 0
    steps = t["draft_n"] // 3
    assert 60 == steps + t["draft_n_accepted"] + 1  # each verify step: its own token + accepted drafts; +1 prefill
    samples = parse_metrics(httpx.get(srv.url + "/metrics").text)
    after = {n: v for n, _, v in samples if "position" not in n}
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    assert delta["llamacpp:spec_decode_num_draft_tokens_total"] == t["draft_n"]
    assert delta["llamacpp:spec_decode_num_accepted_tokens_total"] == t["draft_n_accepted"]
    assert delta["llamacpp:spec_decode_num_drafts_total"] == steps
    assert delta["llamacpp:tokens_predicted_total"] == 60 and delta["llamacpp:prompt_tokens_total"] == 3
    per_pos = [v for n, labels, v in samples if n.endswith("per_pos_total")]
    assert len(per_pos) == 3 and sum(per_pos) == after["llamacpp:spec_decode_num_accepted_tokens_total"]
    assert "llamacpp:requests_processing" in after and "llamacpp:requests_deferred" in after
    # chat: a choices-less usage chunk carries the timings; without include_usage the last content chunk does
    s = stream(srv.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                                                  "ignore_eos": True, "stream": True,
                                                  "stream_options": {"include_usage": True}})
    assert s.chunks[-1]["choices"] == [] and s.chunks[-1]["timings"]["predicted_n"] == 8
    s = stream(srv.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                                                  "ignore_eos": True, "stream": True})
    assert s.chunks[-1]["choices"][0]["finish_reason"] == "length" and s.chunks[-1]["timings"]["predicted_n"] == 8
