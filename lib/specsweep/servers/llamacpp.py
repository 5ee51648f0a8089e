"""llama.cpp's ``llama-server``: ``/props`` for detection and settings, ``timings`` figures,
``llamacpp:*`` metrics, per-slot prompt caches.

``llama-server`` answers ``/props`` with ``default_generation_settings`` and ``total_slots`` (and
``/v1/models`` with ``owned_by: "llamacpp"``); ``/slots`` says whether its slots speculate. Every
stream's final chunk carries ``timings`` (no request field needed). A level's acceptance length
is tokens per target step from the timings (every target forward counted, as SGLang's completion
tokens per verify step); its own figure, 1 + Δaccepted / Δdrafts where
``spec_decode_num_drafts_total`` counts verification steps only, is per drafted step and is kept
under its own name with the share of steps that carried a draft (:data:`TIMINGS`). Its ``/tokenize`` takes
``{"content", "add_special"}`` and answers ``{"tokens"}``. It has no prefix-cache flush route:
each slot keeps its prompt cache, emptied by ``POST /slots/{id}?action=erase``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specsweep.servers.dialect import (
    SIM_COUNTERS,
    Dialect,
    Fetch,
    Sign,
    TimingsAcceptance,
    accepted_per_draft,
    number,
)

if TYPE_CHECKING:  # annotations only: the dialects need no pandas at import
    import pandas as pd

__all__ = ["DIALECT", "LAUNCH_PROPS_KEY", "NO_PROMPT_CACHE", "PROPS_KEYS", "SPEC_TYPE_UNREPORTED", "TIMINGS",
           "props_settings", "step_figures", "timings_figures"]

#: /props keys kept; ``default_generation_settings`` is flattened to n_ctx and the draft limits ``speculative.*``
PROPS_KEYS = ("total_slots", "model_alias", "model_path", "build_info", "endpoint_slots", "endpoint_metrics")
#: the label of a llama.cpp server whose slots speculate but whose /props names no type
SPEC_TYPE_UNREPORTED = "speculative (type not reported)"
#: ``GET /props`` → ``ui_settings`` key where ``specsweep.engines.llamacpp`` records its settings
LAUNCH_PROPS_KEY = "specsweep_launch"
#: what a request body carries when the server refuses slot erase: no prompt-cache reuse
NO_PROMPT_CACHE = {"cache_prompt": False}


def props_settings(props: dict[str, Any], slots: Any = None) -> dict[str, Any]:
    """The server snapshot of a llama.cpp ``/props`` body (and ``/slots``, when it answered).

    Keeps ``PROPS_KEYS`` and adds: ``parallel_slots`` and ``max_running_requests`` (``total_slots``,
    llama-server's ``--parallel``), ``context_length`` (``default_generation_settings.n_ctx``, per
    slot), the draft limits ``draft_max`` / ``draft_min`` / ``draft_p_min`` where ``params`` has
    ``speculative.n_max`` / ``n_min`` / ``p_min`` (older builds), ``speculative_types`` where it
    has ``speculative.types`` (newer builds: ``"none"``, ``"draft-simple"``, ``"ngram-mod"``, …),
    and ``speculative_algorithm`` from ``/slots`` (whose per-slot ``speculative`` is what the server
    does): the types when a slot speculates and they name one (else ``"draft"``), None when no slot
    speculates; without ``/slots`` (``--no-slots``) only types other than ``"none"`` count — a real
    llama-server started with ``--spec-type draft-simple`` still reports ``"none"`` there (the
    per-request default), so ``"none"`` alone proves nothing and the key stays absent (unknown).
    llama.cpp's ``/props`` names no draft model file.
    """
    out: dict[str, Any] = {k: props[k] for k in PROPS_KEYS if k in props}
    if isinstance(props.get("total_slots"), int):
        out["parallel_slots"] = out["max_running_requests"] = props["total_slots"]
    dgs = props.get("default_generation_settings")
    if isinstance(dgs, dict):
        if isinstance(dgs.get("n_ctx"), int):
            out["context_length"] = dgs["n_ctx"]
        params: dict[str, Any] = dgs["params"] if isinstance(dgs.get("params"), dict) else dgs
        for src, dst in (("speculative.n_max", "draft_max"), ("speculative.n_min", "draft_min"),
                         ("speculative.p_min", "draft_p_min")):
            if isinstance(params.get(src), (int, float)) and not isinstance(params.get(src), bool):
                out[dst] = params[src]
        if isinstance(params.get("speculative.types"), str):
            out["speculative_types"] = params["speculative.types"]
    if isinstance(props.get("chat_template"), str):
        out["has_chat_template"] = bool(props["chat_template"].strip())
    types = out.get("speculative_types")
    named = types if isinstance(types, str) and types not in ("", "none") else None
    # older builds (draft limits in /props, no types) drafted only with a draft model; newer ones
    # say "none" per request whatever the server does, and an n-gram drafter is no draft model
    unnamed = "draft" if "speculative_types" not in out and "draft_max" in out else SPEC_TYPE_UNREPORTED
    if isinstance(slots, list) and slots and all(isinstance(x, dict) for x in slots):
        spec = any(bool(x.get("speculative")) for x in slots)
        out["speculative_algorithm"] = (named or unnamed) if spec else None
    elif named:
        out["speculative_algorithm"] = named
    _apply_launch_settings(props, out)
    return out


def _apply_launch_settings(props: dict[str, Any], out: dict[str, Any]) -> None:
    """Settings recorded by ``specsweep.engines.llamacpp`` (``/props`` ``ui_settings.specsweep_launch``):
    kept as ``launch`` and, being what the engine was given, they name the speculative type
    (``--spec``: ``none`` → None; ``draft`` → ``"draft"`` (a draft model), n-gram arms by their
    own name, never "draft"), the draft limits and, where ``build_info`` names no build, the
    engine's version (``xllamacpp <its package version>``)."""
    ui = props.get("ui_settings")
    launch = ui.get(LAUNCH_PROPS_KEY) if isinstance(ui, dict) else None
    if not isinstance(launch, dict):
        return
    out["launch"] = launch
    spec = launch.get("spec")
    if isinstance(spec, str) and spec:
        out["speculative_algorithm"] = None if spec == "none" else spec
    for key in ("draft_max", "draft_min", "draft_p_min"):
        value = launch.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value
    if isinstance(launch.get("draft_model_path"), str):
        out["speculative_draft_model_path"] = launch["draft_model_path"]
    if _unknown_build(out.get("build_info")) and isinstance(launch.get("xllamacpp_version"), str):
        out["version"] = f"xllamacpp {launch['xllamacpp_version']}"  # the wheel names the engine's build


