"""The llama.cpp ``llama-server`` API surface (``--api-surface llamacpp``).

Shapes follow llama.cpp's ``tools/server`` (``server-context.cpp``, ``server-task.cpp``):

* ``GET /props`` → ``default_generation_settings`` (``n_ctx`` per slot and ``params`` with the
  draft limits ``speculative.n_max`` / ``speculative.n_min`` / ``speculative.p_min`` of older
  builds and the ``speculative.types`` of newer ones — real builds carry one or the other; a real
  build started with ``--spec-type draft-simple`` still says ``"none"`` there, as here),
  ``total_slots`` (``--parallel``), ``model_alias``, ``model_path``, ``modalities``,
  ``endpoint_slots`` / ``endpoint_props`` / ``endpoint_metrics``, ``chat_template``,
  ``bos_token``, ``eos_token``, ``build_info``. llama.cpp's ``/props`` does not name a draft
  model; ``/slots`` says per slot whether it speculates.
* ``GET /slots`` → one object per slot: ``id``, ``n_ctx``, ``speculative``, ``is_processing``.
* ``GET /health`` → ``{"status": "ok"}`` (503 ``{"error": {"code": 503, "message": "Loading
  model", "type": "unavailable_error"}}`` while the engine is not running).
* ``GET /v1/models`` → ``owned_by: "llamacpp"`` and ``meta`` with ``vocab_type``, ``n_vocab``,
  ``n_ctx_train``, ``n_embd``, ``n_params``, ``size``.
* ``POST /tokenize`` ``{"content": text, "add_special": bool, "with_pieces": bool}`` →
  ``{"tokens": [ids]}`` (with pieces: ``[{"id", "piece"}]``).
* ``GET /metrics`` → Prometheus text with ``llamacpp:`` names: counters ``prompt_tokens_total``,
  ``tokens_predicted_total``, ``n_decode_total``, ``spec_decode_num_drafts_total`` (verify
  steps), ``spec_decode_num_draft_tokens_total``, ``spec_decode_num_accepted_tokens_total``,
  ``spec_decode_num_accepted_tokens_per_pos_total{position="i"}``; gauges
  ``requests_processing``, ``requests_deferred``.
* Streaming OpenAI responses carry no per-chunk usage (llama.cpp has no
  ``continuous_usage_stats``); the final chunk carries ``timings`` with ``prompt_n``,
  ``predicted_n`` and, with speculation, ``draft_n`` / ``draft_n_accepted`` (left out when the
  request drafted nothing). With ``include_usage``, ``/v1/completions`` puts usage and timings on
  the finishing chunk and chat on a ``choices: []`` usage chunk (as recorded from build
  b1-0c1e570 and read in ``server-task.cpp``); without it, timings ride on the last content chunk.
* A token-ID prompt holding an ID at or above ``n_vocab`` is a 400
  ``{"error": {"code": 400, "message": "Prompt contains invalid tokens", "type":
  "invalid_request_error"}}``.

Not simulated: ``/completion`` (llama.cpp's native streaming format), ``/infill``, ``/embedding``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from specsweep.refserver import __version__ as REFSERVER_VERSION
from specsweep.refserver.llamacpp_metrics import LlamacppMetrics  # noqa: F401 (re-exported)
from specsweep.refserver.tokens import tokenize_text
from specsweep.refserver.versions import LLAMACPP_BUILD

if TYPE_CHECKING:
    from specsweep.refserver.state import ServerState

__all__ = ["LLAMACPP_BUILD", "LlamacppHandlers", "LlamacppMetrics", "add_llamacpp_routes",
           "llamacpp_error"]


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def llamacpp_error(status: int, message: str, type_: str = "invalid_request_error") -> web.Response:
    """llama.cpp's error body: ``{"error": {"code", "message", "type"}}``."""
    return _json({"error": {"code": status, "message": message, "type": type_}}, status)


class LlamacppHandlers:
    """Handlers of the llama.cpp-only routes, bound to one ``ServerState``."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def _slot_ctx(self) -> int:
        cfg = self.state.cfg
        return cfg.context_length

    async def props(self, request: web.Request) -> web.Response:
        """``GET /props``."""
        st = self.state
        cfg = st.cfg
        n_max = cfg.num_steps if cfg.spec else 16
        params: dict[str, Any] = {
            "n_predict": -1, "seed": st.options.seed, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
            "ignore_eos": False, "stream": True,
            "speculative.n_max": n_max, "speculative.n_min": 0, "speculative.p_min": 0.75,
            "speculative.types": "none",  # the per-request default: "none" even when the server drafts
        }
        return _json({
            "default_generation_settings": {"params": params, "n_ctx": self._slot_ctx()},
            "total_slots": cfg.max_running_requests,
            "model_alias": st.model_name,
            "model_path": st.profile.model.model_path,
            "modalities": {"vision": False, "audio": False},
            "endpoint_slots": True, "endpoint_props": False, "endpoint_metrics": True,
            "chat_template": "{{ simulated }}",
            "bos_token": "<s>", "eos_token": "</s>",
            "build_info": f"{LLAMACPP_BUILD}-specsweep-refserver-{REFSERVER_VERSION}-simulated",
        })

    async def slots(self, request: web.Request) -> web.Response:
        """``GET /slots``: one entry per slot (busy ones first)."""
        st = self.state
        cfg = st.cfg
        busy = st.engine.core.num_admitted
        return _json([{"id": i, "id_task": -1, "n_ctx": self._slot_ctx(), "speculative": bool(cfg.spec),
                       "is_processing": i < busy} for i in range(cfg.max_running_requests)])

    async def health(self, request: web.Request) -> web.Response:
        """``GET /health``."""
        if not self.state.engine.alive:
            return llamacpp_error(503, "Loading model", "unavailable_error")
        return _json({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models`` with llama.cpp's ``meta``."""
        st = self.state
        prof = st.profile.model
        return _json({"object": "list", "data": [{
            "id": st.model_name, "object": "model", "created": int(st.started_wall),
            "owned_by": "llamacpp",
            "meta": {"vocab_type": 2, "n_vocab": prof.vocab_size, "n_ctx_train": prof.context_length,
                     "n_embd": 2048, "n_params": int(prof.active_params_b * 1e9),
                     "size": int(prof.active_params_b * 1e9 * prof.bytes_per_param)},
            "simulated": True}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        """``POST /tokenize``: ``{"content": text}`` → ``{"tokens": [ids]}``."""
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return llamacpp_error(400, "Invalid JSON body")
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, str):
            return llamacpp_error(400, "\"content\" must be provided")
        ids = tokenize_text(content, self.state.profile.model.vocab_size)
        if body.get("add_special"):
            ids = [1, *ids]
        if body.get("with_pieces"):
            words = content.split()
            return _json({"tokens": [{"id": t, "piece": (" " + w)} for t, w in zip(ids, words)]})
        return _json({"tokens": ids})


def add_llamacpp_routes(app: web.Application, state: ServerState) -> None:
    """Register the llama.cpp-only routes on ``app``."""
    h = LlamacppHandlers(state)
    app.router.add_get("/props", h.props)
    app.router.add_get("/slots", h.slots)
    app.router.add_get("/health", h.health)
    app.router.add_get("/v1/models", h.models)
    app.router.add_get("/models", h.models)
    app.router.add_post("/tokenize", h.tokenize)

