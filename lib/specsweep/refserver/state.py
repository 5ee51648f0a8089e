"""What every route handler of the reference server shares: its options and its state.

``ServerState`` holds the engine, the metrics of the API surface it presents, the fault plan and
the request counter; the surfaces (``app``, ``vllm_api``, ``llamacpp_api``) read it, and it reads
none of them.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

from specsweep.refserver import __version__ as REFSERVER_VERSION
from specsweep.refserver.acceptance import category_means, category_of_prompt, expected_accept_length
from specsweep.refserver.engine import EmitLog, Engine
from specsweep.refserver.faults import DataFaults, FaultConfig, FaultPlan
from specsweep.refserver.llamacpp_metrics import LlamacppMetrics
from specsweep.refserver.metrics import ServerMetrics
from specsweep.refserver.model import AcceptanceModel, ModelConfig, request_seed
from specsweep.refserver.versions import LLAMACPP_BUILD, SGLANG_VERSION, vllm_version_string
from specsweep.refserver.vllm_metrics import VllmMetrics

#: the APIs the server can present (``--api-surface``)
API_SURFACES = ("sglang", "vllm", "llamacpp")
#: prompts a simulated prefix cache remembers before it starts again
PREFIX_CACHE_ENTRIES = 100_000
#: vLLM's ``--per-request-spec-decode-metrics`` levels
SPEC_DECODE_METRICS_LEVELS = ("none", "summary", "detailed")


@dataclass
class ServerOptions:
    """Server behaviour that is not the performance model (CLI flags)."""

    host: str = "127.0.0.1"
    port: int = 30000
    seed: int = 0
    served_model_name: str | None = None
    health_delay_s: float = 1.0
    disregard_ignore_eos: bool = False
    stream_interval: int = 1
    decode_log_interval: int = 40
    emit_log_path: str | None = None
    timer_spin_ms: float = 1.0
    gate_ms: float = 2.0
    launch_command: str = "python -m specsweep.refserver"
    profile_name: str = ""
    faults: FaultConfig = field(default_factory=FaultConfig)
    #: which server's API to present: "sglang", "vllm" or "llamacpp" (see the module docstring)
    api_surface: str = "sglang"
    #: injected errors quote the request's API key, as some servers do (tests of redaction)
    fault_echo_auth: bool = False
    #: exit when this process (the launcher) is gone; None: never
    parent_pid: int | None = None
    #: vLLM surface: ``--per-request-spec-decode-metrics`` ("none", "summary" or "detailed")
    per_request_spec_decode_metrics: str = "none"
    #: faults in what the server claims: counts, /tokenize, cache flushes, quoted env values
    data_faults: DataFaults = field(default_factory=DataFaults)
    #: vLLM surface: as ``VLLM_SERVER_DEV_MODE=1``, which alone makes vLLM serve ``POST /reset_prefix_cache``
    vllm_dev_mode: bool = False

    def __post_init__(self) -> None:
        if self.api_surface not in API_SURFACES:
            raise ValueError(f"api_surface must be one of {', '.join(API_SURFACES)}; "
                             f"got {self.api_surface!r}")
        if self.per_request_spec_decode_metrics not in SPEC_DECODE_METRICS_LEVELS:
            raise ValueError("per_request_spec_decode_metrics must be one of "
                             f"{', '.join(SPEC_DECODE_METRICS_LEVELS)}; got {self.per_request_spec_decode_metrics!r}")
        if self.per_request_spec_decode_metrics != "none" and self.api_surface != "vllm":
            raise ValueError("per_request_spec_decode_metrics is a vLLM flag: it needs api_surface 'vllm'")
        if self.vllm_dev_mode and self.api_surface != "vllm":
            raise ValueError("vllm_dev_mode is vLLM's VLLM_SERVER_DEV_MODE: it needs api_surface 'vllm'")


class ServerState:
    """Everything the handlers share."""

    def __init__(self, cfg: ModelConfig, options: ServerOptions) -> None:
        self.cfg = cfg
        if cfg.accept is not None:
            category_of_prompt("")  # build the built-in prompt index now, not on the first request
        self.options = options
        self.profile = cfg.profile
        self.model_name = options.served_model_name or cfg.profile.model_name
        self.surface = options.api_surface
        #: the OpenAI semantics of vLLM (strict model name, continuous usage only with include_usage)
        self.vllm = options.api_surface in ("vllm", "llamacpp")
        self.llamacpp = options.api_surface == "llamacpp"
        spec_name = "mtp" if cfg.spec else "off"
        self.emit_log = EmitLog() if options.emit_log_path else None
        self.metrics: ServerMetrics | VllmMetrics | LlamacppMetrics
        if self.vllm:  # vLLM and llama.cpp: metrics observe the engine's steps, gauges read it live
            observed: VllmMetrics | LlamacppMetrics
            if self.llamacpp:
                self.version = f"llama.cpp {LLAMACPP_BUILD} (specsweep refserver {REFSERVER_VERSION}, simulated)"
                observed = LlamacppMetrics(cfg.num_steps if cfg.spec else None)
            else:
                self.version = vllm_version_string()
                observed = VllmMetrics(self.model_name, profile=cfg.profile.name, spec=spec_name,
                                       version=self.version, num_steps=cfg.num_steps)
            self.metrics = observed
            self.engine = Engine(cfg, metrics=None,
                                 decode_log_interval=options.decode_log_interval,
                                 spin_s=options.timer_spin_ms / 1e3, emit_log=self.emit_log,
                                 gate_s=options.gate_ms / 1e3, observer=observed.observe_step)
            observed.attach(self.engine.core)
        else:
            self.version = f"{SGLANG_VERSION} (specsweep refserver {REFSERVER_VERSION}, simulated)"
            sglang_metrics = ServerMetrics(
                self.model_name, profile=cfg.profile.name, spec=spec_name,
                version=self.version, num_steps=cfg.num_steps,
                num_draft_tokens=cfg.num_draft_tokens)
            sglang_metrics.max_running_requests.set(cfg.max_running_requests)
            sglang_metrics.max_total_num_tokens.set(cfg.max_total_num_tokens)
            self.metrics = sglang_metrics
            self.engine = Engine(cfg, metrics=sglang_metrics,
                                 decode_log_interval=options.decode_log_interval,
                                 spin_s=options.timer_spin_ms / 1e3, emit_log=self.emit_log,
                                 gate_s=options.gate_ms / 1e3)
        self.faults = options.faults
        self.next_index = 0
        self.started_wall = time.time()
        #: the prompts whose prefixes a vLLM surface holds, by (cache_salt, prompt digest): the engine
        #: keeps no KV, but hits are counted as vLLM's ``prefix_cache_hits`` counter counts them
        self.prefix_cache: set[tuple[str | None, int]] = set()
        self.counts = {"requests": 0, "errors_injected": 0, "drops_injected": 0,
                       "stalls_injected": 0, "malformed_injected": 0, "rejected": 0}

    def take_index(self) -> tuple[int, FaultPlan]:
        """The next request index and its faults."""
        index = self.next_index
        self.next_index += 1
        self.counts["requests"] += 1
        return index, self.faults.plan(index)

    def note_prefix(self, cache_salt: str | None, digest: int, prompt_tokens: int) -> None:
        """A vLLM surface's prefix-cache lookup of one prompt: a hit when the same prompt came
        before with the same ``cache_salt`` (vLLM keys cached blocks by the salt) since the last
        flush; counted in tokens on ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits``."""
        if not isinstance(self.metrics, VllmMetrics):
            return
        key = (cache_salt, digest)
        hit = key in self.prefix_cache
        if not hit and len(self.prefix_cache) >= PREFIX_CACHE_ENTRIES:
            self.prefix_cache.clear()  # bounded, as a real cache evicts
        self.prefix_cache.add(key)
        self.metrics.observe_prefix(prompt_tokens, hit)

    def rid(self, index: int) -> str:
        """A request id, stable under ``--seed``."""
        return f"{request_seed(self.options.seed, index, 'rid'):016x}"

    # -- content-dependent acceptance (acceptance.py) ---------------------------------------
    def request_acceptance(self, prompt_text: str) -> AcceptanceModel | None:
        """The acceptance of one request with this prompt: its built-in category
        (``acceptance.category_of_prompt``) and repetitiveness move the profile's mean accept
        length (``acceptance.expected_accept_length``); None without speculation. Prompts sent
        as token IDs have no text (``""``): category ``all``, the profile's own mean."""
        accept = self.cfg.accept
        if accept is None or self.cfg.mean_accept_length is None or not prompt_text:
            return None  # no text: the profile's model itself, bit for bit as if there were no content rule
        k = accept.num_steps
        mean = expected_accept_length(prompt_text, category_of_prompt(prompt_text), self.cfg.mean_accept_length, k)
        return _acceptance_model(k, min(float(k + 1), max(1.0, round(mean, 12))))

    def category_accept_lengths(self) -> dict[str, float] | None:
        """Mean accept length (tokens per verify step) per category at repetitiveness 0, or
        None without speculation (``acceptance.category_means``)."""
        accept = self.cfg.accept
        if accept is None or self.cfg.mean_accept_length is None:
            return None
        return {k: round(v, 6) for k, v in category_means(self.cfg.mean_accept_length, accept.num_steps).items()}

    # -- /server_info ----------------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        """SGLang-shaped ``/server_info`` (flat server args + scheduler info + internal states)."""
        cfg, prof, opt = self.cfg, self.profile, self.options
        core = self.engine.core
        spec = cfg.spec
        s = prof.speculative
        internal: dict[str, Any] = {
            "tp_size": cfg.tp_size,
            "world_size": cfg.tp_size,
            "max_running_requests": cfg.max_running_requests_arg,
            "effective_max_running_requests_per_dp": cfg.max_running_requests,
            "last_gen_throughput": round(self.engine.last_gen_throughput, 3),
            "memory_usage": {
                "weight": prof.memory.weights_gib_per_rank
                + (s.draft_weights_gib_per_rank if spec else 0.0),
                "kvcache": round(cfg.max_total_num_tokens * (
                    prof.memory.pool_bytes_per_token_per_rank
                    + (s.draft_pool_bytes_per_token_per_rank if spec else 0.0)) / 2**30, 3),
                "token_capacity": cfg.max_total_num_tokens,
            },
            "simulated": True,
        }
        if spec and core.spec_verify_total > 0:
            internal["avg_spec_accept_length"] = core.avg_spec_accept_length
        return {
            "model_path": prof.model.model_path,
            "tokenizer_path": prof.model.model_path,
            "served_model_name": self.model_name,
            "host": opt.host,
            "port": opt.port,
            "tp_size": cfg.tp_size,
            "dp_size": 1,
            "pp_size": 1,
            "ep_size": 1,
            "mem_fraction_static": cfg.mem_fraction_static,
            "max_running_requests": cfg.max_running_requests_arg,
            "max_total_tokens": None,
            "chunked_prefill_size": cfg.chunked_prefill_size,
            "context_length": cfg.context_length,
            "schedule_policy": "fcfs",
            "disable_radix_cache": True,  # the simulated engine keeps no prefix cache (SGLang's flag for that)
            "speculative_algorithm": s.algorithm if spec else None,
            "speculative_draft_model_path": prof.model.model_path if spec else None,
            "speculative_num_steps": cfg.num_steps,
            "speculative_eagle_topk": cfg.eagle_topk,
            "speculative_num_draft_tokens": cfg.num_draft_tokens,
            "stream_interval": opt.stream_interval,
            "incremental_streaming_output": False,
            "decode_log_interval": opt.decode_log_interval,
            "enable_metrics": True,
            "random_seed": opt.seed,
            "launch_command": opt.launch_command,
            "status": "ready",
            "max_total_num_tokens": cfg.max_total_num_tokens,
            "max_req_input_len": cfg.max_total_num_tokens - 1,
            "startup_time": self.started_wall,
            "internal_states": [internal],
            "version": self.version,
            "simulated": True,
            "specsweep_refserver": {
                "simulated": True,
                "profile": prof.name,
                "profile_description": prof.description,
                "spec": "mtp" if spec else "off",
                "speculative_launch_algorithm": s.launch_algorithm if spec else None,
                "mean_accept_length": cfg.mean_accept_length,
                "accept_probability": cfg.accept.p if cfg.accept else None,
                # per-category mean accept lengths of the content-dependent rule (acceptance.py)
                "category_accept_lengths": self.category_accept_lengths(),
                "seed": opt.seed,
                "faults": {
                    "error_rate": self.faults.error_rate, "drop_rate": self.faults.drop_rate,
                    "stall_rate": self.faults.stall_rate, "stall_s": self.faults.stall_s,
                    "malformed_rate": self.faults.malformed_rate,
                    "omit_usage": self.faults.omit_usage,
                },
                "disregard_ignore_eos": opt.disregard_ignore_eos,
                "health_delay_s": opt.health_delay_s,
                "counts": dict(self.counts),
                "engine": self.engine.stats(),
                "model": cfg.describe(),
            },
        }


@functools.lru_cache(maxsize=4096)
def _acceptance_model(num_steps: int, mean_accept_length: float) -> AcceptanceModel:
    """One shared (immutable) model per distinct mean: solving ``p`` is a bisection."""
    return AcceptanceModel(num_steps, mean_accept_length)