def _unknown_build(build_info: Any) -> bool:
    """Whether ``/props`` ``build_info`` says nothing (``b0-unknown``: built without a build number
    or commit, as the xllamacpp wheel's server is)."""
    return not isinstance(build_info, str) or build_info.startswith("b0-") or "unknown" in build_info


def _settings(found: Mapping[str, dict[str, Any]], fetch: Fetch) -> dict[str, Any]:
    props = found.get("/props") or {}
    return props_settings(props, fetch("/slots") if props else None)


def timings_figures(timings: Mapping[str, Any], server: dict[str, float]) -> None:
    """llama.cpp's final-chunk ``timings``: draft counts → per-request speculation figures.

    ``draft_n`` tokens were drafted and ``draft_n_accepted`` kept; every target forward yields one
    token of its own plus the drafts it accepted, so the request took ``predicted_n −
    draft_n_accepted`` target steps (its first token, from the prompt pass, included, as SGLang's
    ``spec_verify_ct`` does) and its acceptance length is ``predicted_n / steps``. A request that
    drafted nothing has no draft counts (``timings_predicted_n`` only); ``metrics.requests_frame``
    counts it as 0 drafted when others of its level drafted.
    """
    drafted, accepted, predicted = (number(timings.get(k)) for k in ("draft_n", "draft_n_accepted", "predicted_n"))
    if predicted is not None:
        server["timings_predicted_n"] = predicted
    if drafted is None or accepted is None:
        return  # llama.cpp leaves the draft counts out of a request that drafted nothing
    server["spec_draft_tokens"] = drafted
    server["spec_accepted_tokens"] = accepted
    if drafted > 0:
        server["spec_draft_acceptance_rate"] = accepted / drafted
    if predicted is not None and predicted > accepted:
        server["spec_verify_ct"] = predicted - accepted
        server["spec_accept_length"] = predicted / (predicted - accepted)


