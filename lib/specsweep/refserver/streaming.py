"""Response formats (SGLang native, OpenAI completions, OpenAI chat) and the sinks that write them.

Shapes follow ``shared/reference/server-apis.md`` (SGLang 0.5.23):

* SGLang ``/generate`` streams ``data: {"text", "output_ids", "meta_info"}`` with **cumulative**
  ``text`` and ``output_ids`` and cumulative ``meta_info.completion_tokens``; the final chunk's
  ``meta_info`` adds ``finish_reason`` (``{"type":"length","length":N}`` or
  ``{"type":"stop","matched":EOS}``), ``e2e_latency`` and, with speculation and at least one
  verify step, ``spec_accept_rate``, ``spec_accept_length`` (= completion_tokens / verify_ct),
  ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``, ``spec_verify_ct`` and
  ``spec_correct_drafts_histogram`` (index j = verify steps that accepted exactly j drafts, grown to
  the largest j seen: ``schedule_batch.Req.update_spec_correct_drafts_histogram``). Every
  ``meta_info`` also carries ``"simulated": true``.
* SGLang's OpenAI routes with ``"return_spec_tokens_details": true`` (0.5.23,
  ``serving_completions.py`` / ``serving_chat.py``): the same figures as a ``SpecTokensDetails``
  object (``spec_cap_length``, ``spec_block_accept_length`` 0.0 and ``spec_cap_lens_histogram``
  ``[]``, SGLang's defaults when the engine reports no capped verify) in a chunk of its own,
  ``{..., "choices": [], "usage": null, "sglext": {"spec_tokens_details": {...}}}``, after the
  last content chunk and before the usage chunk; the non-streaming body carries ``sglext`` too.
  A request with no verify step gets none (SGLang builds it from the meta_info spec fields).
* vLLM surface with ``--per-request-spec-decode-metrics summary|detailed`` (vLLM PR #48915,
  ``docs/features/speculative_decoding/acceptance_metrics.md``): the final usage chunk (and the
  non-streaming body) carries a top-level ``"metrics": {"speculative_decoding": {...}}`` with
  ``mean_acceptance_length`` (1 + accepted / steps; 1.0 without steps), ``draft_acceptance_rate``
  (accepted / drafted; 0.0 without drafts), ``acceptance_histogram`` (dense, ``k + 1`` buckets:
  index j = steps that accepted exactly j drafts), ``acceptance_histogram_by_draft_length``
  (``{"k": histogram}``; ``{}`` without steps), ``num_spec_steps``, ``num_accepted_draft_tokens``,
  ``num_draft_tokens`` (steps × k) and ``num_spec_tokens`` (k); ``detailed`` adds
  ``per_step_accepted`` and ``per_step_drafted`` when the request had steps. No usage chunk, no
  metrics (vLLM sends them on the usage chunk only).
* OpenAI chunks carry **delta** text, ``usage: null`` unless ``continuous_usage_stats`` (then
  cumulative usage on every chunk); chat opens with a ``{"role":"assistant","content":""}`` delta
  (sent together with the first content chunk). The last content chunk carries the
  ``finish_reason``; with ``include_usage`` a final chunk with ``choices: []`` and the usage
  follows; then ``data: [DONE]``. ``system_fingerprint`` says the server is simulated.

All bytes that do not change within a request are encoded once; a chunk is a few byte
concatenations (the generated words are JSON-safe ASCII, so no escaping is needed).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from specsweep.refserver.faults import FaultPlan
from specsweep.refserver.model import FINISHED, SimRequest
from specsweep.refserver.tokens import EOS_TOKEN_ID, RenderedOutput

if TYPE_CHECKING:
    from specsweep.refserver.engine import EmitLog, Engine

__all__ = [
    "ChatFormat",
    "CompletionFormat",
    "ReqContext",
    "SGLangFormat",
    "StreamSink",
    "WaitSink",
    "DONE",
    "SYSTEM_FINGERPRINT",
]

DONE = b"data: [DONE]\n\n"
SYSTEM_FINGERPRINT = "specsweep-refserver-simulated"
MALFORMED = b'data: {"text": "<injected malformed chunk: not JSON\n\n'
_DROP = object()
_STALL = object()


@dataclass(slots=True)
class ReqContext:
    """What a response needs besides the engine request."""

    rid: str
    created: int
    model: str
    prompt_tokens: int
    max_new_tokens: int
    output: RenderedOutput
    spec_draft_tokens: int | None  # num_draft_tokens when speculation is on
    include_usage: bool = False
    continuous_usage: bool = False
    omit_usage: bool = False
    #: llama.cpp: the final chunk carries ``timings`` (prompt_n, predicted_n, draft_n, draft_n_accepted)
    timings: bool = False
    #: vLLM ``--per-request-spec-decode-metrics``: "none", "summary" or "detailed"
    spec_metrics: str = "none"
    #: SGLang OpenAI ``return_spec_tokens_details``: send the ``sglext.spec_tokens_details`` chunk
    spec_details: bool = False

    def metrics_bytes(self, req: SimRequest) -> bytes:
        """``,"metrics":{"speculative_decoding":{...}}`` for vLLM's usage chunk (empty when off)."""
        if self.spec_metrics == "none" or not self.spec_draft_tokens:
            return b""
        spec = vllm_spec_decoding(req, self.spec_draft_tokens - 1, self.spec_metrics == "detailed")
        return b',"metrics":' + _dumps({"speculative_decoding": spec})

    def spec_tokens_details(self, req: SimRequest) -> dict[str, Any] | None:
        """SGLang's ``SpecTokensDetails`` of this request, or None (not asked, or no verify step)."""
        if not self.spec_details or not self.spec_draft_tokens:
            return None
        fields = sglang_spec_fields(req, self.spec_draft_tokens)
        if not fields:
            return None
        return {"spec_accept_rate": fields["spec_accept_rate"], "spec_accept_length": fields["spec_accept_length"],
                "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
                "spec_num_correct_drafts": fields["spec_num_correct_drafts"],
                "spec_num_proposed_drafts": fields["spec_num_proposed_drafts"],
                "spec_verify_ct": fields["spec_verify_ct"],
                "spec_correct_drafts_histogram": fields["spec_correct_drafts_histogram"],
                "spec_cap_lens_histogram": []}

    def timings_bytes(self, req: SimRequest) -> bytes:
        """``,"timings":{...}`` for llama.cpp's final chunk (empty otherwise or without counts)."""
        if not self.timings or self.omit_usage:
            return b""
        drafts = (self.spec_draft_tokens - 1) if self.spec_draft_tokens else None
        out: dict[str, Any] = {"cache_n": 0, "prompt_n": self.prompt_tokens, "predicted_n": req.generated}
        if drafts and req.verify_ct > 0:
            out["draft_n"] = req.verify_ct * drafts
            out["draft_n_accepted"] = req.correct_drafts
        return b',"timings":' + _dumps(out)

    def finish_kind(self, req: SimRequest) -> str:
        """``length`` when the request produced max_new_tokens, else ``stop`` (EOS)."""
        return "length" if req.generated >= self.max_new_tokens else "stop"


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def _histogram(accepts: list[int], size: int = 0) -> list[int]:
    """Index j = verify steps that accepted exactly j drafts; at least ``size`` buckets."""
    hist = [0] * max(size, max(accepts) + 1 if accepts else 0)
    for a in accepts:
        hist[a] += 1
    return hist


