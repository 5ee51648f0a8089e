"""SGLang: ``/server_info`` for detection and settings, ``meta_info`` / ``sglext`` figures,
``sglang:*`` metrics, ``POST /flush_cache``.

SGLang answers ``/server_info`` (or the older ``/get_server_info``) and has no ``/version``. Its
per-request speculation figures come in the final ``meta_info`` of ``/generate`` (0.5.23
``tokenizer_manager._calculate_spec_decoding_metrics``, sent only when the request had a verify
step) and, on the OpenAI routes asked with ``return_spec_tokens_details``, in the
``sglext.spec_tokens_details`` object built from them. Builds before a rename send the draft
counts and histogram under older names (``spec_accepted_drafts``, ``spec_proposed_drafts``,
``spec_accept_histogram``; for a while both sets): either set is read, the newer winning, each
figure once. Its acceptance length over a level is Δgeneration tokens / Δverify calls (the
prefill's token included). Its running-request cap is ``max_running_requests``; left unset (null
in ``/server_info``) the real one is ``internal_states[0].effective_max_running_requests_per_dp``
per data-parallel rank.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specsweep.servers.dialect import (
    OPENAI_FLAVOURS,
    SIM_COUNTERS,
    Dialect,
    Fetch,
    Sign,
    accepted_per_position,
    configured_cap,
    histogram,
    number,
)

__all__ = ["DIALECT", "INTERNAL_STATE_KEYS", "OLD_SPEC_KEYS", "SERVER_INFO_KEYS", "SPEC_KEYS", "meta_figures",
           "running_cap", "sglext_figures", "spec_figures", "trim_server_info"]

#: server_info keys kept in meta.json (the rest is trimmed: it can be large and is not needed)
SERVER_INFO_KEYS = (
    "version", "model_path", "served_model_name", "tp_size", "dp_size", "pp_size", "max_running_requests",
    "max_total_num_tokens", "max_req_input_len", "mem_fraction_static", "chunked_prefill_size",
    "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "speculative_draft_model_path", "stream_interval", "schedule_policy", "enable_metrics", "attention_backend",
    "cuda_graph_max_bs", "disable_radix_cache", "simulated", "profile",
)  # never launch_command or api_key: a server's command line can carry its API key
INTERNAL_STATE_KEYS = ("effective_max_running_requests_per_dp", "avg_spec_accept_length", "memory_usage")

#: SGLang's per-request speculation figures → ``RequestRecord.server`` names
SPEC_KEYS = {
    "spec_accept_length": "spec_accept_length",  # completion tokens / verify steps
    "spec_verify_ct": "spec_verify_ct",
    "spec_accept_rate": "spec_accept_rate",  # correct drafts / proposed drafts
    "spec_num_correct_drafts": "spec_num_correct_drafts",
    "spec_num_proposed_drafts": "spec_num_proposed_drafts",
}
#: the same figures' names before SGLang renamed them (newer name → older name); the histogram's too
OLD_SPEC_KEYS = {
    "spec_num_correct_drafts": "spec_accepted_drafts",
    "spec_num_proposed_drafts": "spec_proposed_drafts",
    "spec_correct_drafts_histogram": "spec_accept_histogram",
}


def trim_server_info(info: dict[str, Any]) -> dict[str, Any]:
    """A ``/server_info`` body cut to :data:`SERVER_INFO_KEYS` (and the first ``internal_states``
    entry to :data:`INTERNAL_STATE_KEYS`)."""
    out = {k: info[k] for k in SERVER_INFO_KEYS if k in info}
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        out["internal_states"] = [{k: states[0][k] for k in INTERNAL_STATE_KEYS if k in states[0]}]
    return out


def _settings(found: Mapping[str, dict[str, Any]], fetch: Fetch) -> dict[str, Any]:
    return trim_server_info(found.get("/server_info") or found.get("/get_server_info") or {})


def spec_figures(src: Mapping[str, Any], server: dict[str, float]) -> None:
    """SGLang's figures from a final ``meta_info`` or an ``sglext.spec_tokens_details`` object,
    its ``spec_correct_drafts_histogram`` as accepted tokens per draft position. A figure sent under
    both its names (:data:`OLD_SPEC_KEYS`) is read once, by its newer name."""
    for k, name in SPEC_KEYS.items():
        v = number(_either(src, k))
        if v is not None:
            server[name] = v
    accepted_per_position(histogram(_either(src, "spec_correct_drafts_histogram")), server)


def _either(src: Mapping[str, Any], key: str) -> Any:
    """``src[key]``, else the value under the key's older name, else None."""
    value = src.get(key)
    old = OLD_SPEC_KEYS.get(key)
    return src.get(old) if value is None and old is not None else value


