r"""The reference server's performance model: step times, token pool, acceptance, engine core.

Everything here is pure (no sockets, no sleeping): the real-time engine (``engine.py``) and the
virtual-time simulator at the bottom of this module (``simulate_closed_loop``) drive the *same*
``EngineCore``, so a calibration run here and a run over a socket follow the same schedule.

Units: times in milliseconds (``_ms``) inside the model, seconds (``_s``) at its edges; memory in
bytes unless ``_gib``; bandwidth ``_gb_s`` is decimal GB/s.

Engine loop (SGLang-like, one scheduler, no overlap)
---------------------------------------------------
* A FIFO waiting queue. At every step boundary requests are admitted from its head while
  ``admitted < max_running_requests`` **and** the token pool has room: each admitted request
  *reserves* ``prompt_tokens + min(max_new_tokens, 4096)`` tokens of ``max_total_num_tokens``
  until it finishes (a simplification of SGLang's reservation and retraction; 4096 is SGLang's
  ``CLIP_MAX_NEW_TOKENS`` estimate). Admission stops at the first request that does not fit
  (head-of-line, as FIFO).
* Prefill has priority (SGLang's default, no mixed chunk): while any admitted request still has
  prompt tokens to process, the step is a prefill step over up to ``chunked_prefill_size`` prompt
  tokens (requests in admission order, a long prompt split across steps). A request's first
  output token is produced by the step that completes its prefill.
* Otherwise the step is a decode step over the ``B`` running requests. Every request's tokens
  from one step are emitted together (one SSE chunk).

Forward cost (one forward over ``n`` tokens that read ``kv`` context tokens)
-------------------------------------------------------------------------
::

    frac_experts_touched(n) = h * (1 - (1 - s*k/(h*E))^n)          (MoE: distinct experts read,
                              + (1-h) * (1 - (1 - (1-s)*k/((1-h)*E))^n)   hot/cold routing skew)
    weight_bytes(n)         = (dense_params_b + expert_params_b * frac(n)) * 1e9 * bytes_per_param
    mem_ms(n, kv)           = 1e3 * (weight_bytes(n) + kv * kv_read_bytes_per_token) / BW_eff
    BW_eff                  = n_gpus * mem_bandwidth_gb_s * 1e9 * bandwidth_efficiency  [bytes/s]
    compute_ms(n)           = n * 2 * active_params_b * 1e9 / (n_gpus * peak_tflops * 1e12
                                                                * flops_efficiency)
    forward_ms(n, kv)       = decode.fixed_ms + max(mem_ms(n, kv), compute_ms(n))
                              + n * decode.per_token_ms

Memory-bound at small ``n`` (the weights dominate and, for an MoE, more distinct experts are read
as the batch grows), compute-bound at large ``n``. ``E`` routed experts, ``k`` per token; a share
``h`` of the experts is "hot" and receives a share ``s`` of the routing picks (real routers are
skewed); ``h = s`` is uniform routing, ``1 - (1 - k/E)^n``: each token picks ``k`` experts, taken
as independent draws with the per-class probabilities.

* **Baseline decode step** over ``B`` requests: ``t = forward_ms(B, kv)``, where ``kv`` is the sum
  of the running requests' context lengths (prompt + generated).
* **Speculative step** (``--spec mtp``; SGLang NEXTN, reported as EAGLE; ``k = num_steps`` draft
  tokens in a chain, topk 1, ``D = num_draft_tokens = k + 1`` tokens verified per request)::

      t = overhead_ms + k * (draft_step_ms + draft_ms_per_request * B)
          + verify_factor * forward_ms(B * D, kv + B * D)

  Each request then gains ``L = 1 + (consecutively accepted drafts)`` tokens, drawn per request
  and step from a seeded RNG: every draft is accepted with probability ``p`` until the first
  rejection, so ``P(L >= j+1) = p^j`` for ``j <= k`` and ``E[L] = sum_{i=0..k} p^i``; ``p`` is
  solved from the profile's ``mean_accept_length`` (bisection). A request never gains more than
  it has left (its last step is truncated at ``max_new_tokens``); per request the engine counts
  ``verify_ct`` (its speculative steps), correct drafts and the accepted drafts of each step in
  order (``accepts``), so SGLang's ``spec_accept_length = completion_tokens / verify_ct`` includes
  the prefill's token, as SGLang's does, and the per-request histograms of SGLang and vLLM follow.
* **Prefill step** over ``n`` prompt tokens: ``t = (prefill.fixed_ms + max(mem_ms(n, 0),
  n * prefill.ms_per_token)) * (speculative.prefill_factor if spec else 1)`` (the factor is the
  draft model's extend pass).

Token pool (per rank; SGLang ``max_total_num_tokens``)
------------------------------------------------------
::

    avail_gib = gpu_mem_gib * mem_fraction_static - weights_gib_per_rank
                - draft_weights_gib_per_rank (spec) - reserved_gib_per_rank
    max_total_num_tokens = floor(avail_gib * 2^30 / (pool_bytes_per_token_per_rank
                                                     + draft_pool_bytes_per_token_per_rank (spec)))

Speculation uses its own ``mem_fraction_static`` (the seed lowered it to 0.75) and carries the
draft weights, so its pool is smaller. A profile may pin ``max_total_num_tokens`` instead.

Running-request cap
-------------------
With speculation and no ``--max-running-requests``: 48 (SGLang resets it so). Without
speculation and none given: the profile's ``engine.max_running_requests`` or SGLang's rule
``min(clamp(pool / context_length * 512, 2048, 4096), pool // 2)``. Always further limited to
``pool // 2`` (SGLang ``resolve_max_num_reqs``).

``resolve(..., spec_resets_cap=False)`` (the vLLM API surface) skips the reset to 48: vLLM does
not lower ``--max-num-seqs`` for speculation, so a speculative arm gets the non-speculative rule
above (computed on the speculative pool). Step times and acceptance do not depend on it.

Calibration
-----------
``calibration.py`` / ``bench/refserver_calibration.py`` run ``simulate_closed_loop`` for the seed
profile at the seed's workload and compare with the seed's table; the profile's ``notes`` explain
each fitted term.
"""
from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from specsweep.refserver.profiles import Profile, ProfileError

