"""Record a live server's shapes into a capture bundle (``specsweep capture``).

Steps: probe the server (its dialect, flavours and model); ``GET`` every probe route any dialect
reads; the dialect's Prometheus text; one short stream per flavour (and, where the dialect asks
for per-request speculation figures with a body field, one without it); the Prometheus text again;
``POST /tokenize``; the dialect's flush routes (a server whose cache lives in slots is not
touched). What comes back is kept verbatim, every text redacted (``results.redact``: the API key
and handed secrets; the home directory as ``~``). The format: ``servers.capture_bundle``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from specsweep import __version__
from specsweep.errors import InputError
from specsweep.measure.probe import ServerProbe, _client, probe
from specsweep.results.redact import redact_text
from specsweep.servers import FLUSH_ROUTES, Dialect, dialect_of
from specsweep.servers.capture_bundle import FORMAT, VERSION, split_events, stream_parts
from specsweep.servers.flavours import PATHS, Flavour, build_body

__all__ = ["CAPTURE_PROMPT", "PROBE_ROUTES", "capture", "write_bundle"]

#: every GET route a dialect's probe or sweep reads, and what tells trtllm-serve apart
PROBE_ROUTES = ("/v1/models", "/version", "/server_info", "/get_server_info", "/model_info", "/props", "/slots",
                "/health", "/load", "/perf_metrics")
#: the prompt of the recorded streams (text: every flavour takes it)
CAPTURE_PROMPT = "Write one sentence about speculative decoding."
#: a recorded body longer than this (characters) is cut, and says so
MAX_BODY_CHARS = 200_000


def capture(endpoint: str, *, max_tokens: int = 16, timeout_s: float = 60.0) -> dict[str, Any]:
    """A capture bundle of the server at ``endpoint`` (see the module notes): streams of
    ``max_tokens`` output tokens each, every request within ``timeout_s`` seconds."""
    info = probe(endpoint, timeout_s=min(timeout_s, 10.0))
    dialect = dialect_of(info.server)
    with _client(info.base_url, timeout_s) as client:
        # /metrics as a route too where it is not the Prometheus text (trtllm-serve's JSON iteration stats)
        extra_routes = ("/metrics",) if dialect.metrics_path != "/metrics" else ()
        routes = [_answer(client, "GET", path) for path in (*PROBE_ROUTES, *extra_routes)]
        before = _metrics(client, dialect)
        streams = [_stream(client, info, flavour, spec, max_tokens)
                   for flavour in info.flavours for spec in _spec_choices(dialect, flavour)]
        after = _metrics(client, dialect)
        routes.append(_answer(client, "POST", "/tokenize", dialect.tokenize_body("Hello world", info.model)))
        if not dialect.erase_slots:
            routes += [_answer(client, "POST", r) for r in dialect.flush_routes or FLUSH_ROUTES]
    return {"format": FORMAT, "version": VERSION, "captured_by": f"specsweep {__version__}",
            "dialect": info.server, "flavour": info.flavour,
            "routes": [r for r in routes if r is not None],
            "metrics": {"path": dialect.metrics_path, "before": before, "after": after},
            "streams": streams}


def write_bundle(bundle: dict[str, Any], path: str | Path) -> Path:
    """Write ``bundle`` to ``path`` (JSON, UTF-8); returns the path. :class:`InputError` naming the
    path when it cannot be written."""
    out = Path(path)
    try:
        out.write_text(json.dumps(bundle, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{out}: cannot write the capture bundle ({exc.strerror or type(exc).__name__}); "
                         "give --out a path in a folder you can write") from None
    return out


def _clean(text: str) -> str:
    """``text`` redacted (the API key, handed secrets, the home directory) and cut to :data:`MAX_BODY_CHARS`."""
    home = str(Path.home())
    text = redact_text(text)
    if len(home) > 1:
        text = text.replace(home, "~")
    return text if len(text) <= MAX_BODY_CHARS else text[:MAX_BODY_CHARS] + "\n[cut by specsweep capture]\n"


def _answer(client: httpx.Client, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """One route's answer as a bundle entry; None when nothing answered."""
    for attempt in range(2):
        try:
            resp = client.request(method, path, json=body)
            break
        except httpx.RemoteProtocolError:  # a kept-alive connection the server had closed: once more
            if attempt:
                return None
        except httpx.HTTPError:
            return None
    return {"method": method, "path": path, "status": resp.status_code,
            "content_type": resp.headers.get("content-type", ""), "body": _clean(resp.text)}


def _metrics(client: httpx.Client, dialect: Dialect, tries: int = 3) -> str | None:
    """The dialect's Prometheus text, or None where it has none or it did not answer 200 in
    ``tries`` tries a second apart (llama-server can answer the scrape right after a stream with
    an error)."""
    for attempt in range(tries if dialect.metrics_path is not None else 0):
        entry = _answer(client, "GET", dialect.metrics_path or "")
        if entry is not None and entry["status"] == 200:
            return str(entry["body"])
        if attempt + 1 < tries:
            time.sleep(1.0)
    return None


def _spec_choices(dialect: Dialect, flavour: Flavour) -> tuple[bool, ...]:
    """Record a stream with the dialect's speculation fields and, where it has any, one without."""
    return (True, False) if dialect.spec_request_options(flavour) else (True,)


def _stream(client: httpx.Client, info: ServerProbe, flavour: Flavour, spec: bool, max_tokens: int) -> dict[str, Any]:
    """One short stream through ``flavour``: its request and its first and last events verbatim."""
    extra = dialect_of(info.server).spec_request_options(flavour) if spec else {}
    body = build_body(flavour, CAPTURE_PROMPT, max_tokens, model=info.model, extra=extra)
    entry: dict[str, Any] = {"path": PATHS[flavour], "request": body}
    try:
        # a connection of its own: llama-server closes a streamed connection, which a pooled one would then meet
        with client.stream("POST", PATHS[flavour], json=body, headers={"Connection": "close"}) as resp:
            text = resp.read().decode("utf-8", "replace")
            entry.update(status=resp.status_code, content_type=resp.headers.get("content-type", ""))
    except httpx.HTTPError as exc:
        entry.update(status=0, content_type="", events_total=0, head=[], tail=[], error=type(exc).__name__)
        return entry
    events, trailing = split_events(text)
    if trailing:
        events.append(trailing)
    head, tail = stream_parts(events)
    entry.update(events_total=len(events), head=[_clean(e) for e in head], tail=[_clean(e) for e in tail])
    return entry
