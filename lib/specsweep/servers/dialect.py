"""What the measuring code asks of a server, whichever it is: one :class:`Dialect` per server.

A dialect is data and pure functions, no I/O: how the probe recognises the server (:class:`Sign`,
``owned_by``, ``precedence``) and what it keeps of its settings; what a request body adds for it;
which keys of a streamed OpenAI chunk carry its per-request speculation figures and how they are
read; the ``/metrics`` names the sweep polls and reads, and the acceptance length from their deltas
over a level; how its prefix cache is emptied. ``specsweep.servers`` holds the registry; one
module per server builds its dialect.

Figure names written into a request's ``server`` dict (``RequestRecord.server``) are common to
every dialect: ``spec_verify_ct`` (verify steps), ``spec_accepted_tokens``, ``spec_draft_tokens``,
``spec_accept_length`` (tokens per verify step), ``spec_accepted_pos_<i>``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specsweep.servers.flavours import Flavour

if TYPE_CHECKING:  # annotations only: the dialects need no pandas at import
    import pandas as pd

__all__ = [
    "CACHE_SALT_NOTE",
    "OPENAI_FLAVOURS",
    "SIM_COUNTERS",
    "Dialect",
    "Fetch",
    "FigureReader",
    "Sign",
    "TimingsAcceptance",
    "ChoiceReader",
    "accepted_per_draft",
    "accepted_per_position",
    "configured_cap",
    "histogram",
    "number",
]

#: the OpenAI routes every server here offers
OPENAI_FLAVOURS: tuple[Flavour, ...] = ("openai-completions", "openai-chat")

#: how meta.json's ``prefix_cache_flush`` (and a level row) starts where each level carried its own
#: ``cache_salt`` because no route emptied the cache: a cold cache per level, never a flush
CACHE_SALT_NOTE = "cache_salt per level"

#: the reference server's schedule counters (``refserver/schedule_metrics.py``), the same names under
#: every surface it simulates; no real server has them, so they are read only from a simulator
SIM_COUNTERS: dict[str, str] = {
    "sim_steps": "specsweep_refserver_steps_total",
    "sim_step_s": "specsweep_refserver_step_seconds_total",
    "sim_step_lag_s": "specsweep_refserver_step_lag_seconds_total",
    "sim_late_steps": "specsweep_refserver_late_steps_total",
    "sim_clock_resyncs": "specsweep_refserver_clock_resyncs_total",
    "sim_resync_lost_s": "specsweep_refserver_resync_lost_seconds_total",
}

#: reads one figure object of a streamed chunk into a request's ``server`` dict (in place)
FigureReader = Callable[[Mapping[str, Any], dict[str, float]], None]
#: reads one key's value of a streamed chunk's first choice (any JSON value) into a request's
#: ``server`` dict (in place)
ChoiceReader = Callable[[Any, dict[str, float]], None]
#: ``GET path`` on the server: its JSON body when it answered 200, else None
Fetch = Callable[[str], Any]


@dataclass(frozen=True)
class Sign:
    """Evidence of a server: ``GET path`` answered 200 with a JSON object that ``test`` accepts."""

    path: str
    test: Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class TimingsAcceptance:
    """A server whose per-request figures count every target forward while its counters count
    verification steps only (llama.cpp): the requests' figure, tokens per target step, is the
    level's acceptance length (``timings_formula``), comparable with every other server's; the
    counters' per-drafted-step figure (``counters_formula``) is kept beside it, and
    ``step_figures(requests, before, after)`` tells the two apart (columns added to the level row)."""

    counters_formula: str
    timings_formula: str
    step_figures: Callable[[pd.DataFrame, Mapping[str, float], Mapping[str, float]], dict[str, float]]


def _no_settings(found: Mapping[str, dict[str, Any]], fetch: Fetch) -> dict[str, Any]:
    return {}


def _no_acceptance(deltas: Mapping[str, float]) -> float | None:
    return None


def configured_cap(server: Mapping[str, Any]) -> int | None:
    """The running-request cap a meta.json ``server`` record states: its ``max_running_requests``,
    else that of its ``server_info`` snapshot (a whole number, or text or a float that is one); None
    when neither states one."""
    snapshot = server.get("server_info")
    value = server.get("max_running_requests")
    if value is None and isinstance(snapshot, Mapping):
        value = snapshot.get("max_running_requests")
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _openai_tokenize_body(text: str, model: str | None) -> dict[str, Any]:
    """``POST /tokenize`` body of SGLang and vLLM (``{"tokens", "count", "max_model_len"}`` back)."""
    body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
    if model:
        body["model"] = model
    return body


@dataclass(frozen=True)
class Dialect:
    """One server's answers to what the probe, the client and the sweep ask (see the module notes).

    Detection: the dialect of highest ``precedence`` among those whose ``signs`` matched, or whose
    ``owned_by`` is the first ``/v1/models`` entry's; the generic OpenAI dialect (precedence 0)
    when none did. ``settings(found, fetch)``: the server snapshot kept in meta.json, from the
    bodies of the signs that matched (by path) and, where needed, more ``GET`` answers.
    ``flavours``: the API flavours it offers, the ``api="auto"`` choice first.

    Requests: ``spec_options`` (per flavour) are top-level body keys that ask for per-request
    speculation figures; ``tokenize_body(text, model)`` is the ``POST /tokenize`` body;
    ``chunk_figures`` maps a top-level key of a streamed OpenAI chunk to the reader of its figures,
    ``choice_figures`` a key of its first choice to the reader of that key's value.

    ``/metrics``: ``gauges`` (key → (name, how ranks combine: ``"sum"``/``"max"``)) are polled
    during a level; ``counters`` (key → name) and ``per_position`` (accepted tokens per draft
    position, label ``position``) are read before and after it. ``acceptance(deltas)`` is the
    level's acceptance length (tokens per verify step, bonus token included) from the counter
    deltas (keys of ``counters``), None when they did not move; ``acceptance_formula`` says how.
    ``timings``: see :class:`TimingsAcceptance`. ``metrics_path``: the route of its Prometheus text
    (None: it has none). ``acceptance_definition``: what its accept length counts, in a sentence
    for the page.

    Caps: ``running_cap(server)`` is the running-request cap a meta.json ``server`` record states
    (None: not stated); ``cap_unexposed``: why none is stated where the server never reports one.

    Prefix cache: ``flush_routes`` are ``POST`` routes that empty it (None: unknown, every
    dialect's route is tried); ``erase_slots``: the cache lives in slots emptied one by one
    (``POST /slots/{id}?action=erase``) instead; ``no_cache_options``: body keys that turn its
    reuse off, sent when it cannot be emptied. ``cache_salt``: the server takes a per-request
    ``cache_salt`` that keeps requests of different salts from sharing cached prefixes (a cold cache
    per level where no route empties it); ``flush_hint``: what makes its flush route exist, named in
    the warning when it answered 404.
    """

    name: str
    label: str
    signs: tuple[Sign, ...] = ()
    owned_by: str | None = None
    precedence: int = 0
    settings: Callable[[Mapping[str, dict[str, Any]], Fetch], dict[str, Any]] = _no_settings
    flavours: tuple[Flavour, ...] = OPENAI_FLAVOURS
    spec_options: Mapping[Flavour, Mapping[str, Any]] = field(default_factory=dict)
    tokenize_body: Callable[[str, str | None], dict[str, Any]] = _openai_tokenize_body
    chunk_figures: Mapping[str, FigureReader] = field(default_factory=dict)
    choice_figures: Mapping[str, ChoiceReader] = field(default_factory=dict)
    gauges: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    counters: Mapping[str, str] = field(default_factory=dict)
    per_position: str | None = None
    acceptance: Callable[[Mapping[str, float]], float | None] = _no_acceptance
    acceptance_formula: str = ""
    acceptance_definition: str = ""
    timings: TimingsAcceptance | None = None
    metrics_path: str | None = "/metrics"
    running_cap: Callable[[Mapping[str, Any]], int | None] = configured_cap
    cap_unexposed: str | None = None
    flush_routes: tuple[str, ...] | None = ()
    erase_slots: bool = False
    no_cache_options: Mapping[str, Any] = field(default_factory=dict)
    cache_salt: bool = False
    flush_hint: str | None = None

    def spec_request_options(self, flavour: Flavour) -> dict[str, Any]:
        """Top-level body keys that ask this server for per-request speculation figures on
        ``flavour`` (a new dict; empty where it takes none)."""
        return dict(self.spec_options.get(flavour, {}))


# ------------------------------------------------------------------- helpers of the dialects


def number(value: object) -> float | None:
    """``value`` as a float when it is a JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def histogram(value: object) -> list[int] | None:
    """An acceptance histogram (index j = verify steps that accepted exactly j draft tokens) as a
    dense list: a JSON list, or an object keyed by j as text; None when it is neither."""
    if isinstance(value, Mapping):
        try:
            pairs = {int(k): v for k, v in value.items()}
        except (TypeError, ValueError):
            return None
        if not pairs or min(pairs) < 0:
            return None
        value = [pairs.get(j, 0) for j in range(max(pairs) + 1)]
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                              for v in value):
        return None
    return value


def accepted_per_position(hist: list[int] | None, server: dict[str, float]) -> None:
    """Accepted tokens per draft position from an acceptance histogram, as
    ``server["spec_accepted_pos_<i>"]``: verify steps whose i-th draft token was accepted, i.e. that
    accepted more than i (acceptance stops at the first rejected draft), the per-request
    counterpart of vLLM's ``spec_decode_num_accepted_tokens_per_pos`` counter. At least position 0
    is recorded (0 when no step accepted a draft), so its presence says the server sent a histogram."""
    if hist is None or not hist:
        return
    above = sum(hist[1:])
    for i in range(max(len(hist) - 1, 1)):
        server[f"spec_accepted_pos_{i}"] = float(above)
        above -= hist[i + 1] if i + 1 < len(hist) else 0


def accepted_per_draft(deltas: Mapping[str, float]) -> float | None:
    """1 + Δaccepted draft tokens / Δdrafts (verify steps): vLLM's and llama.cpp's acceptance
    length from counter deltas, None when no step was counted."""
    drafts, accepted = deltas.get("spec_drafts"), deltas.get("spec_accepted_tokens")
    return 1.0 + accepted / drafts if drafts and accepted is not None else None