def sglang_spec_fields(req: SimRequest, num_draft_tokens: int) -> dict[str, Any]:
    """SGLang 0.5.23's final ``meta_info`` speculation fields (``_calculate_spec_decoding_metrics``),
    in its order; empty when the request had no verify step (SGLang then sends none)."""
    proposed = req.verify_ct * (num_draft_tokens - 1)
    if req.verify_ct <= 0 or proposed <= 0:
        return {}
    return {"spec_accept_rate": req.correct_drafts / proposed,
            "spec_accept_length": req.generated / req.verify_ct,
            "spec_num_correct_drafts": req.correct_drafts,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": req.verify_ct,
            "spec_correct_drafts_histogram": _histogram(req.accepts)}


def vllm_spec_decoding(req: SimRequest, k: int, detailed: bool) -> dict[str, Any]:
    """vLLM's per-request ``metrics.speculative_decoding`` (``k`` = ``num_speculative_tokens``)."""
    steps, accepted = req.verify_ct, req.correct_drafts
    drafted = steps * k
    hist = _histogram(req.accepts, k + 1)
    out: dict[str, Any] = {
        "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": hist,
        "acceptance_histogram_by_draft_length": {str(k): hist} if steps else {},
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_tokens": k,
    }
    if detailed and steps:
        out["per_step_accepted"] = list(req.accepts)
        out["per_step_drafted"] = [k] * steps
    return out


