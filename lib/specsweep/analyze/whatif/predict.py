"""Predictions for an arm under settings nobody measured, each with a band, or a refusal that says why.

Changed settings (any combination): offered ``concurrency`` levels, ``max_running_requests`` (the
cap), the KV pool (``max_total_num_tokens`` in tokens, or ``mem_fraction_static`` with the GPU
memory per rank), the ``accept_length`` (tokens per step per request, e.g. from another workload or
category) and the ``output_tokens`` per request. How each enters the model (``model.py``):

- running requests n = min(C, cap, pool limit). The pool limit is what the arm's saturated levels
  showed (requests held below the cap with clients queued), scaled by the new pool size and by the
  tokens a request holds (prompt + output, :data:`FOOTPRINT_ASSUMPTION`); without such a level it
  is the pool ÷ (prompt + output tokens).
- the decode step time t(n) is the arm's own, interpolated at n: it does not depend on how many
  drafts are accepted (the verify pass is as wide either way), so another accept length changes the
  tokens each step yields, not the step. Another output length keeps t(n) as measured
  (:data:`CONTEXT_ASSUMPTION`) and is refused above the measured one (longer contexts than any run).

A state the arm measured (the same concurrency and running requests, accept and output length
unchanged) is predicted by its measurement: a cap raised where the pool, not the cap, held the
running requests changes nothing the model can see.

Refusals: n outside the batch sizes the arm ran (interpolation only), an accept length below 1 or
above the tokens verified per step, speculation settings on an arm that does not speculate, a
longer output than measured, a pool change without the figures it needs.

Band: the 2.5–97.5 % percentiles over the bootstrap replicates (``observe.py``), widened in
quadrature by 1.96 × the arm's leave-one-level-out RMS error of the same figure (``validate.py``),
so the band covers both measurement noise and the interpolation's own error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import pandas as pd

from specsweep.analyze.compare import Comparison
from specsweep.results.store import ResultSet

from specsweep.analyze.whatif.model import ArmModel, fit, stall_mix
from specsweep.analyze.whatif.observe import WhatIfError, observe

__all__ = ["Setting", "FIGURES", "CONTEXT_ASSUMPTION", "FOOTPRINT_ASSUMPTION", "predict", "predict_model",
           "model_for"]

#: predicted figures: column name -> what it is (units in the name)
FIGURES: dict[str, str] = {
    "aggregate_tok_s": "aggregate output tok/s",
    "user_tok_s": "per-user decode speed, tok/s (mean 1/TPOT; level-only data: per-request tok/s)",
    "ttft_p50_s": "time to first token, p50, s",
    "e2e_p50_s": "end-to-end latency, p50, s (level-only data: Little's-law mean)",
}
FOOTPRINT_ASSUMPTION = ("a request holds its prompt + output tokens of the KV pool while it runs, so the pool holds "
                        "pool tokens ÷ (prompt + output) requests, scaled from what the arm's saturated levels showed")
CONTEXT_ASSUMPTION = ("another output length keeps the measured step time: the cost of reading KV context cannot be "
                      "separated from the per-request cost with one workload (shorter outputs: an upper bound)")


@dataclass(frozen=True)
class Setting:
    """One configuration to predict (None: as measured)."""

    concurrency: float
    max_running_requests: int | None = None
    pool_tokens: int | None = None
    accept_length: float | None = None
    output_tokens: float | None = None


def model_for(comp: Comparison, arm: str, sets: Sequence[ResultSet] | None = None, *, n_boot: int = 200,
              seed: int = 0) -> ArmModel:
    """Observe and fit one arm."""
    return fit(observe(comp, arm, sets, n_boot=n_boot, seed=seed))


def _pool_limit(m: ArmModel, pool: int | None, out_tok: float) -> tuple[float, str | None]:
    """Requests the pool holds under ``pool`` tokens and ``out_tok`` outputs (inf: no limit known)."""
    d = m.data
    foot_now = d.prompt_tokens + d.output_tokens
    foot_new = d.prompt_tokens + out_tok
    if m.pool_limit is not None:
        # footprint consistent with the observed limit: P + O when floor(pool / (P + O)) matches it
        if d.pool_tokens and math.floor(d.pool_tokens / foot_now) == round(m.pool_limit):
            per_req = foot_now
        elif d.pool_tokens:
            per_req = d.pool_tokens / (m.pool_limit + 0.5)
        else:
            per_req = None
        if per_req is None:
            if pool is not None:
                return math.nan, "pool_tokens: this arm's meta.json gives no pool size to scale from"
            return m.pool_limit * foot_now / foot_new, None
        size = pool if pool is not None else d.pool_tokens
        return math.floor(size / (per_req * foot_new / foot_now)), None
    size = pool if pool is not None else d.pool_tokens
    if size:
        return math.floor(size / foot_new), None
    return math.inf, None


def predict_model(m: ArmModel, s: Setting) -> tuple[dict[str, np.ndarray] | None, dict[str, Any]]:
    """Replicates of every figure for one setting, or None with ``info['why']`` (refused)."""
    d = m.data
    info: dict[str, Any] = {"concurrency": s.concurrency}
    out_tok = float(s.output_tokens if s.output_tokens is not None else d.output_tokens)
    accept_given = s.accept_length is not None
    accept = float(s.accept_length) if accept_given else m.accept_length
    cap = s.max_running_requests if s.max_running_requests is not None else d.cap
    info.update(max_running_requests=cap, accept_length=accept, output_tokens=out_tok,
                pool_tokens=s.pool_tokens if s.pool_tokens is not None else d.pool_tokens)

    def refuse(why: str) -> tuple[None, dict[str, Any]]:
        info["why"] = why
        return None, info

    if not s.concurrency >= 1:
        return refuse(f"concurrency={s.concurrency}: must be ≥ 1")
    if s.accept_length is not None:
        if not d.speculative:
            return refuse(f"accept_length={accept:g}: arm '{d.arm}' does not speculate (one token per step)")
        if not d.accept_measured:
            return refuse(f"accept_length={accept:g}: arm '{d.arm}' has no measured accept length at every level "
                          "to scale from")
        top = d.draft_tokens or math.inf
        if not 1.0 <= accept <= top:
            return refuse(f"accept_length={accept:g}: must lie in [1, {top:g}] (tokens verified per step)")
    if s.output_tokens is not None:
        if out_tok > d.output_tokens + 1e-9:
            return refuse(f"output_tokens={out_tok:g}: longer than the {d.output_tokens:g} measured, so requests "
                          "would hold contexts this arm never ran")
        if out_tok < 2:
            return refuse(f"output_tokens={out_tok:g}: must be ≥ 2")
    limit, why = _pool_limit(m, s.pool_tokens, out_tok)
    if why:
        return refuse(why)
    bounds = [(m.running_at(float(s.concurrency)), "offered concurrency"), (float(cap) if cap else math.inf, "max_running_requests"),
              (float(limit), "KV pool")]
    n, binds = min(bounds, key=lambda b: b[0])
    if n < 1:
        return refuse(f"the KV pool of {info['pool_tokens']} tokens cannot hold one request of "
                      f"{d.prompt_tokens + out_tok:g} tokens")
    info.update(running_requests=n, limited_by=binds)
    lo, hi = m.n_range
    if n < lo - 1e-6 or n > hi + 1e-6:
        return refuse(f"{n:g} running requests ({binds}) is outside the batch sizes arm '{d.arm}' ran "
                      f"({lo:g}–{hi:g}): extrapolation")
    same = np.flatnonzero(np.isclose(d.concurrency, s.concurrency) & (np.abs(d.admitted - n) < 0.5))
    if len(same) and not accept_given and s.output_tokens is None:
        # the arm measured this very state (concurrency and running requests): its outcome is the measurement
        i = int(same[0])
        r = d.replicates
        info["accept_length"] = float(d.accept_length[i])
        return {"aggregate_tok_s": r["output_tok_s"][:, i], "user_tok_s": r["user_tok_s"][:, i],
                "ttft_p50_s": r["ttft_p50_s"][:, i],
                "e2e_p50_s": r["e2e_mean_s" if d.level_only else "e2e_p50_s"][:, i]}, info
    tpot0 = m.at("tpot_s", n)
    ttft0 = m.at("ttft0_mean_s", n)
    kappa = m.at("kappa", n)
    jensen = m.at("jensen", n)
    acc0 = m.at("accept", n)
    if not accept_given:  # the accept length the arm showed at this batch size
        accept = acc0
        info["accept_length"] = float(acc0[0])
    phi = m.at("prefill_share", n)
    drain = min(1.0, n / m.requests_at(s.concurrency)) if not d.level_only else 0.0
    norm = m.at("tpot_norm_s", n)
    tpot_user = norm * stall_mix(drain, phi)  # per-user: the level's share of uninterrupted requests
    ratio = np.ones_like(tpot0)
    if accept_given or s.output_tokens is not None:
        # the step is unchanged; the tokens it yields (L) and the share of time on prompts (φ) move
        pf = m.prefill_s
        tpot = tpot_user
        for _ in range(60):  # fixed point of φ = λ t_pf, λ = n / (TTFT₀ + (O − 1) tpot)
            lam = n / (ttft0 + (out_tok - 1) * tpot0 * tpot / tpot_user)
            tpot = norm * acc0 / accept * stall_mix(drain, np.clip(lam * pf, 0.0, 0.95))
        ratio = tpot / tpot_user
    e2e0 = ttft0 + (out_tok - 1) * tpot0 * ratio
    lam = n / e2e0
    wait = e2e0 * (s.concurrency - n) / n
    tpot_user = tpot_user * ratio
    res = {
        "aggregate_tok_s": kappa * lam * out_tok,
        "user_tok_s": jensen / tpot_user,
        "ttft_p50_s": m.at("ttft0_p50_s", n) + wait,
        "e2e_p50_s": (e2e0 + wait) * m.at("e2e_skew_s", n) if not d.level_only else e2e0 + wait,
    }
    return res, info


def _setting_text(s: Setting, d: Any) -> str:
    parts = []
    if s.max_running_requests is not None:
        parts.append(f"max_running_requests={s.max_running_requests}")
    if s.pool_tokens is not None:
        parts.append(f"pool={s.pool_tokens} tokens")
    if s.accept_length is not None:
        parts.append(f"accept_length={s.accept_length:g}")
    if s.output_tokens is not None:
        parts.append(f"output_tokens={s.output_tokens:g}")
    return ", ".join(parts) or "as measured"


def _pool_from_fraction(m: ArmModel, fraction: float, gpu_mem_gib: float | None) -> int:
    d = m.data
    kv = d.memory_usage.get("kvcache")
    if d.mem_fraction_static is None or not kv or not d.pool_tokens:
        raise WhatIfError(f"mem_fraction_static={fraction}: arm '{d.arm}' recorded no mem_fraction_static, KV cache "
                          "size (memory_usage.kvcache) or pool size; pass max_total_num_tokens instead")
    if gpu_mem_gib is None:
        raise WhatIfError(f"mem_fraction_static={fraction}: pass gpu_mem_gib (memory per GPU rank, GiB) — the KV "
                          "pool grows by gpu_mem_gib × the change in fraction, and servers do not report it")
    new_kv = kv + gpu_mem_gib * (fraction - d.mem_fraction_static)
    if new_kv <= 0:
        raise WhatIfError(f"mem_fraction_static={fraction}: leaves no memory for the KV pool")
    return int(d.pool_tokens * new_kv / kv)


def predict(
    comp: Comparison,
    arm: str,
    *,
    concurrency: Sequence[float] | None = None,
    max_running_requests: int | None = None,
    max_total_num_tokens: int | None = None,
    mem_fraction_static: float | None = None,
    gpu_mem_gib: float | None = None,
    accept_length: float | None = None,
    output_tokens: float | None = None,
    sets: Sequence[ResultSet] | None = None,
    n_boot: int = 200,
    seed: int = 0,
    widen: bool = True,
    model: ArmModel | None = None,
) -> pd.DataFrame:
    """Predict ``arm`` of ``comp`` under changed settings: one row per concurrency.

    Columns: ``arm, concurrency, setting, running_requests, limited_by, aggregate_tok_s, user_tok_s,
    ttft_p50_s, e2e_p50_s`` each with ``_lo``/``_hi`` (95 % band), ``max_running_requests,
    pool_tokens, accept_length, output_tokens, measured`` (a measured level with unchanged settings),
    ``refused`` and ``why``. ``sets``: the result sets ``comp`` was built from (their request rows
    give the bootstrap band). Bad parameters raise :class:`WhatIfError` naming them.
    """
    if max_running_requests is not None and (not isinstance(max_running_requests, (int, np.integer))
                                             or max_running_requests < 1):
        raise WhatIfError(f"max_running_requests={max_running_requests!r}: must be a positive integer")
    if max_total_num_tokens is not None and mem_fraction_static is not None:
        raise WhatIfError("give max_total_num_tokens or mem_fraction_static, not both")
    if mem_fraction_static is not None and not 0 < mem_fraction_static <= 1:
        raise WhatIfError(f"mem_fraction_static={mem_fraction_static!r}: must lie in (0, 1]")
    if max_total_num_tokens is not None and max_total_num_tokens < 1:
        raise WhatIfError(f"max_total_num_tokens={max_total_num_tokens!r}: must be a positive number of tokens")
    m = model or model_for(comp, arm, sets, n_boot=n_boot, seed=seed)
    d = m.data
    pool = max_total_num_tokens
    if mem_fraction_static is not None:
        pool = _pool_from_fraction(m, mem_fraction_static, gpu_mem_gib)
    levels = list(concurrency) if concurrency is not None else [float(c) for c in d.concurrency]
    bad = [c for c in levels if not isinstance(c, (int, float, np.integer, np.floating)) or not c >= 1]
    if bad:
        raise WhatIfError(f"concurrency={levels!r}: every level must be a number ≥ 1 (bad: {bad!r})")
    rms = None
    if widen:
        from specsweep.analyze.whatif.validate import loo_rms  # validation predicts too; imported here to keep the modules acyclic

        rms = loo_rms(m)
    rows = []
    unchanged = all(v is None for v in (max_running_requests, pool, accept_length, output_tokens))
    for c in levels:
        s = Setting(float(c), max_running_requests, pool, accept_length, output_tokens)
        res, info = predict_model(m, s)
        row: dict[str, Any] = {"arm": arm, "concurrency": float(c), "setting": _setting_text(s, d),
                               "running_requests": info.get("running_requests", math.nan),
                               "limited_by": info.get("limited_by"),
                               "max_running_requests": info.get("max_running_requests"),
                               "pool_tokens": info.get("pool_tokens"), "accept_length": info.get("accept_length"),
                               "output_tokens": info.get("output_tokens"),
                               "measured": bool(unchanged and np.isclose(d.concurrency, c).any()),
                               "refused": res is None, "why": info.get("why")}
        for f in FIGURES:
            if res is None or not np.isfinite(res[f][0]):
                row[f] = row[f + "_lo"] = row[f + "_hi"] = math.nan
                continue
            v = res[f]
            point = float(v[0])
            lo, hi = np.nanpercentile(v[1:], [2.5, 97.5]) if len(v) > 1 else (point, point)
            lo, hi = min(lo, point), max(hi, point)
            if rms is not None and math.isfinite(rms.get(f, math.nan)):
                extra = 1.96 * rms[f] / 100 * abs(point)
                lo = point - math.hypot(point - lo, extra)
                hi = point + math.hypot(hi - point, extra)
            row[f], row[f + "_lo"], row[f + "_hi"] = point, float(lo), float(hi)
        rows.append(row)
    return pd.DataFrame(rows)


def with_setting(s: Setting, **change: Any) -> Setting:
    """A copy of ``s`` with fields changed."""
    return replace(s, **change)
