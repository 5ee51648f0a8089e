"""Conformance of the OpenAI-compatible endpoints over a real socket (``tiny`` profile)."""
from __future__ import annotations

from refserver_helpers import post, stream

from specsweep.refserver.launch import RefServer

MODEL = "specsweep-sim/tiny"


def _completion(n: int, **extra: object) -> dict:
    return {"model": MODEL, "prompt": "once upon a time", "max_tokens": n, "ignore_eos": True,
            "temperature": 0, **extra}


def _chat(n: int, **extra: object) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "say something nice"}],
            "max_tokens": n, "ignore_eos": True, "temperature": 0, **extra}


def test_completions_stream_delta_usage_and_done(refserver_mtp: RefServer) -> None:
    url = refserver_mtp.url + "/v1/completions"
    s = stream(url, _completion(60, stream=True, stream_options={"include_usage": True}))
    assert s.status == 200 and s.done and s.error is None
    *content, usage_chunk = s.chunks
    for c in content:
        assert c["object"] == "text_completion" and c["model"] == MODEL
        assert c["system_fingerprint"] == "specsweep-refserver-simulated"
        assert c["usage"] is None and len(c["choices"]) == 1
        assert c["choices"][0]["text"]  # every content chunk carries new text
    assert [c["choices"][0]["finish_reason"] for c in content[:-1]] == [None] * (len(content) - 1)
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["text"] for c in content)
    assert len(text.split()) == 60
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 60
    assert usage_chunk["usage"]["prompt_tokens"] == 4
    assert usage_chunk["usage"]["total_tokens"] == 64
    # delta text joins to the non-streaming text
    body = post(url, _completion(60)).json()
    assert body["choices"][0]["text"] == text
    assert body["usage"]["completion_tokens"] == 60 and body["choices"][0]["finish_reason"] == "length"
    # under speculation some chunks carry several tokens
    words = [len(c["choices"][0]["text"].split()) for c in content]
    assert max(words) > 1 and sum(words) == 60


def test_continuous_usage_stats(refserver_mtp: RefServer) -> None:
    for opts in ({"continuous_usage_stats": True},
                 {"include_usage": True, "continuous_usage_stats": True}):
        s = stream(refserver_mtp.url + "/v1/completions",
                   _completion(50, stream=True, stream_options=opts))
        content = [c for c in s.chunks if c["choices"]]
        counts = [c["usage"]["completion_tokens"] for c in content]
        assert counts == sorted(counts) and counts[-1] == 50
        for c, n in zip(content, counts):
            assert c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + n
            assert len("".join(x["choices"][0]["text"] for x in content[: content.index(c) + 1]).split()) == n
        has_usage_chunk = any(not c["choices"] for c in s.chunks)
        assert has_usage_chunk == bool(opts.get("include_usage"))


def test_no_usage_without_include_usage(refserver: RefServer) -> None:
    s = stream(refserver.url + "/v1/completions", _completion(10, stream=True))
    assert s.done and all(c["choices"] and c["usage"] is None for c in s.chunks)
    assert len(s.chunks) == 10  # baseline: one token per chunk


def test_chat_stream_role_chunk_then_deltas(refserver_mtp: RefServer) -> None:
    url = refserver_mtp.url + "/v1/chat/completions"
    s = stream(url, _chat(40, stream=True, stream_options={"include_usage": True}))
    assert s.status == 200 and s.done
    first, *rest = s.chunks
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert first["choices"][0]["delta"]["content"] == ""
    *content, usage = rest
    assert all(c["choices"][0]["delta"]["content"] for c in content)
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 40
    # 3 content words + 4 template tokens + 3 for the generation prompt
    assert usage["usage"]["prompt_tokens"] == 10
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    body = post(url, _chat(40)).json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": text,
                                             "reasoning_content": None, "tool_calls": None}
    assert body["usage"]["completion_tokens"] == 40


def test_token_id_prompts_and_min_tokens(refserver: RefServer) -> None:
    url = refserver.url + "/v1/completions"
    body = post(url, {"prompt": list(range(1000, 1250)), "max_tokens": 8, "ignore_eos": True}).json()
    assert body["usage"]["prompt_tokens"] == 250 and body["usage"]["completion_tokens"] == 8
    body = post(url, {"prompt": [[7, 8, 9]], "max_tokens": 3, "ignore_eos": True}).json()
    assert body["usage"]["prompt_tokens"] == 3
    # without ignore_eos: EOS at 8..64 tokens, finish_reason stop; min_tokens pushes it out
    body = post(url, {"prompt": "x y", "max_tokens": 400, "temperature": 0}).json()
    assert body["choices"][0]["finish_reason"] == "stop"
    n = body["usage"]["completion_tokens"]
    assert 8 <= n <= 64
    body = post(url, {"prompt": "x y", "max_tokens": 400, "min_tokens": 150}).json()
    assert body["usage"]["completion_tokens"] == 150
    # OpenAI default max_tokens is 16
    body = post(url, {"prompt": "x y", "ignore_eos": True}).json()
    assert body["usage"]["completion_tokens"] == 16


def test_openai_errors(refserver: RefServer) -> None:
    url = refserver.url
    r = post(url + "/v1/completions", {"model": "gpt-9", "prompt": "hi"})
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "The model `gpt-9` does not exist."
    assert r.json()["error"]["code"] == 404
    r = post(url + "/v1/chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404
    r = post(url + "/v1/completions", {"model": MODEL, "max_tokens": 3})
    assert r.status_code == 400 and "prompt" in r.json()["error"]["message"]
    r = post(url + "/v1/chat/completions", {"model": MODEL})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    assert post(url + "/v1/completions", {"prompt": "x", "max_tokens": -1}).status_code == 400
    assert post(url + "/v1/completions", {"prompt": "x", "n": 2}).status_code == 400
    # "default" (SGLang's default model name) and no model at all are accepted
    assert post(url + "/v1/completions", {"model": "default", "prompt": "x", "max_tokens": 1}).status_code == 200
    assert post(url + "/v1/completions", {"prompt": "x", "max_tokens": 1}).status_code == 200