class SGLangFormat:
    """SGLang native ``/generate`` (cumulative text and output_ids)."""

    __slots__ = ("ctx", "_head", "_meta_head", "_meta_tail")

    def __init__(self, ctx: ReqContext) -> None:
        self.ctx = ctx
        self._head = b'data: {"text":"'
        rid = _dumps(ctx.rid)
        if ctx.omit_usage:
            self._meta_head = (b'],"meta_info":{"id":' + rid + b',"finish_reason":null,'
                               b'"weight_version":"default","num_retractions":0,'
                               b'"reasoning_tokens":0,"cached_tokens":0,"simulated":true')
            self._meta_tail = b"}}\n\n"
        else:
            self._meta_head = (b'],"meta_info":{"id":' + rid + b',"finish_reason":null,'
                               b'"prompt_tokens":' + str(ctx.prompt_tokens).encode()
                               + b',"weight_version":"default","num_retractions":0,'
                               b'"reasoning_tokens":0,"completion_tokens":')
            self._meta_tail = b',"cached_tokens":0,"simulated":true}}\n\n'

    def content(self, a: int, b: int, req: SimRequest) -> bytes:
        """A non-final chunk after tokens ``a..b`` (cumulative: the first ``b`` tokens)."""
        out = self.ctx.output
        if self.ctx.omit_usage:
            return b"".join((self._head, out.text_prefix(b), b'","output_ids":[', out.ids_prefix(b),
                             self._meta_head, self._meta_tail))
        return b"".join((self._head, out.text_prefix(b), b'","output_ids":[', out.ids_prefix(b),
                         self._meta_head, str(b).encode(), self._meta_tail))

    def final_object(self, req: SimRequest) -> dict[str, Any]:
        """The final response object (also the non-streaming body)."""
        ctx = self.ctx
        n = req.generated
        if ctx.finish_kind(req) == "length":
            finish: dict[str, Any] = {"type": "length", "length": n}
        else:
            finish = {"type": "stop", "matched": EOS_TOKEN_ID}
        meta: dict[str, Any] = {"id": ctx.rid, "finish_reason": finish}
        if not ctx.omit_usage:
            meta["prompt_tokens"] = ctx.prompt_tokens
        meta.update(weight_version="default", num_retractions=0, reasoning_tokens=0)
        if not ctx.omit_usage:
            meta["completion_tokens"] = n
        meta["cached_tokens"] = 0
        finish_t = req.finish_t if req.finish_t is not None else time.perf_counter()
        meta["e2e_latency"] = round(finish_t - req.arrival_t, 6)
        if ctx.spec_draft_tokens:
            meta.update(sglang_spec_fields(req, ctx.spec_draft_tokens))
        meta["simulated"] = True
        return {"text": ctx.output.text_prefix(n).decode(), "output_ids": ctx.output.id_list(n),
                "meta_info": meta}

    def final(self, a: int, b: int, req: SimRequest) -> bytes:
        """The final chunk and ``[DONE]``."""
        return b"data: " + _dumps(self.final_object(req)) + b"\n\n" + DONE

    def full_response(self, req: SimRequest) -> bytes:
        """Non-streaming body."""
        return _dumps(self.final_object(req))


