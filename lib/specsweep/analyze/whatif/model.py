r"""One arm's serving model, fitted from its own observations (see ``observe.py``), with a bootstrap band.

The model (the form SmartSpec/TurboSpec, SpecDecode-Bench, BLIS and vLLM's dynamic speculation share)::

    running requests   n  = min(offered concurrency C, max_running_requests, what the KV pool holds)
    decode step time   t(n)  (seconds; one step gives every running request L tokens, L = accept length)
    prefill share      φ  = λ · t_pf      (engine time spent on prompts; λ requests/s, t_pf s per prompt)
    time per token     tpot = t(n) / (L · (1 − φ))
    unqueued lifetime  e2e₀ = TTFT₀(n) + (output tokens − 1) · tpot,   λ = n / e2e₀  (Little's law)
    aggregate          A  = κ(n) · λ · output tokens        (κ: the window's ramp-up and drain, measured)
    queueing (C > n)   W  = e2e₀ · (C − n) / n,  TTFT = TTFT₀ + W,  e2e = e2e₀ + W   (closed loop)

Fitting inverts these equations at every measured level: from a level's aggregate, mean e2e and TTFT
and accept length it recovers ``tpot(n)``, ``TTFT₀(n)``, ``κ(n)`` exactly, so predicting a measured
level with its own settings returns its measurement. Predictions interpolate ``tpot`` itself (the
prefill share and the window's ramp-up are inside it, as measured); only a changed accept length or
output length moves it, by ``tpot' = tpot × (L ÷ L') × (1 − φ) ÷ (1 − φ')`` with the new request
rate in φ' (a fixed point). ``t(n)`` is reported for the decomposition and the step-time summary. Between measured batch sizes each quantity is
interpolated in n by a piecewise cubic (modified Akima) — locally "fixed cost + cost per batched token", which follows a
step time that bends (memory-bound at small batches, compute-bound at large, an MoE reading more experts as the
batch grows) without assuming where it bends. Outside the batch sizes the arm ran nothing is
predicted (:func:`specsweep.analyze.whatif.predict` refuses). Interpolation is modified Akima (piecewise cubic) in n. The
prefill share φ of a level is measured from its chunk gaps (1 − p50 ÷ mean: a prompt's prefill step
makes the odd long gap in every running request's stream), and ``t_pf = φ ÷ λ``; without chunk gaps
``t_pf`` is the shortest unqueued mean TTFT of any level.

Every quantity is an array over bootstrap replicates (row 0: the measurement), so a prediction is a
distribution whose 2.5–97.5 % percentiles are the measurement-noise band.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specsweep.analyze.whatif.observe import ArmData

__all__ = ["ArmModel", "fit", "step_line"]

#: how fitted quantities are interpolated between batch sizes: "makima" (modified Akima, the default:
#: follows a bend without PCHIP's flat spots next to a noisy pair of levels), "pchip", "linear", "loglog"
INTERPOLATION: str = "makima"


@dataclass
class ArmModel:
    """Fitted per-batch quantities of one arm: arrays of shape (1 + n_boot, distinct batch sizes)."""

    data: ArmData
    #: distinct admitted batch sizes the arm ran, ascending
    batch: np.ndarray
    #: mean time per output token (the level's mean TPOT: drives λ, the aggregate and e2e), s
    tpot_s: np.ndarray
    #: time per output token of an uninterrupted request (tpot ÷ stall mix = t(n) ÷ L; drives per-user speed), s
    tpot_norm_s: np.ndarray
    #: decode step time at each batch size (tpot × L ÷ stall mix), s
    step_s: np.ndarray
    #: share of engine time spent on prompts (λ × t_pf)
    prefill_share: np.ndarray
    #: mean and p50 TTFT without queueing, s
    ttft0_mean_s: np.ndarray
    ttft0_p50_s: np.ndarray
    #: e2e p50 ÷ e2e mean, queue included (the distribution's skew)
    e2e_skew_s: np.ndarray
    #: aggregate ÷ (λ × output tokens): ramp-up and drain of the measured window
    kappa: np.ndarray
    #: mean(1/TPOT) × mean TPOT (Jensen's gap between the mean speed and the speed of the mean)
    jensen: np.ndarray
    #: tokens per step per request at each batch size (the levels' accept length)
    accept: np.ndarray
    #: engine time per prompt prefilled, s (replicates)
    prefill_s: np.ndarray
    #: requests the KV pool (or another limit below the cap) held, observed at saturated levels; None: never seen
    pool_limit: float | None
    accept_length: float
    #: unsaturated levels' concurrency and running ÷ concurrency (level-only data: < 1, prefill and
    #: ramp included in the per-request figure; measured data: 1)
    ratio_c: np.ndarray = field(default_factory=lambda: np.array([1.0]))
    ratio: np.ndarray = field(default_factory=lambda: np.array([1.0]))
    notes: list[str] = field(default_factory=list)
    #: this model's leave-one-level-out RMS error % per figure, filled by :func:`validate.loo_rms` (it lives
    #: and dies with the model: a cache keyed by ``id()`` would hand a new model a dead one's errors; not an
    #: init field, so ``dataclasses.replace`` starts a changed copy without it)
    loo_rms_pct: dict[str, float] | None = field(default=None, init=False, repr=False, compare=False)
    #: the piecewise-cubic curves :meth:`at` made, by (quantity, :data:`INTERPOLATION`), beside the batch
    #: sizes and values each was made from: a report asks for the same curve hundreds of times
    _curves: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def requests_at(self, concurrency: float) -> float:
        """Requests a level at ``concurrency`` measures: the nearest measured level's requests per client."""
        d = self.data
        i = int(np.argmin(np.abs(np.log2(d.concurrency) - math.log2(concurrency))))
        return concurrency * float(d.requests[i] / d.concurrency[i])

    def running_at(self, concurrency: float) -> float:
        """Requests running at offered ``concurrency`` before any limit applies."""
        if len(self.ratio_c) == 1:
            return concurrency * float(self.ratio[0])
        return concurrency * float(np.interp(math.log2(concurrency), np.log2(self.ratio_c), self.ratio))

    @property
    def n_range(self) -> tuple[float, float]:
        return float(self.batch[0]), float(self.batch[-1])

    def at(self, name: str, n: float) -> np.ndarray:
        """A fitted quantity at batch ``n`` (replicates): piecewise-cubic interpolation between the batch
        sizes (:data:`INTERPOLATION`; linear with two), which follows a curve that bends."""
        values = getattr(self, name)
        if len(self.batch) == 1:
            return values[:, 0].copy()
        if not np.isfinite(values).all():  # a figure the data do not have (level-only TTFT)
            return np.full(values.shape[0], np.nan)
        if len(self.batch) == 2:
            return np.array([np.interp(n, self.batch, row) for row in values])
        n = float(np.clip(n, self.batch[0], self.batch[-1]))
        if INTERPOLATION == "linear":
            return np.array([np.interp(n, self.batch, row) for row in values])
        if INTERPOLATION == "loglog" and (values > 0).all():
            return np.exp(np.array([np.interp(math.log(n), np.log(self.batch), row) for row in np.log(values)]))
        made = self._curves.get((name, INTERPOLATION))
        if made is None or made[0] is not self.batch or made[1] is not values:  # again only if one was replaced
            # deferred: scipy.interpolate is slow to import (bench/import_time.py), so only where a curve through
            # 3+ batch sizes is asked for
            from scipy.interpolate import Akima1DInterpolator, PchipInterpolator

            curve = (Akima1DInterpolator(self.batch, values, axis=1, method="makima") if INTERPOLATION == "makima"
                     else PchipInterpolator(self.batch, values, axis=1))
            made = self._curves[(name, INTERPOLATION)] = (self.batch, values, curve)
        return made[2](n)

    @property
    def step_fit(self) -> dict[str, Any]:
        """The step time as fixed ms + ms per running request (measurement row): :func:`step_line`."""
        return step_line(self.batch, self.step_s[0] * 1e3)


