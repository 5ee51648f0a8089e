"""Prometheus metrics with vLLM 0.33's names, for the vLLM API surface (``--api-surface vllm``).

Names and semantics follow ``vllm/v1/metrics/loggers.py`` as summarised in
``shared/reference/server-apis.md`` §6. Labels on every ``vllm:*`` series: ``model_name`` (the
served name) and ``engine`` (``"0"``: one engine core); ``vllm:request_success`` adds
``finished_reason`` (``length`` or ``stop``) and ``vllm:spec_decode_num_accepted_tokens_per_pos``
adds ``position`` (``0..K-1``).

* Gauges are **live**, read from the engine core at scrape time (vLLM updates them every engine
  step, unlike SGLang's every ``--decode-log-interval`` steps): ``vllm:num_requests_running``
  (requests holding a batch slot: prefilling or decoding), ``vllm:num_requests_waiting`` (queued)
  and ``vllm:kv_cache_usage_perc`` (KV tokens in use / pool size, a fraction 0..1).
* Counters (exported with ``_total``) move once per engine step, as vLLM's iteration stats do:
  ``vllm:prompt_tokens`` (a request's prompt, when its prefill completes), ``vllm:generation_tokens``
  (every token as it is produced), ``vllm:request_success`` (when a request finishes).
* With speculation (``--spec mtp``) the speculative-decoding counters exist from startup:
  ``vllm:spec_decode_num_drafts`` (one per request per verify step),
  ``vllm:spec_decode_num_draft_tokens`` (drafts × num_steps) and
  ``vllm:spec_decode_num_accepted_tokens`` (accepted draft tokens, the bonus token excluded), so
  ``1 + Δaccepted / Δdrafts`` is the tokens per verify step, the simulated mean accept length.
* Histograms, seconds: ``vllm:time_to_first_token_seconds`` (arrival to the end of the step that
  produced the first token) and ``vllm:e2e_request_latency_seconds`` (arrival to the last token).
* ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` (tokens): each prompt is looked up by
  its digest and ``cache_salt`` (``ServerState.note_prefix``); a flush empties the cache.

That the server is simulated is said by ``specsweep_refserver_info{simulated="true",...} 1`` (the
SGLang surface's gauge, plus an ``api_surface`` label).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specsweep.refserver.model import FINISHED, Step

if TYPE_CHECKING:
    from specsweep.refserver.model import EngineCore, SimRequest

__all__ = ["VllmMetrics"]

#: vLLM's bucket edges, seconds
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class VllmMetrics:
    """vLLM-named metrics; ``observe_step`` is the engine's ``StepObserver``, ``render()`` the text.

    ``num_steps``: draft tokens per verify step when speculation is on (None: no spec metrics).
    Call ``attach(core)`` once the engine exists so the live gauges can read it.
    """

    def __init__(self, model_name: str, *, profile: str, spec: str, version: str,
                 num_steps: int | None) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        names = ("model_name", "engine")
        values = (model_name, "0")
        self.num_steps = num_steps
        self._running = Gauge("vllm:num_requests_running",
                              "Number of requests in model execution batches.", names,
                              registry=r).labels(*values)
        self._waiting = Gauge("vllm:num_requests_waiting",
                              "Number of requests waiting to be processed.", names,
                              registry=r).labels(*values)
        self._kv_usage = Gauge("vllm:kv_cache_usage_perc",
                               "KV-cache usage. 1 means 100 percent usage.", names,
                               registry=r).labels(*values)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                     names, registry=r).labels(*values)
        self.generation_tokens = Counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.", names,
                                         registry=r).labels(*values)
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          (*names, "finished_reason"), registry=r)
        self.success_length = success.labels(*values, "length")
        self.success_stop = success.labels(*values, "stop")
        self.ttft = Histogram("vllm:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", names,
                              buckets=_TTFT_BUCKETS, registry=r).labels(*values)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.", names,
                             buckets=_E2E_BUCKETS, registry=r).labels(*values)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of "
                                      "queried tokens.", names, registry=r).labels(*values)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached "
                                   "tokens.", names, registry=r).labels(*values)
        self.spec_drafts: Counter | None = None
        self.spec_draft_tokens: Counter | None = None
        self.spec_accepted: Counter | None = None
        self.spec_accepted_per_pos: list[Counter] = []
        if num_steps is not None:
            self.spec_drafts = Counter("vllm:spec_decode_num_drafts",
                                       "Number of spec decoding drafts.", names,
                                       registry=r).labels(*values)
            self.spec_draft_tokens = Counter("vllm:spec_decode_num_draft_tokens",
                                             "Number of draft tokens.", names,
                                             registry=r).labels(*values)
            self.spec_accepted = Counter("vllm:spec_decode_num_accepted_tokens",
                                         "Number of accepted tokens.", names,
                                         registry=r).labels(*values)
            per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                              "Accepted tokens per draft position.", (*names, "position"),
                              registry=r)
            self.spec_accepted_per_pos = [per_pos.labels(*values, str(i))
                                          for i in range(num_steps)]
        info = Gauge("specsweep_refserver_info",
                     "This server is the specsweep reference server: a SIMULATED engine behind a "
                     "vLLM-shaped API, not a GPU. Labels give the profile and arm.",
                     ("simulated", "profile", "spec", "version", "model_name", "api_surface"),
                     registry=r)
        info.labels("true", profile, spec, version, model_name, "vllm").set(1)

    def attach(self, core: EngineCore) -> None:
        """Read the live gauges from ``core`` at every scrape."""
        pool = core.cfg.max_total_num_tokens
        self._running.set_function(lambda: core.num_admitted)
        self._waiting.set_function(lambda: len(core.waiting))
        self._kv_usage.set_function(lambda: core.kv_tokens / pool)

    def observe_prefix(self, prompt_tokens: int, hit: bool) -> None:
        """One prompt looked up in the (simulated) prefix cache: its tokens queried, and hit or not."""
        self.prefix_queries.inc(prompt_tokens)
        if hit:
            self.prefix_hits.inc(prompt_tokens)

    def observe_step(self, step: Step, emitted: list[SimRequest], t_sched: float) -> None:
        """Count one committed step (``t_sched``: its scheduled end, perf_counter seconds)."""
        generated = prompt = 0
        drafts = accepted = 0
        spec = self.spec_accepted is not None and step.kind == Step.DECODE
        per_pos = [0] * len(self.spec_accepted_per_pos) if spec else None
        for req in emitted:
            if req.index < 0:  # internal requests are not counted
                continue
            n = req.new_tokens
            generated += n
            if req.generated == n:  # the step that completed its prefill
                prompt += req.prompt_tokens
                self.ttft.observe(t_sched - req.arrival_t)
            if spec:
                drafts += 1
                accepted += n - 1
                for pos in range(n - 1):
                    per_pos[pos] += 1  # type: ignore[index]
            if req.state == FINISHED:
                self.e2e.observe(t_sched - req.arrival_t)
                if req.generated >= req.max_new_tokens:
                    self.success_length.inc()
                else:
                    self.success_stop.inc()
        if generated:
            self.generation_tokens.inc(generated)
        if prompt:
            self.prompt_tokens.inc(prompt)
        if drafts:
            assert self.spec_drafts is not None and self.spec_draft_tokens is not None
            assert self.spec_accepted is not None and self.num_steps is not None
            self.spec_drafts.inc(drafts)
            self.spec_draft_tokens.inc(drafts * self.num_steps)
            if accepted:
                self.spec_accepted.inc(accepted)
                for counter, count in zip(self.spec_accepted_per_pos, per_pos):  # type: ignore[arg-type]
                    if count:
                        counter.inc(count)

    def render(self) -> bytes:
        """The Prometheus text exposition of all metrics."""
        return generate_latest(self.registry)