def step_figures(requests: pd.DataFrame, before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Where llama.cpp's two acceptance figures part: the timings' sums against its counters.

    A llama.cpp response's ``timings`` carry ``draft_n`` (tokens drafted) and ``draft_n_accepted``
    but not how many verification steps it took; ``/metrics`` counts those
    (``spec_decode_num_drafts_total``: steps that verified a draft). A request's tokens are its
    first (from the prompt pass) + one per plain step (nothing drafted: an n-gram drafter often
    finds no match) + 1 + accepted per verification step, so Σ (tokens − accepted) = requests +
    plain steps + verification steps. Returned (counts over the level's successful requests):
    ``spec_tokens_per_step`` (tokens per target forward, the timings' figure),
    ``spec_draft_tokens_timings`` / ``spec_accepted_tokens_timings`` (Σ draft_n, Σ
    draft_n_accepted: equal to the counter deltas ``spec_draft_tokens_counters`` /
    ``spec_accepted_tokens_counters`` when only this sweep used the server),
    ``spec_verify_steps_counters`` (Δ verification steps), ``spec_plain_steps`` (target
    forwards that verified no draft, the first token's prompt pass excluded; an estimate: a step
    truncated at ``max_tokens`` counts its discarded drafts) and ``spec_draft_share`` (the share
    of those decode steps that carried a draft, 0..1: verification ÷ (verification + plain)).
    """
    ok = requests[requests["error"].isna() & (requests["output_tokens"].fillna(0) > 0)]
    if not len(ok) or "spec_verify_ct" not in ok.columns or ok["spec_verify_ct"].isna().any():
        return {}
    tokens, steps = float(ok["output_tokens"].sum()), float(ok["spec_verify_ct"].sum())
    out: dict[str, float] = {"spec_tokens_per_step": tokens / steps} if steps > 0 else {}
    out["spec_draft_tokens_timings"] = float(ok["spec_draft_tokens"].fillna(0.0).sum())
    out["spec_accepted_tokens_timings"] = float(ok["spec_accepted_tokens"].fillna(0.0).sum())
    for key, name in (("spec_draft_tokens", "spec_draft_tokens_counters"),
                      ("spec_accepted_tokens", "spec_accepted_tokens_counters"),
                      ("spec_drafts", "spec_verify_steps_counters")):
        if key in before and key in after:
            out[name] = after[key] - before[key]
    if "spec_verify_steps_counters" in out:
        out["spec_plain_steps"] = steps - len(ok) - out["spec_verify_steps_counters"]
        if steps - len(ok) > 0:
            out["spec_draft_share"] = out["spec_verify_steps_counters"] / (steps - len(ok))
    return out


#: the level's accept length from each response's timings, tokens per target step (every forward,
#: drafted or not: SGLang's definition), against llama.cpp's own (its ``mean len`` log line and
#: ``/metrics``), per drafted step, which reads high when few steps draft (an n-gram drafter)
TIMINGS = TimingsAcceptance(
    counters_formula=("1 + Δllamacpp:spec_decode_num_accepted_tokens / Δllamacpp:spec_decode_num_drafts "
                      "(accepted drafts per drafted step: llama.cpp's definition)"),
    timings_formula=("Σ completion tokens / Σ (completion tokens − draft_n_accepted): tokens per "
                     "target step, steps that drafted nothing included, as SGLang's"),
    step_figures=step_figures,
)


def _tokenize_body(text: str, model: str | None) -> dict[str, Any]:
    return {"content": text, "add_special": False}


def _is_llama_server(body: dict[str, Any]) -> bool:
    return "default_generation_settings" in body or "total_slots" in body


DIALECT = Dialect(
    name="llamacpp",
    label="llama.cpp",
    signs=(Sign("/props", _is_llama_server),),
    owned_by="llamacpp",
    precedence=1,
    settings=_settings,
    tokenize_body=_tokenize_body,
    chunk_figures={"timings": timings_figures},
    gauges={"running_requests": ("llamacpp:requests_processing", "sum"),
            "queued_requests": ("llamacpp:requests_deferred", "sum")},
    counters={"generation_tokens": "llamacpp:tokens_predicted_total", "prompt_tokens": "llamacpp:prompt_tokens_total",
              "decode_calls": "llamacpp:n_decode_total", "spec_drafts": "llamacpp:spec_decode_num_drafts_total",
              "spec_draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
              "spec_accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total", **SIM_COUNTERS},
    per_position="llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
    acceptance=accepted_per_draft,
    acceptance_formula="1 + Δllamacpp:spec_decode_num_accepted_tokens / Δllamacpp:spec_decode_num_drafts",
    acceptance_definition=("llama.cpp's accept length is 1 + accepted draft tokens per verification step (its "
                           "counters); its timings count every target forward, steps that drafted nothing included"),
    timings=TIMINGS,
    erase_slots=True,
    no_cache_options=NO_PROMPT_CACHE,
)