class _OpenAIFormat:
    __slots__ = ("ctx", "_head")
    ctx: ReqContext
    _head: bytes

    def _usage(self, n: int, *, chat: bool) -> dict[str, Any]:
        p = self.ctx.prompt_tokens
        if chat:
            return {"prompt_tokens": p, "total_tokens": p + n, "completion_tokens": n,
                    "prompt_tokens_details": None, "reasoning_tokens": 0}
        return {"prompt_tokens": p, "total_tokens": p + n, "completion_tokens": n,
                "reasoning_tokens": 0}

    def _usage_bytes(self, n: int) -> bytes:
        p = self.ctx.prompt_tokens
        return (b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
                b'"prompt_tokens_details":null,"reasoning_tokens":0}' % (p, p + n, n))

    def _usage_field(self, n: int) -> bytes:
        ctx = self.ctx
        if ctx.continuous_usage and not ctx.omit_usage:
            return self._usage_bytes(n)
        return b"null"

    def _finish_bytes(self, req: SimRequest) -> tuple[bytes, bytes]:
        """``finish_reason`` and ``matched_stop`` of the last content chunk, as JSON bytes."""
        if self.ctx.finish_kind(req) == "length":
            return b'"length"', b"null"
        return b'"stop"', str(EOS_TOKEN_ID).encode()

    def _usage_chunk(self, n: int, *, chat: bool, req: SimRequest | None = None) -> bytes:
        """The final usage chunk (``choices: []``) when the client asked for usage (with llama.cpp's
        ``timings`` when ``req`` is given and the surface sends them)."""
        ctx = self.ctx
        sglext = self._sglext_chunk(req) if req is not None else b""
        if ctx.include_usage and not ctx.omit_usage:
            tail = (ctx.timings_bytes(req) + ctx.metrics_bytes(req)) if req is not None else b""
            return sglext + self._head + b'],"usage":' + _dumps(self._usage(n, chat=chat)) + tail + b"}\n\n"
        return sglext

    def _sglext_chunk(self, req: SimRequest) -> bytes:
        """SGLang's ``sglext`` chunk (``choices: []``, ``usage: null``) with ``spec_tokens_details``."""
        details = self.ctx.spec_tokens_details(req)
        if details is None:
            return b""
        return self._head + b'],"usage":null,"sglext":' + _dumps({"spec_tokens_details": details}) + b"}\n\n"

    def _body_extras(self, req: SimRequest, body: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming body with vLLM's ``metrics`` / SGLang's ``sglext`` where asked for."""
        ctx = self.ctx
        if ctx.spec_metrics != "none" and ctx.spec_draft_tokens:
            body["metrics"] = {"speculative_decoding": vllm_spec_decoding(
                req, ctx.spec_draft_tokens - 1, ctx.spec_metrics == "detailed")}
        details = ctx.spec_tokens_details(req)
        if details is not None:
            body["sglext"] = {"spec_tokens_details": details}
        return body

    def _last_timings(self, req: SimRequest) -> bytes:
        """llama.cpp's ``timings`` on the last content chunk when no usage chunk follows."""
        ctx = self.ctx
        return b"" if ctx.include_usage else ctx.timings_bytes(req)


def _chunk_prefix(ctx: ReqContext, obj: str) -> bytes:
    return (b'data: {"id":' + _dumps(ctx.rid) + b',"object":"' + obj.encode() + b'","created":'
            + str(ctx.created).encode() + b',"model":' + _dumps(ctx.model)
            + b',"system_fingerprint":"' + SYSTEM_FINGERPRINT.encode() + b'","choices":[')


class CompletionFormat(_OpenAIFormat):
    """OpenAI ``/v1/completions`` (delta text)."""

    def __init__(self, ctx: ReqContext) -> None:
        self.ctx = ctx
        self._head = _chunk_prefix(ctx, "text_completion")

    def _choice(self, delta: bytes, finish: bytes, matched: bytes) -> bytes:
        return (b'{"index":0,"text":"' + delta + b'","logprobs":null,"finish_reason":' + finish
                + b',"matched_stop":' + matched + b"}")

    def content(self, a: int, b: int, req: SimRequest) -> bytes:
        """A content chunk with the delta text of tokens ``a..b``."""
        return b"".join((self._head, self._choice(self.ctx.output.text_slice(a, b), b"null", b"null"),
                         b'],"usage":', self._usage_field(b), b"}\n\n"))

    def final(self, a: int, b: int, req: SimRequest) -> bytes:
        """Last content chunk (with finish_reason), optional usage chunk, ``[DONE]``."""
        fin, matched = self._finish_bytes(req)
        ctx = self.ctx
        if ctx.timings and ctx.include_usage and not ctx.omit_usage:
            # llama.cpp's /v1/completions: usage and timings ride on the finishing chunk itself
            return b"".join((self._head, self._choice(ctx.output.text_slice(a, b), fin, matched), b'],"usage":',
                             _dumps(self._usage(b, chat=False)), ctx.timings_bytes(req), b"}\n\n", DONE))
        last = b"".join((self._head, self._choice(ctx.output.text_slice(a, b), fin, matched),
                         b'],"usage":', self._usage_field(b), self._last_timings(req), b"}\n\n"))
        return last + self._usage_chunk(b, chat=False, req=req) + DONE

    def full_response(self, req: SimRequest) -> bytes:
        """Non-streaming body."""
        ctx = self.ctx
        n = req.generated
        kind = ctx.finish_kind(req)
        body: dict[str, Any] = {
            "id": ctx.rid, "object": "text_completion", "created": ctx.created, "model": ctx.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"index": 0, "text": ctx.output.text_prefix(n).decode(), "logprobs": None,
                         "finish_reason": kind,
                         "matched_stop": EOS_TOKEN_ID if kind == "stop" else None}],
            "usage": None if ctx.omit_usage else self._usage(n, chat=False),
        }
        return _dumps(self._body_extras(req, body))