def step_line(batch: np.ndarray, step_ms: np.ndarray) -> dict[str, Any]:
    """The least-squares line ``fixed_ms + per_request_ms × n`` through step times ``step_ms`` (ms) at
    batch sizes ``batch`` (requests), with both costs constrained to be non-negative (a step never
    takes less than nothing, nor less as the batch grows); ``note`` says why the line is not the
    unconstrained one, or why none was fitted (costs NaN): a step time that is not positive and finite.

    Two unknowns: the constrained optimum is the unconstrained line when both costs come out
    non-negative, else the better of the lines through the origin and the flat line at the mean.
    """
    x, y = np.asarray(batch, dtype=float), np.asarray(step_ms, dtype=float)
    if not len(y) or not (np.isfinite(y).all() and (y > 0).all()):
        return {"fixed_ms": math.nan, "per_request_ms": math.nan,
                "note": "refused: a measured step time is not a positive finite number"}
    if len(y) < 2 or np.ptp(x) == 0:
        return {"fixed_ms": float(y.mean()), "per_request_ms": math.nan, "note": ""}
    slope, icpt = np.polyfit(x, y, 1)
    if slope >= 0 and icpt >= 0:
        return {"fixed_ms": float(icpt), "per_request_ms": float(slope), "note": ""}
    through_origin = (0.0, max(0.0, float(x @ y / (x @ x))))
    flat = (float(y.mean()), 0.0)
    best = min((through_origin, flat), key=lambda line: float(((line[0] + line[1] * x - y) ** 2).sum()))
    cost = "fixed cost" if icpt < 0 else "cost per request"
    return {"fixed_ms": best[0], "per_request_ms": best[1],
            "note": f"constrained to non-negative costs (the unconstrained line had a negative {cost})"}


def stall_mix(drain: np.ndarray | float, phi: np.ndarray | float) -> np.ndarray:
    """Mean time per token ÷ (t / L): a share ``drain`` of requests decodes uninterrupted, the rest
    with a share ``phi`` of engine time on other requests' prompts."""
    return (1.0 - np.asarray(drain)) / (1.0 - np.asarray(phi)) + np.asarray(drain)


