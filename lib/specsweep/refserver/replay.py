"""Serve a capture bundle back (``specsweep serve --replay BUNDLE``): the recorded server's own
answers, byte for byte, to whatever asks.

Each recorded route answers with its recorded status, content type and body; the recorded
Prometheus route answers with the text captured after the streams; a ``POST`` to a recorded
stream's path answers with that stream's events (its first events, then its last: the finish,
usage and ``[DONE]`` events), choosing the recorded stream whose request asked for the same
speculation fields as this one (else the first of that path). Anything else is a 404
``{"detail": "Not Found"}``. Every response carries ``X-Specsweep-Replay: true``. So a client, a
probe or a whole sweep meets the real server's shapes, and its counts are the captured ones.
"""
from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from specsweep.servers.capture_bundle import Bundle, Route, Stream

__all__ = ["build_replay_app"]

_NOT_FOUND = b'{"detail":"Not Found"}'


def build_replay_app(bundle: Bundle) -> web.Application:
    """The aiohttp application serving ``bundle``."""
    app = web.Application(client_max_size=64 * 2**20)
    seen: set[tuple[str, str]] = set()
    for route in bundle.routes:
        if route.status == 404 or (route.method, route.path) in seen:
            continue  # an absent route stays absent: the catch-all answers it
        seen.add((route.method, route.path))
        app.router.add_route(route.method, route.path, _static(route))
    if bundle.metrics_path and bundle.metrics_after is not None and ("GET", bundle.metrics_path) not in seen:
        seen.add(("GET", bundle.metrics_path))
        app.router.add_get(bundle.metrics_path, _static(Route("GET", bundle.metrics_path, 200,
                                                              "text/plain; version=0.0.4; charset=utf-8",
                                                              bundle.metrics_after)))
    for path in dict.fromkeys(s.path for s in bundle.streams):
        if ("POST", path) not in seen:
            app.router.add_post(path, _streamer([s for s in bundle.streams if s.path == path]))
    app.router.add_route("*", "/{tail:.*}", _not_found)
    app.on_response_prepare.append(_mark)
    return app


async def _mark(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["X-Specsweep-Replay"] = "true"


async def _not_found(request: web.Request) -> web.Response:
    return web.Response(status=404, body=_NOT_FOUND, content_type="application/json")


def _static(route: Route) -> Any:
    body = route.body.encode("utf-8")
    ctype, _, params = route.content_type.partition(";")
    charset = "utf-8" if "charset" in params else None

    async def handler(request: web.Request) -> web.Response:
        resp = web.Response(status=route.status, body=body)
        if ctype.strip():
            resp.content_type = ctype.strip()
            if charset:
                resp.charset = charset
        return resp
    return handler


def _streamer(streams: list[Stream]) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            body = {}
        stream = _choose(streams, body if isinstance(body, dict) else {})
        if stream.status != 200 or not stream.content_type.startswith("text/event-stream"):
            return web.Response(status=stream.status or 500, body="".join(stream.head + stream.tail).encode("utf-8"),
                                content_type=(stream.content_type.partition(";")[0].strip() or "application/json"))
        resp = web.StreamResponse(status=200, headers={"Content-Type": stream.content_type, "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for event in (*stream.head, *stream.tail):
            await resp.write(event.encode("utf-8"))
        await resp.write_eof()
        return resp
    return handler


def _choose(streams: list[Stream], body: dict[str, Any]) -> Stream:
    """The recorded stream whose request asked for the same speculation fields (``return_*``) as
    ``body``; else the first."""
    def extras(req: dict[str, Any]) -> frozenset[str]:
        return frozenset(k for k in req if k.startswith("return_"))
    want = extras(body)
    return next((s for s in streams if extras(s.request) == want), streams[0])