__all__ = [
    "AcceptanceModel",
    "EngineCore",
    "ModelConfig",
    "SimRecord",
    "SimRequest",
    "SimResult",
    "Step",
    "RESERVE_CLIP_TOKENS",
    "frac_experts_touched",
    "request_seed",
    "resolve",
    "simulate_closed_loop",
]

#: SGLang's CLIP_MAX_NEW_TOKENS estimate: a request reserves at most this many output tokens.
RESERVE_CLIP_TOKENS = 4096


def request_seed(seed: int, index: int, salt: str) -> int:
    """A 64-bit seed for one request's RNG stream (deterministic across runs and platforms)."""
    x = (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9 + sum(salt.encode()) * 0x94D049BB133111EB)
    x &= 0xFFFFFFFFFFFFFFFF
    x ^= x >> 31
    x = (x * 0xD6E8FEB86659FD93) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 32
    return x


def frac_experts_touched(n_tokens: float, num_experts: int, experts_per_token: int,
                         hot_fraction: float = 0.5, hot_share: float = 0.5) -> float:
    """Expected fraction of routed experts read by a forward over ``n_tokens`` tokens.

    Each token picks ``k`` of ``E`` experts. A share ``hot_fraction`` of the experts receives a
    share ``hot_share`` of the picks; within a class picks are uniform and independent, so a hot
    expert is missed by one token with probability ``1 - s*k/(h*E)`` and the expected touched
    fraction is ``h*(1 - miss_hot^n) + (1-h)*(1 - miss_cold^n)``. ``h == s`` gives uniform
    routing, ``1 - (1 - k/E)^n``. A dense model (``E == k``) always reads everything.
    """
    if n_tokens <= 0:
        return 0.0
    if experts_per_token >= num_experts:
        return 1.0
    q = experts_per_token / num_experts
    h, s = hot_fraction, hot_share
    miss_hot = 1.0 - s * q / h
    miss_cold = 1.0 - (1.0 - s) * q / (1.0 - h)
    return h * (1.0 - miss_hot ** n_tokens) + (1.0 - h) * (1.0 - miss_cold ** n_tokens)


