"""The vLLM-only routes of the vLLM API surface (``--api-surface vllm``), shaped like vLLM 0.33's.

Facts from ``shared/reference/server-apis.md`` §6 (``vllm/entrypoints/serve/instrumentator/``):

* ``GET /version`` → ``{"version": "0.33.0 (specsweep refserver X, simulated)"}``; SGLang has no
  such route, so clients tell the servers apart by it.
* ``GET /health`` → an instant, empty 200 (no health generation, unlike SGLang), or 503 when the
  engine task is not running.
* ``GET /load`` → ``{"server_load": N}``, N = requests running plus waiting in the engine.
* ``GET /v1/models`` → ``owned_by: "vllm"``, ``root`` the model path, ``max_model_len`` the
  context length, plus ``"simulated": true``.

The shared routes (``/v1/completions``, ``/v1/chat/completions``, ``/metrics``) live in
``app.py``; there is no ``/generate``, ``/server_info``, ``/model_info``, ``/health_generate``
or ``/ready`` on this surface (they answer 404 like any unknown route).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from specsweep.refserver.versions import VLLM_VERSION, vllm_version_string  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from specsweep.refserver.state import ServerState

__all__ = ["VLLM_VERSION", "VllmHandlers", "add_vllm_routes", "vllm_version_string"]


def _json(body: object) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


class VllmHandlers:
    """Handlers of the vLLM-only routes, bound to one ``ServerState``."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def version(self, request: web.Request) -> web.Response:
        """``GET /version``."""
        return _json({"version": self.state.version})

    async def health(self, request: web.Request) -> web.Response:
        """``GET /health``: empty 200 at once; 503 when the engine is not running."""
        return web.Response(status=200 if self.state.engine.alive else 503)

    async def load(self, request: web.Request) -> web.Response:
        """``GET /load``: requests running plus waiting."""
        core = self.state.engine.core
        return _json({"server_load": core.num_admitted + len(core.waiting)})

    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models`` (vLLM's shape)."""
        st = self.state
        body = {"object": "list", "data": [{
            "id": st.model_name, "object": "model", "created": int(st.started_wall),
            "owned_by": "vllm", "root": st.profile.model.model_path, "parent": None,
            "max_model_len": st.cfg.context_length, "permission": [], "simulated": True}]}
        return _json(body)


def add_vllm_routes(app: web.Application, state: ServerState) -> None:
    """Register the vLLM-only routes on ``app``."""
    h = VllmHandlers(state)
    app.router.add_get("/version", h.version)
    app.router.add_get("/health", h.health)
    app.router.add_get("/load", h.load)
    app.router.add_get("/v1/models", h.models)