class ChatFormat(_OpenAIFormat):
    """OpenAI ``/v1/chat/completions`` (role chunk, then delta content)."""

    def __init__(self, ctx: ReqContext) -> None:
        self.ctx = ctx
        self._head = _chunk_prefix(ctx, "chat.completion.chunk")

    def _choice(self, delta: bytes, finish: bytes, matched: bytes) -> bytes:
        return (b'{"index":0,"delta":{"role":null,"content":"' + delta
                + b'","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":'
                + finish + b',"matched_stop":' + matched + b"}")

    def _role_chunk(self) -> bytes:
        return (self._head + b'{"index":0,"delta":{"role":"assistant","content":"",'
                b'"reasoning_content":null,"tool_calls":null},"logprobs":null,'
                b'"finish_reason":null,"matched_stop":null}],"usage":' + self._usage_field(0)
                + b"}\n\n")

    def content(self, a: int, b: int, req: SimRequest) -> bytes:
        """A content chunk (preceded by the role chunk when it is the first)."""
        chunk = b"".join((self._head, self._choice(self.ctx.output.text_slice(a, b), b"null", b"null"),
                          b'],"usage":', self._usage_field(b), b"}\n\n"))
        if a == 0:
            return self._role_chunk() + chunk
        return chunk

    def final(self, a: int, b: int, req: SimRequest) -> bytes:
        """Last content chunk (with finish_reason), optional usage chunk, ``[DONE]``."""
        fin, matched = self._finish_bytes(req)
        last = b"".join((self._head, self._choice(self.ctx.output.text_slice(a, b), fin, matched),
                         b'],"usage":', self._usage_field(b), self._last_timings(req), b"}\n\n"))
        if a == 0:
            last = self._role_chunk() + last
        return last + self._usage_chunk(b, chat=True, req=req) + DONE

    def full_response(self, req: SimRequest) -> bytes:
        """Non-streaming body."""
        ctx = self.ctx
        n = req.generated
        kind = ctx.finish_kind(req)
        body: dict[str, Any] = {
            "id": ctx.rid, "object": "chat.completion", "created": ctx.created, "model": ctx.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"index": 0,
                         "message": {"role": "assistant",
                                     "content": ctx.output.text_prefix(n).decode(),
                                     "reasoning_content": None, "tool_calls": None},
                         "logprobs": None, "finish_reason": kind,
                         "matched_stop": EOS_TOKEN_ID if kind == "stop" else None}],
            "usage": None if ctx.omit_usage else self._usage(n, chat=True),
        }
        return _dumps(self._body_extras(req, body))


Format = SGLangFormat | CompletionFormat | ChatFormat


