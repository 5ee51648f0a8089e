"""TensorRT-LLM's ``trtllm-serve``: ``owned_by: "tensorrt_llm"`` for detection, per-choice
``avg_decoded_tokens_per_iter``, ``trtllm_*`` metrics at ``/prometheus/metrics``.

``trtllm-serve`` answers ``/version`` and ``/server_info`` too (so its other signs are vLLM's and
SGLang's); only its ``/v1/models`` entries' ``owned_by: "tensorrt_llm"`` tell it apart, and they
take precedence over both. Its ``/metrics`` is a JSON list of iteration statistics, not Prometheus
text; the Prometheus exposition is at ``/prometheus/metrics`` (with ``return_perf_metrics``).
Every streamed choice carries ``avg_decoded_tokens_per_iter``: the request's tokens per decoding
iteration so far (the first token's context iteration included, as SGLang's accept length), so
its verify steps are completion tokens ÷ that figure. Its stream's first chunk ends ``} \\n\\n`` (a
blank before the blank line). It has no prefix-cache flush route and no ``/tokenize``; its
running-request cap is ``--max_batch_size``, which no route reports.
"""
from __future__ import annotations

from typing import Any

from specsweep.servers.dialect import SIM_COUNTERS, Dialect, number

__all__ = ["DIALECT", "TOKENS_PER_ITER", "iteration_figures"]

#: the request's ``server`` figure of ``avg_decoded_tokens_per_iter`` (tokens per decoding iteration)
TOKENS_PER_ITER = "spec_tokens_per_iter"


def iteration_figures(value: Any, server: dict[str, float]) -> None:
    """A choice's ``avg_decoded_tokens_per_iter`` (null without speculation) as the request's
    tokens per iteration and its accept length; the last chunk's value stands (it covers the
    whole request)."""
    v = number(value)
    if v is not None and v > 0:
        server[TOKENS_PER_ITER] = v
        server["spec_accept_length"] = v


DIALECT = Dialect(
    name="trtllm",
    label="TensorRT-LLM",
    owned_by="tensorrt_llm",
    precedence=4,  # it answers vLLM's /version and SGLang's /server_info as well
    choice_figures={"avg_decoded_tokens_per_iter": iteration_figures},
    gauges={"running_requests": ("trtllm_num_requests_running", "sum"),
            "queued_requests": ("trtllm_num_requests_waiting", "sum"),
            "kv_usage": ("trtllm_kv_cache_utilization", "max"),
            "spec_accept_length_gauge": ("trtllm_spec_decode_acceptance_length", "max")},
    counters={"generation_tokens": "trtllm_generation_tokens_total", "prompt_tokens": "trtllm_prompt_tokens_total",
              "requests": "trtllm_request_success_total",
              "spec_draft_tokens": "trtllm_spec_decode_num_draft_tokens_total",
              "spec_accepted_tokens": "trtllm_spec_decode_num_accepted_tokens_total", **SIM_COUNTERS},
    acceptance_formula="",
    acceptance_definition=("TensorRT-LLM's accept length is avg_decoded_tokens_per_iter: generated tokens per "
                           "decoding iteration of the request, the bonus token and the first token's context "
                           "iteration included"),
    metrics_path="/prometheus/metrics",
    cap_unexposed="not exposed: trtllm-serve reports no --max_batch_size on any route",
)
