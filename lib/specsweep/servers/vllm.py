"""vLLM: ``/version`` and ``owned_by: "vllm"`` for detection, ``metrics.speculative_decoding``
figures, ``vllm:*`` metrics, ``POST /reset_prefix_cache``.

vLLM answers ``/version`` (and ``/server_info`` too in its dev mode, which is not SGLang's and is
not kept). Per-request speculation figures need a server flag, not a request field, and have had
two shapes: the top-level ``metrics.speculative_decoding`` of the final usage chunk
(``--per-request-spec-decode-metrics summary|detailed``) and, before it, the terminal chunk's
``choices[].speculative_decoding_stats`` (``--per-request-spec-decode-stats``), the same fields;
either is read, each figure once. Its acceptance length over a level is 1 + Δaccepted / Δdrafts;
with async scheduling its counters also count draft steps that proposed nothing, which lowers it.

``POST /reset_prefix_cache`` exists only with ``VLLM_SERVER_DEV_MODE=1``; without it every request
of a level carries that level's own ``cache_salt`` (vLLM keys cached blocks by it), so no level
reads blocks another left. vLLM reports no ``--max-num-seqs`` on any route.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specsweep.servers.dialect import (
    SIM_COUNTERS,
    Dialect,
    Sign,
    accepted_per_draft,
    accepted_per_position,
    histogram,
    number,
)

__all__ = ["DIALECT", "SPEC_KEYS", "choice_stats_figures", "metrics_figures", "spec_figures"]

#: vLLM's ``metrics.speculative_decoding`` → ``RequestRecord.server`` names
SPEC_KEYS = {
    "mean_acceptance_length": "spec_mean_acceptance_length",  # 1 + accepted / steps
    "draft_acceptance_rate": "spec_draft_acceptance_rate",
    "num_spec_steps": "spec_verify_ct",
    "num_accepted_draft_tokens": "spec_accepted_tokens",
    "num_draft_tokens": "spec_draft_tokens",
    "num_spec_tokens": "spec_num_spec_tokens",
}


def spec_figures(spec: Mapping[str, Any], server: dict[str, float]) -> None:
    """vLLM's ``metrics.speculative_decoding``: counts under the names the other servers' figures
    use (``spec_verify_ct`` = ``num_spec_steps``, ``spec_accepted_tokens``, ``spec_draft_tokens``),
    ``mean_acceptance_length`` also as the request's ``spec_accept_length``, and the
    ``acceptance_histogram`` (or, without one, the ``detailed`` level's ``per_step_accepted``) as
    accepted tokens per draft position. ``acceptance_histogram_by_draft_length`` is not read."""
    for k, name in SPEC_KEYS.items():
        v = number(spec.get(k))
        if v is not None:
            server[name] = v
    if "spec_mean_acceptance_length" in server:
        server["spec_accept_length"] = server["spec_mean_acceptance_length"]
    hist = histogram(spec.get("acceptance_histogram"))
    steps = spec.get("per_step_accepted")
    if hist is None and isinstance(steps, list) and all(isinstance(a, int) and not isinstance(a, bool) and a >= 0
                                                        for a in steps):
        hist = [0] * (max(steps, default=0) + 1)
        for a in steps:
            hist[a] += 1
    accepted_per_position(hist, server)


def metrics_figures(metrics: Mapping[str, Any], server: dict[str, float]) -> None:
    """A chunk's top-level ``metrics``: its ``speculative_decoding`` object, where it has one."""
    spec = metrics.get("speculative_decoding")
    if isinstance(spec, dict):
        spec_figures(spec, server)


def choice_stats_figures(stats: Any, server: dict[str, float]) -> None:
    """A choice's ``speculative_decoding_stats`` (the earlier per-choice shape; null on a request
    that did not speculate): the same fields as ``metrics.speculative_decoding``."""
    if isinstance(stats, Mapping):
        spec_figures(stats, server)


def _has_version(body: dict[str, Any]) -> bool:
    return "version" in body  # SGLang has no /version


DIALECT = Dialect(
    name="vllm",
    label="vLLM",
    signs=(Sign("/version", _has_version),),
    owned_by="vllm",
    precedence=3,  # a vLLM in dev mode answers /server_info as well
    chunk_figures={"metrics": metrics_figures},
    choice_figures={"speculative_decoding_stats": choice_stats_figures},
    gauges={"running_requests": ("vllm:num_requests_running", "sum"),
            "queued_requests": ("vllm:num_requests_waiting", "sum"),
            "kv_usage": ("vllm:kv_cache_usage_perc", "max")},
    counters={"generation_tokens": "vllm:generation_tokens_total", "prompt_tokens": "vllm:prompt_tokens_total",
              "requests": "vllm:request_success_total", "spec_drafts": "vllm:spec_decode_num_drafts_total",
              "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
              "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total", **SIM_COUNTERS},
    per_position="vllm:spec_decode_num_accepted_tokens_per_pos_total",
    acceptance=accepted_per_draft,
    acceptance_formula="1 + Δvllm:spec_decode_num_accepted_tokens / Δvllm:spec_decode_num_drafts",
    acceptance_definition=("vLLM's accept length is 1 + accepted draft tokens per draft step (the bonus token "
                           "included, the prefill's token not); with async scheduling its counters also count "
                           "draft steps that proposed nothing, which lowers it"),
    cap_unexposed="not exposed: vLLM reports no --max-num-seqs on any route",
    flush_routes=("/reset_prefix_cache",),
    cache_salt=True,
    flush_hint="vLLM serves POST /reset_prefix_cache only when started with VLLM_SERVER_DEV_MODE=1",
)
