"""Small SSE helpers for the reference-server tests (a real socket, httpx)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Stream:
    """One streamed response: status, parsed events (``None`` for ``[DONE]``), raw lines."""

    status: int
    headers: httpx.Headers
    events: list[Any] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    error: str | None = None
    body: Any = None

    @property
    def done(self) -> bool:
        """True when the stream ended with ``data: [DONE]``."""
        return bool(self.events) and self.events[-1] is None

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """The JSON events (without ``[DONE]``)."""
        return [e for e in self.events if e is not None]


def stream(url: str, payload: dict[str, Any], timeout: float = 30.0) -> Stream:
    """POST ``payload`` and read the SSE stream (never raises on a broken stream)."""
    with httpx.Client(timeout=timeout) as client:
        with client.stream("POST", url, json=payload) as resp:
            out = Stream(resp.status_code, resp.headers)
            if resp.status_code != 200:
                resp.read()
                out.body = resp.json()
                return out
            try:
                for line in resp.iter_lines():
                    if not line:
                        continue
                    out.raw.append(line)
                    assert line.startswith("data: "), line
                    data = line[len("data: "):]
                    now = time.perf_counter()
                    if data == "[DONE]":
                        out.events.append(None)
                        out.times.append(now)
                        continue
                    try:
                        out.events.append(json.loads(data))
                        out.times.append(now)
                    except json.JSONDecodeError:
                        out.malformed.append(data)
            except httpx.HTTPError as exc:
                out.error = f"{type(exc).__name__}: {exc}"
            return out


def post(url: str, payload: dict[str, Any], timeout: float = 30.0) -> httpx.Response:
    """A plain (non-streaming) POST."""
    return httpx.post(url, json=payload, timeout=timeout)