class AcceptanceModel:
    """Chain speculation: ``k`` drafts, each accepted with probability ``p`` until a rejection.

    ``L = 1 + accepted`` tokens per verify step (the bonus token included), so
    ``E[L] = sum_{i=0..k} p^i``; ``p`` is solved from the mean accept length.
    """

    __slots__ = ("num_steps", "mean_accept_length", "p", "_thresholds")

    def __init__(self, num_steps: int, mean_accept_length: float) -> None:
        if num_steps < 1:
            raise ValueError("num_steps must be >= 1")
        if not 1.0 <= mean_accept_length <= num_steps + 1:
            raise ValueError(f"mean_accept_length must be within [1, {num_steps + 1}]")
        self.num_steps = num_steps
        self.mean_accept_length = mean_accept_length
        self.p = self.solve_p(num_steps, mean_accept_length)
        self._thresholds = tuple(self.p ** j for j in range(1, num_steps + 1))

    @staticmethod
    def expected_length(p: float, num_steps: int) -> float:
        """``E[L] = sum_{i=0..k} p^i``."""
        return sum(p ** i for i in range(num_steps + 1))

    @classmethod
    def solve_p(cls, num_steps: int, mean_accept_length: float) -> float:
        """Per-draft acceptance probability whose ``E[L]`` is ``mean_accept_length``."""
        if mean_accept_length >= num_steps + 1:
            return 1.0
        lo, hi = 0.0, 1.0
        for _ in range(80):
            mid = (lo + hi) / 2
            if cls.expected_length(mid, num_steps) < mean_accept_length:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def pmf(self) -> list[float]:
        """``P(L = j)`` for ``j = 1..k+1``."""
        p, k = self.p, self.num_steps
        return [p ** (j - 1) * (1 - p) for j in range(1, k + 1)] + [p ** k]

    def draw(self, rng: random.Random) -> int:
        """One verify step's tokens for one request (1..k+1)."""
        u = rng.random()
        n = 1
        for t in self._thresholds:
            if u < t:
                n += 1
            else:
                break
        return n


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A profile resolved for one arm (spec on/off, cap), with the constants step times need."""

    profile: Profile
    spec: bool
    tp_size: int
    #: the value SGLang would report as ``max_running_requests`` (None: left unset, no spec)
    max_running_requests_arg: int | None
    #: the cap the scheduler applies (SGLang ``effective_max_running_requests_per_dp``)
    max_running_requests: int
    max_total_num_tokens: int
    mem_fraction_static: float
    chunked_prefill_size: int
    context_length: int
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    mean_accept_length: float | None
    accept: AcceptanceModel | None
    # derived constants (see the module docstring)
    bw_bytes_per_ms: float
    dense_bytes: float
    expert_bytes: float
    hot_fraction: float  # h: share of experts that are hot
    miss_hot: float  # 1 - s*k/(h*E): a token misses a given hot expert
    miss_cold: float  # 1 - (1-s)*k/((1-h)*E)
    kv_bytes_per_token: float
    compute_ms_per_token: float
    #: fault: every step grows by this percentage per minute since ``drift_epoch_s`` (a machine
    #: slowing down: heat, a noisy neighbour); 0 = none. Applied by the real-time engine only.
    drift_pct_per_min: float = 0.0
    #: seconds since the Unix epoch the drift counts from (None: when the engine starts), so the
    #: servers of several arms can share one drifting "machine"
    drift_epoch_s: float | None = None

    def drift_factor(self, now_s: float, epoch_s: float) -> float:
        """How much longer a step takes at Unix time ``now_s`` than at ``epoch_s`` (≥ 0.01)."""
        return max(0.01, 1.0 + self.drift_pct_per_min / 100.0 * (now_s - epoch_s) / 60.0)

    # -- step times (milliseconds) -------------------------------------------------------------
    def frac_experts(self, n_tokens: float) -> float:
        """Fraction of routed experts a forward over ``n_tokens`` reads."""
        if n_tokens <= 0:
            return 0.0
        h = self.hot_fraction
        return h * (1.0 - self.miss_hot ** n_tokens) + (1.0 - h) * (1.0 - self.miss_cold ** n_tokens)

    def mem_ms(self, n_tokens: float, kv_tokens: float = 0.0) -> float:
        """Time to read the weights the step touches plus its KV cache, ms."""
        read = self.dense_bytes + self.expert_bytes * self.frac_experts(n_tokens)
        return (read + kv_tokens * self.kv_bytes_per_token) / self.bw_bytes_per_ms

    def compute_ms(self, n_tokens: float) -> float:
        """Time for the step's FLOPs at the achieved rate, ms."""
        return n_tokens * self.compute_ms_per_token

    def forward_ms(self, n_tokens: float, kv_tokens: float = 0.0) -> float:
        """One decode/verify forward over ``n_tokens`` tokens, ms."""
        d = self.profile.decode
        return (d.fixed_ms + max(self.mem_ms(n_tokens, kv_tokens), self.compute_ms(n_tokens))
                + n_tokens * d.per_token_ms)

    def decode_step_ms(self, batch: int, kv_tokens: float = 0.0) -> float:
        """Baseline decode step over ``batch`` requests (one token each), ms."""
        return self.forward_ms(batch, kv_tokens)

    def spec_step_ms(self, batch: int, kv_tokens: float = 0.0) -> float:
        """Speculative step (draft + verify over ``batch x num_draft_tokens``), ms."""
        s = self.profile.speculative
        k = s.num_steps
        draft = s.overhead_ms + k * (s.draft_step_ms + s.draft_ms_per_request * batch)
        n = batch * s.draft_tokens
        return draft + s.verify_factor * self.forward_ms(n, kv_tokens + n)

    def step_ms(self, batch: int, kv_tokens: float = 0.0) -> float:
        """The decode step of this arm (baseline or speculative), ms."""
        if self.spec:
            return self.spec_step_ms(batch, kv_tokens)
        return self.decode_step_ms(batch, kv_tokens)

    def prefill_ms(self, n_tokens: int) -> float:
        """A prefill step over ``n_tokens`` prompt tokens, ms."""
        p = self.profile.prefill
        t = p.fixed_ms + max(self.mem_ms(n_tokens, 0.0), n_tokens * p.ms_per_token)
        if self.spec:
            t *= self.profile.speculative.prefill_factor
        return t

    def reserve_tokens(self, prompt_tokens: int, max_new_tokens: int) -> int:
        """Tokens of the pool a request reserves while admitted."""
        return prompt_tokens + min(max_new_tokens, RESERVE_CLIP_TOKENS)

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary of the resolved arm (for ``/server_info`` and reports)."""
        return {
            "spec": "mtp" if self.spec else "off",
            "max_running_requests": self.max_running_requests,
            "max_total_num_tokens": self.max_total_num_tokens,
            "mem_fraction_static": self.mem_fraction_static,
            "chunked_prefill_size": self.chunked_prefill_size,
            "accept_probability": None if self.accept is None else round(self.accept.p, 6),
            "mean_accept_length": self.mean_accept_length,
            "decode_step_ms": {str(b): round(self.step_ms(b), 3) for b in (1, 4, 16, 32, 64, 128)},
        }


def _pool_tokens(profile: Profile, spec: bool) -> tuple[int, float]:
    m, s, h = profile.memory, profile.speculative, profile.hardware
    frac = (s.mem_fraction_static or m.mem_fraction_static) if spec else m.mem_fraction_static
    pinned = (s.max_total_num_tokens or m.max_total_num_tokens) if spec else m.max_total_num_tokens
    if pinned is not None:
        return pinned, frac
    avail_gib = h.gpu_mem_gib * frac - m.weights_gib_per_rank - m.reserved_gib_per_rank
    per_token = m.pool_bytes_per_token_per_rank
    if spec:
        avail_gib -= s.draft_weights_gib_per_rank
        per_token += s.draft_pool_bytes_per_token_per_rank
    tokens = int(avail_gib * 2**30 // per_token)
    if tokens < 2:
        raise ProfileError(
            f"profile {profile.name!r}: the memory budget leaves no token pool "
            f"({avail_gib:.2f} GiB per rank available{' with speculation' if spec else ''})"
        )
    return tokens, frac


def resolve(profile: Profile, spec: bool | str = False,
            max_running_requests: int | None = None, *,
            spec_resets_cap: bool = True) -> ModelConfig:
    """Resolve ``profile`` for one arm: ``spec`` is a bool or ``"off"``/``"mtp"``.

    ``max_running_requests``: the ``--max-running-requests`` cap (None: the default rule).
    ``spec_resets_cap``: with speculation and no cap given, use the profile's
    ``speculative.default_max_running_requests`` (48, SGLang's reset); False applies the
    non-speculative rule instead (vLLM does not lower its cap for speculation).
    """
    if isinstance(spec, str):
        if spec not in ("off", "mtp"):
            raise ProfileError(f"spec must be 'off' or 'mtp', not {spec!r}")
        spec = spec == "mtp"
    if max_running_requests is not None and max_running_requests < 1:
        raise ProfileError("max_running_requests must be >= 1")
    pool, frac = _pool_tokens(profile, spec)
    ctx = profile.model.context_length
    s = profile.speculative
    cap: int
    arg: int | None
    if spec and spec_resets_cap:
        cap = max_running_requests or s.default_max_running_requests
        arg = cap
    else:
        arg = max_running_requests or profile.engine.max_running_requests
        cap = arg if arg is not None else min(max(int(pool / ctx * 512), 2048), 4096)
    cap = max(1, min(cap, pool // 2))
    h, mt = profile.hardware, profile.model
    accept = AcceptanceModel(s.num_steps, s.mean_accept_length) if spec else None
    q = 1.0 if mt.experts_per_token >= mt.num_experts else mt.experts_per_token / mt.num_experts
    return ModelConfig(
        profile=profile,
        spec=spec,
        tp_size=h.n_gpus,
        max_running_requests_arg=arg,
        max_running_requests=cap,
        max_total_num_tokens=pool,
        mem_fraction_static=frac,
        chunked_prefill_size=profile.prefill.chunked_prefill_size,
        context_length=ctx,
        num_steps=s.num_steps if spec else None,
        eagle_topk=s.eagle_topk if spec else None,
        num_draft_tokens=s.draft_tokens if spec else None,
        mean_accept_length=s.mean_accept_length if spec else None,
        accept=accept,
        bw_bytes_per_ms=h.n_gpus * h.mem_bandwidth_gb_s * 1e9 * h.bandwidth_efficiency / 1e3,
        dense_bytes=mt.dense_params_b * 1e9 * mt.bytes_per_param,
        expert_bytes=mt.expert_params_b * 1e9 * mt.bytes_per_param,
        hot_fraction=mt.routing_hot_fraction,
        miss_hot=1.0 - mt.routing_hot_share * q / mt.routing_hot_fraction,
        miss_cold=1.0 - (1.0 - mt.routing_hot_share) * q / (1.0 - mt.routing_hot_fraction),
        kv_bytes_per_token=mt.kv_read_bytes_per_token,
        compute_ms_per_token=(2 * mt.active_params_b * 1e9)
        / (h.n_gpus * h.peak_tflops * 1e12 * h.flops_efficiency) * 1e3,
    )


# ---------------------------------------------------------------------------------------------
# Engine core: queue, pool, admission, steps. Shared by the real-time engine and the simulator.
# ---------------------------------------------------------------------------------------------

WAITING, PREFILL, RUNNING, FINISHED, ABORTED = range(5)


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request inside the engine. Times are seconds on the caller's clock."""

    index: int
    prompt_tokens: int
    max_new_tokens: int
    #: tokens this request will produce (max_new_tokens, or an earlier EOS)
    target_tokens: int
    arrival_t: float
    rng: random.Random
    #: this request's acceptance (content-dependent, ``acceptance.py``); None: the profile's
    accept: AcceptanceModel | None = None
    reserve: int = 0
    state: int = WAITING
    prefilled: int = 0
    generated: int = 0
    #: tokens produced by the last step that gave this request any (one chunk)
    new_tokens: int = 0
    verify_ct: int = 0
    correct_drafts: int = 0
    #: accepted drafts of each verify step, in order (the bonus token excluded; speculation only):
    #: the per-request histograms and per-step arrays SGLang and vLLM report are built from it
    accepts: list[int] = field(default_factory=list)
    admitted_t: float | None = None
    first_token_t: float | None = None
    finish_t: float | None = None
    chunks: int = 0
    #: free slot for the engine/app (the response sink)
    sink: Any = None

    @property
    def finished(self) -> bool:
        """True once the request produced all its tokens."""
        return self.state == FINISHED


class Step:
    """One engine step: a prefill step (``items``: request, prompt tokens) or a decode step."""

    __slots__ = ("kind", "duration_s", "items", "batch", "tokens")

    PREFILL = "prefill"
    DECODE = "decode"

    def __init__(self, kind: str, duration_s: float, items: list[tuple[SimRequest, int]] | None,
                 batch: int, tokens: int) -> None:
        self.kind = kind
        self.duration_s = duration_s
        self.items = items
        self.batch = batch
        self.tokens = tokens

    def __repr__(self) -> str:
        return (f"Step({self.kind}, {self.duration_s * 1e3:.3f} ms, batch={self.batch}, "
                f"tokens={self.tokens})")


class EngineCore:
    """Continuous batching over a FIFO queue, a running cap and a reserved token pool.

    Usage: ``add()`` requests; ``plan()`` admits what fits and returns the next ``Step`` (or
    ``None`` when idle); after ``step.duration_s`` the caller calls ``commit(step, t_end)``,
    which returns the requests that got tokens in that step (each with ``new_tokens`` set and
    ``state == FINISHED`` when done).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.pool_reserved = 0
        #: tokens in the KV cache (prompt + generated of admitted, prefilled requests)
        self.kv_tokens = 0
        self.steps = 0
        self.decode_steps = 0
        self.prefill_steps = 0
        self.generated_total = 0
        #: lifetime spec figures: tokens from verify steps (bonus incl.), request-verify count
        self.spec_tokens_total = 0
        self.spec_verify_total = 0

    # -- queue -----------------------------------------------------------------------------
    def check_fits(self, prompt_tokens: int, max_new_tokens: int) -> str | None:
        """Why a request can never be admitted (too long for the context or pool), or None."""
        cfg = self.cfg
        if prompt_tokens < 1:
            raise ValueError("prompt_tokens must be >= 1")
        if prompt_tokens + max_new_tokens > cfg.context_length:
            return (f"Requested token count exceeds the model's maximum context length of "
                    f"{cfg.context_length} tokens. You requested a total of "
                    f"{prompt_tokens + max_new_tokens} tokens: {prompt_tokens} tokens from the "
                    f"input messages and {max_new_tokens} tokens for the completion.")
        need = cfg.reserve_tokens(prompt_tokens, max_new_tokens)
        if need > cfg.max_total_num_tokens:
            return (f"The request needs {need} tokens of KV cache but the pool holds "
                    f"max_total_num_tokens={cfg.max_total_num_tokens}.")
        return None

    def add(self, req: SimRequest) -> None:
        """Queue a request (FIFO). ``check_fits`` must have passed."""
        req.reserve = self.cfg.reserve_tokens(req.prompt_tokens, req.max_new_tokens)
        req.state = WAITING
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        """Remove a request wherever it is and release what it holds (client went away)."""
        if req.state == WAITING:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        elif req.state == PREFILL:
            self.prefilling.remove(req)
            self.pool_reserved -= req.reserve
            self.kv_tokens -= req.prefilled
        elif req.state == RUNNING:
            self.running.remove(req)
            self.pool_reserved -= req.reserve
            self.kv_tokens -= req.prompt_tokens + req.generated
        if req.state not in (FINISHED,):
            req.state = ABORTED

    @property
    def num_admitted(self) -> int:
        """Requests holding a slot (prefilling or decoding)."""
        return len(self.prefilling) + len(self.running)

    def has_work(self) -> bool:
        """True when a step could run now or after admission."""
        return bool(self.waiting or self.prefilling or self.running)

    def _admit(self, now: float) -> None:
        cfg = self.cfg
        waiting = self.waiting
        while waiting:
            if len(self.prefilling) + len(self.running) >= cfg.max_running_requests:
                return
            req = waiting[0]
            if self.pool_reserved + req.reserve > cfg.max_total_num_tokens:
                return
            waiting.popleft()
            self.pool_reserved += req.reserve
            req.state = PREFILL
            req.admitted_t = now
            self.prefilling.append(req)

    # -- steps -----------------------------------------------------------------------------
    def plan(self, now: float = 0.0) -> Step | None:
        """Admit what fits, then return the next step (prefill first), or None when idle."""
        if self.waiting:
            self._admit(now)
        cfg = self.cfg
        if self.prefilling:
            budget = cfg.chunked_prefill_size
            items: list[tuple[SimRequest, int]] = []
            total = 0
            for req in self.prefilling:
                take = min(budget, req.prompt_tokens - req.prefilled)
                items.append((req, take))
                total += take
                budget -= take
                if budget <= 0:
                    break
            return Step(Step.PREFILL, cfg.prefill_ms(total) / 1e3, items, len(items), total)
        if self.running:
            batch = len(self.running)
            return Step(Step.DECODE, cfg.step_ms(batch, self.kv_tokens) / 1e3, None, batch, batch)
        return None

    def commit(self, step: Step, t_end: float) -> list[SimRequest]:
        """Apply a finished step at time ``t_end``; return the requests that got tokens."""
        self.steps += 1
        out: list[SimRequest] = []
        if step.kind == Step.PREFILL:
            self.prefill_steps += 1
            assert step.items is not None
            done = False
            for req, take in step.items:
                if req.state != PREFILL:  # aborted meanwhile
                    continue
                req.prefilled += take
                self.kv_tokens += take
                if req.prefilled >= req.prompt_tokens:
                    done = True
                    req.generated = 1
                    req.new_tokens = 1
                    req.first_token_t = t_end
                    self.kv_tokens += 1
                    self.generated_total += 1
                    out.append(req)
                    if req.generated >= req.target_tokens:
                        self._finish(req, t_end)
                    else:
                        req.state = RUNNING
                        self.running.append(req)
            if done:
                self.prefilling = [r for r in self.prefilling if r.state == PREFILL]
            return out

        self.decode_steps += 1
        running = self.running
        finished = False
        gained = 0
        accept = self.cfg.accept
        if accept is None:
            for req in running:
                req.generated += 1
                req.new_tokens = 1
                out.append(req)
                if req.generated >= req.target_tokens:
                    finished = True
            gained = len(running)
        else:
            verify = 0
            for req in running:
                n = (req.accept or accept).draw(req.rng)
                left = req.target_tokens - req.generated
                if n > left:
                    n = left
                req.generated += n
                req.new_tokens = n
                req.verify_ct += 1
                req.correct_drafts += n - 1
                req.accepts.append(n - 1)
                gained += n
                verify += 1
                out.append(req)
                if req.generated >= req.target_tokens:
                    finished = True
            self.spec_tokens_total += gained
            self.spec_verify_total += verify
        self.kv_tokens += gained
        self.generated_total += gained
        if finished:
            keep = []
            for req in running:
                if req.generated >= req.target_tokens:
                    self._finish(req, t_end)
                else:
                    keep.append(req)
            self.running = keep
        return out

    def _finish(self, req: SimRequest, t_end: float) -> None:
        req.state = FINISHED
        req.finish_t = t_end
        self.pool_reserved -= req.reserve
        self.kv_tokens -= req.prompt_tokens + req.generated

    @property
    def avg_spec_accept_length(self) -> float | None:
        """Lifetime tokens per verify (bonus included), as SGLang's ``avg_spec_accept_length``."""
        if not self.spec_verify_total:
            return None
        return self.spec_tokens_total / self.spec_verify_total


# ---------------------------------------------------------------------------------------------
# Virtual-time closed-loop simulator (no sockets, no sleeping)
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class SimRecord:
    """One simulated request, seconds from the start of the run."""

    index: int
    t_start_s: float
    ttft_s: float
    e2e_s: float
    output_tokens: int
    chunks: int
    verify_ct: int

    @property
    def tpot_s(self) -> float | None:
        """(e2e - ttft) / (tokens - 1), as :mod:`specsweep.analyze.metrics` defines ``tpot_s``."""
        if self.output_tokens <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass
class SimResult:
    """A closed-loop run at one concurrency (:mod:`specsweep.analyze.metrics`'s definitions, virtual seconds)."""

    spec: bool
    concurrency: int
    n_requests: int
    input_tokens: int
    output_tokens: int
    window_s: float
    total_output_tokens: int
    output_tok_s: float
    mean_user_tok_s: float
    mean_request_tok_s: float
    mean_ttft_s: float
    mean_admitted: float
    mean_decode_batch: float
    effective_concurrency: float
    accept_length: float | None
    max_running_requests: int
    max_total_num_tokens: int
    steps: int
    records: list[SimRecord] = field(repr=False, default_factory=list)


def simulate_closed_loop(profile: Profile, spec: bool | str, concurrency: int, n_requests: int,
                         input_tokens: int, output_tokens: int, seed: int = 0,
                         max_running_requests: int | None = None) -> SimResult:
    """Run ``n_requests`` requests through the engine with ``concurrency`` closed-loop clients.

    Every client sends its first request at t=0 and its next one the moment the previous one
    finishes (zero client overhead), until ``n_requests`` were sent. Prompts are
    ``input_tokens`` long and each asks ``output_tokens`` with ignore_eos. Figures follow
    :mod:`specsweep.analyze.metrics`'s definitions over the window [0, last finish].
    """
    if concurrency < 1 or n_requests < 1:
        raise ValueError("concurrency and n_requests must be >= 1")
    cfg = resolve(profile, spec, max_running_requests)
    core = EngineCore(cfg)
    if core.check_fits(input_tokens, output_tokens):
        raise ValueError(core.check_fits(input_tokens, output_tokens))
    sent = 0
    t = 0.0

    def submit(now: float) -> None:
        nonlocal sent
        req = SimRequest(index=sent, prompt_tokens=input_tokens, max_new_tokens=output_tokens,
                         target_tokens=output_tokens, arrival_t=now,
                         rng=random.Random(request_seed(seed, sent, "accept")))
        sent += 1
        core.add(req)

    for _ in range(min(concurrency, n_requests)):
        submit(0.0)
    records: list[SimRecord] = []
    admitted_time = 0.0
    batch_time = 0.0
    decode_time = 0.0
    while True:
        step = core.plan(t)
        if step is None:
            break
        dt = step.duration_s
        admitted_time += core.num_admitted * dt
        if step.kind == Step.DECODE:
            batch_time += step.batch * dt
            decode_time += dt
        t += dt
        for req in core.commit(step, t):
            req.chunks += 1
            if req.state == FINISHED:
                assert req.first_token_t is not None
                records.append(SimRecord(req.index, req.arrival_t, req.first_token_t - req.arrival_t,
                                         t - req.arrival_t, req.generated, req.chunks,
                                         req.verify_ct))
                if sent < n_requests:
                    submit(t)
    window = t
    total = sum(r.output_tokens for r in records)
    tpots = [r.tpot_s for r in records if r.tpot_s]
    return SimResult(
        spec=cfg.spec,
        concurrency=concurrency,
        n_requests=n_requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        window_s=window,
        total_output_tokens=total,
        output_tok_s=total / window if window else 0.0,
        mean_user_tok_s=sum(1 / x for x in tpots) / len(tpots) if tpots else 0.0,
        mean_request_tok_s=sum(r.output_tokens / r.e2e_s for r in records) / len(records),
        mean_ttft_s=sum(r.ttft_s for r in records) / len(records),
        mean_admitted=admitted_time / window if window else 0.0,
        mean_decode_batch=batch_time / decode_time if decode_time else 0.0,
        effective_concurrency=sum(r.e2e_s for r in records) / window if window else 0.0,
        accept_length=core.avg_spec_accept_length,
        max_running_requests=cfg.max_running_requests,
        max_total_num_tokens=cfg.max_total_num_tokens,
        steps=core.steps,
        records=records,
    )


def sweep_closed_loop(profile: Profile, spec: bool | str, levels: Iterable[int],
                      input_tokens: int, output_tokens: int, seed: int = 0,
                      requests_per_level: Any = None) -> list[SimResult]:
    """``simulate_closed_loop`` at each level; ``requests_per_level(c)`` gives n (default
    ``max(4 * c, 16)``)."""
    n_of = requests_per_level or (lambda c: max(4 * c, 16))
    return [simulate_closed_loop(profile, spec, c, n_of(c), input_tokens, output_tokens, seed)
            for c in levels]
