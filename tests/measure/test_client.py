"""The streaming client: request bodies, parsing of recorded streams, and real sockets.

Real-socket tests start ``bench/fastsse_server.py`` as a separate process on 127.0.0.1.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from helpers import load_fastsse  # noqa: E402
from specsweep.measure import client as C
from specsweep.measure.client import RawExchange, parse_exchange
from specsweep.servers.flavours import FLAVOURS, build_body

fastsse = load_fastsse()


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with fastsse.spawn() as (_, url):
        yield url


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _sse(*objs: Any, done: bool = True) -> bytes:
    out = b"".join(b"data: " + (o if isinstance(o, bytes) else orjson.dumps(o)) + b"\n\n" for o in objs)
    return out + (b"data: [DONE]\n\n" if done else b"")


def _raw(reads: list[bytes], times: list[float] | None = None, *, status: int = 200,
         ctype: str = "text/event-stream", error: str | None = None) -> RawExchange:
    return RawExchange(t_sent=0.0, t_end=10.0, http_status=status, content_type=ctype, reads=reads,
                       times=times if times is not None else [float(i + 1) for i in range(len(reads))],
                       error=error)


def _events(raw: bytes) -> list[bytes]:
    """Split a stream into its events (each with its blank line) so each can be one read."""
    return [e + b"\n\n" for e in raw.split(b"\n\n") if e]


# ---- request bodies ------------------------------------------------------------------------------

def test_sglang_body_has_stream_top_level_only() -> None:
    b = build_body("sglang", [1, 2, 3], 64, min_tokens=64)
    assert b["stream"] is True and b["input_ids"] == [1, 2, 3] and "text" not in b
    sp = b["sampling_params"]
    assert "stream" not in sp
    assert sp == {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0.0, "min_new_tokens": 64}
    t = build_body("sglang", "hello", 8)
    assert t["text"] == "hello" and "input_ids" not in t and "min_new_tokens" not in t["sampling_params"]


def test_openai_completions_body() -> None:
    b = build_body("openai-completions", [5, 6], 32, temperature=0.5, min_tokens=32, model="m")
    assert b == {"model": "m", "prompt": [5, 6], "max_tokens": 32, "temperature": 0.5, "ignore_eos": True,
                 "min_tokens": 32, "stream": True,
                 "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    assert "model" not in build_body("openai-completions", "text prompt", 4)


def test_openai_chat_body() -> None:
    b = build_body("openai-chat", "hi", 16, extra={"top_p": 1.0})
    assert b["messages"] == [{"role": "user", "content": "hi"}]
    assert b["max_tokens"] == 16 and b["max_completion_tokens"] == 16
    assert b["ignore_eos"] is True and b["stream"] is True and b["top_p"] == 1.0
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert build_body("openai-chat", msgs, 4)["messages"] == msgs


def test_body_validation_names_the_parameter() -> None:
    with pytest.raises(ValueError, match="flavour"):
        build_body("vllm", "x", 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_tokens"):
        build_body("sglang", "x", 0)
    with pytest.raises(ValueError, match="min_tokens"):
        build_body("sglang", "x", 4, min_tokens=5)
    with pytest.raises(ValueError, match="prompt"):
        build_body("openai-chat", [1, 2], 4)
    with pytest.raises(ValueError, match="prompt"):
        build_body("openai-completions", [1.5], 4)  # type: ignore[list-item]


def test_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(C.API_KEY_ENV, raising=False)
    assert C.auth_headers() == {}
    monkeypatch.setenv(C.API_KEY_ENV, "sk-test")
    assert C.auth_headers() == {"Authorization": "Bearer sk-test"}


def test_make_client_validates() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        C.make_client("http://127.0.0.1:1", 0)
    with pytest.raises(ValueError, match="base_url"):
        C.make_client("127.0.0.1:1", 1)
    with pytest.raises(ValueError, match="transport"):
        C.make_client("http://127.0.0.1:1", 1, transport="curl")  # type: ignore[arg-type]


# ---- parsing recorded streams --------------------------------------------------------------------

def _cmpl(text: str | None, cum: int | None, fr: str | None = None, *, choices: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {"id": "x", "object": "text_completion",
                           "choices": [{"index": 0, "text": text, "finish_reason": fr}] if choices else []}
    obj["usage"] = None if cum is None else {"prompt_tokens": 6, "completion_tokens": cum, "total_tokens": 6 + cum}
    return obj


def test_completions_tokens_from_cumulative_usage_with_multi_token_chunks() -> None:
    stream = _sse(_cmpl(" a", 1), _cmpl(" b c d", 4), _cmpl(" e f", 6, "length"), _cmpl(None, 6, choices=False))
    rec = parse_exchange("openai-completions", _raw(_events(stream)))
    assert rec.error is None and rec.ok
    assert rec.chunk_tokens.tolist() == [1, 3, 2] and rec.chunk_times.tolist() == [1.0, 2.0, 3.0]
    assert rec.output_tokens == 6 and rec.token_source == "usage"
    assert rec.prompt_tokens == 6 and rec.finish_reason == "length"
    assert rec.output_digest == _digest(" a b c d e f")


def test_chat_ttft_skips_role_and_usage_only_chunks() -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}}

    def content(t: str, cum: int, fr: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": fr}],
                "usage": {"prompt_tokens": 3, "completion_tokens": cum, "total_tokens": 3 + cum}}

    usage_only = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}
    stream = _sse(role, content("x", 1), content("yz", 3, "length"), usage_only)
    rec = parse_exchange("openai-chat", _raw(_events(stream), [0.5, 2.0, 3.0, 4.0, 4.5]))
    assert rec.chunk_times.tolist() == [2.0, 3.0]  # TTFT on the first token-carrying chunk, not the role chunk
    assert rec.chunk_tokens.tolist() == [1, 2] and rec.output_tokens == 3 and rec.error is None
    assert rec.output_digest == _digest("xyz")


def test_chat_reasoning_tokens_count() -> None:
    c1 = {"choices": [{"delta": {"reasoning_content": "think"}}], "usage": {"completion_tokens": 2}}
    c2 = {"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}], "usage": {"completion_tokens": 3}}
    rec = parse_exchange("openai-chat", _raw([_sse(c1, c2)]))
    assert rec.chunk_tokens.tolist() == [2, 1] and rec.finish_reason == "stop"


def test_sglang_cumulative_counts_text_and_server_figures() -> None:
    def chunk(text: str, cum: int, final: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"id": "r", "finish_reason": None, "prompt_tokens": 4, "completion_tokens": cum}
        if final:
            meta.update({"finish_reason": {"type": "length", "length": cum}, "e2e_latency": 0.41,
                         "spec_accept_length": 2.5, "spec_verify_ct": 2, "spec_accept_rate": 0.6})
        return {"text": text, "output_ids": list(range(cum)), "meta_info": meta}

    stream = _sse(chunk(" a", 1), chunk(" a b c", 3), chunk(" a b c d e", 5, final=True))
    rec = parse_exchange("sglang", _raw(_events(stream)))
    assert rec.error is None
    assert rec.chunk_tokens.tolist() == [1, 2, 2] and rec.output_tokens == 5 and rec.token_source == "usage"
    assert rec.finish_reason == "length" and rec.prompt_tokens == 4
    assert rec.server == {"e2e_latency_s": 0.41, "spec_accept_length": 2.5, "spec_verify_ct": 2.0,
                          "spec_accept_rate": 0.6}
    assert rec.output_digest == _digest(" a b c d e")  # cumulative text: the last one is the output


def test_sglang_incremental_text_and_abort() -> None:
    def chunk(text: str, cum: int, fr: Any = None) -> dict[str, Any]:
        return {"text": text, "meta_info": {"completion_tokens": cum, "finish_reason": fr}}

    rec = parse_exchange("sglang", _raw([_sse(chunk(" a", 1), chunk(" b", 2), chunk(" c", 3, {"type": "stop"}))]))
    assert rec.output_digest == _digest(" a b c") and rec.finish_reason == "stop" and rec.error is None
    rec = parse_exchange("sglang", _raw([_sse(chunk(" a", 1),
                                              chunk(" a", 1, {"type": "abort", "message": "retracted: OOM"}))]))
    assert rec.finish_reason == "abort" and rec.error is not None and "retracted: OOM" in rec.error


def test_counts_only_at_the_end() -> None:
    stream = _sse(_cmpl(" a", None), _cmpl(" b", None), _cmpl(" c", None, "length"), _cmpl(None, 7, choices=False))
    rec = parse_exchange("openai-completions", _raw(_events(stream)))
    assert rec.output_tokens == 7 and rec.token_source == "usage"
    assert rec.chunk_tokens is None and rec.chunk_times.tolist() == [1.0, 2.0, 3.0]


def test_counts_that_grow_on_chunks_without_text_still_count_per_chunk() -> None:
    # e.g. special tokens rendered as empty text: the counts still say which chunk carried tokens
    stream = _sse(_cmpl("", 1), _cmpl("", 3, "length"), _cmpl(None, 3, choices=False))
    rec = parse_exchange("openai-completions", _raw(_events(stream)))
    assert rec.chunk_tokens.tolist() == [1, 2] and rec.chunk_times.tolist() == [1.0, 2.0] and rec.output_tokens == 3


def test_no_counts_falls_back_to_chunks() -> None:
    stream = _sse(_cmpl(" a", None), _cmpl("", None), _cmpl(" b", None, "length"))
    rec = parse_exchange("openai-completions", _raw(_events(stream)))
    assert rec.token_source == "chunks" and rec.output_tokens == 2 and rec.chunk_tokens is None
    assert rec.chunk_times.tolist() == [1.0, 3.0]


def test_events_split_across_reads_take_the_completing_read_time() -> None:
    stream = _sse(_cmpl(" a", 1), _cmpl(" b", 2), _cmpl(" c", 3, "length"))
    cut1 = stream.index(b"\n\n") - 5  # first event split in the middle
    second_end = stream.index(b"\n\n", stream.index(b"\n\n") + 2) + 2
    reads = [stream[:cut1], stream[cut1:second_end], stream[second_end:]]
    rec = parse_exchange("openai-completions", _raw(reads, [1.0, 2.0, 3.0]))
    # event 1 completed by read 2, event 2 also in read 2 (same time), event 3 in read 3
    assert rec.chunk_times.tolist() == [2.0, 2.0, 3.0] and rec.chunk_tokens.tolist() == [1, 1, 1]


def test_http_error_bodies() -> None:
    r = parse_exchange("openai-completions", _raw([b'{"object":"error","message":"model `x` does not exist"}'],
                                                  status=404, ctype="application/json"))
    assert r.error == "HTTP 404: model `x` does not exist" and r.http_status == 404 and not r.ok
    r = parse_exchange("openai-chat", _raw([b'{"error":{"message":"boom","code":500}}'], status=500))
    assert r.error == "HTTP 500: boom"
    r = parse_exchange("sglang", _raw([b'{"detail":[{"msg":"field required"}]}'], status=422))
    assert r.error == "HTTP 422: field required"
    r = parse_exchange("sglang", _raw([b"Bad Gateway"], status=502, ctype="text/plain"))
    assert r.error == "HTTP 502: Bad Gateway"


def test_in_stream_error_keeps_what_came_before() -> None:
    stream = _sse(_cmpl(" a", 1), {"error": {"message": "out of memory", "code": 400}})
    r = parse_exchange("openai-completions", _raw(_events(stream)))
    assert r.error == "server error in stream: out of memory" and r.output_tokens == 1 and not r.ok


def test_dropped_stream_and_malformed_json() -> None:
    r = parse_exchange("openai-completions", _raw([_sse(_cmpl(" a", 1), done=False)]))
    assert r.error == "stream ended without [DONE]" and r.output_tokens == 1
    r = parse_exchange("openai-completions", _raw([_sse(_cmpl(" a", 1), done=False) + b'data: {"choi']))
    assert r.error == "stream ended mid-event without [DONE]"
    r = parse_exchange("openai-completions", _raw([_sse(_cmpl(" a", 1), b'{"choices": [')]))
    assert r.error is not None and r.error.startswith("malformed chunk JSON")
    r = parse_exchange("openai-completions", _raw([_sse(_cmpl(" a", 1)) + b"data: [DONE]"]))
    assert r.error is None  # [DONE] without its blank line still ends the stream


def test_transport_error_and_non_streaming_reply() -> None:
    r = parse_exchange("openai-completions", _raw([_sse(_cmpl(" a", 1), done=False)], error="stream dropped: x"))
    assert r.error == "stream dropped: x" and r.output_tokens == 1 and r.chunk_times.tolist() == [1.0]
    r = parse_exchange("openai-completions", RawExchange(t_sent=1.0, t_end=2.0, error="connect error: refused"))
    assert r.error == "connect error: refused" and r.http_status is None and r.output_tokens is None
    r = parse_exchange("openai-completions", _raw([b'{"choices":[]}'], ctype="application/json"))
    assert r.error is not None and "did not stream" in r.error


# ---- over a real socket ----------------------------------------------------------------------------

def _prompt(flavour: str) -> Any:
    return "two words" if flavour == "openai-chat" else [1, 2, 3]


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_real_socket_each_flavour(server_url: str, transport: C.TransportKind) -> None:
    async def main() -> list[Any]:
        async with C.make_client(server_url, 4, transport=transport) as cl:
            return [await C.fetch(cl, fl, build_body(fl, _prompt(fl), 10, extra={"fastsse": {"k": 3}}))
                    for fl in FLAVOURS]

    for rec in asyncio.run(main()):
        assert rec.error is None and rec.http_status == 200
        assert rec.output_tokens == 10 and rec.chunk_tokens.tolist() == [3, 3, 3, 1] and rec.token_source == "usage"
        assert rec.finish_reason == "length" and rec.output_digest == _digest("".join(f" w{i}" for i in range(10)))
        assert rec.t_sent < rec.chunk_times[0] <= rec.chunk_times[-1] <= rec.t_end
        assert rec.prompt_tokens in (2, 3)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_real_socket_faults_become_records(server_url: str, transport: C.TransportKind) -> None:
    faults = {
        "http500": "HTTP 500: injected: engine crashed",
        "http400text": "HTTP 400: bad request: injected plain-text error",
        "error": "server error in stream: injected failure: out of memory",
        "malformed": "malformed chunk JSON",
        "drop": "stream dropped",
        "no_done": "stream ended without [DONE]",
        "stall": "stalled",
    }

    async def main() -> dict[str, Any]:
        async with C.make_client(server_url, 4, transport=transport, read_timeout_s=0.5) as cl:
            out = {}
            for fault in faults:
                body = build_body("openai-completions", [1], 8, extra={"fastsse": {"fault": fault, "stall_s": 5}})
                out[fault] = await C.fetch(cl, "openai-completions", body)
            # the client still works after every failure
            out["after"] = await C.fetch(cl, "openai-completions", build_body("openai-completions", [1], 3))
            # a limit on the whole request
            slow = build_body("openai-completions", [1], 50, extra={"fastsse": {"itl_ms": 20}})
            out["timeout"] = await C.fetch(cl, "openai-completions", slow, timeout_s=0.2)
            return out

    out = asyncio.run(main())
    for fault, prefix in faults.items():
        assert out[fault].error is not None and out[fault].error.startswith(prefix), (fault, out[fault].error)
    assert out["malformed"].output_tokens == 2 and out["drop"].output_tokens == 2
    assert out["after"].error is None and out["after"].output_tokens == 3
    assert out["timeout"].error == "timeout: request exceeded 0.2 s" and 0 < (out["timeout"].output_tokens or 0) < 50


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_connection_refused_is_a_record(transport: C.TransportKind) -> None:
    async def main() -> Any:
        async with C.make_client(f"http://127.0.0.1:{_free_port()}", 1, transport=transport) as cl:
            return await C.fetch(cl, "sglang", build_body("sglang", [1], 4))

    rec = asyncio.run(main())
    assert rec.error is not None and rec.error.startswith("connect error") and rec.http_status is None


def test_api_key_is_sent_as_bearer(server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(C.API_KEY_ENV, "sk-fastsse-test")

    async def main() -> Any:
        async with C.make_client(server_url, 1) as cl:
            rec = await C.fetch(cl, "openai-completions", build_body("openai-completions", [1], 2))
            stats = (await cl.get("/stats")).json()
            return rec, stats

    rec, stats = asyncio.run(main())
    assert rec.error is None and "Bearer sk-fastsse-test" in stats["auth"]
    assert "sk-fastsse-test" not in repr(rec)


def test_httpx_api_is_kept(server_url: str) -> None:
    """The default client is an httpx.AsyncClient; plain httpx calls work on it."""
    async def main() -> tuple[int, str]:
        async with C.make_client(server_url, 2) as cl:
            assert isinstance(cl, httpx.AsyncClient)
            r = await cl.post("/v1/completions", content=json.dumps(build_body("openai-completions", [1], 2)))
            return r.status_code, r.text

    status, text = asyncio.run(main())
    assert status == 200 and text.rstrip().endswith("data: [DONE]")


def test_usage_on_some_content_chunks_only_keeps_ttft_on_the_first() -> None:
    """A server that puts usage on some content chunks only: time the content chunks, count from usage."""
    def chunk(text: str, usage: int | None) -> bytes:
        obj = {"choices": [{"index": 0, "text": text, "finish_reason": None}],
               "usage": None if usage is None else {"prompt_tokens": 3, "completion_tokens": usage, "total_tokens": 3 + usage}}
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    raw = RawExchange(t_sent=0.0, t_end=2.0, http_status=200, content_type="text/event-stream",
                      reads=[chunk("a", None), chunk("b c", None), chunk("d", 4), b"data: [DONE]\n\n"],
                      times=[1.0, 1.2, 1.3, 1.31])
    rec = parse_exchange("openai-completions", raw)
    assert rec.chunk_times.tolist() == [1.0, 1.2, 1.3] and rec.chunk_tokens is None
    assert rec.output_tokens == 4 and rec.token_source == "usage" and rec.error is None


def test_no_counts_keeps_the_text_for_the_tokenizer() -> None:
    stream = _sse(_cmpl(" a b", None), _cmpl(" c", None, "length"))
    rec = parse_exchange("openai-completions", _raw(_events(stream)))
    assert rec.token_source == "chunks" and rec.output_text == " a b c"
    counted = parse_exchange("openai-completions", _raw(_events(_sse(_cmpl(" a", 1), _cmpl(" b", 2, "length")))))
    assert counted.token_source == "usage" and counted.output_text is None  # not kept when not needed


def test_llamacpp_final_timings_give_per_request_acceptance() -> None:
    # a real llama-server's last chunk: usage and timings with draft counts, no choices
    final = {"choices": [], "created": 1, "id": "chatcmpl-x", "model": "m.gguf", "object": "chat.completion.chunk",
             "usage": {"completion_tokens": 665, "prompt_tokens": 808, "total_tokens": 1473},
             "timings": {"cache_n": 804, "prompt_n": 4, "prompt_ms": 128.3, "predicted_n": 665,
                         "predicted_ms": 20629.2, "draft_n": 604, "draft_n_accepted": 515}}
    def content(t: str) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}], "object": "chat.completion.chunk"}
    stream = _sse(content(" a"), content(" b"), final)
    rec = parse_exchange("openai-chat", _raw(_events(stream)))
    assert rec.output_tokens == 665 and rec.token_source == "usage"
    assert rec.server["spec_draft_tokens"] == 604 and rec.server["spec_accepted_tokens"] == 515
    assert rec.server["spec_verify_ct"] == 665 - 515
    assert rec.server["spec_accept_length"] == pytest.approx(665 / 150)
    assert rec.server["spec_draft_acceptance_rate"] == pytest.approx(515 / 604)
    # no draft counts (baseline llama-server): nothing invented
    plain = dict(final, timings={"prompt_n": 4, "predicted_n": 665})
    rec = parse_exchange("openai-chat", _raw(_events(_sse(content(" a"), plain))))
    assert "spec_accept_length" not in rec.server and "spec_draft_tokens" not in rec.server


def test_a_server_that_closes_kept_alive_connections_after_each_stream() -> None:
    """llama-server advertises ``Keep-Alive`` but closes the connection after a streamed response;
    reusing it failed every other request with 'Can not write request body'."""
    body = _sse(_cmpl(" a", 1), _cmpl(" b", 2, "length"))
    served: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # headers; the small JSON body follows
        served.append(1)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nKeep-Alive: timeout=5, max=100\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.close()  # ... and closes the connection anyway, without reading the next request

    async def main() -> list[Any]:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = C.make_client(f"http://127.0.0.1:{port}", 3)
        try:
            out = []
            for _ in range(4):
                out.append(await C.fetch(client, "openai-completions", {"prompt": "x", "max_tokens": 2}))
            # three at once, then three more: the pool holds three stale connections
            for _ in range(2):
                out += await asyncio.gather(*(C.fetch(client, "openai-completions", {"prompt": "x", "max_tokens": 2})
                                              for _ in range(3)))
            return out
        finally:
            await client.aclose()
            server.close()

    recs = asyncio.run(main())
    assert [r.error for r in recs] == [None] * 10 and all(r.output_tokens == 2 for r in recs)
    assert len(served) == 10  # each request reached the server exactly once


# ---- the fast OpenAI path agrees with the general parser -------------------------------------------

def _chat(content: str | None, cum: int, fr: str | None = None, **delta: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"content": content, **delta}
    return {"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": d, "finish_reason": fr}],
            "usage": {"prompt_tokens": 3, "completion_tokens": cum, "total_tokens": 3 + cum}}


_ESCAPED = 'é "q" \\ \n\t ☃ 😀 "completion_tokens":9'
#: (flavour, stream, whether the fast path must take it)
_FAST_CASES: dict[str, tuple[str, bytes, bool]] = {
    "plain": ("openai-completions", _sse(_cmpl(" a", 1), _cmpl(" b c d", 4), _cmpl(" e", 5, "length"),
                                         _cmpl(None, 5, choices=False)), True),
    "escapes in text": ("openai-completions", _sse(_cmpl(_ESCAPED, 1), _cmpl(" x", 2, "stop")), True),
    "count falls back then rises": ("openai-completions", _sse(_cmpl(" a", 2), _cmpl(" b", 1), _cmpl(" c", 3)), True),
    "empty text chunk": ("openai-completions", _sse(_cmpl("", 0), _cmpl(" a", 1), _cmpl("", 1), _cmpl(" b", 2)), True),
    "chat with role chunk": ("openai-chat", _sse(_chat("", 0, role="assistant"), _chat("Hi", 1), _chat(None, 1, "length")), True),
    "abort": ("openai-completions", _sse(_cmpl(" a", 1), _cmpl(" b", 2, "abort")), True),
    "count on some chunks only": ("openai-completions", _sse(_cmpl(" a", None), _cmpl(" b", 2)), False),
    "no text at all": ("openai-completions", _sse(_cmpl("", 1), _cmpl("", 2)), False),
    "float count": ("openai-completions", _sse(_cmpl(" a", 1), _cmpl(" b", 2)).replace(b'"completion_tokens":2', b'"completion_tokens":2.0'), False),
    "no [DONE]": ("openai-completions", _sse(_cmpl(" a", 1), _cmpl(" b", 2), done=False), False),
    "CRLF": ("openai-completions", _sse(_cmpl(" a", 1), _cmpl(" b", 2)).replace(b"\n", b"\r\n"), False),
    "comment line": ("openai-completions", b": ping\n\n" + _sse(_cmpl(" a", 1), _cmpl(" b", 2)), False),
    "two data lines": ("openai-completions", _sse(_cmpl(" a", 1)).replace(b'"choices"', b'\ndata: "choices"', 1), False),
    "data without space": ("openai-completions", _sse(_cmpl(" a", 1), _cmpl(" b", 2)).replace(b"\n\ndata: ", b"\n\ndata:"), False),
    "in-stream error": ("openai-completions", _sse(_cmpl(" a", 1), {"error": {"message": "boom"}}), False),
    "llama.cpp timings": ("openai-completions", _sse(_cmpl(" a", 1), {**_cmpl(" b", 2, "length"), "timings": {
        "predicted_n": 2, "draft_n": 2, "draft_n_accepted": 1}}), False),
    "reasoning": ("openai-chat", _sse(_chat(None, 1, reasoning_content="think"), _chat("ok", 2)), False),
    "malformed JSON": ("openai-completions", _sse(_cmpl(" a", 1), b'{"usage":{"completion_tokens":2}, "x"'), False),
}


@pytest.mark.parametrize("case", list(_FAST_CASES))
@pytest.mark.parametrize("split", ["one read", "per event", "every 7 bytes"])
def test_fast_openai_path_equals_general_parser(case: str, split: str, monkeypatch: pytest.MonkeyPatch) -> None:
    flavour, stream, fast = _FAST_CASES[case]
    if split == "one read":
        reads = [stream]
    elif split == "per event":
        reads = _events(stream) if b"\r" not in stream else [stream]
    else:
        reads = [stream[i:i + 7] for i in range(0, len(stream), 7)]
    probe = C.RequestRecord(t_sent=0.0, t_end=10.0, http_status=200)
    assert C._parse_openai_fast(flavour, _raw(list(reads)), probe) is fast  # type: ignore[arg-type]
    got = parse_exchange(flavour, _raw(list(reads)))  # type: ignore[arg-type]
    monkeypatch.setattr(C, "_parse_openai_fast", lambda *a: False)
    general = parse_exchange(flavour, _raw(list(reads)))  # type: ignore[arg-type]
    assert got == general
    if fast:
        assert got.output_tokens and got.chunk_times.size and got.output_digest


def test_fast_path_keeps_exact_counts_of_a_real_fastsse_stream() -> None:
    frames, tail = fastsse.build_frames(fastsse.Spec(flavour="openai-completions", n=300, k=3,
                                                     prompt_tokens=4, counts="continuous"))
    body = b"".join(f.partition(b"\r\n")[2][:-2] for f in [f for f, _ in frames] + list(tail))
    reads = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    rec = C.RequestRecord(t_sent=0.0, t_end=10.0, http_status=200)
    assert C._parse_openai_fast("openai-completions", _raw(reads), rec)
    assert rec.output_tokens == 300 and len(rec.chunk_times) == 100
    assert rec.chunk_tokens is not None and rec.chunk_tokens.sum() == 300
    assert (np.diff(rec.chunk_times) >= 0).all() and rec.finish_reason == "length" and rec.prompt_tokens == 4


# ---- the tapped read path: chunks timestamped where the protocol receives them ----------------------

async def _chunked_server(plan: list[tuple[float, bytes]]) -> tuple[asyncio.Server, int]:
    """A server that answers every request with a chunked SSE body: per ``(sleep_s, data)`` of
    ``plan``, sleep (seconds) then send ``data`` as one HTTP chunk; a final chunk ends it."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            pending = []
            for sleep_s, data in plan:
                if sleep_s:
                    writer.write(b"".join(pending))
                    pending.clear()
                    await writer.drain()
                    await asyncio.sleep(sleep_s)
                pending.append(b"%x\r\n%s\r\n" % (len(data), data))
            writer.write(b"".join(pending) + b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _cmpl_events(n: int) -> list[bytes]:
    return [b"data: " + orjson.dumps(_cmpl(f" t{i}", i + 1, "length" if i == n - 1 else None)) + b"\n\n"
            for i in range(n)] + [b"data: [DONE]\n\n"]


@pytest.mark.parametrize("tapped", [True, False], ids=["tapped", "readany"])
def test_tapped_and_readany_paths_record_the_same_body(tapped: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """30,000 HTTP chunks in one response (more than aiohttp's chunk-offset high water of 16,384,
    which would pause a reader that never consumes them), in bursts: every byte arrives on both
    paths, each read has a time, and the tapped reader is aiohttp's own again afterwards."""
    if not tapped:
        monkeypatch.setattr(C, "_tap_protocol", lambda *a: None)
    events = _cmpl_events(30_000)
    plan = [(0.01 if i % 5000 == 0 else 0.0, e) for i, e in enumerate(events)]

    async def main() -> tuple[RawExchange, Any]:
        server, port = await _chunked_server(plan)
        async with C.make_client(f"http://127.0.0.1:{port}", 1, read_timeout_s=30) as cl:
            req = cl.build_request("POST", "/v1/completions", content=b"{}")
            ex = await C.send_streaming(cl, req)
            rec = parse_exchange("openai-completions", ex)
        server.close()
        return ex, rec

    ex, rec = asyncio.run(main())
    assert ex.error is None
    assert b"".join(ex.reads) == b"".join(events)
    assert len(ex.times) == len(ex.reads) and ex.times == sorted(ex.times) and ex.t_sent < ex.times[0]
    assert rec.output_tokens == 30_000 and rec.error is None
    assert not C._TAPS


def test_read_timeout_is_the_longest_silence_between_reads_on_the_tapped_path() -> None:
    """Reads 0.2 s apart for 1.8 s pass a 1 s read timeout (a per-read limit, not a limit on the
    whole body); then a 30 s silence fails the request as stalled, keeping what came before, and
    the next request on the same client works."""
    events = _cmpl_events(10)
    trickle = [(0.2, e) for e in events[:9]]

    async def main() -> list[Any]:
        steady, port_a = await _chunked_server([(0.2, e) for e in events])
        stalling, port_b = await _chunked_server([*trickle, (30.0, events[9]), (0.0, events[10])])
        out = []
        for port in (port_a, port_b, port_a):
            async with C.make_client(f"http://127.0.0.1:{port}", 1, read_timeout_s=1.0) as cl:
                out.append(await C.fetch(cl, "openai-completions", build_body("openai-completions", [1], 10)))
        steady.close()
        stalling.close()
        return out

    ok, stalled, after = asyncio.run(main())
    assert ok.error is None and ok.output_tokens == 10
    assert stalled.error is not None and stalled.error.startswith("stalled: no data for the read timeout 1 s"), stalled.error
    assert stalled.output_tokens == 9
    assert after.error is None and after.output_tokens == 10
    assert not C._TAPS


def test_a_body_that_piled_up_before_the_read_began_arrives_whole() -> None:
    """The loop was busy (another response parsed in the loop) while a large body poured in: the
    protocol paused at aiohttp's high water, and draining the pile resumed it, feeding more at
    once. All of it must be read, in order (a single drain lost what the resume fed: 42 events of
    an SGLang stream)."""
    events = [b"data: " + orjson.dumps({"i": i, "pad": "x" * 900}) + b"\n\n" for i in range(3000)]

    async def main() -> RawExchange:
        server, port = await _chunked_server([(0.0, e) for e in events])
        client = C.SweepClient(base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(30.0),
                               transport=C.AiohttpTransport(limit=1, read_bufsize=4096))

        async def busy_loop() -> None:  # holds the loop while the headers and the body arrive
            await asyncio.sleep(0)
            import time
            time.sleep(0.3)

        try:
            req = client.build_request("POST", "/v1/completions", content=b"{}")
            ex, _ = await asyncio.gather(C.send_streaming(client, req), busy_loop())
        finally:
            await client.aclose()
            server.close()
        return ex

    for _ in range(3):
        ex = asyncio.run(main())
        assert ex.error is None
        assert b"".join(ex.reads) == b"".join(events)


def test_a_stream_spilled_at_every_read_is_not_taken_for_stalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read timeout counts from the last read even when a spill has just moved every read out
    of memory: reads 0.4 s apart for 2 s pass a 1 s timeout with a spill after each read."""
    monkeypatch.setattr(C, "SPILL_STEP_BYTES", 1)
    events = _cmpl_events(5)
    moved: list[bytes] = []

    def spill(ex: RawExchange, held: int) -> bool:
        moved.extend(ex.reads)
        ex.reads.clear()
        ex.times.clear()
        return True

    async def main() -> RawExchange:
        server, port = await _chunked_server([(0.4, e) for e in events])
        async with C.make_client(f"http://127.0.0.1:{port}", 1, read_timeout_s=1.0) as cl:
            ex = await C.send_streaming(cl, cl.build_request("POST", "/v1/completions", content=b"{}"), spill=spill)
        server.close()
        return ex

    ex = asyncio.run(main())
    assert ex.error is None, ex.error
    assert b"".join(moved + ex.reads) == b"".join(events)