def meta_figures(meta: Mapping[str, Any], server: dict[str, float]) -> None:
    """The final ``meta_info`` of a ``/generate`` stream: ``e2e_latency`` (seconds, as
    ``e2e_latency_s``) and the speculation figures (:func:`spec_figures`)."""
    v = number(meta.get("e2e_latency"))
    if v is not None:
        server["e2e_latency_s"] = v
    spec_figures(meta, server)


def sglext_figures(sglext: Mapping[str, Any], server: dict[str, float]) -> None:
    """SGLang's OpenAI ``sglext.spec_tokens_details`` (a list with ``n > 1``: the first choice's).
    An object without verify steps is skipped, as ``meta_info`` has no figures then."""
    details = sglext.get("spec_tokens_details")
    if isinstance(details, list):
        details = details[0] if details else None
    if isinstance(details, Mapping) and (number(details.get("spec_verify_ct")) or 0) > 0:
        spec_figures(details, server)


def running_cap(server: Mapping[str, Any]) -> int | None:
    """SGLang's running-request cap from a meta.json ``server`` record: ``max_running_requests``
    where set, else ``internal_states[0].effective_max_running_requests_per_dp`` × ``dp_size``
    (what the scheduler resolved when the flag was left unset); None when neither is known."""
    cap = configured_cap(server)
    if cap is not None:
        return cap
    snapshot = server.get("server_info")
    states = snapshot.get("internal_states") if isinstance(snapshot, Mapping) else None
    state = states[0] if isinstance(states, list) and states and isinstance(states[0], Mapping) else {}
    per_dp, dp = state.get("effective_max_running_requests_per_dp"), snapshot.get("dp_size") if snapshot else None
    if not isinstance(per_dp, int) or isinstance(per_dp, bool) or per_dp < 1:
        return None
    return per_dp * (dp if isinstance(dp, int) and not isinstance(dp, bool) and dp >= 1 else 1)


def _acceptance(deltas: Mapping[str, float]) -> float | None:
    verify, gen = deltas.get("spec_verify_calls"), deltas.get("generation_tokens")
    return gen / verify if verify and gen is not None else None


def _any_object(body: dict[str, Any]) -> bool:
    return True


DIALECT = Dialect(
    name="sglang",
    label="SGLang",
    signs=(Sign("/server_info", _any_object), Sign("/get_server_info", _any_object)),
    precedence=2,
    settings=_settings,
    flavours=("sglang", *OPENAI_FLAVOURS),
    # its OpenAI request models ignore unknown top-level keys, so an older SGLang is not disturbed;
    # /generate always puts the figures in meta_info
    spec_options={f: {"return_spec_tokens_details": True} for f in OPENAI_FLAVOURS},
    chunk_figures={"sglext": sglext_figures},
    gauges={"running_requests": ("sglang:num_running_reqs", "sum"), "queued_requests": ("sglang:num_queue_reqs", "sum"),
            "kv_usage": ("sglang:token_usage", "max"), "gen_throughput_tok_s": ("sglang:gen_throughput", "sum"),
            "spec_accept_length_gauge": ("sglang:spec_accept_length", "max")},
    counters={"generation_tokens": "sglang:generation_tokens_total", "prompt_tokens": "sglang:prompt_tokens_total",
              "requests": "sglang:num_requests_total", "spec_verify_calls": "sglang:spec_verify_calls_total",
              **SIM_COUNTERS},
    acceptance=_acceptance,
    acceptance_formula="Δsglang:generation_tokens / Δsglang:spec_verify_calls",
    acceptance_definition=("SGLang's accept length counts every generated token per verify step: accepted drafts, "
                           "the bonus token and the prefill's first token (completion tokens ÷ verify steps)"),
    running_cap=running_cap,
    flush_routes=("/flush_cache",),
    cache_salt=True,
)
