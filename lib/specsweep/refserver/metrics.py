"""Prometheus metrics with SGLang's names, in the server's own ``CollectorRegistry``.

Labels on every ``sglang:*`` series: ``model_name`` (the served name), ``engine_type``
(``"unified"``, SGLang's value for a non-disaggregated server, so label filters written for
SGLang keep working) and ``tp_rank`` (``"0"``). That the server is simulated is said by a
separate gauge, ``specsweep_refserver_info{simulated="true",profile=...,spec=...} 1``.

Like SGLang, the scheduler gauges (running and queued requests, generation throughput, token
usage, acceptance length and rate) are refreshed only once every ``decode_log_interval`` decode
steps (default 40; ``--decode-log-interval``) and when the engine goes idle (then running,
queued and throughput read 0). Counters and histograms are updated per request when it
finishes (TTFT at its first token).
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "ServerMetrics"]

_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20,
                 40, 60, 80, 120, 160)
_E2E_BUCKETS = (0.01, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 150,
                200, 250, 300, 350, 500, 1000)


class ServerMetrics:
    """The server's metrics; ``render()`` gives the Prometheus text exposition."""

    def __init__(self, model_name: str, *, profile: str, spec: str, version: str,
                 num_steps: int | None, num_draft_tokens: int | None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        names = ("model_name", "engine_type", "tp_rank")
        values = (model_name, "unified", "0")
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=r).labels(*values)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=r).labels(*values)

        self.num_running_reqs = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.num_queue_reqs = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.num_used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.spec_accept_length = gauge(
            "sglang:spec_accept_length",
            "The average acceptance length of speculative decoding (accepted drafts + bonus token per forward).")
        self.spec_accept_rate = gauge(
            "sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.")
        self.spec_num_steps = gauge("sglang:spec_num_steps", "Speculative decoding num_steps.")
        self.spec_num_draft_tokens = gauge(
            "sglang:spec_num_draft_tokens", "Speculative decoding num_draft_tokens.")
        self.max_running_requests = gauge(
            "sglang:max_running_requests", "The effective max running requests.")
        self.max_total_num_tokens = gauge(
            "sglang:max_total_num_tokens", "The size of the token pool.")
        self.prompt_tokens_total = counter("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens_total = counter(
            "sglang:generation_tokens", "Number of generation tokens processed.")
        self.num_requests_total = counter("sglang:num_requests", "Number of requests processed.")
        self.cached_tokens_total = counter("sglang:cached_tokens", "Number of cached prompt tokens.")
        self.spec_verify_calls_total = counter(
            "sglang:spec_verify_calls", "Number of speculative verify calls (per request).")
        self.ttft = Histogram("sglang:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", names,
                              buckets=_TTFT_BUCKETS, registry=r).labels(*values)
        self.e2e = Histogram("sglang:e2e_request_latency_seconds",
                             "Histogram of End-to-end request latency in seconds", names,
                             buckets=_E2E_BUCKETS, registry=r).labels(*values)
        self.queue_time = Histogram("sglang:queue_time_seconds",
                                    "Histogram of queueing time in seconds.", names,
                                    buckets=_E2E_BUCKETS, registry=r).labels(*values)
        info = Gauge("specsweep_refserver_info",
                     "This server is the specsweep reference server: a SIMULATED SGLang engine, "
                     "not a GPU. Labels give the profile and arm.",
                     ("simulated", "profile", "spec", "version", "model_name"), registry=r)
        info.labels("true", profile, spec, version, model_name).set(1)
        if num_steps is not None:
            self.spec_num_steps.set(num_steps)
        if num_draft_tokens is not None:
            self.spec_num_draft_tokens.set(num_draft_tokens)

    def render(self) -> bytes:
        """The Prometheus text exposition of all metrics."""
        return generate_latest(self.registry)
