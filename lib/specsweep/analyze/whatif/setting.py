"""One setting's figures from an arm's fitted model, as bootstrap replicates (no band yet).

:func:`predict_model` is what both :func:`~specsweep.analyze.whatif.predict.predict` (which widens
the band by the validation error) and :mod:`~specsweep.analyze.whatif.validate` (which measures
that error) evaluate. Input: an arm's fitted :class:`~specsweep.analyze.whatif.model.ArmModel` and
a :class:`Setting`. Output: each figure's replicates (row 0: the estimate), or a refusal, and ``info``
(the setting as used, the running requests and what binds them).

Invariant: a state the arm measured is answered with its measurement; nothing is extrapolated
beyond the batch sizes the arm ran.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from specsweep.analyze.compare import Comparison
from specsweep.analyze.whatif.model import ArmModel, fit, stall_mix
from specsweep.analyze.whatif.observe import observe
from specsweep.results.store import ResultSet

__all__ = ["CONTEXT_ASSUMPTION", "FIGURES", "FOOTPRINT_ASSUMPTION", "OFFERED_REACH", "Setting", "model_for", "predict_model",
           "with_setting"]

#: predicted figures: column name -> what it is (units in the name)
FIGURES: dict[str, str] = {
    "aggregate_tok_s": "aggregate output tok/s",
    "user_tok_s": "per-user decode speed, tok/s (mean 1/TPOT; level-only data: per-request tok/s)",
    "ttft_p50_s": "time to first token, p50, s",
    "e2e_p50_s": "end-to-end latency, p50, s (level-only data: Little's-law mean)",
}
FOOTPRINT_ASSUMPTION = ("a request holds its prompt + output tokens of the KV pool while it runs, so the pool holds "
                        "pool tokens ÷ (prompt + output) requests, scaled from what the arm's saturated levels showed")
#: offered concurrency is predicted up to this multiple of the largest level an arm measured, no further:
#: the clients queued beyond the running requests are modelled by Little's law, validated only near
#: what was measured
OFFERED_REACH = 2
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
        if not d.pool_tokens:
            if pool is not None:
                return math.nan, "pool_tokens: this arm's meta.json gives no pool size to scale from"
            return m.pool_limit * foot_now / foot_new, None
        # footprint consistent with the observed limit: P + O when floor(pool / (P + O)) matches it
        per_req = (foot_now if math.floor(d.pool_tokens / foot_now) == round(m.pool_limit)
                   else d.pool_tokens / (m.pool_limit + 0.5))
        tokens = pool if pool is not None else d.pool_tokens
        return math.floor(tokens / (per_req * foot_new / foot_now)), None
    size = pool if pool is not None else d.pool_tokens
    if size:
        return math.floor(size / foot_new), None
    return math.inf, None


def predict_model(m: ArmModel, s: Setting) -> tuple[dict[str, np.ndarray] | None, dict[str, Any]]:
    """Replicates of every figure for one setting, or None with ``info['why']`` (refused)."""
    d = m.data
    out_tok = float(s.output_tokens if s.output_tokens is not None else d.output_tokens)
    accept_given = s.accept_length is not None
    accept = float(s.accept_length) if s.accept_length is not None else m.accept_length
    cap = s.max_running_requests if s.max_running_requests is not None else d.cap
    info: dict[str, Any] = {"concurrency": s.concurrency, "max_running_requests": cap, "accept_length": accept,
                            "output_tokens": out_tok,
                            "pool_tokens": s.pool_tokens if s.pool_tokens is not None else d.pool_tokens}
    why = _setting_refusal(m, s, accept, out_tok)
    if why:
        return _refused(info, why)
    limit, why = _pool_limit(m, s.pool_tokens, out_tok)
    if why:
        return _refused(info, why)
    n, binds = _running_requests(m, s, cap, limit)
    if n < 1:
        return _refused(info, f"the KV pool of {info['pool_tokens']} tokens cannot hold one request of "
                              f"{d.prompt_tokens + out_tok:g} tokens")
    info.update(running_requests=n, limited_by=binds)
    lo, hi = m.n_range
    if n < lo - 1e-6 or n > hi + 1e-6:
        return _refused(info, f"{n:g} running requests ({binds}) is outside the batch sizes arm '{d.arm}' ran "
                              f"({lo:g}–{hi:g}): extrapolation")
    if not accept_given and s.output_tokens is None:
        measured = _measured_state(m, s, n, info)
        if measured is not None:
            return measured, info
    return _modelled(m, s, n, accept, out_tok, info), info


def _refused(info: dict[str, Any], why: str) -> tuple[None, dict[str, Any]]:
    """A refusal: no replicates, and ``info`` saying why."""
    info["why"] = why
    return None, info


def _setting_refusal(m: ArmModel, s: Setting, accept: float, out_tok: float) -> str | None:
    """Why the arm's model cannot answer the setting ``s`` (its concurrency, accept length or output
    length), or None."""
    d = m.data
    if not s.concurrency >= 1:
        return f"concurrency={s.concurrency}: must be ≥ 1"
    reach = OFFERED_REACH * float(np.max(d.concurrency))
    if s.concurrency > reach:
        return (f"concurrency={s.concurrency:g}: beyond {OFFERED_REACH}× the largest level arm '{d.arm}' measured "
                f"({float(np.max(d.concurrency)):g}), where its queueing is not validated; measure it")
    if s.accept_length is not None:
        if not d.speculative:
            return f"accept_length={accept:g}: arm '{d.arm}' does not speculate (one token per step)"
        if not d.accept_measured:
            return (f"accept_length={accept:g}: arm '{d.arm}' has no measured accept length at every level "
                    "to scale from")
        top = d.draft_tokens or math.inf
        if not 1.0 <= accept <= top:
            return f"accept_length={accept:g}: must lie in [1, {top:g}] (tokens verified per step)"
    if s.output_tokens is not None:
        if out_tok > d.output_tokens + 1e-9:
            return (f"output_tokens={out_tok:g}: longer than the {d.output_tokens:g} measured, so requests "
                    "would hold contexts this arm never ran")
        if out_tok < 2:
            return f"output_tokens={out_tok:g}: must be ≥ 2"
    return None


def _running_requests(m: ArmModel, s: Setting, cap: int | None, limit: float) -> tuple[float, str]:
    """(requests the server runs at once, what binds it): the fewest of what the offered concurrency
    keeps running, the cap and what the KV pool holds (``limit``)."""
    bounds = [(m.running_at(float(s.concurrency)), "offered concurrency"),
              (float(cap) if cap else math.inf, "max_running_requests"), (float(limit), "KV pool")]
    return min(bounds, key=lambda b: b[0])


def _measured_state(m: ArmModel, s: Setting, n: float, info: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """Where the arm measured this very state (the concurrency, with ``n`` requests running), its
    outcome: the measurement's replicates; else None."""
    d = m.data
    same = np.flatnonzero(np.isclose(d.concurrency, s.concurrency) & (np.abs(d.admitted - n) < 0.5))
    if not len(same):
        return None
    i = int(same[0])
    r = d.replicates
    info["accept_length"] = float(d.accept_length[i])
    return {"aggregate_tok_s": r["output_tok_s"][:, i], "user_tok_s": r["user_tok_s"][:, i],
            "ttft_p50_s": r["ttft_p50_s"][:, i],
            "e2e_p50_s": r["e2e_mean_s" if d.level_only else "e2e_p50_s"][:, i]}