class StreamSink:
    """Writes a request's chunks straight to its connection as the engine produces them.

    The body uses HTTP/1.1 chunked transfer encoding (headers were sent by aiohttp); each SSE
    write is formatted and framed in ``prepare`` (before the step's scheduled end) and handed to
    the transport in ``deliver`` (at the scheduled end), so the emission itself is one
    ``transport.write`` per chunk. ``stream_interval`` merges steps
    until that many new tokens are pending (the first token and the end always go out at once).
    """

    __slots__ = ("transport", "fmt", "done", "engine", "emit_log", "interval", "fault", "sent",
                 "closed", "dropped", "holding", "stalled", "malformed_sent", "loop")

    def __init__(self, transport: asyncio.Transport, fmt: Format, done: asyncio.Future[str], *,
                 engine: Engine, emit_log: EmitLog | None, interval: int = 1,
                 fault: FaultPlan | None = None) -> None:
        self.transport = transport
        self.fmt = fmt
        self.done = done
        self.engine = engine
        self.emit_log = emit_log
        self.interval = max(1, interval)
        self.fault = fault if fault is not None and fault.streaming_faults else None
        self.sent = 0
        self.closed = False
        self.dropped = False
        self.holding = False
        self.stalled = False
        self.malformed_sent = False
        self.loop = asyncio.get_running_loop()

    def prepare(self, req: SimRequest, t_sched: float) -> Any:
        """Decide and format this step's chunk (before the step's scheduled end)."""
        if self.closed:
            return None
        n = req.generated
        finished = req.state == FINISHED
        if not finished and self.sent and n - self.sent < self.interval:
            return None
        prefix = b""
        log = True
        fault = self.fault
        if fault is not None:
            log = False  # chunks of faulted streams are not in the emission log
            frac = n / max(1, req.target_tokens)
            if fault.drop_at is not None and (frac >= fault.drop_at or finished):
                self.closed = True
                return _DROP
            if self.holding:
                return None
            if fault.stall_at is not None and not self.stalled and (frac >= fault.stall_at or finished):
                self.stalled = self.holding = True
                return _STALL
            if (fault.malformed_at is not None and not self.malformed_sent
                    and (frac >= fault.malformed_at or finished)):
                self.malformed_sent = True
                prefix = MALFORMED
        if finished:
            data = self.fmt.final(self.sent, n, req)
            self.closed = True
        else:
            data = self.fmt.content(self.sent, n, req)
        if prefix:
            data = prefix + data
        self.sent = n
        return (b"%x\r\n%s\r\n" % (len(data), data), finished, log)

    def deliver(self, req: SimRequest, action: Any, t_sched: float) -> None:
        """Write the prepared chunk (at the step's scheduled end)."""
        if action is _DROP:
            self._drop(req)
            return
        if action is _STALL:
            assert self.fault is not None
            self.loop.call_later(self.fault.stall_s, self._release, req)
            return
        framed, finished, log = action
        tr = self.transport
        if tr.is_closing():
            self.engine.abort(req)
            self._close("client-gone")
            return
        if log and self.emit_log is not None:
            self.emit_log.record(t_sched, time.perf_counter())
        tr.write(framed)
        if finished:
            self._close("done")

    def _write(self, req: SimRequest, data: bytes) -> None:
        tr = self.transport
        if tr.is_closing():
            self.engine.abort(req)
            self._close("client-gone")
            return
        tr.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _release(self, req: SimRequest) -> None:
        self.holding = False
        if self.closed or req.generated <= self.sent and req.state != FINISHED:
            return
        n = req.generated
        if req.state == FINISHED:
            self._write(req, self.fmt.final(self.sent, n, req))
            self.sent = n
            self._close("done")
        elif req.state in (1, 2):  # PREFILL, RUNNING
            self._write(req, self.fmt.content(self.sent, n, req))
            self.sent = n

    def _drop(self, req: SimRequest) -> None:
        self.dropped = True
        self.engine.abort(req)
        self.transport.close()
        self._close("dropped")

    def _close(self, why: str) -> None:
        self.closed = True
        if not self.done.done():
            self.done.set_result(why)


class WaitSink:
    """Non-streaming: resolves ``done`` when the request finishes."""

    __slots__ = ("done",)

    def __init__(self, done: asyncio.Future[str]) -> None:
        self.done = done

    def prepare(self, req: SimRequest, t_sched: float) -> Any:
        """Only the end matters."""
        return True if req.state == FINISHED else None

    def deliver(self, req: SimRequest, action: Any, t_sched: float) -> None:
        """Resolve ``done`` at the scheduled end of the last step."""
        if not self.done.done():
            self.done.set_result("done")
