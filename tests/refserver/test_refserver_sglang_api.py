"""Conformance of SGLang's native ``/generate`` over a real socket (``tiny`` profile)."""
from __future__ import annotations

from refserver_helpers import post, stream

from specsweep.refserver.launch import RefServer

GREEDY = {"temperature": 0, "ignore_eos": True}


def _gen(srv: RefServer, n: int, *, stream_: bool = True, **prompt: object) -> dict:
    payload: dict = {"sampling_params": {**GREEDY, "max_new_tokens": n}, "stream": stream_}
    payload.update(prompt or {"text": "the quick brown fox jumps"})
    return payload


def test_stream_chunks_are_cumulative_and_end_with_done(refserver: RefServer) -> None:
    s = stream(refserver.url + "/generate", _gen(refserver, 40))
    assert s.status == 200 and s.error is None and not s.malformed
    assert s.headers["content-type"].startswith("text/event-stream")
    assert s.headers["x-simulated"] == "true"
    assert s.done and s.raw[-1] == "data: [DONE]"
    chunks = s.chunks
    prev_text, prev_ids, prev_n = "", [], 0
    for c in chunks:
        assert set(c) == {"text", "output_ids", "meta_info"}
        m = c["meta_info"]
        assert m["simulated"] is True and m["prompt_tokens"] == 5
        assert c["text"].startswith(prev_text) and len(c["text"]) > len(prev_text)
        assert c["output_ids"][: len(prev_ids)] == prev_ids
        assert m["completion_tokens"] == len(c["output_ids"]) == len(c["text"].split())
        assert m["completion_tokens"] > prev_n
        prev_text, prev_ids, prev_n = c["text"], c["output_ids"], m["completion_tokens"]
    for c in chunks[:-1]:
        assert c["meta_info"]["finish_reason"] is None
        assert "e2e_latency" not in c["meta_info"]
    final = chunks[-1]["meta_info"]
    assert final["finish_reason"] == {"type": "length", "length": 40}
    assert final["completion_tokens"] == 40
    assert 0 < final["e2e_latency"] < 5
    assert "spec_verify_ct" not in final
    # baseline: one token per step, so one token per chunk
    assert len(chunks) == 40


def test_spec_stream_several_tokens_per_chunk(refserver_mtp: RefServer) -> None:
    s = stream(refserver_mtp.url + "/generate", _gen(refserver_mtp, 200))
    assert s.status == 200 and s.done
    counts = [c["meta_info"]["completion_tokens"] for c in s.chunks]
    deltas = [b - a for a, b in zip([0] + counts, counts)]
    assert deltas[0] == 1  # the prefill's token
    assert max(deltas) > 1 and max(deltas) <= 4  # num_steps 3 -> at most 4 per chunk
    assert min(deltas) >= 1
    assert counts[-1] == 200 and len(s.chunks) < 200
    final = s.chunks[-1]["meta_info"]
    assert final["finish_reason"] == {"type": "length", "length": 200}
    vct = final["spec_verify_ct"]
    assert vct == len(s.chunks) - 1  # one verify step per chunk after the prefill chunk
    assert final["spec_accept_length"] == 200 / vct
    assert 1.5 < final["spec_accept_length"] < 2.6
    assert final["spec_num_proposed_drafts"] == vct * 3
    assert final["spec_accept_rate"] == final["spec_num_correct_drafts"] / (vct * 3)


def test_greedy_output_is_the_same_with_and_without_speculation(
        refserver: RefServer, refserver_mtp: RefServer) -> None:
    for prompt in ({"text": "hello there general"}, {"input_ids": [5, 6, 7, 8, 9, 10]}):
        a = post(refserver.url + "/generate", _gen(refserver, 64, stream_=False, **prompt)).json()
        b = post(refserver_mtp.url + "/generate", _gen(refserver_mtp, 64, stream_=False, **prompt)).json()
        assert a["text"] == b["text"] and a["output_ids"] == b["output_ids"]
        s = stream(refserver_mtp.url + "/generate", _gen(refserver_mtp, 64, **prompt))
        assert s.chunks[-1]["text"] == a["text"]


