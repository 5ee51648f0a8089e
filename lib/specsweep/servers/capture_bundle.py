"""A capture bundle: a live server's answers, verbatim, as ``specsweep capture`` records them and
``specsweep serve --replay`` serves them back.

One JSON object (``*.capture.json``), small enough to attach to a bug report or drop into the tests:

* ``format`` (:data:`FORMAT`), ``version`` (:data:`VERSION`), ``dialect`` (the probe's server name)
  and ``flavour`` (its ``api="auto"`` choice);
* ``routes``: ``[{method, path, status, content_type, body}]``, each answer's body as text (the probe
  routes, ``/tokenize``, the flush routes);
* ``metrics``: ``{path, before, after}``, the Prometheus text before and after the streams;
* ``streams``: ``[{path, request, status, content_type, events_total, head, tail}]``: one short
  stream per API flavour (with and without the dialect's per-request speculation fields where it
  has any); ``head`` holds its first :data:`HEAD_EVENTS` events and ``tail`` its last
  :data:`TAIL_EVENTS` (the finish, usage and ``[DONE]`` events), each event's text exactly as sent,
  its blank line included, so an odd terminator (``} \\n\\n``) survives.

Every text is redacted (``results.redact``) before it is written.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsweep.errors import InputError

__all__ = ["FORMAT", "HEAD_EVENTS", "TAIL_EVENTS", "VERSION", "Bundle", "BundleError", "Route", "Stream",
           "read_bundle", "split_events", "stream_parts"]

FORMAT = "specsweep-capture"
VERSION = 1
#: events kept from a stream's start and its end
HEAD_EVENTS = 2
TAIL_EVENTS = 3
#: one SSE event: anything up to and including its blank line (LF, CRLF or CR line ends)
_EVENT = re.compile(r".*?(?:\r\n\r\n|\n\n|\r\r)", re.S)


class BundleError(InputError, ValueError):
    """A file that is not a capture bundle; the message names it and what is wrong."""


@dataclass(frozen=True)
class Route:
    """One recorded answer: ``method path`` → ``status``, ``content_type`` and ``body`` (text)."""

    method: str
    path: str
    status: int
    content_type: str
    body: str


@dataclass(frozen=True)
class Stream:
    """One recorded stream: the request ``path`` and body, the answer's status and content type,
    how many events it had, and its first and last events verbatim."""

    path: str
    request: dict[str, Any]
    status: int
    content_type: str
    events_total: int
    head: list[str]
    tail: list[str]


@dataclass(frozen=True)
class Bundle:
    """A capture bundle read back (see the module notes)."""

    dialect: str
    flavour: str
    routes: list[Route] = field(default_factory=list)
    metrics_path: str | None = None
    metrics_before: str | None = None
    metrics_after: str | None = None
    streams: list[Stream] = field(default_factory=list)


def split_events(text: str) -> tuple[list[str], str]:
    """The complete SSE events of ``text`` (each with its blank line) and what trails them."""
    events = _EVENT.findall(text)
    return events, text[sum(map(len, events)):]


def stream_parts(events: list[str]) -> tuple[list[str], list[str]]:
    """(head, tail) of a stream's events: the first :data:`HEAD_EVENTS` and the last
    :data:`TAIL_EVENTS`, without overlap (a short stream is all head)."""
    head = events[:HEAD_EVENTS]
    return head, events[max(HEAD_EVENTS, len(events) - TAIL_EVENTS):]


def read_bundle(path: str | Path) -> Bundle:
    """The bundle in ``path``; :class:`BundleError` naming the file when it is not one."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{p}: cannot read a capture bundle ({type(exc).__name__}); give a file written by "
                          "`specsweep capture`") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT or raw.get("version") != VERSION:
        raise BundleError(f"{p}: not a {FORMAT} bundle of version {VERSION}; give a file written by `specsweep capture`")
    try:
        return _bundle(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"{p}: a {FORMAT} bundle with a malformed entry ({type(exc).__name__}: {exc}); "
                          "capture it again") from None


def _bundle(raw: dict[str, Any]) -> Bundle:
    routes = [Route(str(r["method"]).upper(), _path(r["path"]), int(r["status"]), str(r.get("content_type") or ""),
                    _text(r.get("body"))) for r in raw.get("routes") or []]
    streams = [Stream(_path(s["path"]), dict(s.get("request") or {}), int(s["status"]),
                      str(s.get("content_type") or ""), int(s.get("events_total") or 0),
                      [_text(e) for e in s.get("head") or []], [_text(e) for e in s.get("tail") or []])
               for s in raw.get("streams") or []]
    metrics = raw.get("metrics") or {}
    return Bundle(dialect=str(raw.get("dialect") or ""), flavour=str(raw.get("flavour") or ""), routes=routes,
                  metrics_path=_path(metrics["path"]) if metrics.get("path") else None,
                  metrics_before=_text(metrics["before"]) if metrics.get("before") is not None else None,
                  metrics_after=_text(metrics["after"]) if metrics.get("after") is not None else None,
                  streams=streams)


def _path(value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"a path must be text starting with '/', not {value!r:.60}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a body must be text, not {type(value).__name__}")
    return value