def _modelled(m: ArmModel, s: Setting, n: float, accept: float, out_tok: float,
              info: dict[str, Any]) -> dict[str, np.ndarray]:
    """The figures the fitted model gives at ``n`` running requests: step time, prefill share and the
    accept length at that batch size, moved by a given accept length or output length, then closed-loop
    queueing by Little's law for the clients beyond ``n``."""
    d = m.data
    accept_given = s.accept_length is not None
    tpot0 = m.at("tpot_s", n)
    ttft0 = m.at("ttft0_mean_s", n)
    kappa = m.at("kappa", n)
    jensen = m.at("jensen", n)
    acc0 = m.at("accept", n)
    accept_now: float | np.ndarray = accept
    if not accept_given:  # the accept length the arm showed at this batch size
        accept_now = acc0
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
            tpot = norm * acc0 / accept_now * stall_mix(drain, np.clip(lam * pf, 0.0, 0.95))
        ratio = tpot / tpot_user
    e2e0 = ttft0 + (out_tok - 1) * tpot0 * ratio
    lam = n / e2e0
    wait = e2e0 * (s.concurrency - n) / n
    tpot_user = tpot_user * ratio
    return {
        "aggregate_tok_s": kappa * lam * out_tok,
        "user_tok_s": jensen / tpot_user,
        "ttft_p50_s": m.at("ttft0_p50_s", n) + wait,
        "e2e_p50_s": (e2e0 + wait) * m.at("e2e_skew_s", n) if not d.level_only else e2e0 + wait,
    }


def with_setting(s: Setting, **change: Any) -> Setting:
    """A copy of ``s`` with fields changed."""
    return replace(s, **change)
