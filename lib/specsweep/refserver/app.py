"""HTTP API of the reference server (aiohttp.web), shaped like SGLang 0.5.23's or vLLM 0.33's.

API surfaces (``--api-surface``, ``ServerOptions.api_surface``); the simulated engine (step times,
acceptance) is the same under both:

* ``sglang`` (default): SGLang 0.5.23, described below.
* ``vllm``: vLLM 0.33's OpenAI server. Routes: ``POST /v1/completions``,
  ``POST /v1/chat/completions``, ``GET /v1/models`` (``owned_by: "vllm"``, ``max_model_len``),
  ``GET /version``, ``GET /health`` (instant, empty), ``GET /load``, ``GET /metrics`` (vLLM's
  names, ``vllm_metrics.py``), and ``POST /reset_prefix_cache`` only with ``--vllm-dev-mode`` (vLLM's
  ``VLLM_SERVER_DEV_MODE=1``); a per-request ``cache_salt`` keys its prefix-cache hit counters.
  ``/generate``, ``/server_info``, ``/get_server_info``,
  ``/model_info``, ``/get_model_info``, ``/health_generate`` and ``/ready`` answer 404 like any
  unknown route. OpenAI semantics that differ: per-chunk (continuous) usage only when
  ``stream_options`` has **both** ``include_usage`` and ``continuous_usage_stats``; a ``model``
  other than the served name (``"default"`` included) is a 404. With ``--spec mtp`` the
  running-request cap is not reset to 48 (vLLM does not lower ``--max-num-seqs`` for
  speculation; see ``model.resolve``). vLLM-only routes live in ``vllm_api.py``.

SGLang routes: ``POST /generate`` (SGLang native), ``POST /v1/completions``,
``POST /v1/chat/completions``, ``GET /server_info`` and ``/get_server_info``, ``GET /model_info``
and ``/get_model_info``, ``GET /v1/models``, ``GET /health`` and ``/health_generate``,
``GET /ready``, ``GET /metrics``, ``POST /flush_cache`` (the simulated engine has no prefix cache: it
answers as SGLang does — 400 while requests run — and logs the flush). There is deliberately no ``/version`` (SGLang has none; clients
tell SGLang from vLLM that way). Unknown routes answer FastAPI's ``{"detail": "Not Found"}``.

Every response carries ``X-Simulated: true`` and a ``Server`` header naming the simulator; JSON
bodies say ``"simulated": true`` where the shape allows it (SGLang ``meta_info``,
``/server_info``, ``/v1/models``); OpenAI bodies carry
``system_fingerprint: "specsweep-refserver-simulated"``.

Errors are JSON ``{"error": {"message", "type", "param", "code"}}`` (vLLM's shape; SGLang's
``{"error": {"message"}}`` is a subset). Validation follows the real servers where it matters to
clients: SGLang rejects unknown ``sampling_params`` keys (``stream`` included) with a 400 naming
the key; a wrong OpenAI ``model`` is a 404 ``The model `x` does not exist.``; a missing prompt
is a 400. OpenAI extra keys are ignored on both surfaces.

Per-request speculation figures (shapes in ``streaming.py``): the SGLang surface's final
``meta_info`` always carries them; its OpenAI routes send them in an ``sglext`` chunk when the body
asks with ``"return_spec_tokens_details": true`` (SGLang 0.5.23). The vLLM surface sends
``metrics.speculative_decoding`` on the final usage chunk only when started with
``--per-request-spec-decode-metrics summary|detailed`` (``ServerOptions``), as vLLM does.
"""
from __future__ import annotations

import asyncio
import base64
import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from specsweep.errors import InputError
from specsweep.refserver import __version__ as REFSERVER_VERSION
from specsweep.refserver.faults import CountRewriter
from specsweep.refserver.llamacpp_api import add_llamacpp_routes, llamacpp_error
from specsweep.refserver.metrics import CONTENT_TYPE_LATEST
from specsweep.refserver.model import SimRequest, request_seed
from specsweep.refserver.schedule_metrics import schedule_exposition
from specsweep.refserver.state import API_SURFACES, SPEC_DECODE_METRICS_LEVELS, ServerOptions, ServerState  # noqa: F401 (re-exported)
from specsweep.refserver.streaming import (
    ChatFormat,
    CompletionFormat,
    ReqContext,
    SGLangFormat,
    StreamSink,
    WaitSink,
)
from specsweep.refserver.tokens import (
    chat_prompt_tokens,
    natural_length,
    prompt_digest,
    render_output,
    text_prompt_tokens,
    tokenize_text,
)
from specsweep.refserver.versions import LLAMACPP_BUILD, SGLANG_VERSION, VLLM_VERSION  # noqa: F401 (re-exported)
from specsweep.refserver.vllm_api import add_vllm_routes

