"""What specsweep knows of each server it speaks to: API flavours, request bodies, dialects.

:data:`DIALECTS` is the registry, one :class:`~specsweep.servers.dialect.Dialect` per server
module (adding a server is one module and one line here); :func:`dialect_of` looks one up by the
name the probe stored, falling back to the generic OpenAI-compatible dialect.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specsweep.servers import llamacpp, openai, sglang, trtllm, vllm
from specsweep.servers.dialect import SIM_COUNTERS, ChoiceReader, Dialect, Fetch, FigureReader, Sign

__all__ = ["CHOICE_FIGURES", "CHUNK_FIGURES", "DIALECTS", "FLUSH_ROUTES", "SIM_COUNTERS", "ChoiceReader", "Dialect", "Fetch", "FigureReader", "Sign",
           "detect", "dialect_of", "owner"]

#: every dialect by the name the probe stores (``ServerProbe.server``, meta.json ``server.name``)
DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    sglang.DIALECT,
    vllm.DIALECT,
    trtllm.DIALECT,
    llamacpp.DIALECT,
    openai.DIALECT,
)}

#: (top-level key of a streamed OpenAI chunk, its reader) of every dialect: a chunk's key says
#: which server sent the figures, so a stream is read without knowing the server
CHUNK_FIGURES: tuple[tuple[str, FigureReader], ...] = tuple(
    item for d in DIALECTS.values() for item in d.chunk_figures.items())

#: (key of a streamed OpenAI chunk's first choice, its reader) of every dialect, read the same way
CHOICE_FIGURES: tuple[tuple[str, ChoiceReader], ...] = tuple(
    item for d in DIALECTS.values() for item in d.choice_figures.items())

#: every dialect's prefix-cache flush routes, in registry order: what a server of unknown kind is tried with
FLUSH_ROUTES: tuple[str, ...] = tuple(dict.fromkeys(r for d in DIALECTS.values() for r in d.flush_routes or ()))


def dialect_of(server: str) -> Dialect:
    """The dialect of ``server`` (a name in :data:`DIALECTS`); the generic OpenAI-compatible one
    for any other name."""
    return DIALECTS.get(server, openai.DIALECT)


def detect(fetch: Fetch) -> tuple[Dialect, dict[str, dict[str, Any]]]:
    """Which dialect's signs the server shows: the matching dialect of highest precedence (the
    generic one when none matched) and the bodies of the signs that matched, by path.

    ``fetch(path)``: the JSON body of ``GET path`` when it answered 200, else None. Paths are read
    in registry order, each once, and only while a dialect that reads it could still win (SGLang
    found at ``/server_info``: ``/get_server_info`` and llama.cpp's ``/props`` are not read).
    """
    best, found = openai.DIALECT, {}
    for path, tests in _SIGNS_BY_PATH.items():
        if all(d.precedence <= best.precedence for d, _ in tests):
            continue
        body = fetch(path)
        if not isinstance(body, dict):
            continue
        for d, test in tests:
            if test(body):
                found[path] = body
                best = d if d.precedence > best.precedence else best
    return best, found


def owner(detected: Dialect, owned_by: object) -> Dialect:
    """``detected``, or the dialect whose ``/v1/models`` ``owned_by`` is ``owned_by`` where that one
    takes precedence."""
    named = next((d for d in DIALECTS.values() if d.owned_by is not None and d.owned_by == owned_by), None)
    return named if named is not None and named.precedence > detected.precedence else detected


def _signs_by_path() -> dict[str, list[tuple[Dialect, Callable[[dict[str, Any]], bool]]]]:
    out: dict[str, list[tuple[Dialect, Callable[[dict[str, Any]], bool]]]] = {}
    for d in DIALECTS.values():
        for sign in d.signs:
            out.setdefault(sign.path, []).append((d, sign.test))
    return out


_SIGNS_BY_PATH = _signs_by_path()