def _group(batch: np.ndarray, values: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Average levels that ran the same batch size (saturated levels share the limit)."""
    keys = np.round(batch, 1)
    uniq = np.unique(keys)
    with warnings.catch_warnings():  # an all-NaN figure (level-only TTFT) stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {k: np.stack([np.nanmean(v[:, keys == b], axis=1) for b in uniq], axis=1) for k, v in values.items()}
    means = np.array([batch[keys == b].mean() for b in uniq])
    return means, out


def fit(data: ArmData) -> ArmModel:
    """Invert the model at every level of ``data`` (every replicate) and tabulate it by batch size."""
    r = data.replicates
    n = data.admitted[None, :]
    c = data.concurrency[None, :]
    out_tok = data.output_tokens
    e2e = r["e2e_mean_s"]
    e2e0 = e2e * n / c  # without the queue wait W = e2e0 (C − n) / n
    wait = e2e - e2e0
    lam = n / e2e0  # requests/s through the running set
    kappa = r["output_tok_s"] / (lam * out_tok)
    notes: list[str] = []
    if data.level_only:
        tpot = 1.0 / r["user_tok_s"]
        ttft0 = tpot.copy()  # per-request tok/s = output tokens ÷ e2e: the first token costs one tpot too
        ttft0_p50 = np.full_like(e2e, np.nan)
        skew = np.full_like(e2e, np.nan)
        jensen = np.ones_like(e2e)
        prefill = np.zeros(e2e.shape[0])
        # Little's law with per-request tok/s excluding the wait: e2e0 = output tokens / per-request tok/s
        kappa = np.ones_like(e2e)
    else:
        ttft0 = r["ttft_mean_s"] - wait
        ttft0_p50 = r["ttft_p50_s"] - wait
        skew = r["e2e_p50_s"] / e2e  # p50 ÷ mean of the level's e2e (queue included)
        tpot = (e2e - r["ttft_mean_s"]) / max(out_tok - 1, 1)
        jensen = r["user_tok_s"] * tpot
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            prefill = np.nanmin(np.where(ttft0 > 0, ttft0, np.nan), axis=1)
        prefill = np.where(np.isfinite(prefill), prefill, 0.0)
    if np.isfinite(data.stall_share).all():
        # the share measured from the chunk gaps; t_pf = φ ÷ λ where prompts visibly stall decoding
        phi = np.broadcast_to(data.stall_share[None, :], lam.shape).copy()
        seen = data.stall_share > 0.02
        prefill = (np.median(phi[:, seen] / lam[:, seen], axis=1) if seen.any() else np.zeros(lam.shape[0]))
    phi = np.clip(lam * prefill[:, None], 0.0, 0.95) if not np.isfinite(data.stall_share).all() else phi
    if not data.level_only and np.any(lam[0] * prefill[0] > 0.95):
        notes.append("prefill takes almost all engine time at some level; its share is capped at 95 %")
    accept = data.accept_length[None, :]
    # the last n requests of a level are never interrupted by a new prompt (nothing is left to admit): a share
    # f = n ÷ requests of the level's requests decodes at t / L, the rest at t / (L (1 − φ))
    drain = np.clip(data.admitted / data.requests, 0.0, 1.0)[None, :]
    if data.level_only:
        drain = np.zeros_like(drain)
    mix = stall_mix(drain, phi)
    step = tpot * accept / mix
    batch, g = _group(data.admitted, {"tpot_s": tpot, "tpot_norm_s": tpot / mix, "step_s": step, "prefill_share": phi, "ttft0_mean_s": ttft0, "ttft0_p50_s": ttft0_p50,
                                      "e2e_skew_s": skew, "kappa": kappa, "jensen": jensen,
                                      "accept": np.broadcast_to(accept, step.shape)})
    sat = data.saturated
    pool_limit = None
    if sat.any():
        limit = float(np.max(data.admitted[sat]))
        if data.cap is None or limit < data.cap - 0.5:
            pool_limit = limit
    unsat = ~sat
    if data.level_only and unsat.any():
        ratio_c, ratio = data.concurrency[unsat], data.admitted[unsat] / data.concurrency[unsat]
    else:
        ratio_c, ratio = np.array([1.0]), np.array([1.0])
    acc = float(np.nanmean(data.accept_length)) if len(data.accept_length) else 1.0
    return ArmModel(data=data, batch=batch, tpot_s=g["tpot_s"], tpot_norm_s=g["tpot_norm_s"], step_s=g["step_s"], prefill_share=g["prefill_share"], ttft0_mean_s=g["ttft0_mean_s"],
                    ttft0_p50_s=g["ttft0_p50_s"], e2e_skew_s=g["e2e_skew_s"], kappa=g["kappa"],
                    jensen=g["jensen"], accept=g["accept"], prefill_s=prefill, pool_limit=pool_limit, accept_length=acc,
                    ratio_c=ratio_c, ratio=ratio, notes=notes)