__all__ = ["API_SURFACES", "ServerOptions", "ServerState", "build_app", "SGLANG_VERSION",
           "SAMPLING_PARAM_KEYS", "VLLM_VERSION"]

SERVER_HEADER = f"specsweep-refserver/{REFSERVER_VERSION} (simulated SGLang {SGLANG_VERSION})"
VLLM_SERVER_HEADER = f"specsweep-refserver/{REFSERVER_VERSION} (simulated vLLM {VLLM_VERSION})"
LLAMACPP_SERVER_HEADER = f"specsweep-refserver/{REFSERVER_VERSION} (simulated llama.cpp {LLAMACPP_BUILD})"

#: SGLang 0.5.23 ``SamplingParams`` fields; any other key in ``sampling_params`` is a 400
SAMPLING_PARAM_KEYS = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens",
    "n", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "custom_params", "stream_interval",
    "logit_bias", "sampling_seed",
)
_SAMPLING_KEYS = frozenset(SAMPLING_PARAM_KEYS)

_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


class ApiError(InputError):
    """An error answered as a JSON body with ``status``."""

    def __init__(self, status: int, message: str, *, type_: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param


def error_response(status: int, message: str, *, type_: str, param: str | None = None) -> web.Response:
    """A JSON error body shaped like vLLM's / SGLang's OpenAI layer."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": status}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


# ---------------------------------------------------------------------------------------------
# request parsing helpers
# ---------------------------------------------------------------------------------------------


async def _json_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def _int_param(value: Any, name: str, *, minimum: int, default: int | None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ApiError(400, f"{name} must be an integer, got {value!r}", param=name)
    if value < minimum:
        raise ApiError(400, f"{name} must be >= {minimum}, got {value}", param=name)
    return value


def _bool_param(value: Any, name: str, default: bool = False) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be a boolean, got {value!r}", param=name)
    return value


def _float_param(value: Any, name: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"{name} must be a number, got {value!r}", param=name)
    if value < 0:
        raise ApiError(400, f"{name} must be >= 0, got {value}", param=name)
    return float(value)


def _token_ids(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, f"{name} must be a non-empty list of token IDs", param=name)
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise ApiError(400, f"{name} must hold non-negative integers, got {x!r}", param=name)
    return value


class VocabError(ApiError):
    """A token-ID prompt holds an ID the model does not have (answered in each server's words)."""


def check_vocab(ids: list[int], vocab_size: int, surface: str) -> None:
    """Reject ``ids`` holding an ID >= ``vocab_size`` as the real server of ``surface`` does.

    SGLang (``TokenizerManager._validate_input_ids_in_vocab``): 400 ``The input_ids [...] contains
    values greater than the vocab size (N).``; vLLM (``InputProcessor._validate_model_input``):
    400 ``Token id X is out of vocabulary``; llama.cpp (``server_tokens::validate``): 400
    ``Prompt contains invalid tokens``.
    """
    top = max(ids)
    if top < vocab_size:
        return
    if surface == "vllm":
        raise VocabError(400, f"Token id {top} is out of vocabulary", type_="BadRequestError")
    if surface == "llamacpp":
        raise VocabError(400, "Prompt contains invalid tokens", type_="invalid_request_error")
    raise VocabError(400, f"The input_ids {ids} contains values greater than the vocab size "
                     f"({vocab_size}).", type_="BadRequestError")


def _echo(st: ServerState, request: web.Request, index: int) -> str:
    """What an injected error quotes (redaction tests): the request's API key, the server's token,
    a secret argv value — after the fault's filler, and each once more as base64("user:" + it)."""
    faults = st.options.data_faults
    quoted = []
    if st.options.fault_echo_auth:
        quoted.append(("Incorrect API key provided", request.headers.get("Authorization", "").removeprefix("Bearer ")))
    if faults.echo_env:
        quoted.append(("server token", os.environ.get(faults.echo_env, "")))
    if faults.echo_token:
        quoted.append(("api token", faults.echo_token))
    pad = "x" * ((37 * index) % (faults.echo_pad + 1)) if faults.echo_pad and quoted else ""
    echo = f" {pad}" if pad else ""
    for what, value in quoted:
        echo += f" {what}: {value}" if what.startswith("Incorrect") else f" ({what}: {value})"
        if faults.echo_base64:
            echo += f" (basic {base64.b64encode(f'user:{value}'.encode()).decode()})"
    return echo


@dataclass(slots=True)
class _Gen:
    """A parsed generation request."""

    prompt_tokens: int
    digest: int
    max_new_tokens: int
    min_new_tokens: int
    ignore_eos: bool
    temperature: float
    sampling_seed: int | None
    stream: bool
    stream_interval: int | None = None
    #: the prompt as text (chat: the messages' contents joined by newlines; token IDs: ""), for
    #: the content-dependent acceptance rule (``acceptance.py``)
    prompt_text: str = ""
    #: vLLM's per-request ``cache_salt`` (None: none sent)
    cache_salt: str | None = None


# ---------------------------------------------------------------------------------------------
# handlers
# ---------------------------------------------------------------------------------------------


class Handlers:
    """Route handlers bound to one ``ServerState``."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    # -- shared generation path --------------------------------------------------------------
    def _new_request(self, gen: _Gen, index: int, arrival: float) -> tuple[SimRequest, Any]:
        st = self.state
        eng = st.profile.engine
        natural = natural_length(gen.digest, eng.natural_length_min, eng.natural_length_max)
        if gen.ignore_eos and not st.options.disregard_ignore_eos:
            target = gen.max_new_tokens
        else:
            target = min(gen.max_new_tokens, max(natural, gen.min_new_tokens, 1))
        nonce = 0
        if gen.temperature > 0:
            nonce = gen.sampling_seed if gen.sampling_seed is not None else request_seed(
                st.options.seed, index, "sample") | 1
        output = render_output(gen.digest, target, nonce)
        req = SimRequest(index=index, prompt_tokens=gen.prompt_tokens,
                         max_new_tokens=gen.max_new_tokens, target_tokens=target,
                         arrival_t=arrival,
                         rng=random.Random(request_seed(st.options.seed, index, "accept")),
                         accept=st.request_acceptance(gen.prompt_text))
        return req, output

    async def _run(self, request: web.Request, gen: _Gen, arrival: float, kind: str,
                   ctx_extra: dict[str, Any]) -> web.StreamResponse:
        st = self.state
        index, fault = st.take_index()
        if fault.error_status is not None:
            st.counts["errors_injected"] += 1
            echo = _echo(st, request, index)
            if fault.error_status == 503:
                return error_response(503, "Service Unavailable (injected fault: the simulated "
                                      "server is overloaded)" + echo, type_="ServiceUnavailableError")
            return error_response(500, "Internal Server Error (injected fault in the simulated "
                                  "server)" + echo, type_="InternalServerError")
        why = st.engine.core.check_fits(gen.prompt_tokens, gen.max_new_tokens)
        if why:
            st.counts["rejected"] += 1
            raise ApiError(400, why, param="max_tokens")
        st.note_prefix(gen.cache_salt, gen.digest, gen.prompt_tokens)
        req, output = self._new_request(gen, index, arrival)
        rid = st.rid(index)
        if kind != "sglang":
            rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + rid
        ctx = ReqContext(rid=rid, created=int(time.time()), model=st.model_name,
                         prompt_tokens=gen.prompt_tokens, max_new_tokens=gen.max_new_tokens,
                         output=output,
                         spec_draft_tokens=st.cfg.num_draft_tokens if st.cfg.spec else None,
                         omit_usage=fault.omit_usage, timings=st.llamacpp,
                         spec_metrics=st.options.per_request_spec_decode_metrics, **ctx_extra)
        fmt: SGLangFormat | CompletionFormat | ChatFormat
        if kind == "sglang":
            fmt = SGLangFormat(ctx)
        elif kind == "completions":
            fmt = CompletionFormat(ctx)
        else:
            fmt = ChatFormat(ctx)
        if st.options.data_faults.rewrites_counts(index):
            fmt = CountRewriter(fmt, st.options.data_faults, index)  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        if fault.drop_at is not None:
            st.counts["drops_injected"] += 1
        if fault.stall_at is not None:
            st.counts["stalls_injected"] += 1
        if fault.malformed_at is not None and gen.stream:
            st.counts["malformed_injected"] += 1

        if not gen.stream:
            req.sink = WaitSink(done)
            st.engine.submit(req)
            await done
            if fault.stall_at is not None:
                await asyncio.sleep(fault.stall_s)
            if fault.drop_at is not None:
                if request.transport is not None:
                    request.transport.close()
                return web.Response(status=500)  # never reaches the client
            return web.Response(body=fmt.full_response(req), content_type="application/json")

        resp = web.StreamResponse(status=200, headers=_SSE_HEADERS)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b"")  # flush the headers now; the body is written by the sink
        transport = request.transport
        if transport is None or transport.is_closing():
            return resp
        sink = StreamSink(transport, fmt, done, engine=st.engine, emit_log=st.emit_log,
                          interval=gen.stream_interval or st.options.stream_interval, fault=fault)
        req.sink = sink
        st.engine.submit(req)
        why_done = await done
        if why_done == "done":
            await st.engine.wait_gate()  # finishing a response is HTTP work too: not at a deadline
            try:
                await resp.write_eof()
            except ConnectionError:
                pass
        return resp

    # -- SGLang native -----------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        """``POST /generate``: SGLang native API."""
        arrival = time.perf_counter()
        await self.state.engine.wait_gate()
        try:
            body = await _json_body(request)
            gen = self._parse_generate(body)
            return await self._run(request, gen, arrival, "sglang", {})
        except ApiError as exc:
            return error_response(exc.status, exc.message, type_="invalid_request_error",
                                  param=exc.param)

    def _parse_generate(self, body: dict[str, Any]) -> _Gen:
        text, ids = body.get("text"), body.get("input_ids")
        if text is not None and ids is not None:
            raise ApiError(400, "Either text or input_ids should be provided, not both.")
        if text is None and ids is None:
            raise ApiError(400, "Either text, input_ids or input_embeds should be provided.")
        if text is not None:
            if isinstance(text, list):
                raise ApiError(400, "Batch requests (a list of prompts) are not supported by the "
                               "simulated server; send one prompt per request.", param="text")
            if not isinstance(text, str):
                raise ApiError(400, "text must be a string", param="text")
            n = text_prompt_tokens(text)
            if n < 1:
                raise ApiError(400, "The prompt is empty.", param="text")
            digest = prompt_digest(text)
        else:
            if isinstance(ids, list) and ids and isinstance(ids[0], list):
                raise ApiError(400, "Batch requests (a list of prompts) are not supported by the "
                               "simulated server; send one prompt per request.", param="input_ids")
            ids = _token_ids(ids, "input_ids")
            check_vocab(ids, self.state.profile.model.vocab_size, self.state.surface)
            n = len(ids)
            digest = prompt_digest(ids)
        sp = body.get("sampling_params")
        if sp is None:
            sp = {}
        if isinstance(sp, list):
            raise ApiError(400, "A list of sampling_params (batch) is not supported by the "
                           "simulated server.", param="sampling_params")
        if not isinstance(sp, dict):
            raise ApiError(400, "sampling_params must be an object", param="sampling_params")
        for key in sp:
            if key not in _SAMPLING_KEYS:
                expected = ", ".join(f"`{k}`" for k in SAMPLING_PARAM_KEYS)
                raise ApiError(400, f"unknown field `{key}`, expected one of {expected}",
                               param=f"sampling_params.{key}")
        stream = _bool_param(body.get("stream"), "stream")
        max_new = _int_param(sp.get("max_new_tokens"), "max_new_tokens", minimum=1, default=128)
        min_new = _int_param(sp.get("min_new_tokens"), "min_new_tokens", minimum=0, default=0)
        assert max_new is not None and min_new is not None
        if min_new > max_new:
            raise ApiError(400, f"min_new_tokens ({min_new}) must be <= max_new_tokens ({max_new})",
                           param="min_new_tokens")
        si = _int_param(sp.get("stream_interval"), "stream_interval", minimum=1, default=None)
        seed = sp.get("sampling_seed")
        return _Gen(prompt_tokens=n, digest=digest, max_new_tokens=max_new, min_new_tokens=min_new,
                    ignore_eos=_bool_param(sp.get("ignore_eos"), "ignore_eos"),
                    temperature=_float_param(sp.get("temperature"), "temperature", 1.0),
                    sampling_seed=seed if isinstance(seed, int) else None, stream=stream,
                    stream_interval=si, prompt_text=text if isinstance(text, str) else "")

    # -- OpenAI ------------------------------------------------------------------------------
    def _check_model(self, body: dict[str, Any]) -> None:
        """404 for a model that is not served (SGLang also takes ``"default"``; vLLM does not)."""
        model = body.get("model")
        if self.state.llamacpp:
            return  # llama-server serves one model and ignores the name
        accepted = (self.state.model_name,) if self.state.vllm else (self.state.model_name,
                                                                      "default")
        if model is not None and model not in accepted:
            raise ApiError(404, f"The model `{model}` does not exist.", type_="NotFoundError",
                           param="model")

    def _openai_common(self, body: dict[str, Any], n: int, digest: int,
                       default_max: int | None, chat: bool,
                       prompt_text: str = "") -> tuple[_Gen, dict[str, Any]]:
        if body.get("n") not in (None, 1):
            raise ApiError(400, "n > 1 is not supported by the simulated server.", param="n")
        max_tokens = body.get("max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None \
            else "max_tokens"
        max_new = _int_param(max_tokens, name, minimum=1, default=default_max)
        if max_new is None:  # chat without a limit: up to the context, as SGLang
            max_new = max(1, self.state.cfg.context_length - n)
        min_new = _int_param(body.get("min_tokens"), "min_tokens", minimum=0, default=0)
        assert min_new is not None
        if min_new > max_new:
            raise ApiError(400, f"min_tokens ({min_new}) must be <= {name} ({max_new})",
                           param="min_tokens")
        stream = _bool_param(body.get("stream"), "stream")
        so = body.get("stream_options") or {}
        if not isinstance(so, dict):
            raise ApiError(400, "stream_options must be an object", param="stream_options")
        seed = body.get("seed")
        salt = body.get("cache_salt")
        if salt is not None and (not isinstance(salt, str) or not salt):
            raise ApiError(400, "Parameter 'cache_salt' must be a non-empty string if provided.", param="cache_salt")
        gen = _Gen(prompt_tokens=n, digest=digest, max_new_tokens=max_new, min_new_tokens=min_new,
                   ignore_eos=_bool_param(body.get("ignore_eos"), "ignore_eos"),
                   temperature=_float_param(body.get("temperature"), "temperature", 1.0),
                   sampling_seed=seed if isinstance(seed, int) else None, stream=stream,
                   prompt_text=prompt_text, cache_salt=salt)
        include_usage = _bool_param(so.get("include_usage"), "stream_options.include_usage")
        continuous = _bool_param(so.get("continuous_usage_stats"),
                                 "stream_options.continuous_usage_stats")
        if self.state.vllm:  # vLLM: include_continuous_usage = include_usage and continuous
            continuous = continuous and include_usage
        if self.state.llamacpp:  # llama.cpp sends usage on the final chunk only
            continuous = False
        extra = {"include_usage": include_usage, "continuous_usage": continuous}
        if self.state.surface == "sglang":  # SGLang 0.5.23: speculation figures in an sglext chunk
            extra["spec_details"] = _bool_param(body.get("return_spec_tokens_details"), "return_spec_tokens_details")
        return gen, extra

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/completions``."""
        arrival = time.perf_counter()
        await self.state.engine.wait_gate()
        try:
            body = await _json_body(request)
            self._check_model(body)
            prompt = body.get("prompt")
            if prompt is None:
                raise ApiError(400, "prompt is required", param="prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
                prompt = prompt[0]
            if isinstance(prompt, str):
                n = text_prompt_tokens(prompt)
                if n < 1:
                    raise ApiError(400, "The prompt is empty.", param="prompt")
                digest = prompt_digest(prompt)
            elif isinstance(prompt, list):
                if prompt and isinstance(prompt[0], (str, list)):
                    raise ApiError(400, "Several prompts in one request are not supported by the "
                                   "simulated server.", param="prompt")
                ids = _token_ids(prompt, "prompt")
                check_vocab(ids, self.state.profile.model.vocab_size, self.state.surface)
                n, digest = len(ids), prompt_digest(ids)
            else:
                raise ApiError(400, "prompt must be a string or a list of token IDs", param="prompt")
            gen, extra = self._openai_common(body, n, digest, 16, chat=False,
                                             prompt_text=prompt if isinstance(prompt, str) else "")
            return await self._run(request, gen, arrival, "completions", extra)
        except VocabError as exc:
            if self.state.llamacpp:
                return llamacpp_error(exc.status, exc.message)
            return error_response(exc.status, exc.message, type_=exc.type, param=exc.param)
        except ApiError as exc:
            return error_response(exc.status, exc.message, type_=exc.type, param=exc.param)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``."""
        arrival = time.perf_counter()
        await self.state.engine.wait_gate()
        try:
            body = await _json_body(request)
            self._check_model(body)
            messages = body.get("messages")
            if messages is None:
                raise ApiError(400, "messages is required", param="messages")
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and "role" in m for m in messages):
                raise ApiError(400, "messages must be a non-empty list of {role, content} objects",
                               param="messages")
            n = chat_prompt_tokens(messages)
            digest = prompt_digest(orjson.dumps(messages, option=orjson.OPT_SORT_KEYS))
            text = "\n".join(str(m.get("content", "")) for m in messages
                              if isinstance(m.get("content"), str))
            gen, extra = self._openai_common(body, n, digest, None, chat=True, prompt_text=text)
            return await self._run(request, gen, arrival, "chat", extra)
        except ApiError as exc:
            return error_response(exc.status, exc.message, type_=exc.type, param=exc.param)

    # -- info ---------------------------------------------------------------------------------
    async def server_info(self, request: web.Request) -> web.Response:
        """``GET /server_info`` and ``/get_server_info``."""
        return web.Response(body=orjson.dumps(self.state.server_info()),
                            content_type="application/json")

    async def model_info(self, request: web.Request) -> web.Response:
        """``GET /model_info`` and ``/get_model_info``."""
        st = self.state
        body = {"model_path": st.profile.model.model_path,
                "tokenizer_path": st.profile.model.model_path, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": "default",
                "served_model_name": st.model_name, "simulated": True}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``."""
        st = self.state
        body = {"object": "list", "data": [{
            "id": st.model_name, "object": "model", "created": int(st.started_wall),
            "owned_by": "sglang", "root": st.model_name, "parent": None,
            "max_model_len": st.cfg.context_length, "simulated": True}]}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def health(self, request: web.Request) -> web.Response:
        """``GET /health`` and ``/health_generate``: a one-token generation, at least
        ``--health-delay-s`` (SGLang polls its health generation every 1 s), 503 after 20 s."""
        st = self.state
        start = time.perf_counter()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        req = SimRequest(index=-1, prompt_tokens=1, max_new_tokens=1, target_tokens=1,
                         arrival_t=start, rng=random.Random(0))
        req.sink = WaitSink(done)
        st.engine.submit(req)
        try:
            await asyncio.wait_for(done, timeout=20.0)
        except TimeoutError:
            st.engine.abort(req)
            return web.Response(status=503)
        remaining = st.options.health_delay_s - (time.perf_counter() - start)
        if remaining > 0:
            await asyncio.sleep(remaining)
        return web.Response(status=200)

    async def tokenize(self, request: web.Request) -> web.Response:
        """``POST /tokenize`` (SGLang and vLLM): ``{"model"?, "prompt": text, "add_special_tokens"?}``
        → ``{"tokens": [ids], "count": n, "max_model_len": context}``."""
        try:
            body = await _json_body(request)
            self._check_model(body)
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise ApiError(400, "prompt must be a string", param="prompt")
        except ApiError as exc:
            return error_response(exc.status, exc.message, type_=exc.type, param=exc.param)
        ids = tokenize_text(prompt, self.state.profile.model.vocab_size)
        if self.state.options.data_faults.tokenize_tokens is not None:
            ids = [1] * self.state.options.data_faults.tokenize_tokens
        body_out = {"tokens": ids, "count": len(ids), "max_model_len": self.state.cfg.context_length}
        return web.Response(body=orjson.dumps(body_out), content_type="application/json")

    async def flush_cache(self, request: web.Request) -> web.Response:
        """``POST /flush_cache`` (SGLang) and ``POST /reset_prefix_cache`` (vLLM): the simulated
        engine keeps no prefix cache, so there is nothing to empty; like SGLang it refuses (400)
        while requests run or wait, and each flush is logged on stderr (the server's log)."""
        failure = self.state.options.data_faults.flush
        if failure == "500":
            return web.Response(status=500, text="Internal Server Error (injected flush fault)\n")
        if failure == "hang":
            await asyncio.sleep(3600)
        if failure == "reset":
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never reaches the client
        if self.state.engine.core.has_work():
            return web.Response(status=400, text="Cache not flushed: requests are running or waiting.\n")
        self.state.prefix_cache.clear()
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} refserver {request.path}: prefix cache flushed "
              "(simulated: the engine keeps no prefix cache)", file=sys.stderr, flush=True)
        return web.Response(status=200, text="Cache flushed.\n")

    async def ready(self, request: web.Request) -> web.Response:
        """``GET /ready``: answers at once."""
        return web.Response(status=200)

    async def metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``: Prometheus text."""
        resp = web.Response(body=self.state.metrics.render() + schedule_exposition(self.state.engine))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp


@web.middleware
async def _fastapi_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return web.Response(status=404, body=b'{"detail":"Not Found"}', content_type="application/json")
    except web.HTTPMethodNotAllowed:
        return web.Response(status=405, body=b'{"detail":"Method Not Allowed"}',
                            content_type="application/json")


async def _headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = SERVER_HEADER
    response.headers["X-Simulated"] = "true"


async def _vllm_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = VLLM_SERVER_HEADER
    response.headers["X-Simulated"] = "true"


async def _llamacpp_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = LLAMACPP_SERVER_HEADER
    response.headers["X-Simulated"] = "true"


def build_app(state: ServerState) -> web.Application:
    """The aiohttp application of ``state.options.api_surface``; the engine starts and stops
    with it."""
    app = web.Application(middlewares=[_fastapi_errors], client_max_size=64 * 2**20)
    h = Handlers(state)
    if state.llamacpp:
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/completions", h.completions)
            app.router.add_post(f"{prefix}/chat/completions", h.chat)
        add_llamacpp_routes(app, state)
        app.router.add_get("/metrics", h.metrics)
        app.on_response_prepare.append(_llamacpp_headers)
    elif state.vllm:
        app.router.add_post("/v1/completions", h.completions)
        app.router.add_post("/v1/chat/completions", h.chat)
        app.router.add_post("/tokenize", h.tokenize)
        add_vllm_routes(app, state)
        if state.options.vllm_dev_mode:  # vLLM serves it only with VLLM_SERVER_DEV_MODE=1
            app.router.add_post("/reset_prefix_cache", h.flush_cache)
        app.router.add_get("/metrics", h.metrics)
        app.on_response_prepare.append(_vllm_headers)
    else:
        app.router.add_post("/generate", h.generate)
        app.router.add_put("/generate", h.generate)
        app.router.add_post("/v1/completions", h.completions)
        app.router.add_post("/v1/chat/completions", h.chat)
        for path in ("/server_info", "/get_server_info"):
            app.router.add_get(path, h.server_info)
        for path in ("/model_info", "/get_model_info"):
            app.router.add_get(path, h.model_info)
        app.router.add_get("/v1/models", h.models)
        for path in ("/health", "/health_generate"):
            app.router.add_get(path, h.health)
        app.router.add_get("/ready", h.ready)
        app.router.add_get("/metrics", h.metrics)
        app.router.add_post("/tokenize", h.tokenize)
        app.router.add_post("/flush_cache", h.flush_cache)
        app.on_response_prepare.append(_headers)

    async def _start(app: web.Application) -> None:
        state.engine.start()

    async def _stop(app: web.Application) -> None:
        await state.engine.stop()
        if state.emit_log is not None and state.options.emit_log_path:
            state.emit_log.save(state.options.emit_log_path)

    app.on_startup.append(_start)
    app.on_cleanup.append(_stop)
    return app