def test_non_streaming_response(refserver_mtp: RefServer) -> None:
    r = post(refserver_mtp.url + "/generate", _gen(refserver_mtp, 30, stream_=False,
                                                   input_ids=list(range(100, 117))))
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert len(body["output_ids"]) == 30 and len(body["text"].split()) == 30
    m = body["meta_info"]
    assert m["prompt_tokens"] == 17 and m["completion_tokens"] == 30
    assert m["finish_reason"] == {"type": "length", "length": 30}
    assert m["spec_verify_ct"] > 0 and m["spec_accept_length"] == 30 / m["spec_verify_ct"]
    assert m["simulated"] is True


def test_eos_and_min_new_tokens(refserver: RefServer) -> None:
    url = refserver.url + "/generate"
    # tiny: natural EOS lengths are 8..64 tokens; without ignore_eos the request stops there
    body = post(url, {"text": "a b c", "sampling_params": {"max_new_tokens": 500,
                                                           "temperature": 0}}).json()
    n = body["meta_info"]["completion_tokens"]
    assert 8 <= n <= 64
    assert body["meta_info"]["finish_reason"]["type"] == "stop"
    again = post(url, {"text": "a b c", "sampling_params": {"max_new_tokens": 500,
                                                            "temperature": 0}}).json()
    assert again["meta_info"]["completion_tokens"] == n  # deterministic
    longer = post(url, {"text": "a b c", "sampling_params": {
        "max_new_tokens": 500, "min_new_tokens": 100, "temperature": 0}}).json()
    assert longer["meta_info"]["completion_tokens"] == 100
    capped = post(url, {"text": "a b c", "sampling_params": {"max_new_tokens": 5}}).json()
    assert capped["meta_info"]["finish_reason"] == {"type": "length", "length": 5}


def test_disregard_ignore_eos_flag(refserver_factory) -> None:
    srv = refserver_factory("off", ["--disregard-ignore-eos"])
    body = post(srv.url + "/generate", {"text": "a b c", "sampling_params": {
        "max_new_tokens": 500, "ignore_eos": True}}).json()
    assert body["meta_info"]["completion_tokens"] < 500
    assert body["meta_info"]["finish_reason"]["type"] == "stop"


def test_unknown_sampling_param_is_a_400_naming_it(refserver: RefServer) -> None:
    url = refserver.url + "/generate"
    r = post(url, {"text": "hi", "sampling_params": {"max_new_tokens": 4, "stream": True}})
    assert r.status_code == 400
    err = r.json()["error"]
    assert "unknown field `stream`" in err["message"] and "`max_new_tokens`" in err["message"]
    assert err["code"] == 400
    r = post(url, {"text": "hi", "sampling_params": {"max_new_tokenz": 4}})
    assert r.status_code == 400 and "`max_new_tokenz`" in r.json()["error"]["message"]
    # unknown top-level keys are ignored, as SGLang's schema does
    assert post(url, {"text": "hi", "whatever": 1, "sampling_params": {"max_new_tokens": 2}}).status_code == 200


def test_bad_generate_requests(refserver: RefServer) -> None:
    url = refserver.url + "/generate"
    r = post(url, {"sampling_params": {"max_new_tokens": 4}})
    assert r.status_code == 400 and "input_ids" in r.json()["error"]["message"]
    assert post(url, {"text": "x", "input_ids": [1]}).status_code == 400
    assert post(url, {"text": "x", "sampling_params": {"max_new_tokens": 0}}).status_code == 400
    assert post(url, {"text": "x", "sampling_params": {"max_new_tokens": "a"}}).status_code == 400
    assert post(url, {"input_ids": [1, -2]}).status_code == 400
    r = post(url, {"text": "x", "sampling_params": {"max_new_tokens": 10 ** 6}})
    assert r.status_code == 400 and "context length" in r.json()["error"]["message"]
    r = __import__("httpx").post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "Invalid JSON" in r.json()["error"]["message"]


def test_stream_interval_merges_chunks(refserver: RefServer) -> None:
    payload = _gen(refserver, 40)
    payload["sampling_params"]["stream_interval"] = 5
    s = stream(refserver.url + "/generate", payload)
    counts = [c["meta_info"]["completion_tokens"] for c in s.chunks]
    assert counts[0] == 1 and counts[-1] == 40
    assert counts[:-1] == list(range(1, 40, 5))  # first token at once, then every 5
